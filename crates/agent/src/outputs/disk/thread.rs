//! The I/O thread: it alone touches the queue's files, answering the
//! async side's requests (append, read, acknowledge, sync).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc as std_mpsc;
use std::time::Instant;

use crate::pipeline::event::Carried;

use super::format::*;
use super::ledger::*;
use super::shared::*;

/// A record past the read position: handed out (not acknowledged yet),
/// or skipped as damaged. A skipped one waits in line with the others so
/// the ledger moves past it with the next acknowledgement, never before
/// the records handed out ahead of it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Handed {
    /// Where the record ends.
    pub(super) end: Pos,
    /// Its bytes, freed when acknowledged (0 once skipped: freed then).
    pub(super) len: u64,
    /// Skipped as damaged: never sent, so never acknowledged.
    pub(super) skipped: bool,
}

/// The I/O thread's state: it alone touches the files.
pub(super) struct Io {
    pub(super) dir: PathBuf,
    pub(super) shared: Arc<Shared>,
    /// Segments present (not deleted, not set aside), and their format.
    pub(super) segments: BTreeMap<u64, Format>,
    /// Where a segment's readable part ends when not at its file's end
    /// (a torn tail that could not be cut, a write that failed).
    pub(super) limits: HashMap<u64, u64>,
    /// Records of each segment counted in the depth and not handed out
    /// (what setting it aside loses).
    pub(super) unread: HashMap<u64, u64>,
    /// The segment appended to (its file is `None` until (re)created).
    pub(super) writing: u64,
    pub(super) file: Option<File>,
    pub(super) size: u64,
    /// Written and not fsynced since.
    pub(super) dirty_since: Option<Instant>,
    pub(super) sync_warned: bool,
    pub(super) read: Pos,
    pub(super) reader: Option<(u64, File)>,
    /// The records handed out and not acknowledged, in order, with the
    /// damaged ones skipped between them (see [`Handed`]).
    pub(super) handed: VecDeque<Handed>,
    /// Where records appended by this run that carry something start, in
    /// order, with what they carry; taken when the record is read.
    pub(super) carried: VecDeque<(Pos, Carried)>,
    /// The first segment this run appends to: records before it were
    /// left by an earlier run.
    pub(super) run_start: u64,
    /// An `ack` file of an earlier version to delete with the first ledger.
    pub(super) old_ack: bool,
}

impl Io {
    /// Answers requests until every [`DiskQueue`] handle is gone, fsyncing
    /// written data within [`SYNC_EVERY`].
    pub(super) fn serve(&mut self, rx: &std_mpsc::Receiver<Cmd>) {
        loop {
            let cmd = match self.dirty_since {
                None => match rx.recv() {
                    Ok(c) => Some(c),
                    Err(_) => break,
                },
                Some(t) => match rx.recv_timeout(SYNC_EVERY.saturating_sub(t.elapsed())) {
                    Ok(c) => Some(c),
                    Err(std_mpsc::RecvTimeoutError::Timeout) => None,
                    Err(std_mpsc::RecvTimeoutError::Disconnected) => break,
                },
            };
            if let Some(cmd) = cmd {
                self.handle(cmd);
            }
            if self.dirty_since.is_some_and(|t| t.elapsed() >= SYNC_EVERY) {
                let _ = self.sync();
            }
        }
        let _ = self.sync();
    }

    pub(super) fn handle(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Append {
                record,
                carried,
                reply,
            } => {
                let framed = HEADER_BYTES + record.len() as u64;
                let result = match self.append(&record) {
                    Ok(start) => {
                        if let Some(c) = carried {
                            self.carried.push_back((start, c));
                        }
                        *self.unread.entry(self.writing).or_default() += 1;
                        self.shared.counts().lines += 1;
                        self.shared.data.notify_waiters();
                        Ok(())
                    }
                    Err(e) => {
                        let mut c = self.shared.counts();
                        c.bytes = c.bytes.saturating_sub(framed);
                        drop(c);
                        self.shared.room.notify_waiters();
                        Err((e, carried))
                    }
                };
                let _ = reply.send(result);
            }
            Cmd::Read { max, reply } => {
                let _ = reply.send(self.read_batch(max));
            }
            Cmd::Ack { n, reply } => {
                let _ = reply.send(self.ack(n));
            }
            Cmd::Sync { reply } => {
                let _ = reply.send(self.sync());
            }
            #[cfg(test)]
            Cmd::Stall(until) => {
                let _ = until.recv();
            }
        }
    }

    /// Creates the segment `self.writing` (mode 0600) and records it in
    /// the directory.
    pub(super) fn open_writing(&mut self) -> io::Result<()> {
        let path = segment_path(&self.dir, self.writing, Format::Records);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| named(&path, e))?;
        self.size = file.metadata().map_err(|e| named(&path, e))?.len();
        sync_dir(&self.dir)?;
        self.file = Some(file);
        self.segments.insert(self.writing, Format::Records);
        Ok(())
    }

    /// Closes the segment being written (fsynced) and starts the next.
    pub(super) fn roll(&mut self) -> io::Result<()> {
        if self.file.is_some() {
            let _ = self.sync();
            self.file = None;
            self.writing += 1;
        }
        self.open_writing()
    }

    /// Appends one record; returns where it starts.
    pub(super) fn append(&mut self, payload: &[u8]) -> io::Result<Pos> {
        if self.file.is_none() || self.size >= SEGMENT_BYTES {
            self.roll()?;
        }
        let path = segment_path(&self.dir, self.writing, Format::Records);
        let Some(file) = self.file.as_mut() else {
            return Err(named(&path, stopped()));
        };
        let mut record = Vec::with_capacity(HEADER_BYTES as usize + payload.len());
        let len = payload.len() as u32;
        record.extend_from_slice(&len.to_le_bytes());
        record.extend_from_slice(&len_check(len).to_le_bytes());
        record.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
        record.extend_from_slice(payload);
        if let Err(e) = file.write_all(&record) {
            // A part may be written: cut it, or leave the segment.
            if file.set_len(self.size).is_err() {
                self.limits.insert(self.writing, self.size);
                self.file = None;
                self.writing += 1;
            }
            return Err(named(&path, e));
        }
        let start = Pos {
            segment: self.writing,
            offset: self.size,
        };
        self.size += record.len() as u64;
        self.dirty_since.get_or_insert_with(Instant::now);
        Ok(start)
    }

    pub(super) fn sync(&mut self) -> io::Result<()> {
        if self.dirty_since.is_none() {
            return Ok(());
        }
        let Some(file) = &self.file else {
            self.dirty_since = None;
            return Ok(());
        };
        match file.sync_data() {
            Ok(()) => {
                self.dirty_since = None;
                self.sync_warned = false;
                Ok(())
            }
            Err(e) => {
                let path = segment_path(&self.dir, self.writing, Format::Records);
                if !self.sync_warned {
                    tracing::warn!(path = %path.display(), error = %e, "disk queue fsync failed; retrying (a machine crash could lose the records since the last fsync)");
                    self.sync_warned = true;
                }
                // Retried after another period, not at once.
                self.dirty_since = Some(Instant::now());
                Err(named(&path, e))
            }
        }
    }

    /// Where segment `seg`'s readable part ends.
    pub(super) fn end_of(&mut self, seg: u64) -> io::Result<u64> {
        if seg == self.writing && self.file.is_some() {
            return Ok(self.size);
        }
        let file = self.reader_for(seg)?;
        let len = file.metadata()?.len();
        Ok(self.limits.get(&seg).map_or(len, |&l| l.min(len)))
    }

    pub(super) fn reader_for(&mut self, seg: u64) -> io::Result<&File> {
        if self.reader.as_ref().is_none_or(|(s, _)| *s != seg) {
            let format = self.segments.get(&seg).copied().unwrap_or(Format::Records);
            let file = File::open(segment_path(&self.dir, seg, format))?;
            self.reader = Some((seg, file));
        }
        match &self.reader {
            Some((_, f)) => Ok(f),
            None => Err(stopped()),
        }
    }

    pub(super) fn read_at(&mut self, seg: u64, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        let file = self.reader_for(seg)?;
        let mut buf = vec![0; usize::try_from(len).unwrap_or(usize::MAX)];
        file.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    }

    /// Up to `max` records after the read position; damaged segments on
    /// the way are set aside.
    pub(super) fn read_batch(&mut self, max: usize) -> io::Result<Vec<Stored>> {
        let mut out = Vec::new();
        // Each step hands out a record, skips damaged ones, or moves to
        // another segment: the read position or `out` changes, so the
        // steps end with the data. A step that changed neither would
        // repeat: give back what was read (the guard is never expected
        // to trip). Returning nothing while records are left would make
        // the reader wait for an append.
        let mut last = None;
        while out.len() < max {
            let now = (self.read, out.len());
            if last == Some(now) {
                break;
            }
            last = Some(now);
            let seg = self.read.segment;
            let Some(&format) = self.segments.get(&seg) else {
                match self.segments.range(seg..).next() {
                    Some((&next, _)) => {
                        self.read = Pos {
                            segment: next,
                            offset: 0,
                        };
                        continue;
                    }
                    None => break,
                }
            };
            let end = match self.end_of(seg) {
                Ok(end) => end,
                Err(e) if transient(&e) => return self.retry_later(seg, out, e),
                Err(e) => {
                    let offset = self.read.offset;
                    self.set_aside(seg, offset, &format!("cannot be read: {e}"));
                    continue;
                }
            };
            let offset = self.read.offset;
            if offset >= end {
                if seg == self.writing {
                    break;
                }
                self.next_segment(seg);
                continue;
            }
            let want = (end - offset).min(READ_CHUNK);
            let buf = match self.read_at(seg, offset, want) {
                Ok(b) => b,
                Err(e) if transient(&e) => return self.retry_later(seg, out, e),
                Err(e) => {
                    self.set_aside(seg, offset, &format!("cannot be read: {e}"));
                    continue;
                }
            };
            match format {
                Format::Records => self.take_records(seg, &buf, end, max, &mut out),
                Format::Ndjson => self.take_lines(seg, &buf, end, max, &mut out),
            }
        }
        Ok(out)
    }

    /// What was read so far, or the error when nothing was: the reader
    /// retries (too many open files, no memory: the data is not at fault).
    pub(super) fn retry_later(
        &mut self,
        seg: u64,
        out: Vec<Stored>,
        e: io::Error,
    ) -> io::Result<Vec<Stored>> {
        self.reader = None;
        if out.is_empty() {
            let format = self.segments.get(&seg).copied().unwrap_or(Format::Records);
            return Err(named(&segment_path(&self.dir, seg, format), e));
        }
        Ok(out)
    }

    pub(super) fn hand(&mut self, len: u64, payload: Vec<u8>, out: &mut Vec<Stored>) {
        if let Some(n) = self.unread.get_mut(&self.read.segment) {
            *n = n.saturating_sub(1);
        }
        let start = self.read;
        // What records set aside before this one carried is dropped
        // unsettled: those events are lost, never acknowledged.
        while self.carried.front().is_some_and(|(at, _)| *at < start) {
            self.carried.pop_front();
        }
        let carried = if self.carried.front().is_some_and(|(at, _)| *at == start) {
            self.carried.pop_front().map(|(_, c)| c)
        } else {
            None
        };
        self.read.offset += len;
        self.handed.push_back(Handed {
            end: self.read,
            len,
            skipped: false,
        });
        out.push(Stored {
            line: payload,
            carried,
            earlier_run: start.segment < self.run_start,
        });
    }

    pub(super) fn take_records(
        &mut self,
        seg: u64,
        buf: &[u8],
        end: u64,
        max: usize,
        out: &mut Vec<Stored>,
    ) {
        let mut p = 0;
        while out.len() < max {
            match frame_at(buf, p) {
                Frame::Whole { payload, next } => {
                    let record = buf[payload].to_vec();
                    self.hand((next - p) as u64, record, out);
                    p = next;
                }
                Frame::Damaged { next } => {
                    self.skip(seg, (next - p) as u64);
                    p = next;
                }
                Frame::Incomplete { needed } => {
                    let at = self.read.offset;
                    if p == buf.len() {
                        return;
                    }
                    if at + needed > end {
                        self.set_aside(seg, at, "ends inside a record");
                        return;
                    }
                    if p > 0 {
                        // Read on from this record in the next step.
                        return;
                    }
                    // A record longer than one read: read it whole.
                    match self.read_at(seg, at, needed) {
                        Ok(whole) => match frame_at(&whole, 0) {
                            Frame::Whole { payload, next } => {
                                let record = whole[payload].to_vec();
                                self.hand(next as u64, record, out);
                            }
                            Frame::Damaged { next } => self.skip(seg, next as u64),
                            _ => self.set_aside(seg, at, "holds a damaged record"),
                        },
                        Err(e) => self.set_aside(seg, at, &format!("cannot be read: {e}")),
                    }
                    return;
                }
                Frame::Corrupt(why) => {
                    let at = self.read.offset;
                    self.set_aside(seg, at, why);
                    return;
                }
            }
        }
    }

    pub(super) fn take_lines(
        &mut self,
        seg: u64,
        buf: &[u8],
        end: u64,
        max: usize,
        out: &mut Vec<Stored>,
    ) {
        let mut p = 0;
        while out.len() < max {
            if let Some(nl) = memchr::memchr(b'\n', &buf[p..]) {
                let line = buf[p..p + nl + 1].to_vec();
                self.hand(line.len() as u64, line, out);
                p += nl + 1;
                continue;
            }
            if p > 0 {
                return;
            }
            // No newline in this read: the line is longer, or unfinished.
            let at = self.read.offset;
            match self.read_at(seg, at, end - at) {
                Ok(rest) => match memchr::memchr(b'\n', &rest) {
                    Some(nl) => {
                        let line = rest[..nl + 1].to_vec();
                        self.hand(line.len() as u64, line, out);
                    }
                    None => self.set_aside(seg, at, "ends inside a line"),
                },
                Err(e) => self.set_aside(seg, at, &format!("cannot be read: {e}")),
            }
            return;
        }
    }

    /// Skips the record of `len` bytes at the read position of segment
    /// `seg`, whose payload does not match its checksum: it is never sent
    /// (counted lost, an ERROR names the file and offset), and the reader
    /// goes on with the next record, the framing being sound. What the
    /// record carried is dropped unsettled, as for a set-aside segment.
    pub(super) fn skip(&mut self, seg: u64, len: u64) {
        let start = self.read;
        let format = self.segments.get(&seg).copied().unwrap_or(Format::Records);
        tracing::error!(
            path = %segment_path(&self.dir, seg, format).display(),
            offset = start.offset,
            bytes = len,
            reason = "a record's checksum does not match",
            "disk queue record is damaged: it is not sent (counted in leasehold_output_disk_queue_records_lost_total); going on with the next record",
        );
        if let Some(n) = self.unread.get_mut(&seg) {
            *n = n.saturating_sub(1);
        }
        while self.carried.front().is_some_and(|(at, _)| *at <= start) {
            self.carried.pop_front();
        }
        self.read.offset += len;
        self.shared.lost.inc();
        {
            let mut c = self.shared.counts();
            c.lines = c.lines.saturating_sub(1);
            c.bytes = c.bytes.saturating_sub(len);
        }
        self.shared.room.notify_waiters();
        self.handed.push_back(Handed {
            end: self.read,
            len: 0,
            skipped: true,
        });
        // Nothing handed out ahead of it: the ledger moves past it now,
        // so a restart does not find it (and count it) again.
        if self.handed.iter().all(|h| h.skipped)
            && let Err(e) = self.ack(0)
        {
            tracing::warn!(error = %e, "cannot record the skipped record in the disk queue's ledger; it is skipped again after a restart");
        }
    }

    /// Leaves segment `seg` (read to its end) for the next one present.
    pub(super) fn next_segment(&mut self, seg: u64) {
        self.reader = None;
        let next = self
            .segments
            .range(seg + 1..)
            .next()
            .map_or(self.writing, |(&n, _)| n);
        self.read = Pos {
            segment: next,
            offset: 0,
        };
    }

    /// Renames segment `seg` to `<name>.bad` because of damage at
    /// `offset`, reports the records lost (those counted and not handed
    /// out), and moves the reader on.
    pub(super) fn set_aside(&mut self, seg: u64, offset: u64, why: &str) {
        let format = self.segments.get(&seg).copied().unwrap_or(Format::Records);
        let path = segment_path(&self.dir, seg, format);
        if seg == self.writing
            && self.file.is_some()
            && let Err(e) = self.roll()
        {
            tracing::error!(path = %path.display(), error = %e, "cannot start a new disk queue segment; appends will retry");
        }
        let end = self.end_of(seg).ok();
        self.reader = None;
        // A segment unreadable from the start: how many is unknown.
        let counted = self.unread.remove(&seg);
        let lost = counted.unwrap_or(1);
        let records_lost =
            counted.map_or_else(|| "unknown (counted as 1)".to_string(), |n| n.to_string());
        let lost_bytes = end.map_or(0, |e| e.saturating_sub(offset));
        let bad = path.with_file_name(format!(
            "{}.bad",
            path.file_name().unwrap_or_default().to_string_lossy()
        ));
        let moved = fs::rename(&path, &bad);
        match &moved {
            Ok(()) => {
                tracing::error!(path = %path.display(), offset, records_lost = %records_lost, reason = why, set_aside = %bad.display(), "disk queue segment is damaged: the records from this offset on are not sent; the segment was renamed (inspect it, then delete it); going on with the next segment")
            }
            Err(e) => {
                tracing::error!(path = %path.display(), offset, records_lost = %records_lost, reason = why, error = %e, "disk queue segment is damaged and could not be renamed: the records from this offset on are not sent (delete the file); going on with the next segment")
            }
        }
        let _ = sync_dir(&self.dir);
        self.shared.lost.inc_by(lost);
        {
            let mut c = self.shared.counts();
            c.lines = c.lines.saturating_sub(counted.unwrap_or(0));
            c.bytes = c.bytes.saturating_sub(lost_bytes);
        }
        self.shared.room.notify_waiters();
        self.segments.remove(&seg);
        self.limits.remove(&seg);
        if self.read.segment == seg {
            self.next_segment(seg);
        }
    }

    pub(super) fn ack(&mut self, n: usize) -> io::Result<()> {
        let mut last = None;
        let mut freed = 0;
        let mut records = 0u64;
        // The skipped records in line come off with those around them.
        while records < n as u64 || self.handed.front().is_some_and(|h| h.skipped) {
            let Some(h) = self.handed.pop_front() else {
                break;
            };
            if !h.skipped {
                freed += h.len;
                records += 1;
            }
            last = Some(h.end);
        }
        let Some(pos) = last else { return Ok(()) };
        {
            let mut c = self.shared.counts();
            c.bytes = c.bytes.saturating_sub(freed);
            c.lines = c.lines.saturating_sub(records);
        }
        self.shared.room.notify_waiters();
        write_ledger(&self.dir, pos)?;
        if self.old_ack {
            remove_logged(&self.dir.join(OLD_ACK_FILE));
            self.old_ack = false;
        }
        let done: Vec<(u64, Format)> = self
            .segments
            .range(..pos.segment)
            .map(|(&s, &f)| (s, f))
            .collect();
        for (seg, format) in done {
            if seg == self.writing {
                continue;
            }
            remove_logged(&segment_path(&self.dir, seg, format));
            self.segments.remove(&seg);
            self.limits.remove(&seg);
            self.unread.remove(&seg);
        }
        Ok(())
    }
}
