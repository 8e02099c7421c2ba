//! `server.properties`: Kafka's key names and defaults, plus ringbroker's own.

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};

use shards::log::{LogConfig, LogManagerConfig};

use crate::coordinator::group::GroupConfig;
use tracing::warn;

/// Keys this broker understands beyond the topic defaults (`log.*`).
const BROKER_KEYS: &[&str] = &[
    "broker.id",
    "listeners",
    "advertised.listeners",
    "log.dirs",
    "log.dir",
    "num.partitions",
    "default.replication.factor",
    "min.insync.replicas",
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
];

/// Broker keys that set a topic config's default, as Kafka maps them.
const LOG_DEFAULT_KEYS: &[(&str, &str)] = &[
    ("log.segment.bytes", "segment.bytes"),
    ("log.roll.ms", "segment.ms"),
    ("log.index.size.max.bytes", "segment.index.bytes"),
    ("log.index.interval.bytes", "index.interval.bytes"),
    ("log.flush.interval.messages", "flush.messages"),
    ("log.flush.interval.ms", "flush.ms"),
    ("log.retention.ms", "retention.ms"),
    ("log.retention.bytes", "retention.bytes"),
    ("log.cleanup.policy", "cleanup.policy"),
    ("log.cleaner.delete.retention.ms", "delete.retention.ms"),
    ("log.cleaner.min.compaction.lag.ms", "min.compaction.lag.ms"),
    (
        "log.cleaner.min.cleanable.ratio",
        "min.cleanable.dirty.ratio",
    ),
    ("message.max.bytes", "max.message.bytes"),
    ("log.message.timestamp.type", "message.timestamp.type"),
    (
        "log.message.timestamp.before.max.ms",
        "message.timestamp.before.max.ms",
    ),
    (
        "log.message.timestamp.after.max.ms",
        "message.timestamp.after.max.ms",
    ),
];

#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub broker_id: i32,
    /// Where the client listener binds.
    pub listener: SocketAddr,
    /// What clients are told to connect to (`advertised.listeners`, else the listener).
    pub advertised_host: String,
    pub advertised_port: u16,
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    pub min_insync_replicas: i32,
    pub auto_create_topics_enable: bool,
    pub socket_request_max_bytes: usize,
    pub max_incremental_fetch_session_cache_slots: usize,
    pub fetch_max_bytes: usize,
    pub connections_max_idle_ms: u64,
    /// `offsets.topic.num.partitions`
    pub offsets_topic_num_partitions: i32,
    /// `offsets.topic.replication.factor`
    pub offsets_topic_replication_factor: i16,
    /// `offsets.topic.segment.bytes`
    pub offsets_topic_segment_bytes: u64,
    pub group: GroupConfig,
    pub log_dirs: Vec<PathBuf>,
    pub cores: Vec<usize>,
    pub log_defaults: LogConfig,
    pub log_manager: LogManagerConfig,
}

#[derive(Debug)]
pub struct ConfigError(pub String);

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
    pub fn load(path: &Path, overrides: &[String]) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| ConfigError(format!("cannot read {}: {error}", path.display())))?;
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
        if get("zookeeper.connect").is_some_and(|v| !v.trim().is_empty()) {
            return Err(ConfigError(
                "invalid value for zookeeper.connect: ZooKeeper mode is not implemented yet; \
                 remove it to run a single broker with embedded metadata"
                    .into(),
            ));
        }
        let mut log_defaults = LogConfig::default();
        // Kafka's retention in hours and minutes, overridden by the finer key.
        for (key, factor) in [
            ("log.retention.hours", 3_600_000i64),
            ("log.retention.minutes", 60_000),
        ] {
            if let Some(value) = get(key) {
                let amount: i64 = parse(key, value)?;
                log_defaults.retention_ms = if amount < 0 { -1 } else { amount * factor };
            }
        }
        if let Some(value) = get("log.roll.hours") {
            log_defaults.segment_ms = parse::<i64>("log.roll.hours", value)? * 3_600_000;
        }
        for (broker_key, topic_key) in LOG_DEFAULT_KEYS {
            if let Some(value) = get(broker_key) {
                log_defaults.set(topic_key, value).map_err(|error| {
                    ConfigError(format!(
                        "invalid value {value:?} for {broker_key}: {}",
                        error.reason
                    ))
                })?;
            }
        }
        for key in properties.keys() {
            let known = BROKER_KEYS.contains(&key.as_str())
                || LOG_DEFAULT_KEYS.iter().any(|(k, _)| k == key)
                || [
                    "log.retention.hours",
                    "log.retention.minutes",
                    "log.roll.hours",
                ]
                .contains(&key.as_str());
            if !known {
                warn!(key, "unknown configuration key, ignored");
            }
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
        let (listen_host, listen_port) =
            parse_listener("listeners", get("listeners").unwrap_or("PLAINTEXT://:9092"))?;
        let listener = format!(
            "{}:{listen_port}",
            if listen_host.is_empty() {
                "0.0.0.0"
            } else {
                &listen_host
            }
        )
        .to_socket_addrs()
        .ok()
        .and_then(|mut addresses| addresses.next())
        .ok_or_else(|| {
            ConfigError(format!(
                "invalid value for listeners: cannot resolve {listen_host:?}"
            ))
        })?;
        let (advertised_host, advertised_port) = match get("advertised.listeners") {
            Some(value) => parse_listener("advertised.listeners", value)?,
            None if listen_host.is_empty() => ("127.0.0.1".to_owned(), listen_port),
            None => (listen_host, listen_port),
        };
        let min_insync_replicas =
            get("min.insync.replicas").map_or(Ok(1), |v| parse("min.insync.replicas", v))?;
        if min_insync_replicas < 1 {
            return Err(ConfigError(
                "invalid value for min.insync.replicas: must be at least 1".into(),
            ));
        }
        Ok(Self {
            broker_id: get("broker.id").map_or(Ok(0), |v| parse("broker.id", v))?,
            listener,
            advertised_host,
            advertised_port,
            num_partitions: get("num.partitions").map_or(Ok(1), |v| parse("num.partitions", v))?,
            default_replication_factor: get("default.replication.factor")
                .map_or(Ok(1), |v| parse("default.replication.factor", v))?,
            min_insync_replicas,
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
            offsets_topic_num_partitions,
            offsets_topic_replication_factor: get("offsets.topic.replication.factor")
                .map_or(Ok(3), |v| parse("offsets.topic.replication.factor", v))?,
            offsets_topic_segment_bytes: number("offsets.topic.segment.bytes", 104_857_600)?,
            group,
            log_dirs,
            cores,
            log_defaults,
            log_manager,
        })
    }
}

/// `PLAINTEXT://host:port` (only the PLAINTEXT listener is served).
fn parse_listener(key: &str, value: &str) -> Result<(String, u16), ConfigError> {
    let invalid = |why: &str| ConfigError(format!("invalid value {value:?} for {key}: {why}"));
    let first = value.split(',').next().unwrap_or("").trim();
    let rest = first
        .strip_prefix("PLAINTEXT://")
        .ok_or_else(|| invalid("only PLAINTEXT://host:port is supported"))?;
    let (host, port) = rest.rsplit_once(':').ok_or_else(|| invalid("no port"))?;
    let port = port.parse().map_err(|_| invalid("bad port"))?;
    Ok((host.trim_matches(['[', ']']).to_owned(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let bad = parse_properties("log.segment.bytes=lots\n");
        let error = BrokerConfig::from_properties(&bad).unwrap_err();
        assert!(error.0.contains("log.segment.bytes"), "{error}");
        assert_eq!(config.listener.port(), 9092);
        assert_eq!(config.advertised_host, "127.0.0.1");
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
}
