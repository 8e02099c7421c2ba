//! `server.properties`: Kafka's key names and defaults, plus ringbroker's own.

pub mod definitions;
pub mod describe;
pub mod dynamic;

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use shards::log::{LogConfig, LogManagerConfig, TOPIC_CONFIG_NAMES};
use shards::runtime::{MAX_SLICE_US, MIN_SLICE_US};

use self::definitions::kafka_config_defs;

use crate::coordinator::group::GroupConfig;
use crate::metadata::zookeeper::ZooKeeperConfig;
use tracing::{info, warn};

/// Keys this broker understands beyond the topic defaults (`log.*`).
const BROKER_KEYS: &[&str] = &[
    "broker.id",
    "node.id",
    "listeners",
    "advertised.listeners",
    "listener.security.protocol.map",
    "inter.broker.listener.name",
    "security.inter.broker.protocol",
    "socket.listen.backlog.size",
    "log.dirs",
    "log.dir",
    "num.partitions",
    "default.replication.factor",
    "auto.create.topics.enable",
    "log.retention.check.interval.ms",
    "log.flush.scheduler.interval.ms",
    "log.flush.offset.checkpoint.interval.ms",
    "log.cleaner.enable",
    "log.cleaner.backoff.ms",
    "log.cleaner.dedupe.buffer.size",
    "socket.request.max.bytes",
    "max.incremental.fetch.session.cache.slots",
    "fetch.max.bytes",
    "connections.max.idle.ms",
    "offsets.topic.num.partitions",
    "offsets.topic.replication.factor",
    "offsets.topic.segment.bytes",
    "offsets.retention.minutes",
    "offsets.retention.check.interval.ms",
    "offsets.load.buffer.size",
    "offset.metadata.max.bytes",
    "group.min.session.timeout.ms",
    "group.max.session.timeout.ms",
    "group.initial.rebalance.delay.ms",
    "group.max.size",
    "ringbroker.cores",
    "ringbroker.cores.pinned",
    "ringbroker.cores.slice.us",
    "ringbroker.shard.balance.interval.ms",
    "ringbroker.metrics.port",
    "ringbroker.log.drop.behind.bytes",
    "ringbroker.response.hold.us",
    "zookeeper.connect",
    "zookeeper.session.timeout.ms",
    "zookeeper.connection.timeout.ms",
    "zookeeper.max.in.flight.requests",
    "broker.rack",
    "replica.selector.class",
    "controlled.shutdown.enable",
    "auto.leader.rebalance.enable",
    "leader.imbalance.per.broker.percentage",
    "leader.imbalance.check.interval.seconds",
    "controlled.shutdown.max.retries",
    "controlled.shutdown.retry.backoff.ms",
    "replica.lag.time.max.ms",
    "replica.fetch.wait.max.ms",
    "replica.fetch.min.bytes",
    "replica.fetch.max.bytes",
    "replica.fetch.response.max.bytes",
    "replica.fetch.backoff.ms",
    "replica.socket.timeout.ms",
    "num.replica.fetchers",
    "replica.high.watermark.checkpoint.interval.ms",
];

/// KRaft keys a ZooKeeper-mode broker has no use for: said once, then ignored.
const KRAFT_KEYS: &[&str] = &[
    "process.roles",
    "controller.quorum.voters",
    "controller.quorum.bootstrap.servers",
    "controller.listener.names",
];

/// `config/server.properties`, the configuration of a start without CONFIG.
pub const DEFAULT_PROPERTIES: &str = include_str!("../../config/server.properties");

/// Kafka's `listener.security.protocol.map` default: each protocol's own name.
const DEFAULT_SECURITY_PROTOCOL_MAP: &str =
    "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL";

/// One entry of `listeners`, with what `advertised.listeners` says of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerConfig {
    /// The listener name (`PLAINTEXT`, `INTERNAL`, ...).
    pub name: String,
    /// Its protocol from `listener.security.protocol.map`; only PLAINTEXT is served.
    pub security_protocol: String,
    /// Where it binds.
    pub address: SocketAddr,
    /// What clients connected to it are told (`advertised.listeners`, else the listener).
    pub advertised_host: String,
    pub advertised_port: u16,
}

#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Every key as given (server.properties and overrides), for DescribeConfigs.
    pub properties: BTreeMap<String, String>,
    pub broker_id: i32,
    /// `broker.rack`
    pub rack: Option<String>,
    /// `replica.selector.class` is Kafka's `RackAwareReplicaSelector`: a
    /// leader sends consumers to an in-sync follower in their rack (KIP-392).
    pub rack_aware_replica_selector: bool,
    /// `zookeeper.*`: None runs one broker on the embedded store.
    pub zookeeper: Option<ZooKeeperConfig>,
    /// Every listener of `listeners`, in its order.
    pub listeners: Vec<ListenerConfig>,
    /// `inter.broker.listener.name`: one of `listeners`.
    pub inter_broker_listener_name: String,
    /// `socket.listen.backlog.size`
    pub socket_listen_backlog_size: u32,
    /// `ringbroker.metrics.port`: where `/metrics` and `/health` are served, on
    /// the first listener's address; None (absent or 0) when off.
    pub metrics_address: Option<SocketAddr>,
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    pub auto_create_topics_enable: bool,
    pub socket_request_max_bytes: usize,
    pub max_incremental_fetch_session_cache_slots: usize,
    pub fetch_max_bytes: usize,
    pub connections_max_idle_ms: u64,
    pub controlled_shutdown: ControlledShutdownConfig,
    pub leader_rebalance: LeaderRebalanceConfig,
    pub replication: ReplicationConfig,
    /// `offsets.topic.num.partitions`
    pub offsets_topic_num_partitions: i32,
    /// `offsets.topic.replication.factor`
    pub offsets_topic_replication_factor: i16,
    /// `offsets.topic.segment.bytes`
    pub offsets_topic_segment_bytes: u64,
    pub group: GroupConfig,
    pub log_dirs: Vec<PathBuf>,
    pub cores: Vec<usize>,
    /// `ringbroker.cores.pinned`: each shard's thread bound to its CPU.
    pub cores_pinned: bool,
    /// `ringbroker.cores.slice.us`: the kernel's time slice for each shard's
    /// thread; None (0) leaves the kernel's default.
    pub cores_slice_us: Option<u32>,
    /// `ringbroker.shard.balance.interval.ms`: how often the shard balancer
    /// looks where partitions' requests arrive and how busy shards are; 0
    /// never moves a partition off the shard it was placed on.
    pub shard_balance_interval_ms: u64,
    /// `ringbroker.response.hold.us`: how long a response complete at once
    /// may wait, while the client's next pipelined requests are taken up,
    /// to leave with theirs in one send (`network::PendingResponses`); 0
    /// sends each response as soon as it is complete.
    pub response_hold_us: u64,
    pub log_defaults: LogConfig,
    pub log_manager: LogManagerConfig,
}

/// `ringbroker.response.hold.us`' default. Long enough for a client's
/// pipelined requests to be answered together (librdkafka's three 26 KB
/// produces at 10% are appended in about 0.2 ms); past it, a response waits
/// behind the work of one more request at most, however long an append
/// stalls. Against 0, with librdkafka at `linger.ms=0` (2 runs each): 11-14%
/// less CPU per GiB at 10% and 50% of Kafka's maximum, for 0.03-0.13 ms more
/// at the acknowledgement's p50 and 1-4 ms more at its p99.9 at 50%.
const DEFAULT_RESPONSE_HOLD_US: u64 = 1_000;

/// `ringbroker.shard.balance.interval.ms`' default: a partition follows its
/// requests within seconds of a change in load, and a round costs a hop to
/// each shard.
const DEFAULT_SHARD_BALANCE_INTERVAL_MS: u64 = 5_000;

#[derive(Debug)]
pub struct ConfigError(pub String);

/// `controlled.shutdown.*`, with Kafka's defaults: a ZooKeeper-mode broker
/// asks the controller to move its leaderships away before it stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlledShutdownConfig {
    pub enable: bool,
    pub max_retries: u32,
    pub retry_backoff_ms: u64,
}

/// `auto.leader.rebalance.enable` and `leader.imbalance.*`, with Kafka's
/// defaults: how often the controller moves leadership back to preferred
/// replicas, and past what imbalance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderRebalanceConfig {
    pub enable: bool,
    pub imbalance_per_broker_percentage: u32,
    pub check_interval_seconds: u64,
}

/// `replica.*` and `num.replica.fetchers`, with Kafka's defaults: how
/// followers fetch from leaders and how long a leader waits for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicationConfig {
    pub replica_lag_time_max_ms: i64,
    pub replica_fetch_wait_max_ms: i32,
    pub replica_fetch_min_bytes: i32,
    pub replica_fetch_max_bytes: i32,
    pub replica_fetch_response_max_bytes: i32,
    pub replica_fetch_backoff_ms: u64,
    pub replica_socket_timeout_ms: u64,
    pub num_replica_fetchers: u32,
    pub replica_high_watermark_checkpoint_interval_ms: u64,
}

impl Default for ReplicationConfig {
    fn default() -> Self {
        Self {
            replica_lag_time_max_ms: 30_000,
            replica_fetch_wait_max_ms: 500,
            replica_fetch_min_bytes: 1,
            replica_fetch_max_bytes: 1024 * 1024,
            replica_fetch_response_max_bytes: 10 * 1024 * 1024,
            replica_fetch_backoff_ms: 1_000,
            replica_socket_timeout_ms: 30_000,
            num_replica_fetchers: 1,
            replica_high_watermark_checkpoint_interval_ms: 5_000,
        }
    }
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// Parses Java-properties text (`key=value` or `key: value`, `#`/`!` comments).
pub fn parse_properties(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#') && !line.starts_with('!'))
        .filter_map(|line| {
            let split = line.find(['=', ':'])?;
            Some((
                line[..split].trim().to_owned(),
                line[split + 1..].trim().to_owned(),
            ))
        })
        .collect()
}

fn parse<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, ConfigError> {
    value
        .parse()
        .map_err(|_| ConfigError(format!("invalid value {value:?} for {key}")))
}

impl BrokerConfig {
    /// Reads `path`, or without one the built-in `config/server.properties`.
    pub fn load(path: Option<&Path>, overrides: &[String]) -> Result<Self, ConfigError> {
        let text = match path {
            Some(path) => std::fs::read_to_string(path)
                .map_err(|error| ConfigError(format!("cannot read {}: {error}", path.display())))?,
            None => DEFAULT_PROPERTIES.to_owned(),
        };
        let mut properties = parse_properties(&text);
        for entry in overrides {
            let (key, value) = entry
                .split_once('=')
                .ok_or_else(|| ConfigError(format!("--override {entry:?} is not key=value")))?;
            properties.insert(key.trim().to_owned(), value.trim().to_owned());
        }
        Self::from_properties(&properties)
    }

    pub fn from_properties(properties: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let get = |key: &str| properties.get(key).map(String::as_str);
        let mut log_defaults = log_defaults(properties)?;
        log_defaults.drop_behind_bytes =
            drop_behind_bytes(get("ringbroker.log.drop.behind.bytes"))?;
        let ignored: Vec<&str> = KRAFT_KEYS
            .iter()
            .copied()
            .filter(|key| properties.contains_key(*key))
            .collect();
        if !ignored.is_empty() {
            warn!(
                keys = ignored.join(", "),
                "KRaft configuration ignored: ringbroker runs in ZooKeeper mode \
                 (embedded metadata without zookeeper.connect)"
            );
        }
        let defs = kafka_config_defs();
        let mut not_acted_on = Vec::new();
        for key in properties.keys() {
            let key = key.as_str();
            let honoured = BROKER_KEYS.contains(&key)
                || KRAFT_KEYS.contains(&key)
                || TOPIC_CONFIG_NAMES
                    .iter()
                    .any(|topic_key| defs.topic_synonyms(topic_key).contains(&key));
            if honoured {
                continue;
            }
            if defs.broker.contains_key(key) {
                not_acted_on.push(key);
            } else {
                warn!(key, "unknown configuration key, ignored");
            }
        }
        if !not_acted_on.is_empty() {
            info!(
                keys = not_acted_on.join(", "),
                "Kafka configuration this broker does not act on (described, otherwise ignored)"
            );
        }
        let log_dirs: Vec<PathBuf> = get("log.dirs")
            .or(get("log.dir"))
            .unwrap_or("/tmp/kafka-logs")
            .split(',')
            .map(|dir| PathBuf::from(dir.trim()))
            .filter(|dir| !dir.as_os_str().is_empty())
            .collect();
        if log_dirs.is_empty() {
            return Err(ConfigError(
                "invalid value for log.dirs: no directory".into(),
            ));
        }
        let cores = match get("ringbroker.cores") {
            Some(list) => list
                .split(',')
                .map(|core| parse("ringbroker.cores", core.trim()))
                .collect::<Result<Vec<usize>, _>>()?,
            None => (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect(),
        };
        if cores.is_empty() {
            return Err(ConfigError(
                "invalid value for ringbroker.cores: no core".into(),
            ));
        }
        let defaults = LogManagerConfig::default();
        let number = |key: &str, default: u64| -> Result<u64, ConfigError> {
            get(key).map_or(Ok(default), |value| parse(key, value))
        };
        let log_manager = LogManagerConfig {
            retention_check_interval_ms: number(
                "log.retention.check.interval.ms",
                defaults.retention_check_interval_ms,
            )?,
            flush_scheduler_interval_ms: number(
                "log.flush.scheduler.interval.ms",
                defaults.flush_scheduler_interval_ms,
            )?,
            flush_offset_checkpoint_interval_ms: number(
                "log.flush.offset.checkpoint.interval.ms",
                defaults.flush_offset_checkpoint_interval_ms,
            )?,
            high_watermark_checkpoint_interval_ms: number(
                "replica.high.watermark.checkpoint.interval.ms",
                defaults.high_watermark_checkpoint_interval_ms,
            )?,
            cleaner_enable: get("log.cleaner.enable")
                .map_or(Ok(true), |v| parse("log.cleaner.enable", v))?,
            cleaner_backoff_ms: number("log.cleaner.backoff.ms", defaults.cleaner_backoff_ms)?,
            cleaner_dedupe_buffer_bytes: number(
                "log.cleaner.dedupe.buffer.size",
                defaults.cleaner_dedupe_buffer_bytes as u64,
            )? as usize,
        };
        let group_defaults = GroupConfig::default();
        let group = GroupConfig {
            min_session_timeout_ms: number(
                "group.min.session.timeout.ms",
                group_defaults.min_session_timeout_ms as u64,
            )? as i32,
            max_session_timeout_ms: number(
                "group.max.session.timeout.ms",
                group_defaults.max_session_timeout_ms as u64,
            )? as i32,
            initial_rebalance_delay_ms: number(
                "group.initial.rebalance.delay.ms",
                group_defaults.initial_rebalance_delay_ms as u64,
            )? as i64,
            max_size: number("group.max.size", group_defaults.max_size as u64)? as usize,
            offsets_retention_ms: number(
                "offsets.retention.minutes",
                (group_defaults.offsets_retention_ms / 60_000) as u64,
            )? as i64
                * 60_000,
            offsets_retention_check_interval_ms: number(
                "offsets.retention.check.interval.ms",
                group_defaults.offsets_retention_check_interval_ms as u64,
            )? as i64,
            offset_metadata_max_bytes: number(
                "offset.metadata.max.bytes",
                group_defaults.offset_metadata_max_bytes as u64,
            )? as usize,
            load_buffer_bytes: number(
                "offsets.load.buffer.size",
                group_defaults.load_buffer_bytes as u64,
            )?
            .max(1) as usize,
        };
        if group.min_session_timeout_ms > group.max_session_timeout_ms {
            return Err(ConfigError(
                "invalid value for group.min.session.timeout.ms: above group.max.session.timeout.ms"
                    .into(),
            ));
        }
        let offsets_topic_num_partitions: i32 = get("offsets.topic.num.partitions")
            .map_or(Ok(50), |v| parse("offsets.topic.num.partitions", v))?;
        if offsets_topic_num_partitions < 1 {
            return Err(ConfigError(
                "invalid value for offsets.topic.num.partitions: must be at least 1".into(),
            ));
        }
        let replication_defaults = ReplicationConfig::default();
        let replication = ReplicationConfig {
            replica_lag_time_max_ms: number(
                "replica.lag.time.max.ms",
                replication_defaults.replica_lag_time_max_ms as u64,
            )? as i64,
            replica_fetch_wait_max_ms: number(
                "replica.fetch.wait.max.ms",
                replication_defaults.replica_fetch_wait_max_ms as u64,
            )? as i32,
            replica_fetch_min_bytes: number(
                "replica.fetch.min.bytes",
                replication_defaults.replica_fetch_min_bytes as u64,
            )? as i32,
            replica_fetch_max_bytes: number(
                "replica.fetch.max.bytes",
                replication_defaults.replica_fetch_max_bytes as u64,
            )? as i32,
            replica_fetch_response_max_bytes: number(
                "replica.fetch.response.max.bytes",
                replication_defaults.replica_fetch_response_max_bytes as u64,
            )? as i32,
            replica_fetch_backoff_ms: number(
                "replica.fetch.backoff.ms",
                replication_defaults.replica_fetch_backoff_ms,
            )?,
            replica_socket_timeout_ms: number(
                "replica.socket.timeout.ms",
                replication_defaults.replica_socket_timeout_ms,
            )?,
            num_replica_fetchers: number(
                "num.replica.fetchers",
                replication_defaults.num_replica_fetchers as u64,
            )?
            .max(1) as u32,
            replica_high_watermark_checkpoint_interval_ms: number(
                "replica.high.watermark.checkpoint.interval.ms",
                replication_defaults.replica_high_watermark_checkpoint_interval_ms,
            )?,
        };
        if replication.replica_fetch_wait_max_ms as u64 >= replication.replica_socket_timeout_ms {
            return Err(ConfigError(
                "invalid value for replica.socket.timeout.ms: must be above replica.fetch.wait.max.ms"
                    .into(),
            ));
        }
        let (listeners, inter_broker_listener_name) = parse_listeners(&get)?;
        let metrics_port: u16 = get("ringbroker.metrics.port")
            .map_or(Ok(0), |v| parse("ringbroker.metrics.port", v))?;
        let metrics_address =
            (metrics_port != 0).then(|| SocketAddr::new(listeners[0].address.ip(), metrics_port));
        Ok(Self {
            properties: properties.clone(),
            broker_id: broker_id(&get)?,
            rack: get("broker.rack")
                .map(str::trim)
                .filter(|rack| !rack.is_empty())
                .map(str::to_owned),
            rack_aware_replica_selector: replica_selector(get("replica.selector.class"))?,
            zookeeper: zookeeper(&get)?,
            listeners,
            inter_broker_listener_name,
            socket_listen_backlog_size: number("socket.listen.backlog.size", 50)? as u32,
            metrics_address,
            num_partitions: get("num.partitions").map_or(Ok(1), |v| parse("num.partitions", v))?,
            default_replication_factor: get("default.replication.factor")
                .map_or(Ok(1), |v| parse("default.replication.factor", v))?,
            auto_create_topics_enable: get("auto.create.topics.enable")
                .map_or(Ok(true), |v| parse("auto.create.topics.enable", v))?,
            socket_request_max_bytes: get("socket.request.max.bytes")
                .map_or(Ok(104_857_600), |v| parse("socket.request.max.bytes", v))?,
            max_incremental_fetch_session_cache_slots: get(
                "max.incremental.fetch.session.cache.slots",
            )
            .map_or(Ok(1000), |v| {
                parse("max.incremental.fetch.session.cache.slots", v)
            })?,
            fetch_max_bytes: get("fetch.max.bytes")
                .map_or(Ok(57_671_680), |v| parse("fetch.max.bytes", v))?,
            connections_max_idle_ms: get("connections.max.idle.ms")
                .map_or(Ok(600_000), |v| parse("connections.max.idle.ms", v))?,
            replication,
            controlled_shutdown: ControlledShutdownConfig {
                enable: get("controlled.shutdown.enable")
                    .map_or(Ok(true), |v| parse("controlled.shutdown.enable", v))?,
                max_retries: get("controlled.shutdown.max.retries")
                    .map_or(Ok(3), |v| parse("controlled.shutdown.max.retries", v))?,
                retry_backoff_ms: get("controlled.shutdown.retry.backoff.ms")
                    .map_or(Ok(5_000), |v| {
                        parse("controlled.shutdown.retry.backoff.ms", v)
                    })?,
            },
            leader_rebalance: LeaderRebalanceConfig {
                enable: get("auto.leader.rebalance.enable")
                    .map_or(Ok(true), |v| parse("auto.leader.rebalance.enable", v))?,
                imbalance_per_broker_percentage: number(
                    "leader.imbalance.per.broker.percentage",
                    10,
                )? as u32,
                check_interval_seconds: match number("leader.imbalance.check.interval.seconds", 300)? {
                    0 => {
                        return Err(ConfigError(
                            "invalid value 0 for leader.imbalance.check.interval.seconds: must be at least 1".into(),
                        ))
                    }
                    seconds => seconds,
                },
            },
            offsets_topic_num_partitions,
            offsets_topic_replication_factor: get("offsets.topic.replication.factor")
                .map_or(Ok(3), |v| parse("offsets.topic.replication.factor", v))?,
            offsets_topic_segment_bytes: number("offsets.topic.segment.bytes", 104_857_600)?,
            group,
            log_dirs,
            cores,
            cores_pinned: get("ringbroker.cores.pinned")
                .map_or(Ok(true), |v| parse("ringbroker.cores.pinned", v))?,
            cores_slice_us: match number("ringbroker.cores.slice.us", DEFAULT_SLICE_US.into())? {
                0 => None,
                us if (MIN_SLICE_US.into()..=MAX_SLICE_US.into()).contains(&us) => Some(us as u32),
                us => {
                    return Err(ConfigError(format!(
                        "invalid value {us} for ringbroker.cores.slice.us: must be 0 (the kernel's \
                         default) or between {MIN_SLICE_US} and {MAX_SLICE_US}"
                    )))
                }
            },
            shard_balance_interval_ms: number(
                "ringbroker.shard.balance.interval.ms",
                DEFAULT_SHARD_BALANCE_INTERVAL_MS,
            )?,
            response_hold_us: number("ringbroker.response.hold.us", DEFAULT_RESPONSE_HOLD_US)?,
            log_defaults,
            log_manager,
        })
    }
}

/// The topic configs' defaults from their broker synonyms, as Kafka takes them:
/// the most specific synonym given wins (`log.retention.ms` over
/// `log.retention.minutes` over `log.retention.hours`), hours and minutes
/// converted to milliseconds.
fn log_defaults(properties: &BTreeMap<String, String>) -> Result<LogConfig, ConfigError> {
    let defs = kafka_config_defs();
    let mut log_defaults = LogConfig::default();
    for topic_key in TOPIC_CONFIG_NAMES {
        let given = defs
            .topic_synonyms(topic_key)
            .iter()
            .find_map(|synonym| Some((*synonym, properties.get(*synonym)?)));
        let Some((broker_key, value)) = given else {
            continue;
        };
        let factor_ms = if broker_key.ends_with(".hours") {
            3_600_000
        } else if broker_key.ends_with(".minutes") {
            60_000
        } else {
            1
        };
        let value = if factor_ms == 1 {
            value.clone()
        } else {
            let amount: i64 = parse(broker_key, value)?;
            let ms = if amount < 0 {
                Some(-1)
            } else {
                amount.checked_mul(factor_ms)
            };
            ms.ok_or_else(|| {
                ConfigError(format!(
                    "invalid value {value:?} for {broker_key}: too large"
                ))
            })?
            .to_string()
        };
        log_defaults.set(topic_key, &value).map_err(|error| {
            ConfigError(format!(
                "invalid value {value:?} for {broker_key}: {}",
                error.reason
            ))
        })?;
    }
    Ok(log_defaults)
}

/// `ringbroker.log.drop.behind.bytes`: -1 (the default) or none leaves the
/// page cache to the kernel.
fn drop_behind_bytes(value: Option<&str>) -> Result<Option<u64>, ConfigError> {
    const KEY: &str = "ringbroker.log.drop.behind.bytes";
    match value.map_or(Ok(-1), |value| parse::<i64>(KEY, value))? {
        -1 => Ok(None),
        bytes if bytes >= 0 => Ok(Some(bytes as u64)),
        bytes => Err(ConfigError(format!(
            "invalid value {bytes} for {KEY}: must be -1 (the kernel evicts) or at least 0"
        ))),
    }
}

/// `zookeeper.session.timeout.ms` by default: how long a dead broker holds
/// its leaderships before the controller moves them. Kafka's 18 s allows for
/// garbage-collector pauses this broker does not have; the bench's W7
/// measured kill -9 to the next acknowledged produce at about this plus
/// 0.2 s, and a broker with both cores saturated keeps its session
/// (tests/zookeeper_session.rs).
pub const DEFAULT_ZOOKEEPER_SESSION_TIMEOUT_MS: u64 = 2_000;

/// `ringbroker.cores.slice.us`' default (`shards::runtime::scheduler_slice`).
/// A slice shorter than the clients' (1.4 ms on two CPUs) lets a woken shard
/// preempt them; the kernel's shortest, 100 us, did that as well but let a
/// woken client take the CPU back from a shard 100 us into its work, and the
/// shard then waited for the next tick (4 ms at HZ=250): the bench's 4 ms
/// appends and response sends doubled.
pub const DEFAULT_SLICE_US: u32 = 500;

/// `replica.selector.class`: Kafka's two selectors by their class names;
/// whether it is the rack-aware one.
fn replica_selector(class: Option<&str>) -> Result<bool, ConfigError> {
    match class.map(str::trim).unwrap_or("") {
        "" | "org.apache.kafka.common.replica.LeaderSelector" => Ok(false),
        "org.apache.kafka.common.replica.RackAwareReplicaSelector" => Ok(true),
        other => Err(ConfigError(format!(
            "invalid value {other:?} for replica.selector.class: ringbroker has Kafka's \
             org.apache.kafka.common.replica.RackAwareReplicaSelector and LeaderSelector"
        ))),
    }
}

/// `broker.id`, or KRaft's `node.id` (the two must agree when both are set).
/// `zookeeper.*` with Kafka's defaults; None without `zookeeper.connect`.
fn zookeeper<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
) -> Result<Option<ZooKeeperConfig>, ConfigError> {
    let Some(connect) = get("zookeeper.connect")
        .map(str::trim)
        .filter(|connect| !connect.is_empty())
    else {
        return Ok(None);
    };
    let (hosts, chroot) = connect.split_at(connect.find('/').unwrap_or(connect.len()));
    let valid_host = |host: &str| match host.rsplit_once(':') {
        Some((name, port)) => !name.is_empty() && port.parse::<u16>().is_ok(),
        None => !host.is_empty(),
    };
    // ZooKeeper's path rules: no empty segment, no trailing slash but the root.
    let valid_chroot = chroot.len() <= 1 || !chroot[1..].split('/').any(str::is_empty);
    if !hosts.split(',').map(str::trim).all(valid_host) || !valid_chroot {
        return Err(ConfigError(format!(
            "invalid value {connect:?} for zookeeper.connect: expected host:port,... with an optional /chroot"
        )));
    }
    let millis = |key: &str, default: u64| -> Result<u64, ConfigError> {
        let value = get(key).map_or(Ok(default), |v| parse(key, v))?;
        if value == 0 {
            return Err(ConfigError(format!("invalid value 0 for {key}")));
        }
        Ok(value)
    };
    let session_timeout_ms = millis(
        "zookeeper.session.timeout.ms",
        DEFAULT_ZOOKEEPER_SESSION_TIMEOUT_MS,
    )?;
    // Kafka's shipped server.properties' value: only how long a start waits.
    let connection_timeout_ms = millis("zookeeper.connection.timeout.ms", 18_000)?;
    let max_in_flight_requests = millis("zookeeper.max.in.flight.requests", 10)? as usize;
    Ok(Some(ZooKeeperConfig {
        connect: connect.to_owned(),
        session_timeout: Duration::from_millis(session_timeout_ms),
        connection_timeout: Duration::from_millis(connection_timeout_ms),
        max_in_flight_requests,
    }))
}

fn broker_id<'a>(get: &impl Fn(&str) -> Option<&'a str>) -> Result<i32, ConfigError> {
    let broker_id = get("broker.id")
        .map(|v| parse::<i32>("broker.id", v))
        .transpose()?;
    let node_id = get("node.id")
        .map(|v| parse::<i32>("node.id", v))
        .transpose()?;
    match (broker_id, node_id) {
        (Some(broker), Some(node)) if broker != node => Err(ConfigError(format!(
            "invalid value for node.id: {node} differs from broker.id {broker}"
        ))),
        (Some(id), _) | (None, Some(id)) => Ok(id),
        (None, None) => Ok(0),
    }
}

/// `listeners`, `advertised.listeners`, `listener.security.protocol.map` and
/// `inter.broker.listener.name`, checked with Kafka's rules.
fn parse_listeners<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
) -> Result<(Vec<ListenerConfig>, String), ConfigError> {
    let map_value = get("listener.security.protocol.map").unwrap_or(DEFAULT_SECURITY_PROTOCOL_MAP);
    let mut protocols = BTreeMap::new();
    for entry in map_value
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
    {
        let (name, protocol) = entry.split_once(':').ok_or_else(|| {
            ConfigError(format!(
                "invalid value {map_value:?} for listener.security.protocol.map: {entry:?} is not NAME:PROTOCOL"
            ))
        })?;
        let protocol = protocol.trim().to_ascii_uppercase();
        if !["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"].contains(&protocol.as_str()) {
            return Err(ConfigError(format!(
                "invalid value {map_value:?} for listener.security.protocol.map: unknown security protocol {protocol}"
            )));
        }
        protocols.insert(name.trim().to_ascii_uppercase(), protocol);
    }
    let bound = parse_endpoints("listeners", get("listeners").unwrap_or("PLAINTEXT://:9092"))?;
    let advertised = get("advertised.listeners")
        .map(|value| parse_endpoints("advertised.listeners", value))
        .transpose()?
        .unwrap_or_default();
    for (name, _, _) in &advertised {
        if !bound.iter().any(|(bound_name, _, _)| bound_name == name) {
            return Err(ConfigError(format!(
                "invalid value for advertised.listeners: listener {name} is not in listeners"
            )));
        }
    }
    let mut listeners = Vec::new();
    for (name, host, port) in bound {
        let security_protocol = protocols.get(&name).cloned().ok_or_else(|| {
            ConfigError(format!(
                "invalid value for listeners: no security protocol defined for listener {name} \
                 (listener.security.protocol.map)"
            ))
        })?;
        if security_protocol != "PLAINTEXT" {
            return Err(ConfigError(format!(
                "invalid value for listeners: listener {name} uses {security_protocol}, which \
                 ringbroker does not implement yet (only PLAINTEXT listeners are served)"
            )));
        }
        if listeners.iter().any(|l: &ListenerConfig| l.name == name) {
            return Err(ConfigError(format!(
                "invalid value for listeners: each listener must have a different name ({name} twice)"
            )));
        }
        if listeners
            .iter()
            .any(|l: &ListenerConfig| l.address.port() == port && port != 0)
        {
            return Err(ConfigError(format!(
                "invalid value for listeners: each listener must have a different port ({port} twice)"
            )));
        }
        let bind_host = if host.is_empty() { "0.0.0.0" } else { &host };
        let address = (bind_host, port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut addresses| addresses.next())
            .ok_or_else(|| {
                ConfigError(format!(
                    "invalid value for listeners: cannot resolve {host:?} of listener {name}"
                ))
            })?;
        let (advertised_host, advertised_port) =
            match advertised.iter().find(|(n, _, _)| *n == name) {
                Some((_, host, port)) => (host.clone(), *port),
                None if host.is_empty() => ("127.0.0.1".to_owned(), port),
                None => (host, port),
            };
        listeners.push(ListenerConfig {
            name,
            security_protocol,
            address,
            advertised_host,
            advertised_port,
        });
    }
    if listeners.is_empty() {
        return Err(ConfigError(
            "invalid value for listeners: no listener".into(),
        ));
    }
    // Kafka's default: the listener of `security.inter.broker.protocol`.
    let inter_broker = match get("inter.broker.listener.name") {
        Some(name) => name.trim().to_ascii_uppercase(),
        None => get("security.inter.broker.protocol")
            .unwrap_or("PLAINTEXT")
            .trim()
            .to_ascii_uppercase(),
    };
    if !listeners.iter().any(|l| l.name == inter_broker) {
        let names: Vec<&str> = listeners.iter().map(|l| l.name.as_str()).collect();
        return Err(ConfigError(format!(
            "invalid value {inter_broker:?} for inter.broker.listener.name: it must be a listener \
             name defined in advertised.listeners; the valid options based on the configured \
             listeners are {}",
            names.join(",")
        )));
    }
    Ok((listeners, inter_broker))
}

/// A comma-separated list of `NAME://host:port` (IPv6 hosts in brackets).
fn parse_endpoints(key: &str, value: &str) -> Result<Vec<(String, String, u16)>, ConfigError> {
    let invalid = |why: String| ConfigError(format!("invalid value {value:?} for {key}: {why}"));
    value
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let (name, rest) = entry
                .split_once("://")
                .ok_or_else(|| invalid(format!("{entry:?} is not NAME://host:port")))?;
            let (host, port) = rest
                .rsplit_once(':')
                .ok_or_else(|| invalid(format!("{entry:?} has no port")))?;
            let port = port
                .parse()
                .map_err(|_| invalid(format!("{entry:?} has a bad port")))?;
            Ok((
                name.to_ascii_uppercase(),
                host.trim_matches(['[', ']']).to_owned(),
                port,
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zookeeper_keys_with_kafkas_defaults() {
        let config = |entries: &[&str]| {
            let properties = parse_properties(&entries.join("\n"));
            BrokerConfig::from_properties(&properties)
        };
        assert!(
            config(&[]).unwrap().zookeeper.is_none(),
            "embedded by default"
        );
        let zookeeper = config(&["zookeeper.connect=a:2181,b:2182/kafka"])
            .unwrap()
            .zookeeper
            .unwrap();
        assert_eq!(
            zookeeper,
            ZooKeeperConfig {
                connect: "a:2181,b:2182/kafka".into(),
                session_timeout: Duration::from_millis(DEFAULT_ZOOKEEPER_SESSION_TIMEOUT_MS),
                connection_timeout: Duration::from_millis(18_000),
                max_in_flight_requests: 10,
            }
        );
        let tuned = config(&[
            "zookeeper.connect=a:2181",
            "zookeeper.session.timeout.ms=6000",
            "zookeeper.connection.timeout.ms=2000",
            "zookeeper.max.in.flight.requests=3",
            "broker.rack=r1",
        ])
        .unwrap();
        assert_eq!(tuned.rack.as_deref(), Some("r1"));
        let zookeeper = tuned.zookeeper.unwrap();
        assert_eq!(
            (zookeeper.session_timeout, zookeeper.connection_timeout),
            (Duration::from_millis(6000), Duration::from_millis(2000))
        );
        assert_eq!(zookeeper.max_in_flight_requests, 3);
        for bad in [
            "zookeeper.connect=a:port",
            "zookeeper.connect=,",
            "zookeeper.connect=a:1/kafka/",
            "zookeeper.connect=a:1//kafka",
        ] {
            let error = config(&[bad]).unwrap_err().0;
            assert!(error.contains("zookeeper.connect"), "{bad}: {error}");
        }
        let error = config(&[
            "zookeeper.connect=a:1",
            "zookeeper.max.in.flight.requests=0",
        ])
        .unwrap_err()
        .0;
        assert!(
            error.contains("zookeeper.max.in.flight.requests"),
            "{error}"
        );
    }

    #[test]
    fn kafka_keys_and_errors_that_name_the_key() {
        let properties = parse_properties(
            "# comment\nbroker.id=3\nlog.dirs=/a, /b\nlog.retention.hours=24\nlog.segment.bytes: 1048576\nringbroker.cores=0\n",
        );
        let config = BrokerConfig::from_properties(&properties).unwrap();
        assert_eq!(config.broker_id, 3);
        assert_eq!(
            config.log_dirs,
            vec![PathBuf::from("/a"), PathBuf::from("/b")]
        );
        assert_eq!(config.log_defaults.retention_ms, 86_400_000);
        assert_eq!(config.log_defaults.segment_bytes, 1 << 20);
        assert_eq!(config.cores, vec![0]);
        assert!(config.cores_pinned);
        let unpinned = parse_properties("ringbroker.cores=0,1\nringbroker.cores.pinned=false\n");
        let unpinned = BrokerConfig::from_properties(&unpinned).unwrap();
        assert_eq!((unpinned.cores, unpinned.cores_pinned), (vec![0, 1], false));
        assert!(error_of("ringbroker.cores.pinned=maybe\n").contains("ringbroker.cores.pinned"));
        assert_eq!(config.cores_slice_us, Some(DEFAULT_SLICE_US));
        let kernels = parse_properties("ringbroker.cores.slice.us=0\n");
        assert_eq!(
            BrokerConfig::from_properties(&kernels)
                .unwrap()
                .cores_slice_us,
            None
        );
        for bad in ["99", "100001"] {
            let error = error_of(&format!("ringbroker.cores.slice.us={bad}\n"));
            assert!(error.contains("between 100 and 100000"), "{error}");
        }
        assert_eq!(config.response_hold_us, DEFAULT_RESPONSE_HOLD_US);
        let at_once = parse_properties("ringbroker.response.hold.us=0\n");
        assert_eq!(
            BrokerConfig::from_properties(&at_once)
                .unwrap()
                .response_hold_us,
            0
        );
        assert!(
            error_of("ringbroker.response.hold.us=-1\n").contains("ringbroker.response.hold.us")
        );
        assert_eq!(config.log_defaults.drop_behind_bytes, None);
        let dropping = parse_properties("ringbroker.log.drop.behind.bytes=16777216\n");
        assert_eq!(
            BrokerConfig::from_properties(&dropping)
                .unwrap()
                .log_defaults
                .drop_behind_bytes,
            Some(16 << 20)
        );
        for bad in ["-2", "some"] {
            let error = error_of(&format!("ringbroker.log.drop.behind.bytes={bad}\n"));
            assert!(
                error.contains("ringbroker.log.drop.behind.bytes"),
                "{error}"
            );
        }
        let bad = parse_properties("log.segment.bytes=lots\n");
        let error = BrokerConfig::from_properties(&bad).unwrap_err();
        assert!(error.0.contains("log.segment.bytes"), "{error}");
        assert_eq!(config.listeners.len(), 1);
        assert_eq!(config.listeners[0].address.port(), 9092);
        assert_eq!(config.listeners[0].advertised_host, "127.0.0.1");
        assert_eq!(config.inter_broker_listener_name, "PLAINTEXT");
        let bad = parse_properties("listeners=SSL://:9093\n");
        assert!(BrokerConfig::from_properties(&bad)
            .unwrap_err()
            .0
            .contains("listeners"));
        let bad = parse_properties("broker.id=x\n");
        assert!(BrokerConfig::from_properties(&bad)
            .unwrap_err()
            .0
            .contains("broker.id"));
    }

    fn error_of(text: &str) -> String {
        BrokerConfig::from_properties(&parse_properties(text))
            .unwrap_err()
            .0
    }

    #[test]
    fn every_listener_with_its_protocol_and_advertised_address() {
        let config = BrokerConfig::from_properties(&parse_properties(
            "listeners=PLAINTEXT://127.0.0.1:9092,INTERNAL://127.0.0.2:9093\n\
             advertised.listeners=INTERNAL://broker-0.internal:19093\n\
             listener.security.protocol.map=PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT\n\
             inter.broker.listener.name=INTERNAL\n",
        ))
        .unwrap();
        let names: Vec<(&str, u16, &str, u16)> = config
            .listeners
            .iter()
            .map(|l| {
                (
                    l.name.as_str(),
                    l.address.port(),
                    l.advertised_host.as_str(),
                    l.advertised_port,
                )
            })
            .collect();
        assert_eq!(
            names,
            vec![
                ("PLAINTEXT", 9092, "127.0.0.1", 9092),
                ("INTERNAL", 9093, "broker-0.internal", 19093)
            ]
        );
        assert_eq!(config.inter_broker_listener_name, "INTERNAL");
    }

    #[test]
    fn listeners_refused_with_a_message_naming_them() {
        let sasl = error_of(
            "listeners=PLAINTEXT://:9092,SECURE://:9093\n\
             listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SECURE:SASL_SSL\n",
        );
        assert!(
            sasl.contains("SECURE") && sasl.contains("SASL_SSL"),
            "{sasl}"
        );
        let unmapped = error_of("listeners=INTERNAL://:9093\n");
        assert!(unmapped.contains("INTERNAL"), "{unmapped}");
        let no_inter_broker = error_of(
            "listeners=INTERNAL://:9093\nlistener.security.protocol.map=INTERNAL:PLAINTEXT\n",
        );
        assert!(
            no_inter_broker.contains("inter.broker.listener.name")
                && no_inter_broker.contains("INTERNAL"),
            "{no_inter_broker}"
        );
        let twice = error_of(
            "listeners=PLAINTEXT://:9092,OTHER://:9092\n\
             listener.security.protocol.map=PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT\n",
        );
        assert!(twice.contains("different port"), "{twice}");
        let unknown_advertised = error_of("advertised.listeners=OTHER://h:1\n");
        assert!(unknown_advertised.contains("OTHER"), "{unknown_advertised}");
    }

    #[test]
    fn node_id_is_read_as_broker_id() {
        let config = BrokerConfig::from_properties(&parse_properties(
            "node.id=7\nprocess.roles=broker,controller\n",
        ))
        .unwrap();
        assert_eq!(config.broker_id, 7);
        assert!(error_of("node.id=7\nbroker.id=8\n").contains("node.id"));
        // Validated as the topic default it sets.
        assert!(error_of("min.insync.replicas=0\n").contains("min.insync.replicas"));
    }

    #[test]
    fn the_built_in_defaults_are_config_server_properties() {
        let built_in = BrokerConfig::load(None, &[]).unwrap();
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/server.properties");
        let from_file = BrokerConfig::load(Some(&path), &[]).unwrap();
        assert_eq!(built_in.listeners, from_file.listeners);
        assert_eq!(built_in.log_dirs, from_file.log_dirs);
        let missing = Path::new("/nonexistent/server.properties");
        let error = BrokerConfig::load(Some(missing), &[]).unwrap_err();
        assert!(
            error.0.contains("/nonexistent/server.properties"),
            "{error}"
        );
    }
}
