//! The files of a queue: the record framing (length, its check, the
//! payload's CRC), how a segment is scanned, and segment names.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::shared::*;

/// What [`scan`] found in a segment read at start.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Scanned {
    /// Records (whole, or counted as lost past damage) from the offset on.
    pub(super) records: u64,
    /// Their bytes.
    pub(super) bytes: u64,
    /// Where an unfinished last record starts (a crash while writing).
    pub(super) torn: Option<u64>,
}

/// Counts the records of a segment from `from` on. Damage is counted in
/// (the reader sets it aside when it gets there); an unfinished tail is
/// reported to be cut.
pub(super) fn scan(data: &[u8], format: Format, from: u64) -> Scanned {
    let from = usize::try_from(from).unwrap_or(usize::MAX).min(data.len());
    let mut out = Scanned::default();
    match format {
        Format::Ndjson => {
            let whole = memchr::memrchr(b'\n', data).map_or(0, |i| i + 1);
            if whole < data.len() {
                out.torn = Some(whole as u64);
            }
            let from = from.min(whole);
            out.records = count_lines(&data[from..whole]);
            out.bytes = (whole - from) as u64;
        }
        Format::Records => {
            // The delivered position is a record's start: what lies before
            // it was delivered, damaged since or not, and is never read.
            let mut p = from;
            // Each step moves past a record; bounded by the data length.
            while p < data.len() {
                match frame_at(data, p) {
                    // A damaged record counts until the reader skips it.
                    Frame::Whole { next, .. } | Frame::Damaged { next } => {
                        out.records += 1;
                        out.bytes += (next - p) as u64;
                        p = next;
                    }
                    Frame::Incomplete { .. } => {
                        out.torn = Some(p as u64);
                        break;
                    }
                    Frame::Corrupt(_) => {
                        out.records += count_framed(&data[p..]);
                        out.bytes += (data.len() - p) as u64;
                        break;
                    }
                }
            }
        }
    }
    out
}

/// One record read at `p`.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Frame {
    /// A whole record: its payload, and where the next one starts.
    Whole {
        payload: std::ops::Range<usize>,
        next: usize,
    },
    /// The data ends inside the record, which takes `needed` bytes (the
    /// header's when the header itself is cut). Nothing at all left: 0
    /// more bytes from `p`, i.e. `p == data.len()`.
    Incomplete { needed: u64 },
    /// A record whose header is sound (its length passed its own check)
    /// but whose payload does not match its checksum: the damage is
    /// inside this record alone, and the next one starts at `next`.
    Damaged { next: usize },
    /// Damage to the framing itself (a length that cannot be trusted):
    /// where the next record starts is unknown. The reason.
    Corrupt(&'static str),
}

pub(super) fn frame_at(data: &[u8], p: usize) -> Frame {
    let rest = &data[p.min(data.len())..];
    let word = |at: usize| {
        rest.get(at..at + 4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(u32::from_le_bytes)
    };
    let (Some(len), Some(check), Some(crc)) = (word(0), word(4), word(8)) else {
        return Frame::Incomplete {
            needed: HEADER_BYTES,
        };
    };
    if check != len_check(len) {
        // Zeros where a crash left the file longer than what reached it.
        if rest.iter().all(|&b| b == 0) {
            return Frame::Incomplete {
                needed: rest.len() as u64 + 1,
            };
        }
        return Frame::Corrupt("a record's length is damaged");
    }
    let len = u64::from(len);
    if len == 0 || len > MAX_RECORD {
        return Frame::Corrupt("a record's length is impossible");
    }
    let total = HEADER_BYTES + len;
    if (rest.len() as u64) < total {
        return Frame::Incomplete { needed: total };
    }
    let end = total as usize;
    if crc32fast::hash(&rest[HEADER_BYTES as usize..end]) != crc {
        return Frame::Damaged { next: p + end };
    }
    Frame::Whole {
        payload: p + HEADER_BYTES as usize..p + end,
        next: p + end,
    }
}

/// The check of a record's length field.
pub(super) fn len_check(len: u32) -> u32 {
    crc32fast::hash(&len.to_le_bytes())
}

/// Records framed in `data`, which starts at a damaged one: it counts,
/// and the ones after it as far as their lengths can be trusted (a lower
/// bound when a length is damaged).
pub(super) fn count_framed(data: &[u8]) -> u64 {
    let mut n = 0;
    let mut p = 0;
    // Each step moves at least one header on.
    while p < data.len() {
        n += 1;
        let len = data
            .get(p..p + 4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(u32::from_le_bytes);
        let check = data
            .get(p + 4..p + 8)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(u32::from_le_bytes);
        match (len, check) {
            (Some(len), Some(check)) if check == len_check(len) && len > 0 => {
                p += HEADER_BYTES as usize + len as usize;
            }
            _ => break,
        }
    }
    n.max(1)
}

pub(super) fn count_lines(data: &[u8]) -> u64 {
    memchr::memchr_iter(b'\n', data).count() as u64
}

pub(super) fn segment_path(dir: &Path, seg: u64, format: Format) -> PathBuf {
    let ext = match format {
        Format::Records => RECORDS_EXT,
        Format::Ndjson => NDJSON_EXT,
    };
    dir.join(format!("{SEGMENT_PREFIX}{seg:016}{ext}"))
}

/// The segments in `dir`, in order, with their formats.
pub(super) fn list_segments(dir: &Path) -> io::Result<BTreeMap<u64, Format>> {
    let mut out = BTreeMap::new();
    for entry in fs::read_dir(dir).map_err(|e| named(dir, e))? {
        let entry = entry.map_err(|e| named(dir, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Some(rest) = name.strip_prefix(SEGMENT_PREFIX) else {
            continue;
        };
        let (number, format) = if let Some(n) = rest.strip_suffix(RECORDS_EXT) {
            (n, Format::Records)
        } else if let Some(n) = rest.strip_suffix(NDJSON_EXT) {
            (n, Format::Ndjson)
        } else {
            continue;
        };
        if let Ok(n) = number.parse() {
            out.entry(n).or_insert(format);
        }
    }
    Ok(out)
}
