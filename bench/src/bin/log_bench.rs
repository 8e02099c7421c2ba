//! Log micro-benchmark: appends of 1 KiB records through `Log` against a plain
//! sequential write of the same bytes to the same disk, and fetch read-back
//! against a plain sequential read, in one run.
//!
//! cargo run --release -p bench --bin log-bench -- --dir bench/work --total-mib 1024

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use clap::Parser;
use shards::log::record_batch::RecordBatchBuilder;
use shards::log::{Log, LogConfig, LogDirHealth, LogOpenParams, SegmentFile, TopicPartition};

#[derive(Parser)]
struct Args {
    /// Directory on the disk under test (emptied first).
    #[arg(long, default_value = "bench/work")]
    dir: PathBuf,
    /// Bytes written per case, in MiB.
    #[arg(long, default_value_t = 1024)]
    total_mib: usize,
    /// Repetitions per case; the median is reported.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
}

const RECORD_BYTES: usize = 1024;
const READ_CHUNK_BYTES: usize = 1024 * 1024;

fn batch_of(batch_bytes: usize) -> Vec<u8> {
    let mut builder = RecordBatchBuilder::new(0, 1_700_000_000_000);
    let value = vec![b'x'; RECORD_BYTES - 20];
    while builder.records_section().len() + RECORD_BYTES <= batch_bytes - 61 {
        builder.append(1_700_000_000_000, Some(b"key-0000"), Some(&value));
    }
    builder.build()
}

/// Evicts the files from the page cache (when allowed), so reads hit the disk.
fn drop_caches() {
    let _ = std::process::Command::new("sync").status();
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
}

fn mib_per_s(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / (1024.0 * 1024.0) / elapsed.as_secs_f64()
}

async fn open_log(dir: &Path) -> Log {
    let mut config = LogConfig::default();
    config.set("retention.ms", "-1").unwrap();
    Log::open(LogOpenParams {
        dir: dir.join("bench-0"),
        topic_partition: TopicPartition::new("bench", 0),
        config: Rc::new(config),
        recovery_point: 0,
        had_clean_shutdown: false,
        high_watermark: None,
        log_start_offset: None,
        health: LogDirHealth::new(dir),
        now_ms: 1_700_000_000_000,
        handoff: None,
    })
    .await
    .expect("open log")
}

struct Case {
    raw_write: f64,
    log_append: f64,
    raw_read: f64,
    log_fetch: f64,
}

async fn run_case(dir: &Path, batch_bytes: usize, total_bytes: usize) -> Case {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let batch = batch_of(batch_bytes);
    let batches = total_bytes / batch.len();
    let written = (batches * batch.len()) as u64;

    // Plain sequential write of the same bytes, same write path, then sync.
    let raw_path = dir.join("raw.bin");
    let raw = SegmentFile::create(&raw_path).await.unwrap();
    let start = Instant::now();
    for i in 0..batches {
        raw.write_all_at(&batch, (i * batch.len()) as u64).unwrap();
    }
    raw.fdatasync().await.unwrap();
    let raw_write = mib_per_s(written, start.elapsed());

    // The same bytes appended through the log (validation, offsets, indexes), then flushed.
    let log = open_log(dir).await;
    let start = Instant::now();
    for _ in 0..batches {
        log.append_as_leader(&batch, 0, 1_700_000_000_000)
            .await
            .unwrap();
    }
    log.flush().await.unwrap();
    let log_append = mib_per_s(written, start.elapsed());

    drop_caches();
    let start = Instant::now();
    let mut position = 0u64;
    loop {
        let chunk = raw.read_at(position, READ_CHUNK_BYTES).await.unwrap();
        if chunk.is_empty() {
            break;
        }
        position += chunk.len() as u64;
    }
    let raw_read = mib_per_s(position, start.elapsed());

    drop_caches();
    let start = Instant::now();
    let mut offset = 0;
    let mut fetched = 0u64;
    let end = log.log_end_offset();
    while offset < end {
        let info = log.read(offset, READ_CHUNK_BYTES, end, true).await.unwrap();
        let slice = info.records.expect("data below the log end");
        let bytes = slice
            .file
            .read_exact_at(slice.position, slice.size_bytes)
            .await
            .unwrap();
        fetched += bytes.len() as u64;
        // Every batch is the same size, so the last one starts `batch.len()` from the end.
        let header = shards::log::record_batch::RecordBatchHeader::parse(
            &bytes[bytes.len() - batch.len()..],
        )
        .unwrap();
        offset = header.next_offset();
    }
    assert_eq!(fetched, written);
    let log_fetch = mib_per_s(fetched, start.elapsed());
    Case {
        raw_write,
        log_append,
        raw_read,
        log_fetch,
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    values[values.len() / 2]
}

fn main() {
    let args = Args::parse();
    let total_bytes = args.total_mib * 1024 * 1024;
    let executor = shards::runtime::local_executor();
    println!("| batch | raw write MiB/s | log append MiB/s | append/raw | raw read MiB/s | log fetch MiB/s | fetch/raw |");
    println!("|---|---|---|---|---|---|---|");
    for (label, batch_bytes) in [("16 KiB", 16 * 1024), ("1 MiB", 1024 * 1024)] {
        let cases: Vec<Case> = (0..args.repeat)
            .map(|_| executor.run(run_case(&args.dir, batch_bytes, total_bytes)))
            .collect();
        let pick = |f: fn(&Case) -> f64| median(cases.iter().map(f).collect());
        let (raw_write, log_append) = (pick(|c| c.raw_write), pick(|c| c.log_append));
        let (raw_read, log_fetch) = (pick(|c| c.raw_read), pick(|c| c.log_fetch));
        println!(
            "| {label} | {raw_write:.0} | {log_append:.0} | {:.2} | {raw_read:.0} | {log_fetch:.0} | {:.2} |",
            log_append / raw_write,
            log_fetch / raw_read
        );
    }
    let _ = std::fs::remove_dir_all(&args.dir);
}
