//! Codec glue for the few places the broker must look inside a compressed batch
//! (the cleaner, timestamp lookups) or rewrite one (a topic whose
//! `compression.type` names another codec than the producer's). The codecs are
//! kafka-protocol's, which frame gzip, snappy (xerial), lz4 (frame) and zstd the
//! way Kafka clients do; recompression uses the same crates with the topic's
//! `compression.*.level`.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::compression::{Compressor, Decompressor, Gzip, Lz4, Snappy, Zstd};

use std::io::Write;

use super::record_batch::{
    check_records, CompressionType, RecordBatchBuilder, RecordBatchHeader, COMPRESSION_CODEC_MASK,
    RECORD_BATCH_OVERHEAD,
};
use super::{LogConfig, LogError};

fn codec_error(error: impl std::fmt::Display) -> LogError {
    LogError::CorruptMessage(format!("cannot decompress records: {error}"))
}

/// The uncompressed records section of a batch.
pub fn decompress(codec: CompressionType, section: &[u8]) -> Result<Bytes, LogError> {
    let mut input = section;
    let take = |buf: &mut Bytes| Ok(buf.clone());
    match codec {
        CompressionType::None => Ok(Bytes::copy_from_slice(section)),
        CompressionType::Gzip => Gzip::decompress(&mut input, take),
        CompressionType::Snappy => Snappy::decompress(&mut input, take),
        CompressionType::Lz4 => Lz4::decompress(&mut input, take),
        CompressionType::Zstd => Zstd::decompress(&mut input, take),
    }
    .map_err(codec_error)
}

/// Compresses a records section with `codec`.
pub fn compress(codec: CompressionType, section: &[u8]) -> Result<Vec<u8>, LogError> {
    let mut out = BytesMut::new();
    let put = |buf: &mut BytesMut| {
        buf.put_slice(section);
        Ok(())
    };
    match codec {
        CompressionType::None => {
            out.put_slice(section);
            Ok(())
        }
        CompressionType::Gzip => Gzip::compress(&mut out, put),
        CompressionType::Snappy => Snappy::compress(&mut out, put),
        CompressionType::Lz4 => Lz4::compress(&mut out, put),
        CompressionType::Zstd => Zstd::compress(&mut out, put),
    }
    .map_err(codec_error)?;
    Ok(out.to_vec())
}

/// A topic's `compression.*.level`s, copied out of its config so a
/// recompression can run on the blocking pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompressionLevels {
    /// 1-9, or -1 for the codec's default.
    pub gzip: i32,
    pub lz4: i32,
    pub zstd: i32,
}

impl CompressionLevels {
    pub fn of(config: &LogConfig) -> Self {
        Self {
            gzip: config.compression_gzip_level,
            lz4: config.compression_lz4_level,
            zstd: config.compression_zstd_level,
        }
    }
}

/// The most a produced batch may decompress to before the broker refuses it:
/// a client's small "bomb" must not take the broker's memory.
pub const MAX_DECOMPRESSED_BATCH_BYTES: usize = 256 * 1024 * 1024;

fn io_error(what: &str) -> impl Fn(std::io::Error) -> LogError + '_ {
    move |error| LogError::CorruptMessage(format!("cannot {what} records: {error}"))
}

/// A client's records section decompressed, refused past `max_bytes`.
fn decompress_bounded(
    codec: CompressionType,
    section: &[u8],
    max_bytes: usize,
) -> Result<Vec<u8>, LogError> {
    use std::io::Read;
    let mut out = Vec::new();
    let limit = max_bytes as u64 + 1;
    let read = match codec {
        CompressionType::Gzip => flate2::read::GzDecoder::new(section)
            .take(limit)
            .read_to_end(&mut out),
        CompressionType::Zstd => zstd::stream::read::Decoder::new(section)
            .and_then(|decoder| decoder.take(limit).read_to_end(&mut out)),
        CompressionType::Lz4 => {
            lz4::Decoder::new(section).and_then(|decoder| decoder.take(limit).read_to_end(&mut out))
        }
        // Snappy expands at most about 21 times per block, and an
        // uncompressed section is what it is.
        CompressionType::Snappy | CompressionType::None => {
            return decompress(codec, section).map(|bytes| bytes.to_vec())
        }
    };
    read.map_err(io_error("decompress"))?;
    if out.len() > max_bytes {
        return Err(LogError::CorruptMessage(format!(
            "records decompress to more than {max_bytes} bytes"
        )));
    }
    Ok(out)
}

/// `section` compressed with `codec` at its level (gzip's -1 is the codec's
/// default).
fn compress_at_level(
    codec: CompressionType,
    section: &[u8],
    levels: CompressionLevels,
) -> Result<Vec<u8>, LogError> {
    let io = io_error("compress");
    match codec {
        CompressionType::Gzip => {
            let level = match levels.gzip {
                -1 => flate2::Compression::default(),
                level => flate2::Compression::new(level as u32),
            };
            let mut encoder = flate2::write::GzEncoder::new(Vec::new(), level);
            encoder.write_all(section).map_err(&io)?;
            encoder.finish().map_err(&io)
        }
        CompressionType::Lz4 => {
            // Kafka's lz4 framing: independent blocks, as its clients write.
            let mut encoder = lz4::EncoderBuilder::new()
                .level(levels.lz4 as u32)
                .block_mode(lz4::BlockMode::Independent)
                .build(Vec::new())
                .map_err(&io)?;
            encoder.write_all(section).map_err(&io)?;
            let (out, result) = encoder.finish();
            result.map_err(&io)?;
            Ok(out)
        }
        // One-shot, so the frame carries its content size, as Java clients'
        // frames do.
        CompressionType::Zstd => zstd::bulk::compress(section, levels.zstd).map_err(&io),
        CompressionType::None | CompressionType::Snappy => compress(codec, section),
    }
}

/// A produced batch rewritten with the codec `target`: the same records and
/// header fields, but for the codec bits, the length and the CRC (Kafka
/// recompresses on append when a topic's `compression.type` names another
/// codec than the producer's). The records are checked on the way, as Kafka
/// validates what it rewrites: consecutive offset deltas, as many as the header
/// claims. CPU-heavy: run it off the shard's thread.
pub fn recompress(
    batch: &[u8],
    header: &RecordBatchHeader,
    target: CompressionType,
    levels: CompressionLevels,
) -> Result<Vec<u8>, LogError> {
    let section = decompress_bounded(
        header.compression()?,
        &batch[RECORD_BATCH_OVERHEAD..],
        MAX_DECOMPRESSED_BATCH_BYTES,
    )?;
    check_records(&section, header, true)?;
    let mut builder = RecordBatchBuilder::like(header);
    builder.attributes = (header.attributes & !COMPRESSION_CODEC_MASK) | target.id();
    builder.set_records_count(header.records_count);
    Ok(builder.build_with_section(&compress_at_level(target, &section, levels)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_codec_round_trips() {
        let section: Vec<u8> = (0..10_000u32)
            .flat_map(|i| (i % 251).to_be_bytes())
            .collect();
        for codec in [
            CompressionType::None,
            CompressionType::Gzip,
            CompressionType::Snappy,
            CompressionType::Lz4,
            CompressionType::Zstd,
        ] {
            let compressed = compress(codec, &section).unwrap();
            assert_eq!(
                decompress(codec, &compressed).unwrap(),
                section,
                "{codec:?}"
            );
        }
    }

    fn gzip_batch(records: usize, claimed: i32) -> (Vec<u8>, RecordBatchHeader) {
        let mut builder = RecordBatchBuilder::new(0, 1_000);
        for i in 0..records {
            builder.append(1_000, None, Some(format!("value-{i}").as_bytes()));
        }
        builder.attributes = CompressionType::Gzip.id();
        builder.set_records_count(claimed);
        builder.last_offset_delta = Some(claimed - 1);
        let batch = builder.build_with_section(
            &compress(CompressionType::Gzip, builder.records_section()).unwrap(),
        );
        let header = RecordBatchHeader::parse(&batch).unwrap();
        (batch, header)
    }

    #[test]
    fn recompression_checks_the_records_it_rewrites() {
        let levels = CompressionLevels {
            gzip: -1,
            lz4: 9,
            zstd: 3,
        };
        let (good, header) = gzip_batch(3, 3);
        let rewritten = recompress(&good, &header, CompressionType::None, levels).unwrap();
        let stored = crate::log::record_batch::validate_produced_batch(&rewritten).unwrap();
        assert_eq!(stored.compression().unwrap(), CompressionType::None);
        assert_eq!(stored.records_count, 3);
        // A header claiming more records than the compressed section holds.
        let (lying, header) = gzip_batch(2, 3);
        for target in [CompressionType::None, CompressionType::Zstd] {
            assert!(matches!(
                recompress(&lying, &header, target, levels),
                Err(LogError::InvalidRecord(_))
            ));
        }
    }

    #[test]
    fn decompression_of_client_records_is_bounded() {
        let section = vec![0u8; 1 << 20];
        for codec in [
            CompressionType::Gzip,
            CompressionType::Lz4,
            CompressionType::Zstd,
        ] {
            let compressed = compress(codec, &section).unwrap();
            assert!(
                compressed.len() < 64 * 1024,
                "{codec:?} compresses zeros well"
            );
            assert_eq!(
                decompress_bounded(codec, &compressed, 1 << 20).unwrap(),
                section
            );
            assert!(
                matches!(
                    decompress_bounded(codec, &compressed, (1 << 20) - 1),
                    Err(LogError::CorruptMessage(_))
                ),
                "{codec:?}"
            );
        }
    }
}
