//! Opening a queue directory: what is left to send, and damaged contents
//! cut or set aside, never an error.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::sync::Arc;

use super::format::*;
use super::ledger::*;
use super::shared::*;
use super::thread::Io;

impl Io {
    /// Opens the directory and works out what is left to send; damaged
    /// contents are cut or set aside, never an error.
    pub(super) fn recover(dir: PathBuf, shared: Arc<Shared>) -> io::Result<Io> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| named(&dir, e))?;
        for tmp in [LEDGER_TMP, OLD_ACK_TMP] {
            let path = dir.join(tmp);
            match fs::remove_file(&path) {
                Ok(()) => {
                    tracing::info!(path = %path.display(), "removed a ledger left half-written by a crash")
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot remove a stale temporary file")
                }
            }
        }
        let segments = list_segments(&dir)?;
        let (acked, old_ack) = read_position(&dir);
        let acked = acked.unwrap_or(Pos {
            segment: segments.keys().next().copied().unwrap_or(1),
            offset: 0,
        });
        if segments.values().any(|f| *f == Format::Ndjson) {
            tracing::info!(path = %dir.display(), "the disk queue holds segments of an earlier version (plain NDJSON): they are sent as they are, new events go to checksummed segments");
        }
        let last = segments.keys().next_back().copied().unwrap_or(0);
        let mut io = Io {
            dir,
            shared,
            segments: BTreeMap::new(),
            limits: HashMap::new(),
            unread: HashMap::new(),
            // After everything present, and past the delivered position
            // (its segment may be gone).
            writing: (last + 1).max(acked.segment + u64::from(acked.offset > 0)),
            file: None,
            size: 0,
            dirty_since: None,
            sync_warned: false,
            read: acked,
            reader: None,
            handed: VecDeque::new(),
            carried: VecDeque::new(),
            run_start: 0,
            old_ack,
        };
        io.run_start = io.writing;
        let (mut bytes, mut lines) = (0, 0);
        let mut unreadable = Vec::new();
        for (seg, format) in segments {
            let path = segment_path(&io.dir, seg, format);
            if seg < acked.segment {
                remove_logged(&path);
                continue;
            }
            let data = match fs::read(&path) {
                Ok(d) => d,
                Err(e) => {
                    io.segments.insert(seg, format);
                    unreadable.push((seg, format!("cannot be read: {e}")));
                    continue;
                }
            };
            if data.is_empty() {
                remove_logged(&path);
                continue;
            }
            let from = if seg == acked.segment {
                acked.offset
            } else {
                0
            };
            let found = scan(&data, format, from);
            if let Some(at) = found.torn {
                let cut = data.len() as u64 - at;
                tracing::warn!(path = %path.display(), offset = at, bytes = cut, "cut off a record torn by a crash while it was written; it was not fsynced");
                let truncated = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .and_then(|f| f.set_len(at));
                if let Err(e) = truncated {
                    tracing::warn!(path = %path.display(), error = %e, "cannot cut the torn record off; it is skipped");
                    io.limits.insert(seg, at);
                }
            }
            bytes += found.bytes;
            lines += found.records;
            io.unread.insert(seg, found.records);
            io.segments.insert(seg, format);
        }
        // Set aside once every segment is known, for the reader to move
        // on to the next; they are not in the counts.
        for (seg, why) in unreadable {
            let at = if seg == acked.segment {
                acked.offset
            } else {
                0
            };
            io.set_aside(seg, at, &why);
        }
        {
            let mut c = io.shared.counts();
            c.bytes = bytes;
            c.lines = lines;
        }
        io.open_writing()?;
        Ok(io)
    }
}
