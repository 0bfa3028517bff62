//! The delivered position: the `ledger` file (or an earlier version's
//! `ack` file), written atomically.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::shared::*;

/// The delivered position, from the ledger or an earlier version's `ack`
/// file; `None` (with a WARN naming the file) when it is missing or
/// damaged. Also whether an `ack` file is there to delete.
pub(super) fn read_position(dir: &Path) -> (Option<Pos>, bool) {
    let old = dir.join(OLD_ACK_FILE);
    let has_old = old.exists();
    let ledger = dir.join(LEDGER_FILE);
    match fs::read(&ledger) {
        Ok(text) => {
            let pos = parse_ledger(&text);
            if pos.is_none() {
                tracing::warn!(path = %ledger.display(), "the disk queue's ledger is empty, torn or damaged; starting at the oldest segment present (events delivered from it may be sent again)");
            }
            return (pos, has_old);
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(path = %ledger.display(), error = %e, "cannot read the disk queue's ledger; starting at the oldest segment present (events delivered from it may be sent again)");
            return (None, has_old);
        }
    }
    if !has_old {
        return (None, false);
    }
    let text = fs::read_to_string(&old).unwrap_or_default();
    let mut parts = text.split_whitespace().map(str::parse::<u64>);
    match (parts.next(), parts.next(), parts.next()) {
        (Some(Ok(segment)), Some(Ok(offset)), None) => (Some(Pos { segment, offset }), true),
        _ => {
            tracing::warn!(path = %old.display(), "the disk queue's position is empty, torn or damaged; starting at the oldest segment present (events delivered from it may be sent again)");
            (None, true)
        }
    }
}

pub(super) fn ledger_body(pos: Pos) -> String {
    format!("v1 {} {}", pos.segment, pos.offset)
}

pub(super) fn parse_ledger(text: &[u8]) -> Option<Pos> {
    let text = std::str::from_utf8(text).ok()?;
    let line = text.strip_suffix('\n')?;
    let (body, crc) = line.rsplit_once(' ')?;
    if u32::from_str_radix(crc, 16).ok()? != crc32fast::hash(body.as_bytes()) {
        return None;
    }
    let mut parts = body.split(' ');
    if parts.next()? != "v1" {
        return None;
    }
    let segment = parts.next()?.parse().ok()?;
    let offset = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some(Pos { segment, offset })
}

/// Saves `pos`: a temporary file (0600) fsynced, renamed over the ledger,
/// the directory fsynced.
pub(super) fn write_ledger(dir: &Path, pos: Pos) -> io::Result<()> {
    let body = ledger_body(pos);
    let text = format!("{body} {:08x}\n", crc32fast::hash(body.as_bytes()));
    let tmp = dir.join(LEDGER_TMP);
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| named(&tmp, e))?;
    f.write_all(text.as_bytes()).map_err(|e| named(&tmp, e))?;
    f.sync_all().map_err(|e| named(&tmp, e))?;
    drop(f);
    let path = dir.join(LEDGER_FILE);
    fs::rename(&tmp, &path).map_err(|e| named(&path, e))?;
    sync_dir(dir)
}

/// fsyncs a directory, so created, renamed and deleted names survive a
/// machine crash. File systems that cannot are let be.
pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    match File::open(dir).and_then(|d| d.sync_all()) {
        Ok(()) => Ok(()),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::InvalidInput | io::ErrorKind::Unsupported
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(named(dir, e)),
    }
}
