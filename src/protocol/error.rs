//! Kafka's errors, typed. `ResponseError` is kafka-protocol's: every code
//! Kafka defines, by Kafka's name, with its retriable flag. A code becomes an
//! `i16` only where a response field is filled in.

pub use kafka_protocol::error::ResponseError;

/// A request's failure with the message Kafka sends alongside its code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub error: ResponseError,
    pub message: String,
}

impl ApiError {
    pub fn new(error: ResponseError, message: impl Into<String>) -> Self {
        Self {
            error,
            message: message.into(),
        }
    }

    pub fn code(&self) -> i16 {
        self.error.code()
    }
}

/// The code a response field carries for an outcome: 0 for success.
pub trait ErrorCode {
    fn error_code(&self) -> i16;
}

impl<T> ErrorCode for Result<T, ResponseError> {
    fn error_code(&self) -> i16 {
        self.as_ref().err().map_or(0, ResponseError::code)
    }
}

impl ErrorCode for Option<ResponseError> {
    fn error_code(&self) -> i16 {
        self.map_or(0, |error| error.code())
    }
}
