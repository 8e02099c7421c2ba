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
    CompressionType, RecordBatchBuilder, RecordBatchHeader, COMPRESSION_CODEC_MASK,
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

/// `section` compressed with `codec` at the topic's level for it (Kafka's
/// `compression.gzip.level` -1 is the codec's default).
fn compress_at_level(
    codec: CompressionType,
    section: &[u8],
    config: &LogConfig,
) -> Result<Vec<u8>, LogError> {
    let io = |error: std::io::Error| LogError::CorruptMessage(format!("cannot compress: {error}"));
    match codec {
        CompressionType::Gzip => {
            let level = match config.compression_gzip_level {
                -1 => flate2::Compression::default(),
                level => flate2::Compression::new(level as u32),
            };
            let mut encoder = flate2::write::GzEncoder::new(Vec::new(), level);
            encoder.write_all(section).map_err(io)?;
            encoder.finish().map_err(io)
        }
        CompressionType::Lz4 => {
            // Kafka's lz4 framing: independent blocks, as its clients write.
            let mut encoder = lz4::EncoderBuilder::new()
                .level(config.compression_lz4_level as u32)
                .block_mode(lz4::BlockMode::Independent)
                .build(Vec::new())
                .map_err(io)?;
            encoder.write_all(section).map_err(io)?;
            let (out, result) = encoder.finish();
            result.map_err(io)?;
            Ok(out)
        }
        // One-shot, so the frame carries its content size, as Java clients'
        // frames do (librdkafka 2.0 refuses frames without one).
        CompressionType::Zstd => {
            zstd::bulk::compress(section, config.compression_zstd_level).map_err(io)
        }
        CompressionType::None | CompressionType::Snappy => compress(codec, section),
    }
}

/// A produced batch rewritten with the codec `target`: the same records and
/// header fields, but for the codec bits, the length and the CRC (Kafka
/// recompresses on append when a topic's `compression.type` names another
/// codec than the producer's).
pub fn recompress(
    batch: &[u8],
    header: &RecordBatchHeader,
    target: CompressionType,
    config: &LogConfig,
) -> Result<Vec<u8>, LogError> {
    let section = decompress(header.compression()?, &batch[RECORD_BATCH_OVERHEAD..])?;
    let mut builder = RecordBatchBuilder::like(header);
    builder.attributes = (header.attributes & !COMPRESSION_CODEC_MASK) | target.id();
    builder.set_records_count(header.records_count);
    Ok(builder.build_with_section(&compress_at_level(target, &section, config)?))
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
}
