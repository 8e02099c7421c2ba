//! The bytes of the batches a shard's leaders appended last, kept so that a
//! fetch at a log's end (every caught-up consumer and follower) is answered
//! from them: no read of the page cache (a `preadv2` and its copy into a new
//! buffer per partition), the response's one `sendmsg` gathers them.
//!
//! Bounded per shard by `RECENT_APPEND_BYTES`, the oldest let go first. The
//! records are slices of the produce requests they came in, and a slice keeps
//! its whole request alive; the slices of one request are appended one after
//! another, so what is kept alive is about the last `RECENT_APPEND_BYTES` of
//! requests, and the one the oldest slice is in.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use bytes::Bytes;

/// What one shard keeps; at 50% of Kafka's maximum on one node (190 MB/s) the
/// last 20 ms of appends, while a caught-up reader is answered within a few.
pub const RECENT_APPEND_BYTES: usize = 4 * 1024 * 1024;

/// A batch's bytes as they were written (its stamped header, then its
/// records), until the shard lets them go.
#[derive(Default)]
pub struct RetainedBatch {
    parts: RefCell<Option<[Bytes; 2]>>,
}

impl RetainedBatch {
    pub fn parts(&self) -> Option<[Bytes; 2]> {
        self.parts.borrow().clone()
    }
}

#[derive(Default)]
struct RecentAppends {
    batches: VecDeque<(Rc<RetainedBatch>, usize)>,
    size_bytes: usize,
}

thread_local! {
    static RECENT_APPENDS: RefCell<RecentAppends> = RefCell::new(RecentAppends::default());
}

/// Keeps `parts` (a batch's header and records) among this shard's recent
/// appends, letting the oldest go past `RECENT_APPEND_BYTES`. A batch larger
/// than a quarter of that is not kept.
pub fn retain(parts: [Bytes; 2]) -> Rc<RetainedBatch> {
    let size_bytes = parts[0].len() + parts[1].len();
    if size_bytes > RECENT_APPEND_BYTES / 4 {
        return Rc::default();
    }
    let batch = Rc::new(RetainedBatch {
        parts: RefCell::new(Some(parts)),
    });
    RECENT_APPENDS.with(|recent| {
        let mut recent = recent.borrow_mut();
        recent.batches.push_back((batch.clone(), size_bytes));
        recent.size_bytes += size_bytes;
        while recent.size_bytes > RECENT_APPEND_BYTES {
            let (oldest, size_bytes) = recent.batches.pop_front().expect("bytes counted are held");
            oldest.parts.borrow_mut().take();
            recent.size_bytes -= size_bytes;
        }
    });
    batch
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(size_bytes: usize) -> [Bytes; 2] {
        [
            Bytes::from_static(b"header"),
            Bytes::from(vec![7u8; size_bytes - 6]),
        ]
    }

    #[test]
    fn the_oldest_batches_go_past_the_shards_bound() {
        let quarter = RECENT_APPEND_BYTES / 4;
        let kept: Vec<_> = (0..4).map(|_| retain(batch(quarter))).collect();
        assert!(kept.iter().all(|batch| batch.parts().is_some()));
        let newest = retain(batch(quarter / 2));
        assert!(kept[0].parts().is_none(), "the oldest went");
        assert!(kept[1..].iter().all(|batch| batch.parts().is_some()));
        let parts = newest.parts().expect("kept");
        assert_eq!(parts[0].len() + parts[1].len(), quarter / 2);
        assert!(
            retain(batch(quarter + 1)).parts().is_none(),
            "too large to keep"
        );
        RECENT_APPENDS.with(|recent| {
            let recent = recent.borrow();
            assert_eq!(recent.size_bytes, quarter * 3 + quarter / 2);
            assert_eq!(recent.batches.len(), 4);
        });
    }
}
