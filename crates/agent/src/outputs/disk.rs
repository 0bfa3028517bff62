//! `queue.disk`: an output queue kept in files, so events an input handed
//! over survive an agent restart while the destination is down.
//!
//! Events are appended, one NDJSON line each, to numbered segment files; a
//! send returns once its line is written to the file (the OS has it: an
//! agent crash loses nothing; the files are fsynced every
//! [`SYNC_EVERY`], so a machine crash loses at most that much). A reader
//! hands lines to the output's writer in order; when the writer reports a
//! batch delivered, the acknowledged position advances in `ack` (written
//! atomically) and fully delivered segments are deleted. After a restart
//! the reader starts at `ack`: what was handed over but not acknowledged
//! is sent again (at least once; ids make it once where the server checks).
//! The queue holds at most `max_size` bytes; a send waits for room.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use crate::owner_only;

/// A segment is closed and a new one started past this size.
const SEGMENT_BYTES: u64 = if cfg!(test) {
    64 * 1024
} else {
    32 * 1024 * 1024
};
/// How often written segments are fsynced.
pub const SYNC_EVERY: Duration = Duration::from_secs(1);
/// Default `queue.disk.max_size`.
pub const DEFAULT_MAX_SIZE: u64 = 1024 * 1024 * 1024;
const ACK_FILE: &str = "ack";

/// A position in the queue: segment number and byte offset in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
struct Pos {
    segment: u64,
    offset: u64,
}

struct State {
    /// The segment being appended to, and its size.
    writing: u64,
    file: File,
    size: u64,
    dirty: bool,
    /// Where the reader goes on.
    read: Pos,
    /// End positions of the lines handed to the writer, not acknowledged.
    handed: VecDeque<(Pos, u64)>,
    /// Everything before it is delivered.
    acked: Pos,
    /// Bytes and lines not acknowledged.
    bytes: u64,
    lines: u64,
    closed: bool,
}

/// One output's queue on disk. See the module documentation.
pub struct DiskQueue {
    dir: PathBuf,
    max_size: u64,
    state: Mutex<State>,
    /// Signalled when acknowledged bytes free room.
    room: Notify,
    /// Signalled when a line is appended.
    data: Notify,
}

impl std::fmt::Debug for DiskQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskQueue")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl DiskQueue {
    /// Opens (or creates) the queue in `dir`. Lines left from an earlier
    /// run after the acknowledged position are read again first; a line
    /// torn by a crash mid-write is cut off.
    pub fn open(dir: &Path, max_size: u64) -> io::Result<DiskQueue> {
        owner_only::create_dir_all(dir).map_err(|e| named(dir, e))?;
        let segments = list_segments(dir)?;
        let acked = read_ack(dir)?.unwrap_or(Pos {
            segment: segments.first().copied().unwrap_or(1),
            offset: 0,
        });
        let mut bytes = 0;
        let mut lines = 0;
        for &seg in &segments {
            let path = segment_path(dir, seg);
            if seg < acked.segment {
                fs::remove_file(&path).map_err(|e| named(&path, e))?;
                continue;
            }
            let data = fs::read(&path).map_err(|e| named(&path, e))?;
            let whole = data.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            if whole < data.len() {
                let f = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(|e| named(&path, e))?;
                f.set_len(whole as u64).map_err(|e| named(&path, e))?;
            }
            let from = if seg == acked.segment {
                (acked.offset as usize).min(whole)
            } else {
                0
            };
            bytes += (whole - from) as u64;
            lines += data[from..whole].iter().filter(|&&b| b == b'\n').count() as u64;
        }
        let writing = segments
            .last()
            .map_or(acked.segment, |&s| s + 1)
            .max(acked.segment);
        let path = segment_path(dir, writing);
        let file = owner_only::open_append(&path).map_err(|e| named(&path, e))?;
        let size = file.metadata().map_err(|e| named(&path, e))?.len();
        Ok(DiskQueue {
            dir: dir.to_path_buf(),
            max_size: max_size.max(1),
            state: Mutex::new(State {
                writing,
                file,
                size,
                dirty: false,
                read: acked,
                handed: VecDeque::new(),
                acked,
                bytes,
                lines,
                closed: false,
            }),
            room: Notify::new(),
            data: Notify::new(),
        })
    }

    /// Lines queued and not yet acknowledged.
    pub fn depth(&self) -> usize {
        self.lock().lines as usize
    }

    /// Whether [`DiskQueue::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Refuses later appends and wakes every waiter.
    pub fn close(&self) {
        self.lock().closed = true;
        self.room.notify_waiters();
        self.data.notify_waiters();
    }

    /// Appends one line (newline included), waiting while the queue is
    /// full. Returns once the line is in the file. Cancel-safe: a dropped
    /// call appended nothing.
    pub async fn append(&self, line: &[u8]) -> io::Result<()> {
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            {
                let mut s = self.lock();
                if s.closed {
                    return Err(io::Error::new(io::ErrorKind::BrokenPipe, QueueClosedError));
                }
                if s.bytes == 0 || s.bytes + line.len() as u64 <= self.max_size {
                    self.write_line(&mut s, line)?;
                    drop(s);
                    self.data.notify_waiters();
                    return Ok(());
                }
            }
            room.await;
        }
    }

    fn write_line(&self, s: &mut State, line: &[u8]) -> io::Result<()> {
        if s.size >= SEGMENT_BYTES {
            s.file.sync_data().ok();
            let next = s.writing + 1;
            let path = segment_path(&self.dir, next);
            s.file = owner_only::open_append(&path).map_err(|e| named(&path, e))?;
            s.writing = next;
            s.size = 0;
        }
        s.file
            .write_all(line)
            .map_err(|e| named(&segment_path(&self.dir, s.writing), e))?;
        s.size += line.len() as u64;
        s.bytes += line.len() as u64;
        s.lines += 1;
        s.dirty = true;
        Ok(())
    }

    /// Up to `max` lines after those already handed out, waiting until
    /// there is at least one; `None` once closed and nothing is left to
    /// read.
    pub async fn next_lines(&self, max: usize) -> io::Result<Option<Vec<Vec<u8>>>> {
        loop {
            let data = self.data.notified();
            tokio::pin!(data);
            data.as_mut().enable();
            let got = self.read_available(max)?;
            if !got.is_empty() {
                return Ok(Some(got));
            }
            if self.lock().closed {
                return Ok(None);
            }
            data.await;
        }
    }

    fn read_available(&self, max: usize) -> io::Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        let mut s = self.lock();
        while out.len() < max {
            let end = if s.read.segment == s.writing {
                s.size
            } else {
                let path = segment_path(&self.dir, s.read.segment);
                match fs::metadata(&path) {
                    Ok(m) => m.len(),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
                    Err(e) => return Err(named(&path, e)),
                }
            };
            if s.read.offset >= end {
                if s.read.segment < s.writing {
                    s.read = Pos {
                        segment: s.read.segment + 1,
                        offset: 0,
                    };
                    continue;
                }
                break;
            }
            let path = segment_path(&self.dir, s.read.segment);
            let mut f = File::open(&path).map_err(|e| named(&path, e))?;
            f.seek(SeekFrom::Start(s.read.offset))
                .map_err(|e| named(&path, e))?;
            let want = (end - s.read.offset).min(8 * 1024 * 1024);
            let mut buf = Vec::with_capacity(want as usize);
            f.take(want)
                .read_to_end(&mut buf)
                .map_err(|e| named(&path, e))?;
            let mut start = 0;
            while out.len() < max {
                let Some(nl) = buf[start..].iter().position(|&b| b == b'\n') else {
                    break;
                };
                let line = buf[start..start + nl + 1].to_vec();
                start += nl + 1;
                let len = line.len() as u64;
                s.read.offset += len;
                let at = s.read;
                s.handed.push_back((at, len));
                out.push(line);
            }
            if start == 0 {
                // A line longer than one read: read it whole.
                let mut rest = Vec::new();
                File::open(&path)
                    .and_then(|mut f| {
                        f.seek(SeekFrom::Start(s.read.offset))?;
                        f.take(end - s.read.offset).read_to_end(&mut rest)
                    })
                    .map_err(|e| named(&path, e))?;
                let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
                    break;
                };
                rest.truncate(nl + 1);
                let len = rest.len() as u64;
                s.read.offset += len;
                let at = s.read;
                s.handed.push_back((at, len));
                out.push(rest);
            }
        }
        Ok(out)
    }

    /// Acknowledges the `n` oldest lines handed out: they are delivered.
    /// The position is saved and delivered segments are deleted.
    pub fn ack(&self, n: usize) -> io::Result<()> {
        let mut s = self.lock();
        let mut last = None;
        for _ in 0..n {
            let Some((pos, len)) = s.handed.pop_front() else {
                break;
            };
            s.bytes -= len.min(s.bytes);
            s.lines = s.lines.saturating_sub(1);
            last = Some(pos);
        }
        let Some(pos) = last else { return Ok(()) };
        s.acked = pos;
        write_ack(&self.dir, pos)?;
        for seg in list_segments(&self.dir)? {
            if seg < pos.segment {
                let path = segment_path(&self.dir, seg);
                fs::remove_file(&path).map_err(|e| named(&path, e))?;
            }
        }
        drop(s);
        self.room.notify_waiters();
        Ok(())
    }

    /// fsyncs the segment being written, if anything was written since.
    pub fn sync(&self) -> io::Result<()> {
        let mut s = self.lock();
        if s.dirty {
            s.file
                .sync_data()
                .map_err(|e| named(&segment_path(&self.dir, s.writing), e))?;
            s.dirty = false;
        }
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The error inside [`DiskQueue::append`]'s `BrokenPipe` once closed.
#[derive(Debug)]
pub struct QueueClosedError;

impl std::fmt::Display for QueueClosedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the disk queue is closed")
    }
}

impl std::error::Error for QueueClosedError {}

/// fsyncs `queue` every [`SYNC_EVERY`] until it is closed.
pub async fn sync_loop(queue: Arc<DiskQueue>) {
    let mut tick = tokio::time::interval(SYNC_EVERY);
    loop {
        tick.tick().await;
        let q = Arc::clone(&queue);
        let _ = tokio::task::spawn_blocking(move || {
            if let Err(e) = q.sync() {
                tracing::warn!(error = %e, "disk queue fsync failed");
            }
        })
        .await;
        if queue.is_closed() {
            let _ = queue.sync();
            return;
        }
    }
}

fn segment_path(dir: &Path, seg: u64) -> PathBuf {
    dir.join(format!("segment-{seg:016}.ndjson"))
}

fn list_segments(dir: &Path) -> io::Result<Vec<u64>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| named(dir, e))? {
        let entry = entry.map_err(|e| named(dir, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if let Some(n) = name
            .strip_prefix("segment-")
            .and_then(|r| r.strip_suffix(".ndjson"))
            .and_then(|n| n.parse().ok())
        {
            out.push(n);
        }
    }
    out.sort_unstable();
    Ok(out)
}

fn read_ack(dir: &Path) -> io::Result<Option<Pos>> {
    let path = dir.join(ACK_FILE);
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(named(&path, e)),
    };
    let mut parts = text.split_whitespace().map(str::parse::<u64>);
    match (parts.next(), parts.next()) {
        (Some(Ok(segment)), Some(Ok(offset))) => Ok(Some(Pos { segment, offset })),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: not a queue position (`SEGMENT OFFSET`); delete the queue directory to start empty",
                path.display()
            ),
        )),
    }
}

fn write_ack(dir: &Path, pos: Pos) -> io::Result<()> {
    let path = dir.join(ACK_FILE);
    let tmp = dir.join("ack.tmp");
    owner_only::write(&tmp, format!("{} {}\n", pos.segment, pos.offset).as_bytes())
        .map_err(|e| named(&tmp, e))?;
    fs::rename(&tmp, &path).map_err(|e| named(&path, e))
}

fn named(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(n: usize) -> Vec<u8> {
        format!("{{\"n\":{n}}}\n").into_bytes()
    }

    #[tokio::test]
    async fn lines_come_out_in_order_and_acked_ones_do_not_come_back() {
        let dir = tempfile::tempdir().unwrap();
        let q = DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap();
        for n in 0..10 {
            q.append(&line(n)).await.unwrap();
        }
        assert_eq!(q.depth(), 10);
        let got = q.next_lines(4).await.unwrap().unwrap();
        assert_eq!(got, (0..4).map(line).collect::<Vec<_>>());
        q.ack(4).unwrap();
        let got = q.next_lines(100).await.unwrap().unwrap();
        assert_eq!(got, (4..10).map(line).collect::<Vec<_>>());
        assert_eq!(q.depth(), 6, "handed out but not acknowledged");
        drop(q);

        // A restart replays what was not acknowledged, then goes on.
        let q = DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap();
        assert_eq!(q.depth(), 6);
        q.append(&line(10)).await.unwrap();
        let got = q.next_lines(100).await.unwrap().unwrap();
        assert_eq!(got, (4..11).map(line).collect::<Vec<_>>());
        q.ack(7).unwrap();
        assert_eq!(q.depth(), 0);
        drop(q);
        let q = DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap();
        assert_eq!(q.depth(), 0);
        q.close();
        assert!(q.next_lines(1).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_line_torn_by_a_crash_is_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let q = DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap();
        q.append(&line(1)).await.unwrap();
        drop(q);
        let seg = segment_path(dir.path(), 1);
        let mut f = OpenOptions::new().append(true).open(&seg).unwrap();
        f.write_all(b"{\"n\":2").unwrap();
        let q = DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap();
        assert_eq!(q.depth(), 1);
        q.append(&line(3)).await.unwrap();
        let got = q.next_lines(10).await.unwrap().unwrap();
        assert_eq!(got, [line(1), line(3)]);
    }

    #[tokio::test]
    async fn a_full_queue_makes_appends_wait_until_an_ack() {
        let dir = tempfile::tempdir().unwrap();
        let one = line(0).len() as u64;
        let q = Arc::new(DiskQueue::open(dir.path(), 2 * one).unwrap());
        q.append(&line(0)).await.unwrap();
        q.append(&line(1)).await.unwrap();
        let waiting = tokio::spawn({
            let q = Arc::clone(&q);
            async move { q.append(&line(2)).await.unwrap() }
        });
        let got = q.next_lines(1).await.unwrap().unwrap();
        assert_eq!(got, [line(0)]);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "no room until something is acked");
        q.ack(1).unwrap();
        waiting.await.unwrap();
        let got = q.next_lines(10).await.unwrap().unwrap();
        assert_eq!(got, [line(1), line(2)]);
    }

    #[tokio::test]
    async fn segments_roll_over_and_delivered_ones_are_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let q = DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap();
        let big = {
            let mut l = vec![b'x'; SEGMENT_BYTES as usize / 2];
            l.push(b'\n');
            l
        };
        for _ in 0..5 {
            q.append(&big).await.unwrap();
        }
        assert!(list_segments(dir.path()).unwrap().len() >= 3);
        let mut n = 0;
        while n < 5 {
            let got = q.next_lines(10).await.unwrap().unwrap();
            assert!(got.iter().all(|l| *l == big));
            n += got.len();
            q.ack(got.len()).unwrap();
        }
        assert_eq!(n, 5);
        assert_eq!(
            list_segments(dir.path()).unwrap().len(),
            1,
            "only the one being written"
        );
        assert_eq!(q.depth(), 0);
    }

    #[tokio::test]
    async fn segments_ack_and_a_new_directory_are_private_to_the_agent() {
        use crate::owner_only::mode_of;
        let dir = tempfile::tempdir().unwrap();
        let qdir = dir.path().join("queue/default");
        let q = DiskQueue::open(&qdir, DEFAULT_MAX_SIZE).unwrap();
        assert_eq!(mode_of(&dir.path().join("queue")), 0o700);
        assert_eq!(mode_of(&qdir), 0o700);
        // A temporary file left with wider modes does not widen `ack`.
        fs::write(qdir.join("ack.tmp"), b"").unwrap();
        q.append(&line(1)).await.unwrap();
        q.next_lines(1).await.unwrap().unwrap();
        q.ack(1).unwrap();
        assert_eq!(mode_of(&segment_path(&qdir, 1)), 0o600);
        assert_eq!(mode_of(&qdir.join(ACK_FILE)), 0o600);
        // A segment started when the current one is full.
        let big = vec![b'x'; SEGMENT_BYTES as usize];
        q.append(&big).await.unwrap();
        q.append(&line(2)).await.unwrap();
        assert_eq!(mode_of(&segment_path(&qdir, 2)), 0o600);
    }
}
