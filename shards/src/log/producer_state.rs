//! Idempotent producers: per partition, each producer's epoch and its last
//! batches (Kafka keeps five), so a retried batch is recognised and answered
//! with its original offset instead of being written twice, and a gap in
//! sequence numbers is refused. A producer without state here is taken at any
//! sequence (Kafka's `ProducerAppendInfo`).

use std::collections::{HashMap, VecDeque};

use super::record_batch::RecordBatchHeader;
use super::LogError;

/// Batches remembered per producer, as Kafka (max.in.flight for idempotence).
pub const NUM_BATCHES_TO_RETAIN: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BatchMetadata {
    first_sequence: i32,
    last_sequence: i32,
    first_offset: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct ProducerStateEntry {
    epoch: i16,
    batches: VecDeque<BatchMetadata>,
}

/// What to do with an incoming batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// Append it.
    Append,
    /// Already written at this first offset: acknowledge without writing.
    Duplicate { first_offset: i64 },
}

#[derive(Debug, Default)]
pub struct ProducerStateManager {
    producers: HashMap<i64, ProducerStateEntry>,
}

fn next_sequence(sequence: i32) -> i32 {
    if sequence == i32::MAX {
        0
    } else {
        sequence + 1
    }
}

fn last_sequence(header: &RecordBatchHeader) -> i32 {
    // Sequences wrap at i32::MAX like offsets within the batch.
    ((header.base_sequence as i64 + header.last_offset_delta as i64) % (i32::MAX as i64 + 1)) as i32
}

impl ProducerStateManager {
    /// Checks a produced batch against what the producer did before.
    pub fn check(&self, header: &RecordBatchHeader) -> Result<SequenceCheck, LogError> {
        if !header.has_producer_id() || header.base_sequence < 0 {
            return Ok(SequenceCheck::Append);
        }
        let Some(entry) = self.producers.get(&header.producer_id) else {
            // No state for this producer: any sequence is taken, as Kafka
            // does. Its batches may be gone (retention, DeleteRecords, a
            // replica started again at the leader's log start) while it
            // goes on producing; refusing would fail its next batch.
            return Ok(SequenceCheck::Append);
        };
        if header.producer_epoch < entry.epoch {
            return Err(LogError::InvalidProducerEpoch(format!(
                "producer {} epoch {} is older than {}",
                header.producer_id, header.producer_epoch, entry.epoch
            )));
        }
        if header.producer_epoch > entry.epoch {
            return if header.base_sequence == 0 {
                Ok(SequenceCheck::Append)
            } else {
                Err(LogError::OutOfOrderSequence(format!(
                    "producer {} new epoch {} starts at sequence {}",
                    header.producer_id, header.producer_epoch, header.base_sequence
                )))
            };
        }
        if let Some(batch) = entry.batches.iter().find(|b| {
            b.first_sequence == header.base_sequence && b.last_sequence == last_sequence(header)
        }) {
            return Ok(SequenceCheck::Duplicate {
                first_offset: batch.first_offset,
            });
        }
        let expected = entry
            .batches
            .back()
            .map_or(0, |b| next_sequence(b.last_sequence));
        if header.base_sequence != expected {
            return Err(LogError::OutOfOrderSequence(format!(
                "producer {} sent sequence {}, expected {expected}",
                header.producer_id, header.base_sequence
            )));
        }
        Ok(SequenceCheck::Append)
    }

    /// Records a written batch (also used to rebuild state from the log).
    pub fn update(&mut self, header: &RecordBatchHeader) {
        if !header.has_producer_id() || header.base_sequence < 0 {
            return;
        }
        let entry = self.producers.entry(header.producer_id).or_default();
        if header.producer_epoch != entry.epoch {
            entry.epoch = header.producer_epoch;
            entry.batches.clear();
        }
        if entry.batches.len() == NUM_BATCHES_TO_RETAIN {
            entry.batches.pop_front();
        }
        entry.batches.push_back(BatchMetadata {
            first_sequence: header.base_sequence,
            last_sequence: last_sequence(header),
            first_offset: header.base_offset,
        });
    }

    /// Forgets every producer; the log replays its batches after a truncation.
    pub fn clear(&mut self) {
        self.producers.clear();
    }

    pub fn producer_count(&self) -> usize {
        self.producers.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::record_batch::RecordBatchBuilder;

    fn header(
        producer_id: i64,
        epoch: i16,
        sequence: i32,
        records: i32,
        offset: i64,
    ) -> RecordBatchHeader {
        let mut builder = RecordBatchBuilder::new(offset, 0);
        builder.producer_id = producer_id;
        builder.producer_epoch = epoch;
        builder.base_sequence = sequence;
        for _ in 0..records {
            builder.append(0, Some(b"k"), Some(b"v"));
        }
        RecordBatchHeader::parse(&builder.build()).unwrap()
    }

    #[test]
    fn duplicates_gaps_and_fencing() {
        let mut state = ProducerStateManager::default();
        let first = header(7, 0, 0, 3, 100);
        assert_eq!(state.check(&first), Ok(SequenceCheck::Append));
        state.update(&first);
        assert_eq!(
            state.check(&header(7, 0, 0, 3, 999)),
            Ok(SequenceCheck::Duplicate { first_offset: 100 })
        );
        assert!(matches!(
            state.check(&header(7, 0, 5, 1, 103)),
            Err(LogError::OutOfOrderSequence(_))
        ));
        let second = header(7, 0, 3, 2, 103);
        assert_eq!(state.check(&second), Ok(SequenceCheck::Append));
        state.update(&second);
        // Only the last five batches are remembered.
        for i in 0..5 {
            let next = header(7, 0, 5 + i, 1, 105 + i as i64);
            state.update(&next);
        }
        assert!(matches!(
            state.check(&header(7, 0, 0, 3, 0)),
            Err(LogError::OutOfOrderSequence(_))
        ));
        // A bumped epoch starts over at 0; the old epoch is fenced.
        assert_eq!(
            state.check(&header(7, 1, 0, 1, 200)),
            Ok(SequenceCheck::Append)
        );
        state.update(&header(7, 1, 0, 1, 200));
        assert!(matches!(
            state.check(&header(7, 0, 10, 1, 201)),
            Err(LogError::InvalidProducerEpoch(_))
        ));
        // An unknown producer is taken at any sequence, as by Kafka; no
        // producer id means no checks.
        assert_eq!(
            state.check(&header(8, 0, 4, 1, 0)),
            Ok(SequenceCheck::Append)
        );
        assert_eq!(
            state.check(&header(-1, -1, -1, 1, 0)),
            Ok(SequenceCheck::Append)
        );
    }
}
