//! The cross-shard mesh: a bounded SPSC channel from every shard to every other.
//! A shard asks another to run a closure against that shard's own state and
//! awaits the answer; the closure builds its future on the target shard, so the
//! state it touches never leaves its thread.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use glommio::channels::shared_channel::{
    self, ConnectedReceiver, ConnectedSender, SharedReceiver, SharedSender,
};
use glommio::sync::Semaphore;

type LocalFuture = Pin<Box<dyn Future<Output = ()>>>;
/// A unit of work sent to another shard.
pub type Job<S> = Box<dyn FnOnce(Rc<S>) -> LocalFuture + Send>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MeshError {
    /// The target shard is gone (shutting down).
    Closed,
    /// No such shard.
    NoSuchShard(usize),
}

impl std::fmt::Display for MeshError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MeshError::Closed => write!(f, "target shard is shutting down"),
            MeshError::NoSuchShard(shard) => write!(f, "no shard {shard}"),
        }
    }
}

impl std::error::Error for MeshError {}

/// One shard's unconnected ends of the mesh, made on the launching thread.
pub struct MeshEnds<S: 'static> {
    shard_id: usize,
    /// `senders[j]`: to shard j (None for self).
    senders: Vec<Option<SharedSender<Job<S>>>>,
    /// `receivers[j]`: from shard j (None for self).
    receivers: Vec<Option<SharedReceiver<Job<S>>>>,
}

/// Builds every shard's ends: `channel_capacity` jobs may wait per direction.
pub fn build_mesh<S: 'static>(nr_shards: usize, channel_capacity: usize) -> Vec<MeshEnds<S>> {
    assert!(nr_shards > 0 && channel_capacity > 0);
    let mut ends: Vec<MeshEnds<S>> = (0..nr_shards)
        .map(|shard_id| MeshEnds {
            shard_id,
            senders: (0..nr_shards).map(|_| None).collect(),
            receivers: (0..nr_shards).map(|_| None).collect(),
        })
        .collect();
    for from in 0..nr_shards {
        for to in 0..nr_shards {
            if from != to {
                let (sender, receiver) = shared_channel::new_bounded(channel_capacity);
                ends[from].senders[to] = Some(sender);
                ends[to].receivers[from] = Some(receiver);
            }
        }
    }
    ends
}

/// Whether a job wakes its shard if that shard is asleep.
#[derive(Debug, Clone, Copy)]
pub enum Delivery {
    Wake,
    /// For work that only matters once the shard does work of its own (a
    /// watch on its partitions, which only it moves): a sleeping shard is left
    /// asleep, and the job runs when it next wakes for anything, or once its
    /// channel from here is half full. A wake between shards is an eventfd
    /// write and a sleeping thread scheduled, the largest cost of a lightly
    /// loaded broker.
    WhenAwake,
}

pub struct ShardMesh<S: 'static> {
    shard_id: usize,
    senders: Vec<Option<ConnectedSender<Job<S>>>>,
    /// Bounds the jobs from other shards running here.
    in_flight: Rc<Semaphore>,
    max_in_flight_jobs: usize,
}

impl<S: 'static> MeshEnds<S> {
    /// Connects this shard's ends (on its own executor) and starts serving jobs
    /// from every peer against `state`, at most `max_in_flight_jobs` at once.
    pub async fn connect(self, state: Rc<S>, max_in_flight_jobs: usize) -> ShardMesh<S> {
        // Each end's connect waits for its peer's, so every end connects at once.
        let in_flight = Rc::new(Semaphore::new(max_in_flight_jobs as u64));
        for receiver in self.receivers.into_iter().flatten() {
            let state = state.clone();
            let in_flight = in_flight.clone();
            glommio::spawn_local(async move {
                let receiver: ConnectedReceiver<Job<S>> = receiver.connect().await;
                while let Some(job) = receiver.recv().await {
                    let Ok(permit) = in_flight.acquire_static_permit(1).await else {
                        break;
                    };
                    let work = job(state.clone());
                    glommio::spawn_local(async move {
                        work.await;
                        drop(permit);
                    })
                    .detach();
                }
            })
            .detach();
        }
        let connecting: Vec<_> = self
            .senders
            .into_iter()
            .map(|sender| sender.map(|sender| glommio::spawn_local(sender.connect())))
            .collect();
        let mut senders = Vec::with_capacity(connecting.len());
        for task in connecting {
            senders.push(match task {
                Some(task) => Some(task.await),
                None => None,
            });
        }
        ShardMesh {
            shard_id: self.shard_id,
            senders,
            in_flight,
            max_in_flight_jobs,
        }
    }
}

impl<S: 'static> ShardMesh<S> {
    pub fn shard_id(&self) -> usize {
        self.shard_id
    }

    pub fn nr_shards(&self) -> usize {
        self.senders.len()
    }

    /// Jobs from other shards running on this shard now.
    pub fn jobs_in_flight(&self) -> u64 {
        self.max_in_flight_jobs as u64 - self.in_flight.available()
    }

    /// Runs `work` on `shard` against that shard's state and returns its answer.
    /// On the local shard it runs inline; otherwise it waits for room in the
    /// bounded channel (backpressure) and then for the answer.
    pub async fn invoke_on<T, F, Fut>(
        &self,
        shard: usize,
        local: &Rc<S>,
        work: F,
    ) -> Result<T, MeshError>
    where
        T: Send + 'static,
        F: FnOnce(Rc<S>) -> Fut + Send + 'static,
        Fut: Future<Output = T> + 'static,
    {
        self.invoke_on_with(shard, local, work, Delivery::Wake)
            .await
    }

    /// `invoke_on`, delivered as `delivery` says.
    pub async fn invoke_on_with<T, F, Fut>(
        &self,
        shard: usize,
        local: &Rc<S>,
        work: F,
        delivery: Delivery,
    ) -> Result<T, MeshError>
    where
        T: Send + 'static,
        F: FnOnce(Rc<S>) -> Fut + Send + 'static,
        Fut: Future<Output = T> + 'static,
    {
        if shard == self.shard_id {
            return Ok(work(local.clone()).await);
        }
        let sender = self
            .senders
            .get(shard)
            .ok_or(MeshError::NoSuchShard(shard))?
            .as_ref()
            .expect("only the local shard lacks a sender");
        let (reply, answer) = futures_channel::oneshot::channel();
        let job: Job<S> = Box::new(move |state| {
            Box::pin(async move {
                let _ = reply.send(work(state).await);
            })
        });
        let sent = match delivery {
            Delivery::Wake => sender.send(job).await,
            Delivery::WhenAwake => sender.send_deferred(job).await,
        };
        sent.map_err(|_| MeshError::Closed)?;
        answer.await.map_err(|_| MeshError::Closed)
    }

    /// Hands `work` to another shard without waiting, neither for room nor
    /// for it to run, and without waking it (`Delivery::WhenAwake`);
    /// false when the channel is full or closed and `work` was dropped. For
    /// work whose loss only costs time (a release that a deadline also brings).
    pub fn try_submit_when_awake<F, Fut>(&self, shard: usize, work: F) -> bool
    where
        F: FnOnce(Rc<S>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        assert_ne!(shard, self.shard_id, "local work runs inline");
        let Some(Some(sender)) = self.senders.get(shard) else {
            return false;
        };
        let job: Job<S> = Box::new(move |state| Box::pin(work(state)));
        sender.try_send_deferred(job).is_ok()
    }

    /// Closes this shard's outgoing channels (shutdown).
    pub fn close(&self) {
        for sender in self.senders.iter().flatten() {
            sender.close();
        }
    }
}
