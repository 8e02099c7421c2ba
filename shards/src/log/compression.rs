//! Codec glue for the few places the broker must look inside a compressed batch
//! (the cleaner, timestamp lookups). The codecs are kafka-protocol's, which frame
//! gzip, snappy (xerial), lz4 (frame) and zstd the way Kafka clients do.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::compression::{Compressor, Decompressor, Gzip, Lz4, Snappy, Zstd};

use super::record_batch::CompressionType;
use super::LogError;

fn codec_error(error: impl std::fmt::Display) -> LogError {
    LogError::CorruptMessage(format!("cannot decompress records: {error}"))
}

/// The uncompressed records section of a batch.
pub fn decompress(codec: CompressionType, section: &[u8]) -> Result<Bytes, LogError> {
    let mut input = section;
    let take = |buf: &mut Bytes| Ok(buf.clone());
    match codec {
        CompressionType::None => Ok(Bytes::copy_from_slice(section)),
        CompressionType::Gzip => Gzip::decompress(&mut input, take),
        CompressionType::Snappy => Snappy::decompress(&mut input, take),
        CompressionType::Lz4 => Lz4::decompress(&mut input, take),
        CompressionType::Zstd => Zstd::decompress(&mut input, take),
    }
    .map_err(codec_error)
}

/// Compresses a records section with `codec`.
pub fn compress(codec: CompressionType, section: &[u8]) -> Result<Vec<u8>, LogError> {
    let mut out = BytesMut::new();
    let put = |buf: &mut BytesMut| {
        buf.put_slice(section);
        Ok(())
    };
    match codec {
        CompressionType::None => {
            out.put_slice(section);
            Ok(())
        }
        CompressionType::Gzip => Gzip::compress(&mut out, put),
        CompressionType::Snappy => Snappy::compress(&mut out, put),
        CompressionType::Lz4 => Lz4::compress(&mut out, put),
        CompressionType::Zstd => Zstd::compress(&mut out, put),
    }
    .map_err(codec_error)?;
    Ok(out.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_codec_round_trips() {
        let section: Vec<u8> = (0..10_000u32)
            .flat_map(|i| (i % 251).to_be_bytes())
            .collect();
        for codec in [
            CompressionType::None,
            CompressionType::Gzip,
            CompressionType::Snappy,
            CompressionType::Lz4,
            CompressionType::Zstd,
        ] {
            let compressed = compress(codec, &section).unwrap();
            assert_eq!(
                decompress(codec, &compressed).unwrap(),
                section,
                "{codec:?}"
            );
        }
    }
}
