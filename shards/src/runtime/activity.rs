//! What a shard was doing besides serving requests: the background and
//! bookkeeping work that can hold a request up (a segment roll, an index
//! write, a flush, a retention or cleaner pass...). Each shard keeps the last
//! `CAPACITY` such activities of at least `MIN_RECORDED` in a ring of its own,
//! so a slow request can be listed beside what ran while it waited.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Activities a shard remembers; the oldest go first.
const CAPACITY: usize = 4096;
/// Shorter work is not worth remembering: it cannot explain a slow request.
const MIN_RECORDED: Duration = Duration::from_micros(100);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActivityKind {
    SegmentRoll,
    /// The next segment's files made ahead of its roll (`preallocate`).
    SegmentPrepare,
    /// Index entries written to the index files.
    IndexWrite,
    /// Appended bytes handed to the kernel's writeback (blocking pool).
    Writeback,
    /// fsync of a log (`flush.messages`, `flush.ms`, shutdown).
    Flush,
    RetentionPass,
    CleanerPass,
    /// The checkpoint files written (blocking pool).
    Checkpoint,
    /// The group coordinator's deadlines checked.
    CoordinatorTick,
    /// A log moved between log dirs, its writes held.
    LogMoveHeld,
    /// A metadata image applied by a shard.
    ImageApply,
    /// A partition leaving a shard (`ShardBalancer`): its requests held
    /// while it drains, until its log is handed off.
    ShardHandOff,
}

impl ActivityKind {
    pub fn name(self) -> &'static str {
        match self {
            ActivityKind::SegmentRoll => "segment roll",
            ActivityKind::SegmentPrepare => "segment prepare",
            ActivityKind::IndexWrite => "index write",
            ActivityKind::Writeback => "writeback",
            ActivityKind::Flush => "fsync",
            ActivityKind::RetentionPass => "retention",
            ActivityKind::CleanerPass => "cleaner",
            ActivityKind::Checkpoint => "checkpoint write",
            ActivityKind::CoordinatorTick => "coordinator tick",
            ActivityKind::LogMoveHeld => "log dir move",
            ActivityKind::ImageApply => "image apply",
            ActivityKind::ShardHandOff => "shard hand-off",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Activity {
    pub kind: ActivityKind,
    pub started: Instant,
    pub duration: Duration,
}

impl Activity {
    pub fn ended(&self) -> Instant {
        self.started + self.duration
    }
}

thread_local! {
    static ACTIVITIES: RefCell<VecDeque<Activity>> = const { RefCell::new(VecDeque::new()) };
}

/// Records work of `kind` that began at `started` and ends now, on this
/// thread's (shard's) ring.
pub fn record(kind: ActivityKind, started: Instant) {
    let duration = started.elapsed();
    if duration < MIN_RECORDED {
        return;
    }
    ACTIVITIES.with(|ring| {
        let mut ring = ring.borrow_mut();
        if ring.len() == CAPACITY {
            ring.pop_front();
        }
        ring.push_back(Activity {
            kind,
            started,
            duration,
        });
    });
}

/// This shard's remembered activities that overlap `[from, to]`, and the
/// start of the oldest one remembered (what is older is forgotten).
pub fn overlapping(from: Instant, to: Instant) -> (Vec<Activity>, Option<Instant>) {
    ACTIVITIES.with(|ring| {
        let ring = ring.borrow();
        let overlapping = ring
            .iter()
            .filter(|activity| activity.started <= to && activity.ended() >= from)
            .copied()
            .collect();
        (overlapping, ring.front().map(|oldest| oldest.started))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_activities_long_enough_to_matter() {
        let long_ago = Instant::now() - Duration::from_secs(10);
        record(ActivityKind::IndexWrite, Instant::now());
        for _ in 0..CAPACITY + 1 {
            record(ActivityKind::Flush, long_ago);
        }
        record(
            ActivityKind::SegmentRoll,
            Instant::now() - Duration::from_millis(5),
        );
        let (all, oldest) = overlapping(long_ago, Instant::now());
        assert_eq!(all.len(), CAPACITY, "bounded, the short one left out");
        assert_eq!(oldest, Some(long_ago));
        let (recent, _) = overlapping(Instant::now() - Duration::from_millis(1), Instant::now());
        assert_eq!(
            recent.len(),
            CAPACITY,
            "every one ended within the last millisecond"
        );
        let (roll, _) = overlapping(
            Instant::now() + Duration::from_secs(1),
            Instant::now() + Duration::from_secs(2),
        );
        assert!(roll.is_empty());
    }
}
