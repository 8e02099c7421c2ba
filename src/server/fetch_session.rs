//! Incremental fetch sessions (KIP-227): a client that opens a session sends,
//! after the first full request, only the partitions that changed, and gets
//! back only the partitions with something new. Sessions live on the shard
//! serving the connection, in a bounded cache
//! (`max.incremental.fetch.session.cache.slots`, least recently used evicted).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use uuid::Uuid;

/// How long a session must sit unused before a new one may take its slot.
const EVICTABLE_AFTER: Duration = Duration::from_secs(120);

/// A partition in a session, by (topic name, partition).
pub type SessionKey = (String, i32);

#[derive(Debug, Clone, PartialEq)]
pub struct CachedPartition {
    pub topic_id: Uuid,
    pub fetch_offset: i64,
    pub max_bytes: i32,
    /// The leader epoch the fetcher believes current (-1: unchecked).
    pub current_leader_epoch: i32,
    /// A follower's last fetched epoch (-1: none).
    pub last_fetched_epoch: i32,
    /// What the client was last told, to send only changes.
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
}

#[derive(Debug)]
pub struct FetchSession {
    pub id: i32,
    /// The epoch the next incremental request must carry.
    pub next_epoch: i32,
    pub partitions: BTreeMap<SessionKey, CachedPartition>,
    last_used: Instant,
}

/// The epoch after `epoch`; 0 is only for opening a session.
pub fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

pub struct FetchSessionCache {
    max_sessions: usize,
    sessions: BTreeMap<i32, FetchSession>,
    next_id: i32,
}

impl FetchSessionCache {
    /// `first_id` spreads ids over shards so each shard's are distinct.
    pub fn new(max_sessions: usize, first_id: i32) -> Self {
        Self {
            max_sessions,
            sessions: BTreeMap::new(),
            next_id: first_id.max(1),
        }
    }

    /// Opens a session. When the cache is full, only a session idle for
    /// `EVICTABLE_AFTER` makes room, as in Kafka; otherwise no session (None)
    /// and the client keeps sending full requests.
    pub fn create(
        &mut self,
        partitions: BTreeMap<SessionKey, CachedPartition>,
        stride: i32,
    ) -> Option<i32> {
        if !self.make_room() {
            return None;
        }
        let id = self.next_id;
        self.next_id = self.next_id.checked_add(stride).unwrap_or(1).max(1);
        self.sessions.insert(
            id,
            FetchSession {
                id,
                next_epoch: 1,
                partitions,
                last_used: Instant::now(),
            },
        );
        Some(id)
    }

    /// A slot for one more session: a free one, or one idle for
    /// `EVICTABLE_AFTER`, as in Kafka.
    fn make_room(&mut self) -> bool {
        if self.sessions.len() < self.max_sessions {
            return true;
        }
        let Some(oldest) = self.sessions.values().min_by_key(|s| s.last_used) else {
            return false;
        };
        if oldest.last_used.elapsed() < EVICTABLE_AFTER {
            return false;
        }
        let oldest = oldest.id;
        self.sessions.remove(&oldest);
        true
    }

    /// A session another shard gave up, its connection now served here
    /// (its id keeps the other shard's residue, so no id here clashes);
    /// false if there is no room for it.
    pub fn adopt(&mut self, session: FetchSession) -> bool {
        if !self.make_room() {
            return false;
        }
        assert!(self.sessions.insert(session.id, session).is_none());
        true
    }

    /// Gives a session up to another shard.
    pub fn take(&mut self, id: i32) -> Option<FetchSession> {
        self.sessions.remove(&id)
    }

    pub fn contains(&self, id: i32) -> bool {
        self.sessions.contains_key(&id)
    }

    pub fn get_mut(&mut self, id: i32) -> Option<&mut FetchSession> {
        let session = self.sessions.get_mut(&id)?;
        session.last_used = Instant::now();
        Some(session)
    }

    pub fn remove(&mut self, id: i32) {
        self.sessions.remove(&id);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.sessions.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition() -> CachedPartition {
        CachedPartition {
            topic_id: Uuid::nil(),
            fetch_offset: 0,
            max_bytes: 100,
            current_leader_epoch: -1,
            last_fetched_epoch: -1,
            high_watermark: -1,
            last_stable_offset: -1,
            log_start_offset: -1,
        }
    }

    #[test]
    fn bounded_and_active_sessions_are_never_evicted() {
        let mut cache = FetchSessionCache::new(2, 1);
        let a = cache
            .create(BTreeMap::from([(("t".into(), 0), partition())]), 2)
            .unwrap();
        let b = cache.create(BTreeMap::new(), 2).unwrap();
        assert_ne!(a, b);
        // Full, and both sessions are in use: no new session.
        assert_eq!(cache.create(BTreeMap::new(), 2), None);
        assert_eq!(cache.len(), 2);
        // A session idle long enough gives up its slot.
        cache.sessions.get_mut(&b).unwrap().last_used -= EVICTABLE_AFTER;
        let c = cache.create(BTreeMap::new(), 2).unwrap();
        assert!(cache.get_mut(b).is_none());
        assert!(cache.get_mut(a).is_some() && cache.get_mut(c).is_some());
        assert_eq!(next_epoch(i32::MAX), 1);
        assert!(FetchSessionCache::new(0, 1)
            .create(BTreeMap::new(), 1)
            .is_none());
    }

    #[test]
    fn a_session_moves_to_another_shard_with_its_partitions_and_epoch() {
        let (mut first, mut second) = (FetchSessionCache::new(2, 1), FetchSessionCache::new(1, 2));
        let id = first
            .create(BTreeMap::from([(("t".into(), 0), partition())]), 2)
            .unwrap();
        first.get_mut(id).unwrap().next_epoch = 7;
        let session = first.take(id).unwrap();
        assert!(!first.contains(id) && first.take(id).is_none());
        assert!(second.adopt(session));
        let adopted = second.get_mut(id).unwrap();
        assert_eq!((adopted.next_epoch, adopted.partitions.len()), (7, 1));
        // Its own sessions keep their residue: no clash with the adopted id.
        assert!(
            second.create(BTreeMap::new(), 2).is_none(),
            "full, and in use"
        );
        let other = first.create(BTreeMap::new(), 2).unwrap();
        assert!(!second.adopt(first.take(other).unwrap()), "no room");
    }
}
