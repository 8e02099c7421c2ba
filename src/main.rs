//! ringbroker: a broker that speaks Apache Kafka's wire protocol, one thread per
//! core on io_uring.

mod allocator;
mod config;
mod controller;
mod coordinator;
mod handlers;
mod metadata;
mod metrics;
mod network;
mod protocol;
mod replication;
mod server;
#[cfg(test)]
mod test_support;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracing::{error, info};

use crate::config::BrokerConfig;

#[global_allocator]
static GLOBAL: allocator::Allocator = allocator::Allocator;

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
        /// server.properties to read (default: the built-in copy of
        /// config/server.properties).
        config: Option<PathBuf>,
        /// Overrides one property, Kafka-style: --override log.dirs=/data
        #[arg(long = "override", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        // Colour codes only for a terminal, not for a log file or a pipe.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new("info,zookeeper_client=warn")
            }),
        )
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Start { config, overrides } => start(config, overrides),
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

/// Segments, indexes and connections each hold a descriptor: take the hard
/// limit, as Kafka's start scripts advise.
fn raise_open_files_limit() {
    // SAFETY: getrlimit/setrlimit on a valid, owned struct.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

fn start(
    config_path: Option<PathBuf>,
    overrides: Vec<String>,
) -> Result<(), Box<dyn std::error::Error>> {
    let config = BrokerConfig::load(config_path.as_deref(), &overrides)?;
    raise_open_files_limit();
    let signals = block_shutdown_signals();
    let listeners = config
        .listeners
        .iter()
        .map(|l| format!("{}://{}", l.name, l.address))
        .collect::<Vec<_>>()
        .join(",");
    let (broker_id, shards) = (config.broker_id, config.cores.len());
    let inter_broker_listener = config.inter_broker_listener_name.clone();
    let broker = server::start(config)?;
    info!(
        broker_id,
        shards, listeners, inter_broker_listener, "ringbroker is ready"
    );
    let signal = wait_for_shutdown_signal(&signals);
    info!(signal, "shutting down");
    broker.stop()
}
