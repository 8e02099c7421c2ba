//! Kafka's RequestMetrics: where each request's time went, phase by phase,
//! from the instants the network and the handlers mark on its
//! `RequestTimes`; and ringbroker's own phases of a partition's part in a
//! request (the hop to the owning shard, the append, the wait for the ISR).

use std::cell::Cell;
use std::time::{Duration, Instant};

use crate::replication::AppendTiming;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// From the request's last byte read to its handler starting. A shard
    /// has no request queue: this is the wait for the shard's scheduler.
    RequestQueue,
    /// The handler's own work, up to its local part being done (a Produce's
    /// appends, a Fetch's first read).
    Local,
    /// Waiting on others after that: the ISR for acks=all, data for a
    /// parked Fetch.
    Remote,
    /// Client quota throttling; no client quotas are enforced, so always 0.
    Throttle,
    /// From the response ready (a Produce's last partition done; otherwise
    /// the handler's end) to its first byte sent: what the shard ran before
    /// taking the request up again, as Kafka's response queue holds a
    /// response until a network thread takes it.
    ResponseQueue,
    ResponseSend,
    Total,
    /// Before the request: from the kernel's receipt of its first bytes to
    /// the shard reading them (a lower bound; `network::receive_timestamp`).
    SocketWait,
    /// A partition's work waiting to start on the shard that owns it (only
    /// for partitions on another shard).
    MeshWait,
    /// A partition's append on its leader, the log write included.
    Append,
    /// A partition's acks=all wait for its ISR, after the append.
    AcksWait,
}

impl Phase {
    /// The phases each request has, in order.
    pub const REQUEST: [Phase; 7] = [
        Phase::RequestQueue,
        Phase::Local,
        Phase::Remote,
        Phase::Throttle,
        Phase::ResponseQueue,
        Phase::ResponseSend,
        Phase::Total,
    ];
    /// ringbroker's own: per request, then per partition.
    pub const OWN: [Phase; 4] = [
        Phase::SocketWait,
        Phase::MeshWait,
        Phase::Append,
        Phase::AcksWait,
    ];

    /// Kafka's MBean name (`kafka.network:type=RequestMetrics,name=...`), or
    /// ringbroker's for its own phases.
    pub fn name(self) -> &'static str {
        match self {
            Phase::RequestQueue => "RequestQueueTimeMs",
            Phase::Local => "LocalTimeMs",
            Phase::Remote => "RemoteTimeMs",
            Phase::Throttle => "ThrottleTimeMs",
            Phase::ResponseQueue => "ResponseQueueTimeMs",
            Phase::ResponseSend => "ResponseSendTimeMs",
            Phase::Total => "TotalTimeMs",
            Phase::SocketWait => "SocketWaitTimeMs",
            Phase::MeshWait => "MeshWaitTimeMs",
            Phase::Append => "AppendTimeMs",
            Phase::AcksWait => "AcksWaitTimeMs",
        }
    }

    /// The Prometheus family, as a JMX exporter names Kafka's MBeans.
    pub fn metric_name(self) -> String {
        let prefix = if Phase::REQUEST.contains(&self) {
            "kafka_network_requestmetrics_"
        } else {
            "ringbroker_requestmetrics_"
        };
        format!("{prefix}{}", self.name().to_ascii_lowercase())
    }

    pub fn help(self) -> &'static str {
        match self {
            Phase::RequestQueue => "From a request read to its handler starting, ms.",
            Phase::Local => "A request's local work (appends, first read), ms.",
            Phase::Remote => {
                "A request waiting on others (ISR for acks=all, data for a parked fetch), ms."
            }
            Phase::Throttle => "Client quota throttling, ms (no client quotas: 0).",
            Phase::ResponseQueue => {
                "From a response ready (a Produce's last partition done) to its sending starting, ms."
            }
            Phase::ResponseSend => "Sending a response, ms.",
            Phase::Total => "From a request read to its response sent, ms.",
            Phase::SocketWait => {
                "A request's first bytes waiting in the socket to be read, at least, ms."
            }
            Phase::MeshWait => {
                "A request's work waiting for another shard owning its partitions, per hop, ms."
            }
            Phase::Append => "A partition's leader append, ms.",
            Phase::AcksWait => "A partition's acks=all wait for its ISR after the append, ms.",
        }
    }
}

/// The instants of one request, marked as it goes (Kafka's
/// RequestChannel.Request timestamps).
#[derive(Debug)]
pub struct RequestTimes {
    /// Its last byte read.
    pub received: Instant,
    /// How long its first bytes had waited in the socket before they were
    /// read (`Phase::SocketWait`), when the kernel timestamped them.
    pub socket_wait: Option<Duration>,
    dequeued: Cell<Option<Instant>>,
    local_complete: Cell<Option<Instant>>,
    /// (api version, correlation id), once the header is read.
    identity: Cell<Option<(i16, i32)>>,
    /// A produce's longest shard wait, append and acks wait over its
    /// partitions; its last partition done is when its response was ready.
    slowest_partition: Cell<Option<AppendTiming>>,
}

impl RequestTimes {
    pub fn new(received: Instant, socket_wait: Option<Duration>) -> Self {
        Self {
            received,
            socket_wait,
            dequeued: Cell::new(None),
            local_complete: Cell::new(None),
            identity: Cell::new(None),
            slowest_partition: Cell::new(None),
        }
    }

    pub fn set_slowest_partition(&self, timing: AppendTiming) {
        self.slowest_partition.set(Some(timing));
    }

    pub fn slowest_partition(&self) -> Option<AppendTiming> {
        self.slowest_partition.get()
    }

    /// The handler starts.
    pub fn dequeued(&self, version: i16, correlation_id: i32) {
        self.dequeued.set(Some(Instant::now()));
        self.identity.set(Some((version, correlation_id)));
    }

    /// The handler's local work is done at `at`; what follows is remote.
    /// The first mark counts (a Fetch parked twice went remote at the first).
    pub fn local_complete_at(&self, at: Instant) {
        if self.local_complete.get().is_none() {
            self.local_complete.set(Some(at));
        }
    }

    pub fn identity(&self) -> Option<(i16, i32)> {
        self.identity.get()
    }

    /// The request phases, in `Phase::REQUEST`'s order, of a request whose
    /// response was complete at `responded`, began sending at `send_started`
    /// and was sent at `sent`. A request refused before its handler ran spent
    /// all of it in the queue.
    pub fn phases(
        &self,
        responded: Instant,
        send_started: Instant,
        sent: Instant,
    ) -> [Duration; 7] {
        assert!(self.received <= responded && responded <= send_started && send_started <= sent);
        let dequeued = self.dequeued.get().unwrap_or(responded);
        let local_complete = self
            .local_complete
            .get()
            .unwrap_or(responded)
            .min(responded);
        let local_complete = local_complete.max(dequeued);
        // Ready when a Produce's last partition was done; otherwise when
        // the handler ended.
        let ready = self
            .slowest_partition
            .get()
            .and_then(|partition| partition.done_at)
            .unwrap_or(responded)
            .clamp(local_complete, responded);
        [
            dequeued - self.received,
            local_complete - dequeued,
            ready - local_complete,
            Duration::ZERO,
            send_started - ready,
            sent - send_started,
            sent - self.received,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_split_the_total() {
        let received = Instant::now();
        let at = |ms: u64| received + Duration::from_millis(ms);
        let ms = |phases: [Duration; 7]| phases.map(|d| d.as_millis() as u64);
        let times = RequestTimes::new(received, None);
        times.dequeued.set(Some(at(1)));
        times.local_complete_at(at(4));
        times.local_complete_at(at(6));
        let phases = times.phases(at(10), at(11), at(15));
        assert_eq!(ms(phases), [1, 3, 6, 0, 1, 4, 15]);
        assert_eq!(phases[..6].iter().sum::<Duration>(), phases[6]);

        // Done at 7, taken up again at 10: the response queued 3 ms more.
        let times = RequestTimes::new(received, None);
        times.dequeued.set(Some(at(1)));
        times.local_complete_at(at(4));
        times.set_slowest_partition(AppendTiming {
            done_at: Some(at(7)),
            ..AppendTiming::default()
        });
        assert_eq!(
            ms(times.phases(at(10), at(11), at(15))),
            [1, 3, 3, 0, 4, 4, 15]
        );

        // Nothing went remote: all of the handler's time is local.
        let times = RequestTimes::new(received, None);
        times.dequeued.set(Some(at(1)));
        let phases = times.phases(at(10), at(10), at(12));
        assert_eq!(phases[1], Duration::from_millis(9));
        assert_eq!(phases[2], Duration::ZERO);
    }

    #[test]
    fn kafka_names() {
        assert_eq!(
            Phase::Total.metric_name(),
            "kafka_network_requestmetrics_totaltimems"
        );
        assert_eq!(
            Phase::AcksWait.metric_name(),
            "ringbroker_requestmetrics_ackswaittimems"
        );
    }
}
