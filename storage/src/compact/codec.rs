//! The compression codecs of Kafka record batches, for the cleaner: gzip, snappy (raw, or in
//! the xerial framing the Java client writes), lz4 (the LZ4 frame format) and zstd (frames).

use std::io::{Read, Write};

/// Upper bound on a batch's decompressed records: a compressed batch claiming more is kept
/// whole rather than inflated into memory.
pub(super) const DECOMPRESSED_BYTES_MAX: usize = 256 << 20;

const GZIP: u8 = 1;
const SNAPPY: u8 = 2;
const LZ4: u8 = 3;
const ZSTD: u8 = 4;
/// zstd's default level, which Kafka's producers use too.
const ZSTD_LEVEL: i32 = 3;

/// The header of snappy-java's stream framing: magic, version 1, compatible version 1.
const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
const XERIAL_HEADER_BYTES: usize = 16;
/// Uncompressed bytes per xerial chunk (snappy-java's default block size).
const XERIAL_CHUNK_BYTES: usize = 32 << 10;

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum CodecError {
    Unsupported(u8),
    Corrupt(String),
}

/// The decompressed records of a batch compressed with `codec` (1 gzip, 2 snappy, 3 lz4,
/// 4 zstd).
pub(super) fn decompress(codec: u8, data: &[u8]) -> Result<Vec<u8>, CodecError> {
    match codec {
        GZIP => read_bounded(flate2::read::MultiGzDecoder::new(data)),
        SNAPPY => decompress_snappy(data),
        LZ4 => read_bounded(lz4_flex::frame::FrameDecoder::new(data)),
        ZSTD => {
            let decoder = zstd::stream::read::Decoder::new(data)
                .map_err(|e| CodecError::Corrupt(e.to_string()))?;
            read_bounded(decoder)
        }
        other => Err(CodecError::Unsupported(other)),
    }
}

/// `data` compressed with `codec`.
pub(super) fn compress(codec: u8, data: &[u8]) -> Result<Vec<u8>, CodecError> {
    let corrupt = |e: std::io::Error| CodecError::Corrupt(e.to_string());
    match codec {
        GZIP => {
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            encoder.write_all(data).map_err(corrupt)?;
            encoder.finish().map_err(corrupt)
        }
        SNAPPY => compress_snappy(data),
        LZ4 => {
            // Kafka's readers accept independent blocks of 64 KiB without checksums.
            let info = lz4_flex::frame::FrameInfo::new()
                .block_size(lz4_flex::frame::BlockSize::Max64KB)
                .block_mode(lz4_flex::frame::BlockMode::Independent);
            let mut encoder = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
            encoder.write_all(data).map_err(corrupt)?;
            encoder
                .finish()
                .map_err(|e| CodecError::Corrupt(e.to_string()))
        }
        ZSTD => zstd::bulk::compress(data, ZSTD_LEVEL).map_err(corrupt),
        other => Err(CodecError::Unsupported(other)),
    }
}

fn read_bounded(reader: impl Read) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::new();
    reader
        .take(DECOMPRESSED_BYTES_MAX as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| CodecError::Corrupt(e.to_string()))?;
    if out.len() > DECOMPRESSED_BYTES_MAX {
        return Err(CodecError::Corrupt("decompressed records too large".into()));
    }
    Ok(out)
}

fn decompress_snappy(data: &[u8]) -> Result<Vec<u8>, CodecError> {
    if !data.starts_with(&XERIAL_MAGIC) {
        let mut out = Vec::new();
        decompress_snappy_raw(data, &mut out)?;
        return Ok(out);
    }
    let mut out = Vec::new();
    let mut at = XERIAL_HEADER_BYTES.min(data.len());
    while at < data.len() {
        let Some(length) = data.get(at..at + 4) else {
            return Err(CodecError::Corrupt("cut xerial chunk length".into()));
        };
        let length = u32::from_be_bytes([length[0], length[1], length[2], length[3]]) as usize;
        at += 4;
        let Some(chunk) = data.get(at..at.saturating_add(length)) else {
            return Err(CodecError::Corrupt("cut xerial chunk".into()));
        };
        decompress_snappy_raw(chunk, &mut out)?;
        at += length;
    }
    Ok(out)
}

/// Appends the raw snappy block `data`, decompressed, to `out`.
fn decompress_snappy_raw(data: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
    let corrupt = |e: snap::Error| CodecError::Corrupt(e.to_string());
    let length = snap::raw::decompress_len(data).map_err(corrupt)?;
    if out.len() + length > DECOMPRESSED_BYTES_MAX {
        return Err(CodecError::Corrupt("decompressed records too large".into()));
    }
    let start = out.len();
    out.resize(start + length, 0);
    let written = snap::raw::Decoder::new()
        .decompress(data, &mut out[start..])
        .map_err(corrupt)?;
    out.truncate(start + written);
    Ok(())
}

/// Snappy in the xerial framing, which both the Java client and librdkafka read.
fn compress_snappy(data: &[u8]) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::with_capacity(XERIAL_HEADER_BYTES + data.len() / 2 + 64);
    out.extend_from_slice(&XERIAL_MAGIC);
    out.extend_from_slice(&1i32.to_be_bytes());
    out.extend_from_slice(&1i32.to_be_bytes());
    let mut encoder = snap::raw::Encoder::new();
    for chunk in data.chunks(XERIAL_CHUNK_BYTES) {
        let compressed = encoder
            .compress_vec(chunk)
            .map_err(|e| CodecError::Corrupt(e.to_string()))?;
        out.extend_from_slice(&(compressed.len() as u32).to_be_bytes());
        out.extend_from_slice(&compressed);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_codec_round_trips() {
        let data: Vec<u8> = (0..100_000u32)
            .flat_map(|i| (i % 251).to_be_bytes())
            .collect();
        for codec in [GZIP, SNAPPY, LZ4, ZSTD] {
            let compressed = compress(codec, &data).expect("compress");
            assert!(compressed.len() < data.len(), "codec {codec}");
            assert_eq!(decompress(codec, &compressed).expect("decompress"), data);
        }
        assert_eq!(decompress(5, b"x"), Err(CodecError::Unsupported(5)));
    }

    #[test]
    fn raw_snappy_is_read_too() {
        let data = b"raw snappy, as some clients send it".repeat(50);
        let raw = snap::raw::Encoder::new()
            .compress_vec(&data)
            .expect("compress");
        assert_eq!(decompress(SNAPPY, &raw).expect("decompress"), data);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for codec in [GZIP, SNAPPY, LZ4, ZSTD] {
            assert!(decompress(codec, b"\x82SNAPPY\x00garbage-garbage").is_err());
            assert!(decompress(codec, &[0xff; 40]).is_err());
        }
    }
}
