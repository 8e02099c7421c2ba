//! Starting and stopping a broker: metadata, control plane, shards, listeners.

pub mod broker;
pub mod control;
mod controlled_shutdown;
pub mod fetch_session;
mod producer_id_manager;
pub mod shard_balancer;

use crate::replication::quota::ReplicationQuotas;
use crate::replication::SharedPartitionOffsets;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::rc::Rc;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use futures_channel::mpsc::{unbounded, TryRecvError, UnboundedReceiver, UnboundedSender};
use futures_lite::StreamExt;
use glommio::{LocalExecutorBuilder, Placement};
use shards::log::{LogDirs, LogManager};
use shards::runtime::{
    raise_memlock_limit, spawn_shards, ShardPlacement, ShardRuntimeConfig, ShardStart,
    EXECUTOR_LOCKED_BYTES,
};
use tracing::{info, warn};

use self::broker::{ShardBroker, ShardNetwork};
use self::control::{
    build_control_channels, ApplyImage, ControlClient, ControlEnds, ControlPlane, ShardControlEnds,
};
use crate::config::BrokerConfig;
use crate::controller::TopicDefaults;
use crate::handlers::{ApiTable, RequestDispatcher};
use crate::metadata::image::{Broker, EndPoint, MetadataImage};
use crate::metadata::kafka_zk_client::KafkaZkError;
use crate::metadata::zk_client::{ZkClient, ZkEventReceiver};
use crate::metadata::znodes::BrokerIdZNode;
use crate::metadata::zookeeper::enter_control_thread;
use crate::metrics;
use crate::network::{
    accept_loop, probe_listeners, ConnectionLimits, Listener, ListenerSockets, ShardConnections,
};

/// How often a stopping shard looks whether its connections are closed.
const DRAIN_POLL_INTERVAL: Duration = Duration::from_millis(20);
/// How long shutdown waits for in-flight requests to be answered.
const SHUTDOWN_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// io_uring buffer memory for the control plane's executor.
const CONTROL_IO_MEMORY_BYTES: usize = 256 * 1024;

/// What the thread that started the broker tells a shard. A shard sleeps
/// until one comes (an idle broker wakes for nothing).
enum ShardSignal {
    /// Shard 0: ask the controller to move this broker's leaderships.
    ControlledShutdown,
    Stop,
}

/// How often a shard looks at its signals without being woken: a backstop,
/// should a wake from another thread be lost (glommio's cross-thread wakes
/// have raced before; see the mesh).
const SIGNAL_BACKSTOP_INTERVAL: Duration = Duration::from_secs(1);

/// The next signal for a shard; a dropped sender stops it too.
async fn next_signal(signals: &mut UnboundedReceiver<ShardSignal>) -> ShardSignal {
    loop {
        let woken = futures_lite::future::or(async { Some(signals.next().await) }, async {
            glommio::timer::sleep(SIGNAL_BACKSTOP_INTERVAL).await;
            None
        })
        .await;
        match woken {
            Some(signal) => return signal.unwrap_or(ShardSignal::Stop),
            None => match signals.try_recv() {
                Ok(signal) => return signal,
                Err(TryRecvError::Closed) => return ShardSignal::Stop,
                Err(TryRecvError::Empty) => {}
            },
        }
    }
}

/// A running broker; `stop` shuts it down cleanly.
pub struct RunningBroker {
    /// ZooKeeper mode with `controlled.shutdown.enable`: a controlled shutdown,
    /// which `done` reports, and its bound.
    controlled_shutdown: Option<(mpsc::Receiver<()>, Duration)>,
    /// One per shard, by shard id.
    signals: Vec<UnboundedSender<ShardSignal>>,
    shards: Vec<glommio::ExecutorJoinHandle<()>>,
    control: glommio::ExecutorJoinHandle<()>,
    dirs: Arc<LogDirs>,
}

pub fn start(config: BrokerConfig) -> Result<RunningBroker, Box<dyn std::error::Error>> {
    let config = Arc::new(config);
    let nr_shards = config.cores.len();
    let dirs = LogDirs::open(&config.log_dirs)?;
    // The embedded metadata lives in the first log dir: starting without it
    // would forget every topic whose partitions are in the other dirs.
    let metadata_dir = &dirs.dirs()[0].health;
    if let Some(reason) = metadata_dir
        .offline_reason()
        .filter(|_| config.zookeeper.is_none())
    {
        return Err(format!(
            "log dir {} holds the embedded metadata and cannot be used: {reason}",
            metadata_dir.path().display()
        )
        .into());
    }
    let addresses = probe_listeners(&config.listeners)?;
    let registration = BrokerIdZNode {
        broker: Broker {
            id: config.broker_id,
            endpoints: config
                .listeners
                .iter()
                .zip(&addresses)
                .map(|(listener, address)| EndPoint {
                    listener_name: listener.name.clone(),
                    security_protocol: listener.security_protocol.clone(),
                    host: listener.advertised_host.clone(),
                    // A listener on port 0 advertises the port it got.
                    port: match listener.advertised_port {
                        0 => address.port(),
                        port => port,
                    },
                })
                .collect(),
            rack: config.rack.clone(),
        },
        timestamp_ms: shards::log::wall_clock_ms(),
    };
    let defaults = TopicDefaults {
        num_partitions: config.num_partitions,
        default_replication_factor: config.default_replication_factor,
        log_config: config.log_defaults.clone(),
    };
    let placement = Arc::new(ShardPlacement::load(&config.log_dirs, nr_shards)?);
    let (control_ends, shard_ends) = build_control_channels(nr_shards);
    let runtime = ShardRuntimeConfig {
        pinned: config.cores_pinned,
        slice_us: config.cores_slice_us,
        ..ShardRuntimeConfig::for_cores(config.cores.clone())
    };
    // Before the first executor: the control plane's needs locked memory too.
    raise_memlock_limit(
        runtime.locked_bytes() + EXECUTOR_LOCKED_BYTES + CONTROL_IO_MEMORY_BYTES as u64,
    );
    // The control thread opens the store, registers this broker and takes
    // the controller's office, then hands the first image to the shards.
    let (started_tx, started_rx) = mpsc::channel::<Result<Arc<MetadataImage>, String>>();
    let (metadata_dir, zookeeper) = (config.log_dirs[0].clone(), config.zookeeper.clone());
    let inter_broker_listener = config.inter_broker_listener_name.clone();
    let leader_rebalance = config.leader_rebalance;
    let storage = control::LocalStorage {
        placement,
        dirs: dirs.clone(),
    };
    let control = LocalExecutorBuilder::new(Placement::Unbound)
        .name("control")
        .io_memory(CONTROL_IO_MEMORY_BYTES)
        .spawn(move || async move {
            match zookeeper {
                None => {
                    let started = control::start_embedded(
                        &metadata_dir,
                        registration,
                        defaults,
                        leader_rebalance,
                        storage,
                    )
                    .await;
                    run_control_plane(started, started_tx, control_ends).await
                }
                Some(zookeeper) => {
                    // The ZooKeeper client's tasks run on this thread, for its life.
                    let _spawner = enter_control_thread();
                    let started = control::start_zookeeper(
                        &zookeeper,
                        inter_broker_listener,
                        registration,
                        defaults,
                        leader_rebalance,
                        storage,
                    )
                    .await;
                    run_control_plane(started, started_tx, control_ends).await
                }
            }
        })
        .map_err(|e| e.to_string())?;
    let initial_image = match started_rx.recv() {
        Ok(Ok(image)) => image,
        Ok(Err(error)) => return Err(error.into()),
        Err(_) => return Err("the control thread died while starting".into()),
    };

    let (signals, signal_receivers): (Vec<_>, Vec<_>) =
        (0..nr_shards).map(|_| unbounded::<ShardSignal>()).unzip();
    let signal_receivers = Arc::new(Mutex::new(
        signal_receivers.into_iter().map(Some).collect::<Vec<_>>(),
    ));
    let (retry, controlled) = (
        config.controlled_shutdown,
        config.zookeeper.is_some() && config.controlled_shutdown.enable,
    );
    let (shutdown_done_tx, shutdown_done_rx) = mpsc::channel::<()>();
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let shard_ends: Arc<Mutex<Vec<Option<ShardControlEnds>>>> =
        Arc::new(Mutex::new(shard_ends.into_iter().map(Some).collect()));
    let listeners: Vec<(String, SocketAddr)> = config
        .listeners
        .iter()
        .map(|listener| listener.name.clone())
        .zip(addresses)
        .collect();
    // Bound by the first shard past the load barrier, then shared out.
    let sockets: Arc<Mutex<Option<Result<ListenerSockets, String>>>> = Arc::new(Mutex::new(None));
    let max_in_flight_mesh_jobs = runtime.max_in_flight_mesh_jobs;
    let shard_dirs = dirs.clone();
    let loaded = Arc::new(std::sync::Barrier::new(nr_shards));
    let quotas = Arc::new(ReplicationQuotas::default());
    let shared_offsets = Arc::new(SharedPartitionOffsets::default());
    let shards =
        spawn_shards::<ShardBroker, _, _, ()>(&runtime, move |start: ShardStart<ShardBroker>| {
            let shutdown_done = shutdown_done_tx.clone();
            let mut signals = signal_receivers.lock().unwrap()[start.shard_id]
                .take()
                .expect("one signal receiver per shard");
            let (config, dirs, image, ready, loaded) = (
                config.clone(),
                shard_dirs.clone(),
                initial_image.clone(),
                ready_tx.clone(),
                loaded.clone(),
            );
            let ends = shard_ends.lock().unwrap()[start.shard_id]
                .take()
                .expect("one set of control ends per shard");
            let (sockets, listeners, quotas, shared_offsets) = (
                sockets.clone(),
                listeners.clone(),
                quotas.clone(),
                shared_offsets.clone(),
            );
            async move {
                let log_manager = LogManager::new(start.shard_id, dirs, config.log_manager.clone());
                let image_receiver = glommio::spawn_local(ends.images.connect());
                let control = ControlClient::new(ends.requests.connect().await);
                let broker = Rc::new(ShardBroker::new(
                    start.shard_id,
                    config.clone(),
                    log_manager.clone(),
                    control,
                    image.clone(),
                    quotas,
                    shared_offsets,
                ));
                broker.set_mesh(
                    start
                        .mesh
                        .connect(broker.clone(), max_in_flight_mesh_jobs)
                        .await,
                );
                broker.apply_image(image).await;
                let images = image_receiver.await;
                let applier = broker.clone();
                glommio::spawn_local(async move {
                    while let Some(ApplyImage { image, applied }) = images.recv().await {
                        applier.apply_image(image).await;
                        let _ = applied.send(());
                    }
                })
                .detach();
                log_manager.start_background_tasks();
                broker.replica_manager.start_isr_expiration();
                if start.shard_id == 0 {
                    shard_balancer::start(broker.clone());
                }
                broker.groups.start();
                // Clients come in only once every shard serves its partitions.
                glommio::executor()
                    .spawn_blocking(move || {
                        loaded.wait();
                    })
                    .await;
                let taken = {
                    let mut slot = sockets.lock().unwrap();
                    let bound = slot.get_or_insert_with(|| {
                        ListenerSockets::bind(
                            &listeners,
                            config.cores.len(),
                            config.socket_listen_backlog_size,
                            config.metrics_address,
                        )
                    });
                    bound
                        .as_mut()
                        .map(|bound| bound.take(start.shard_id))
                        .map_err(|error| error.clone())
                };
                let (sockets, metrics_socket) = match taken {
                    Ok(taken) => taken,
                    Err(error) => {
                        let _ = ready.send(Err(error));
                        return;
                    }
                };
                let connections = Rc::new(ShardConnections::default());
                let limits = ConnectionLimits {
                    max_request_bytes: config.socket_request_max_bytes,
                    idle_timeout: Duration::from_millis(config.connections_max_idle_ms),
                    response_hold: Duration::from_micros(config.response_hold_us),
                };
                // A dispatcher per listener, each with its listener's table:
                // the controller's requests only on the inter-broker one.
                let client_apis = Rc::new(ApiTable::client());
                let inter_broker_apis = Rc::new(ApiTable::inter_broker());
                let (listeners, acceptors): (Vec<_>, Vec<_>) = sockets
                    .into_iter()
                    .map(|(name, socket)| {
                        let apis = if name == config.inter_broker_listener_name {
                            inter_broker_apis.clone()
                        } else {
                            client_apis.clone()
                        };
                        let dispatcher = RequestDispatcher::new(broker.clone(), apis);
                        let listener =
                            Listener::new(Rc::from(name), dispatcher, limits, connections.clone());
                        let acceptor = glommio::spawn_local(accept_loop(socket, listener.clone()));
                        (listener, acceptor)
                    })
                    .unzip();
                broker.set_network(ShardNetwork {
                    connections: connections.clone(),
                    listeners,
                });
                let metrics_server = metrics_socket.map(|socket| {
                    // SAFETY: a bound, listening TCP socket this shard now owns.
                    let listener =
                        unsafe { glommio::net::TcpListener::from_raw_fd(socket.into_raw_fd()) };
                    glommio::spawn_local(metrics::http::serve(listener, broker.clone()))
                });
                let _ = ready.send(Ok(()));
                while let ShardSignal::ControlledShutdown = next_signal(&mut signals).await {
                    let (broker, done) = (broker.clone(), shutdown_done.clone());
                    glommio::spawn_local(async move {
                        controlled_shutdown::controlled_shutdown(&broker).await;
                        let _ = done.send(());
                    })
                    .detach();
                }
                for acceptor in acceptors {
                    acceptor.cancel().await;
                }
                if let Some(metrics_server) = metrics_server {
                    metrics_server.cancel().await;
                }
                broker.close_network();
                connections.stop();
                broker.replica_manager.shutdown();
                // Joins and syncs waiting on a rebalance are answered now.
                broker.groups.shutdown();
                let drain_deadline = Instant::now() + SHUTDOWN_DRAIN_TIMEOUT;
                while connections.open() > 0 && Instant::now() < drain_deadline {
                    glommio::timer::sleep(DRAIN_POLL_INTERVAL).await;
                }
                log_manager.shutdown().await;
                broker.mesh().close();
                broker.control.close();
            }
        })?;
    for _ in 0..nr_shards {
        ready_rx
            .recv()
            .map_err(|_| "a shard died while starting")??;
    }
    // Every attempt may wait for its answer and then for the backoff.
    let attempts = retry.max_retries + 1;
    let bound =
        (Duration::from_secs(30) + Duration::from_millis(retry.retry_backoff_ms)) * attempts;
    Ok(RunningBroker {
        controlled_shutdown: controlled.then_some((shutdown_done_rx, bound)),
        signals,
        shards,
        control,
        dirs,
    })
}

/// Hands the started control plane's first image to the shards (or why it
/// did not start), then serves them until they hang up.
async fn run_control_plane<Z: ZkClient>(
    started: Result<(ControlPlane<Z>, ZkEventReceiver), KafkaZkError>,
    started_tx: mpsc::Sender<Result<Arc<MetadataImage>, String>>,
    ends: ControlEnds,
) {
    match started {
        Ok((mut control_plane, zk_events)) => {
            let _ = started_tx.send(Ok(control_plane.initial_image()));
            control_plane.run(ends, zk_events).await;
        }
        Err(error) => {
            let _ = started_tx.send(Err(error.to_string()));
        }
    }
}

impl RunningBroker {
    /// In ZooKeeper mode first has the controller move this broker's
    /// leaderships (controlled shutdown); then answers in-flight requests,
    /// flushes every log, writes the checkpoints and the clean-shutdown marker.
    pub fn stop(self) -> Result<(), Box<dyn std::error::Error>> {
        if let Some((done, bound)) = &self.controlled_shutdown {
            let _ = self.signals[0].unbounded_send(ShardSignal::ControlledShutdown);
            if done.recv_timeout(*bound).is_err() {
                warn!("controlled shutdown did not end within {bound:?}; stopping anyway");
            }
        }
        for signal in &self.signals {
            let _ = signal.unbounded_send(ShardSignal::Stop);
        }
        for shard in self.shards {
            shard.join().map_err(|error| error.to_string())?;
        }
        // The shards hung up on the control plane, which then ends.
        if let Err(error) = self.control.join() {
            warn!(%error, "control plane ended badly");
        }
        self.dirs.write_checkpoints()?;
        self.dirs.mark_clean_shutdown()?;
        info!("shut down cleanly");
        Ok(())
    }
}
