//! ringbroker: a broker that speaks Apache Kafka's wire protocol, one thread per
//! core on io_uring.

mod config;

use std::path::PathBuf;
use std::process::ExitCode;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use shards::log::{LogDirs, LogManager};
use shards::runtime::{spawn_shards, ShardPlacement, ShardRuntimeConfig, ShardStart};
use tracing::{error, info};

use crate::config::BrokerConfig;

#[derive(Parser)]
#[command(
    name = "ringbroker",
    version,
    about = "A Kafka-compatible broker, thread-per-core on io_uring"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Starts a broker.
    Start {
        /// server.properties to read (default: config/server.properties).
        config: Option<PathBuf>,
        /// Overrides one property, Kafka-style: --override log.dirs=/data
        #[arg(long = "override", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
    },
}

/// What each shard owns.
struct ShardState {
    log_manager: Rc<LogManager>,
}

/// How often a shard looks for the shutdown signal.
const STOP_POLL_INTERVAL: Duration = Duration::from_millis(50);

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Start { config, overrides } => start(
            config.unwrap_or_else(|| PathBuf::from("config/server.properties")),
            overrides,
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            error!("{error}");
            eprintln!("ringbroker: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Blocks SIGINT and SIGTERM in this thread and every thread it starts, so the
/// main thread alone receives them through sigwait.
fn block_shutdown_signals() -> libc::sigset_t {
    // SAFETY: plain libc signal-set calls on a zeroed, owned sigset_t.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn wait_for_shutdown_signal(set: &libc::sigset_t) -> i32 {
    let mut signal = 0;
    // SAFETY: `set` is a valid signal set and `signal` a valid out-pointer.
    unsafe { libc::sigwait(set, &mut signal) };
    signal
}

fn start(config_path: PathBuf, overrides: Vec<String>) -> Result<(), Box<dyn std::error::Error>> {
    let config = BrokerConfig::load(&config_path, &overrides)?;
    let signals = block_shutdown_signals();
    let dirs = LogDirs::open(&config.log_dirs);
    let placement = Arc::new(ShardPlacement::load(&config.log_dirs, config.cores.len())?);
    for (_, tp) in dirs.partitions() {
        placement.assign(&tp)?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let runtime = ShardRuntimeConfig::for_cores(config.cores.clone());
    let shard_config = config.clone();
    let shard_dirs = dirs.clone();
    let shard_stop = stop.clone();
    let max_in_flight_mesh_jobs = runtime.max_in_flight_mesh_jobs;
    let handles =
        spawn_shards::<ShardState, _, _, ()>(&runtime, move |start: ShardStart<ShardState>| {
            let (config, dirs, placement, stop) = (
                shard_config.clone(),
                shard_dirs.clone(),
                placement.clone(),
                shard_stop.clone(),
            );
            async move {
                let log_manager =
                    LogManager::new(start.shard_id, dirs.clone(), config.log_manager.clone());
                let defaults = Rc::new(config.log_defaults.clone());
                for (_, tp) in dirs.partitions() {
                    if placement.shard_of(&tp) == Some(start.shard_id) {
                        if let Err(error) =
                            log_manager.get_or_create_log(&tp, defaults.clone()).await
                        {
                            error!(partition = %tp, %error, "cannot load partition");
                        }
                    }
                }
                let state = Rc::new(ShardState {
                    log_manager: log_manager.clone(),
                });
                let mesh = start
                    .mesh
                    .connect(state.clone(), max_in_flight_mesh_jobs)
                    .await;
                state.log_manager.start_background_tasks();
                info!(
                    shard = start.shard_id,
                    partitions = state.log_manager.logs().len(),
                    "shard ready"
                );
                while !stop.load(Ordering::Acquire) {
                    glommio::timer::sleep(STOP_POLL_INTERVAL).await;
                }
                state.log_manager.shutdown().await;
                mesh.close();
            }
        })?;
    info!(
        broker_id = config.broker_id,
        shards = config.cores.len(),
        log_dirs = ?config.log_dirs,
        "ringbroker storage is ready; the Kafka protocol listener ({}) is not implemented yet",
        config.listeners
    );
    let signal = wait_for_shutdown_signal(&signals);
    info!(signal, "shutting down");
    stop.store(true, Ordering::Release);
    for handle in handles {
        handle.join().map_err(|error| error.to_string())?;
    }
    dirs.write_checkpoints()?;
    dirs.mark_clean_shutdown()?;
    info!("shut down cleanly");
    Ok(())
}
