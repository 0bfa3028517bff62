//! `queue.disk`: an output queue kept in files, so events an input handed
//! over survive an agent restart while the destination is down.
//!
//! # I/O
//!
//! Every file of a queue is read and written by one thread of its own
//! (`leasehold-queue`), fed by a channel: the async side ([`DiskQueue`])
//! only sends requests and awaits replies, so a slow or hung disk never
//! stalls a tokio worker (the leader election shares them). Opening runs
//! the recovery on that thread too, and waits for it (once, at start).
//!
//! # Format
//!
//! Events are appended to numbered segment files
//! `segment-<16 digits>.rec`, each event one record: a 12-byte header (the
//! payload length as u32 little-endian, a CRC-32 of those four bytes, a
//! CRC-32 of the payload) then the payload (the NDJSON line, newline
//! included). A segment is closed (fsynced) and the next one started past
//! 32 MiB. The delivered position (segment and byte offset) is kept in
//! `ledger`, one line `v1 <segment> <offset> <crc32 of the rest, hex>`.
//!
//! Queue directories of earlier versions (`segment-*.ndjson`, plain NDJSON
//! lines, and an `ack` file `<segment> <offset>`) are read once as they
//! are (an INFO says so): their lines are sent, their segments deleted
//! once delivered, and new events go to `.rec` segments.
//!
//! # Guarantees
//!
//! A send returns once its record is written to the file (the OS has it),
//! and segments are fsynced at most [`SYNC_EVERY`] after a write, at each
//! segment change and at shutdown. So:
//! - an agent crash (SIGKILL, OOM) loses nothing; a machine crash loses at
//!   most the records of the last [`SYNC_EVERY`], and a record torn by it
//!   (the file ends inside a record) is cut off at the next start with a
//!   WARN naming the file and the offset;
//! - events are sent at least once: the records handed to the writer and
//!   not yet acknowledged when the agent stopped are sent again (ids make
//!   it once on Elasticsearch). The ledger is written to `ledger.tmp`,
//!   fsynced, renamed and the directory fsynced, so it is the old or the
//!   new position, never a mix; should it still be empty, torn or damaged
//!   (checksum), a WARN names it and the queue starts at the oldest
//!   segment present, sending again what was delivered from that segment.
//!
//! # Damaged data
//!
//! Damaged data is never sent, and costs no more than the damage:
//! - a record whose header is sound (its length passes its own check) but
//!   whose payload does not match its checksum is skipped alone: an ERROR
//!   names the file and the record's byte offset, it is added to
//!   `leasehold_output_disk_queue_records_lost_total{output}`, and the
//!   reader goes on with the next record, whose start the length gives;
//! - damage to the framing itself (a length that fails its check or is
//!   impossible, a segment that ends inside a record or cannot be read)
//!   leaves no way to find the next record: the segment is renamed
//!   `<name>.bad` (kept for inspection; delete it when done), an ERROR
//!   names the file, the byte offset and how many records were lost (past
//!   a damaged length, at least one), the count is added to the same
//!   counter, and the queue goes on with the next segment.
//!
//! Both apply at start as while running. The contents of the directory
//! never stop the agent from starting.
//!
//! The queue holds at most `max_size` bytes (headers included); a send
//! waits for room.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;

use crate::pipeline::event::Carried;

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
/// Bytes before each record's payload.
pub const HEADER_BYTES: u64 = 12;
/// The longest payload: a length beyond it is damage.
const MAX_RECORD: u64 = 1 << 30;
/// Bytes read from a segment at a time.
const READ_CHUNK: u64 = 1 << 20;
const LEDGER_FILE: &str = "ledger";
const LEDGER_TMP: &str = "ledger.tmp";
/// The position file of earlier versions, read once.
const OLD_ACK_FILE: &str = "ack";
const OLD_ACK_TMP: &str = "ack.tmp";
const SEGMENT_PREFIX: &str = "segment-";
const RECORDS_EXT: &str = ".rec";
const NDJSON_EXT: &str = ".ndjson";

/// A position in the queue: segment number and byte offset in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
struct Pos {
    segment: u64,
    offset: u64,
}

/// How a segment's events are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// Checksummed records (this version).
    Records,
    /// Plain NDJSON lines (earlier versions), read once.
    Ndjson,
}

/// What both sides see, without touching a file.
struct Shared {
    counts: Mutex<Counts>,
    /// Signalled when acknowledged or failed appends free room.
    room: Notify,
    /// Signalled when a record is appended.
    data: Notify,
    /// Cancelled by [`DiskQueue::abort`]: every waiter gives up.
    aborted: CancellationToken,
    /// Records set aside as damaged.
    lost: Counter,
}

#[derive(Default)]
struct Counts {
    /// Bytes not acknowledged, appends under way included.
    bytes: u64,
    /// Records stored and not acknowledged.
    lines: u64,
    closed: bool,
}

impl Shared {
    fn counts(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }
}

type Reply<T> = oneshot::Sender<io::Result<T>>;

/// A record read back from the queue.
#[derive(Debug)]
pub struct Stored {
    /// The line as appended.
    pub line: Vec<u8>,
    /// What it carried when appended by this run of the agent.
    pub carried: Option<Carried>,
    /// Appended by an earlier run of the agent (found at start).
    pub earlier_run: bool,
}

/// A request to the I/O thread.
enum Cmd {
    Append {
        record: Vec<u8>,
        carried: Option<Carried>,
        /// On failure, what the record carried comes back with the error.
        reply: oneshot::Sender<Result<(), (io::Error, Option<Carried>)>>,
    },
    Read {
        max: usize,
        reply: Reply<Vec<Stored>>,
    },
    Ack {
        n: usize,
        reply: Reply<()>,
    },
    Sync {
        reply: Reply<()>,
    },
    /// Blocks the thread until the sender is dropped (tests).
    #[cfg(test)]
    Stall(std_mpsc::Receiver<()>),
}

/// One output's queue on disk. See the module documentation.
pub struct DiskQueue {
    dir: PathBuf,
    max_size: u64,
    shared: Arc<Shared>,
    cmds: std_mpsc::Sender<Cmd>,
    #[cfg(test)]
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for DiskQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskQueue")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl DiskQueue {
    /// Opens (or creates) the queue in `dir`, damaged records counted in a
    /// counter of its own. See [`DiskQueue::open_counted`].
    pub fn open(dir: &Path, max_size: u64) -> io::Result<DiskQueue> {
        Self::open_counted(dir, max_size, Counter::default())
    }

    /// Opens (or creates, mode 0700) the queue in `dir` and starts its I/O
    /// thread; records set aside as damaged are added to `lost`. Records
    /// left by an earlier run after the delivered position are read again
    /// first. Waits for the recovery (reading every segment once). Fails
    /// only when the directory cannot be used (created, listed, a segment
    /// created in it), never because of what the files hold.
    pub fn open_counted(dir: &Path, max_size: u64, lost: Counter) -> io::Result<DiskQueue> {
        let shared = Arc::new(Shared {
            counts: Mutex::new(Counts::default()),
            room: Notify::new(),
            data: Notify::new(),
            aborted: CancellationToken::new(),
            lost,
        });
        let (cmds, rx) = std_mpsc::channel();
        let (ready_tx, ready_rx) = std_mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("leasehold-queue".into())
            .spawn({
                let dir = dir.to_path_buf();
                let shared = Arc::clone(&shared);
                move || match Io::recover(dir, shared) {
                    Ok(mut io) => {
                        let _ = ready_tx.send(Ok(()));
                        io.serve(&rx);
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            })
            .map_err(|e| {
                named(
                    dir,
                    io::Error::new(
                        e.kind(),
                        format!("cannot start the queue's I/O thread: {e}"),
                    ),
                )
            })?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(named(dir, stopped())),
        }
        #[cfg(not(test))]
        drop(thread);
        Ok(DiskQueue {
            dir: dir.to_path_buf(),
            max_size: max_size.max(1),
            shared,
            cmds,
            #[cfg(test)]
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Records queued and not yet acknowledged.
    pub fn depth(&self) -> usize {
        usize::try_from(self.shared.counts().lines).unwrap_or(usize::MAX)
    }

    /// Records set aside as damaged since the queue was opened.
    pub fn records_lost(&self) -> u64 {
        self.shared.lost.get()
    }

    /// Whether [`DiskQueue::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.shared.counts().closed
    }

    /// Refuses later appends and wakes every waiter; reading and
    /// acknowledging go on, so the writer can drain the queue.
    pub fn close(&self) {
        self.shared.counts().closed = true;
        self.shared.room.notify_waiters();
        self.shared.data.notify_waiters();
    }

    /// Gives up on the I/O thread (a shutdown deadline passed): every call
    /// waiting for it returns at once, appends with `BrokenPipe`, reads
    /// with `None`. What the thread does later is kept on disk.
    pub fn abort(&self) {
        self.close();
        self.shared.aborted.cancel();
    }

    /// Appends one line (newline included), waiting while the queue is
    /// full. Returns once the record is written to the file. A call
    /// dropped while waiting for room appended nothing; one dropped while
    /// the thread writes may still append it (sent again: at least once).
    /// After [`DiskQueue::close`] or [`DiskQueue::abort`]: `BrokenPipe`.
    pub async fn append(&self, line: &[u8]) -> io::Result<()> {
        self.append_carrying(line, None).await.map_err(|(e, _)| e)
    }

    /// As [`DiskQueue::append`], with `carried` kept in memory beside the
    /// record until it is read back (a restart loses it). On failure it
    /// comes back with the error, unless the append was abandoned.
    pub async fn append_carrying(
        &self,
        line: &[u8],
        mut carried: Option<Carried>,
    ) -> Result<(), (io::Error, Option<Carried>)> {
        if line.is_empty() || line.len() as u64 > MAX_RECORD {
            return Err((
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "an event of {} bytes cannot be queued (1 byte to 1 GiB)",
                        line.len()
                    ),
                ),
                carried,
            ));
        }
        let framed = HEADER_BYTES + line.len() as u64;
        loop {
            let room = self.shared.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            let sent = {
                let mut c = self.shared.counts();
                if c.closed {
                    return Err((closed(), carried));
                }
                if c.bytes == 0 || c.bytes + framed <= self.max_size {
                    // Sent under the lock: no append reaches the thread
                    // after a reader saw the queue closed.
                    let (reply, rx) = oneshot::channel();
                    let record = line.to_vec();
                    let cmd = Cmd::Append {
                        record,
                        carried: carried.take(),
                        reply,
                    };
                    if let Err(std_mpsc::SendError(cmd)) = self.cmds.send(cmd) {
                        let back = match cmd {
                            Cmd::Append { carried, .. } => carried,
                            _ => None,
                        };
                        return Err((named(&self.dir, stopped()), back));
                    }
                    c.bytes += framed;
                    Some(rx)
                } else {
                    None
                }
            };
            if let Some(rx) = sent {
                return tokio::select! {
                    r = rx => r.unwrap_or_else(|_| Err((named(&self.dir, stopped()), None))),
                    () = self.shared.aborted.cancelled() => Err((closed(), None)),
                };
            }
            tokio::select! {
                () = &mut room => {}
                () = self.shared.aborted.cancelled() => return Err((closed(), carried)),
            }
        }
    }

    /// Up to `max` records after those already handed out, waiting until
    /// there is at least one; `None` once closed and nothing is left to
    /// read, or once aborted.
    pub async fn next_lines(&self, max: usize) -> io::Result<Option<Vec<Vec<u8>>>> {
        let records = self.next_records(max).await?;
        Ok(records.map(|r| r.into_iter().map(|s| s.line).collect()))
    }

    /// As [`DiskQueue::next_lines`], with what each record carried.
    pub async fn next_records(&self, max: usize) -> io::Result<Option<Vec<Stored>>> {
        let max = max.max(1);
        loop {
            let data = self.shared.data.notified();
            tokio::pin!(data);
            data.as_mut().enable();
            let was_closed = self.is_closed();
            let got = match self.request(|reply| Cmd::Read { max, reply }).await {
                Ok(got) => got,
                Err(_) if self.shared.aborted.is_cancelled() => return Ok(None),
                Err(e) => return Err(e),
            };
            if !got.is_empty() {
                return Ok(Some(got));
            }
            if was_closed {
                return Ok(None);
            }
            tokio::select! {
                () = &mut data => {}
                () = self.shared.aborted.cancelled() => return Ok(None),
            }
        }
    }

    /// Acknowledges the `n` oldest records handed out: they are delivered.
    /// Returns once the position is saved (fsynced) and delivered segments
    /// are deleted.
    pub async fn ack(&self, n: usize) -> io::Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.request(|reply| Cmd::Ack { n, reply }).await
    }

    /// fsyncs the segment being written, if anything was written since.
    pub async fn sync(&self) -> io::Result<()> {
        self.request(|reply| Cmd::Sync { reply }).await
    }

    async fn request<T>(&self, make: impl FnOnce(Reply<T>) -> Cmd) -> io::Result<T> {
        let (reply, rx) = oneshot::channel();
        self.cmds
            .send(make(reply))
            .map_err(|_| named(&self.dir, stopped()))?;
        self.wait(rx).await
    }

    async fn wait<T>(&self, rx: oneshot::Receiver<io::Result<T>>) -> io::Result<T> {
        tokio::select! {
            r = rx => r.unwrap_or_else(|_| Err(named(&self.dir, stopped()))),
            () = self.shared.aborted.cancelled() => Err(named(
                &self.dir,
                io::Error::new(io::ErrorKind::TimedOut, "abandoned at shutdown while the disk did not answer"),
            )),
        }
    }

    /// Blocks the I/O thread until the returned sender is dropped.
    #[cfg(test)]
    pub(crate) fn stall(&self) -> std_mpsc::Sender<()> {
        let (tx, rx) = std_mpsc::channel();
        let _ = self.cmds.send(Cmd::Stall(rx));
        tx
    }

    /// Drops the queue and waits for its thread to finish what it was
    /// asked (tests: the next open sees the files as left).
    #[cfg(test)]
    pub(crate) fn close_and_join(self) {
        let thread = self.thread.lock().unwrap().take();
        drop(self);
        if let Some(t) = thread {
            t.join().unwrap();
        }
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

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, QueueClosedError)
}

fn stopped() -> io::Error {
    io::Error::other("the disk queue's I/O thread stopped")
}

/// A record past the read position: handed out (not acknowledged yet),
/// or skipped as damaged. A skipped one waits in line with the others so
/// the ledger moves past it with the next acknowledgement, never before
/// the records handed out ahead of it.
#[derive(Debug, Clone, Copy)]
struct Handed {
    /// Where the record ends.
    end: Pos,
    /// Its bytes, freed when acknowledged (0 once skipped: freed then).
    len: u64,
    /// Skipped as damaged: never sent, so never acknowledged.
    skipped: bool,
}

/// The I/O thread's state: it alone touches the files.
struct Io {
    dir: PathBuf,
    shared: Arc<Shared>,
    /// Segments present (not deleted, not set aside), and their format.
    segments: BTreeMap<u64, Format>,
    /// Where a segment's readable part ends when not at its file's end
    /// (a torn tail that could not be cut, a write that failed).
    limits: HashMap<u64, u64>,
    /// Records of each segment counted in the depth and not handed out
    /// (what setting it aside loses).
    unread: HashMap<u64, u64>,
    /// The segment appended to (its file is `None` until (re)created).
    writing: u64,
    file: Option<File>,
    size: u64,
    /// Written and not fsynced since.
    dirty_since: Option<Instant>,
    sync_warned: bool,
    read: Pos,
    reader: Option<(u64, File)>,
    /// The records handed out and not acknowledged, in order, with the
    /// damaged ones skipped between them (see [`Handed`]).
    handed: VecDeque<Handed>,
    /// Where records appended by this run that carry something start, in
    /// order, with what they carry; taken when the record is read.
    carried: VecDeque<(Pos, Carried)>,
    /// The first segment this run appends to: records before it were
    /// left by an earlier run.
    run_start: u64,
    /// An `ack` file of an earlier version to delete with the first ledger.
    old_ack: bool,
}

impl Io {
    /// Opens the directory and works out what is left to send; damaged
    /// contents are cut or set aside, never an error.
    fn recover(dir: PathBuf, shared: Arc<Shared>) -> io::Result<Io> {
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

    /// Answers requests until every [`DiskQueue`] handle is gone, fsyncing
    /// written data within [`SYNC_EVERY`].
    fn serve(&mut self, rx: &std_mpsc::Receiver<Cmd>) {
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

    fn handle(&mut self, cmd: Cmd) {
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
    fn open_writing(&mut self) -> io::Result<()> {
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
    fn roll(&mut self) -> io::Result<()> {
        if self.file.is_some() {
            let _ = self.sync();
            self.file = None;
            self.writing += 1;
        }
        self.open_writing()
    }

    /// Appends one record; returns where it starts.
    fn append(&mut self, payload: &[u8]) -> io::Result<Pos> {
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

    fn sync(&mut self) -> io::Result<()> {
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
    fn end_of(&mut self, seg: u64) -> io::Result<u64> {
        if seg == self.writing && self.file.is_some() {
            return Ok(self.size);
        }
        let file = self.reader_for(seg)?;
        let len = file.metadata()?.len();
        Ok(self.limits.get(&seg).map_or(len, |&l| l.min(len)))
    }

    fn reader_for(&mut self, seg: u64) -> io::Result<&File> {
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

    fn read_at(&mut self, seg: u64, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        let file = self.reader_for(seg)?;
        let mut buf = vec![0; usize::try_from(len).unwrap_or(usize::MAX)];
        file.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    }

    /// Up to `max` records after the read position; damaged segments on
    /// the way are set aside.
    fn read_batch(&mut self, max: usize) -> io::Result<Vec<Stored>> {
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
    fn retry_later(&mut self, seg: u64, out: Vec<Stored>, e: io::Error) -> io::Result<Vec<Stored>> {
        self.reader = None;
        if out.is_empty() {
            let format = self.segments.get(&seg).copied().unwrap_or(Format::Records);
            return Err(named(&segment_path(&self.dir, seg, format), e));
        }
        Ok(out)
    }

    fn hand(&mut self, len: u64, payload: Vec<u8>, out: &mut Vec<Stored>) {
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

    fn take_records(&mut self, seg: u64, buf: &[u8], end: u64, max: usize, out: &mut Vec<Stored>) {
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

    fn take_lines(&mut self, seg: u64, buf: &[u8], end: u64, max: usize, out: &mut Vec<Stored>) {
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
    fn skip(&mut self, seg: u64, len: u64) {
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
    fn next_segment(&mut self, seg: u64) {
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
    fn set_aside(&mut self, seg: u64, offset: u64, why: &str) {
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

    fn ack(&mut self, n: usize) -> io::Result<()> {
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

/// Whether a read error says nothing about the file (retried, not set
/// aside).
fn transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock | io::ErrorKind::OutOfMemory
    ) || matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM)
    )
}

/// What [`scan`] found in a segment read at start.
#[derive(Debug, Default, PartialEq, Eq)]
struct Scanned {
    /// Records (whole, or counted as lost past damage) from the offset on.
    records: u64,
    /// Their bytes.
    bytes: u64,
    /// Where an unfinished last record starts (a crash while writing).
    torn: Option<u64>,
}

/// Counts the records of a segment from `from` on. Damage is counted in
/// (the reader sets it aside when it gets there); an unfinished tail is
/// reported to be cut.
fn scan(data: &[u8], format: Format, from: u64) -> Scanned {
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
            let mut p = 0;
            // Each step moves past a record; bounded by the data length.
            while p < data.len() {
                match frame_at(data, p) {
                    // A damaged record counts until the reader skips it.
                    Frame::Whole { next, .. } | Frame::Damaged { next } => {
                        if p >= from {
                            out.records += 1;
                            out.bytes += (next - p) as u64;
                        }
                        p = next;
                    }
                    Frame::Incomplete { .. } => {
                        out.torn = Some(p as u64);
                        break;
                    }
                    Frame::Corrupt(_) => {
                        let start = p.max(from);
                        out.records += count_framed(&data[start..]);
                        out.bytes += (data.len() - start) as u64;
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
enum Frame {
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

fn frame_at(data: &[u8], p: usize) -> Frame {
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
fn len_check(len: u32) -> u32 {
    crc32fast::hash(&len.to_le_bytes())
}

/// Records framed in `data`, which starts at a damaged one: it counts,
/// and the ones after it as far as their lengths can be trusted (a lower
/// bound when a length is damaged).
fn count_framed(data: &[u8]) -> u64 {
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

fn count_lines(data: &[u8]) -> u64 {
    memchr::memchr_iter(b'\n', data).count() as u64
}

fn segment_path(dir: &Path, seg: u64, format: Format) -> PathBuf {
    let ext = match format {
        Format::Records => RECORDS_EXT,
        Format::Ndjson => NDJSON_EXT,
    };
    dir.join(format!("{SEGMENT_PREFIX}{seg:016}{ext}"))
}

/// The segments in `dir`, in order, with their formats.
fn list_segments(dir: &Path) -> io::Result<BTreeMap<u64, Format>> {
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

/// The delivered position, from the ledger or an earlier version's `ack`
/// file; `None` (with a WARN naming the file) when it is missing or
/// damaged. Also whether an `ack` file is there to delete.
fn read_position(dir: &Path) -> (Option<Pos>, bool) {
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

fn ledger_body(pos: Pos) -> String {
    format!("v1 {} {}", pos.segment, pos.offset)
}

fn parse_ledger(text: &[u8]) -> Option<Pos> {
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
fn write_ledger(dir: &Path, pos: Pos) -> io::Result<()> {
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
fn sync_dir(dir: &Path) -> io::Result<()> {
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

fn remove_logged(path: &Path) {
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot delete a delivered disk queue file; it is deleted at the next start")
        }
    }
}

fn named(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn line(n: usize) -> Vec<u8> {
        format!("{{\"n\":{n}}}\n").into_bytes()
    }

    fn seg(dir: &Path, n: u64) -> PathBuf {
        segment_path(dir, n, Format::Records)
    }

    /// Everything readable now, bounded.
    async fn drain(q: &DiskQueue, want: usize) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        for _ in 0..=want {
            if got.len() >= want {
                break;
            }
            let more = tokio::time::timeout(Duration::from_secs(5), q.next_lines(1000))
                .await
                .expect("no hang")
                .unwrap()
                .unwrap();
            got.extend(more);
        }
        got
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
        q.ack(4).await.unwrap();
        let got = q.next_lines(100).await.unwrap().unwrap();
        assert_eq!(got, (4..10).map(line).collect::<Vec<_>>());
        assert_eq!(q.depth(), 6, "handed out but not acknowledged");
        q.close_and_join();

        // A restart replays what was not acknowledged, then goes on.
        let q = DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap();
        assert_eq!(q.depth(), 6);
        q.append(&line(10)).await.unwrap();
        let got = q.next_lines(100).await.unwrap().unwrap();
        assert_eq!(got, (4..11).map(line).collect::<Vec<_>>());
        q.ack(7).await.unwrap();
        assert_eq!(q.depth(), 0);
        q.close_and_join();
        let q = DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap();
        assert_eq!(q.depth(), 0);
        q.close();
        assert!(q.next_lines(1).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn what_a_record_carried_comes_back_with_it_and_a_restart_marks_the_rest_earlier() {
        use crate::pipeline::ack::{Ack, tests::Recorder};
        let dir = tempfile::tempdir().unwrap();
        let acks = Arc::new(Recorder::default());
        let carrying = |seq: u64| Carried {
            ack: Ack::new(acks.clone(), seq),
            fence: None,
            meta: None,
        };
        let q = DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap();
        q.append(&line(0)).await.unwrap();
        q.append_carrying(&line(1), Some(carrying(1)))
            .await
            .unwrap();
        q.append(&line(2)).await.unwrap();
        let got = q.next_records(100).await.unwrap().unwrap();
        let carried: Vec<bool> = got.iter().map(|r| r.carried.is_some()).collect();
        assert_eq!(
            carried,
            [false, true, false],
            "only line 1 carried something"
        );
        assert!(
            got.iter().all(|r| !r.earlier_run),
            "all appended by this run"
        );
        // Settling what came back reaches the producer.
        let [_, one, _] = <[Stored; 3]>::try_from(got).unwrap();
        one.carried.unwrap().ack.settle();
        assert_eq!(*acks.0.lock().unwrap(), [1]);
        // Line 3 is stored with an acknowledgement, then the agent stops
        // before it is read: a restart finds it, carrying nothing (the
        // acknowledgement is gone with the run: never settled).
        q.append_carrying(&line(3), Some(carrying(3)))
            .await
            .unwrap();
        q.close_and_join();
        let q = DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap();
        q.append_carrying(&line(4), Some(carrying(4)))
            .await
            .unwrap();
        let got = q.next_records(100).await.unwrap().unwrap();
        let seen: Vec<(Vec<u8>, bool, bool)> = got
            .into_iter()
            .map(|r| (r.line, r.earlier_run, r.carried.is_some()))
            .collect();
        assert_eq!(
            seen,
            [
                (line(0), true, false),
                (line(1), true, false),
                (line(2), true, false),
                (line(3), true, false),
                (line(4), false, true),
            ],
            "nothing acknowledged, so the earlier run's records come again first"
        );
        assert_eq!(*acks.0.lock().unwrap(), [1], "3 was never settled");
    }

    #[tokio::test]
    async fn what_a_set_aside_record_carried_is_dropped_unsettled() {
        use crate::pipeline::ack::{Ack, tests::Recorder};
        let dir = tempfile::tempdir().unwrap();
        let acks = Arc::new(Recorder::default());
        let q = DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap();
        let big = vec![b'x'; 20 * 1024];
        // Four records of 20 KiB fill segment 1 past its 64 KiB (tests),
        // the fifth starts segment 2.
        for seq in 0..5u64 {
            let mut rec = big.clone();
            rec.extend_from_slice(format!("{seq}\n").as_bytes());
            let carried = Carried {
                ack: Ack::new(acks.clone(), seq),
                fence: None,
                meta: None,
            };
            q.append_carrying(&rec, Some(carried)).await.unwrap();
        }
        // Damage the length of segment 1's second record: the rest of the
        // segment cannot be framed.
        let first = seg(dir.path(), 1);
        let f = OpenOptions::new().write(true).open(&first).unwrap();
        let second = HEADER_BYTES + big.len() as u64 + 2;
        f.write_all_at(b"!!!!", second).unwrap();
        let got = q.next_records(100).await.unwrap().unwrap();
        let seqs: Vec<u64> = got
            .into_iter()
            .map(|r| {
                let a = r.carried.expect("carried").ack;
                let n = String::from_utf8_lossy(&r.line[big.len()..])
                    .trim()
                    .parse()
                    .unwrap();
                a.settle();
                n
            })
            .collect();
        assert_eq!(seqs.first(), Some(&0));
        assert_eq!(
            seqs.last(),
            Some(&4),
            "the next segment flows, carrying its own"
        );
        assert!(!seqs.contains(&1), "the damaged record is not sent");
        assert_eq!(*acks.0.lock().unwrap(), seqs, "each came back with its own");
    }

    /// A record whose payload fails its checksum, its header sound, is
    /// skipped alone: the records after it in its segment are sent, it is
    /// counted once, and the ledger moves past it so a restart neither
    /// sends nor counts it again.
    #[tokio::test]
    async fn a_record_with_a_damaged_payload_is_skipped_alone() {
        let dir = tempfile::tempdir().unwrap();
        let q = DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap();
        let lines = fill(&q, 0..1000, 100).await;
        q.close_and_join();
        let per = (SEGMENT_BYTES).div_ceil(100 + HEADER_BYTES) as usize;
        assert!(per > 501, "record 500 is in segment 1");
        // One flipped byte inside the payload of record 500.
        let path = seg(dir.path(), 1);
        let mut data = fs::read(&path).unwrap();
        data[500 * (100 + HEADER_BYTES as usize) + HEADER_BYTES as usize + 40] ^= 0x01;
        fs::write(&path, &data).unwrap();

        let q = DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap();
        assert_eq!(q.depth(), 1000, "counted until the reader meets it");
        let got = drain(&q, 999).await;
        let mut want = lines;
        want.remove(500);
        assert_eq!(got, want, "every other record, in order");
        assert_eq!(q.records_lost(), 1);
        assert_eq!(q.depth(), 999, "handed out, not acknowledged");
        assert!(path.exists(), "the segment is not set aside");
        q.ack(999).await.unwrap();
        assert_eq!(q.depth(), 0);
        q.close_and_join();
        let q = DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap();
        assert_eq!(q.depth(), 0);
        assert_eq!(q.records_lost(), 0, "not met again");
    }

    /// A damaged record met while running with nothing handed out ahead of
    /// it moves the ledger on by itself; what it carried is dropped
    /// unsettled.
    #[tokio::test]
    async fn a_damaged_record_with_nothing_ahead_moves_the_ledger_past_it() {
        use crate::pipeline::ack::{Ack, tests::Recorder};
        let dir = tempfile::tempdir().unwrap();
        let acks = Arc::new(Recorder::default());
        let q = DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap();
        fill(&q, 0..3, 100).await;
        assert_eq!(q.next_lines(10).await.unwrap().unwrap().len(), 3);
        q.ack(3).await.unwrap();
        let carried = Carried {
            ack: Ack::new(acks.clone(), 3),
            fence: None,
            meta: None,
        };
        q.append_carrying(&line(3), Some(carried)).await.unwrap();
        let path = seg(dir.path(), 1);
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(b"!", 3 * (100 + HEADER_BYTES) + HEADER_BYTES + 2)
            .unwrap();
        // One read that does not wait for data: the record is skipped.
        let got = q
            .request(|reply| Cmd::Read { max: 10, reply })
            .await
            .unwrap();
        assert!(got.is_empty());
        assert_eq!(q.records_lost(), 1);
        assert_eq!(q.depth(), 0);
        q.append(&line(4)).await.unwrap();
        assert_eq!(q.next_lines(10).await.unwrap().unwrap(), [line(4)]);
        q.close_and_join();
        assert!(acks.0.lock().unwrap().is_empty(), "never settled");
        let q = DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap();
        assert_eq!(q.records_lost(), 0, "the ledger is past it");
        assert_eq!(q.next_lines(10).await.unwrap().unwrap(), [line(4)]);
    }

    #[tokio::test]
    async fn a_record_torn_by_a_crash_is_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let q = DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap();
        q.append(&line(1)).await.unwrap();
        q.append(&line(2)).await.unwrap();
        q.close_and_join();
        let path = seg(dir.path(), 1);
        let len = fs::metadata(&path).unwrap().len();
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len - 3)
            .unwrap();
        let q = DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap();
        assert_eq!(q.depth(), 1);
        q.append(&line(3)).await.unwrap();
        let got = q.next_lines(10).await.unwrap().unwrap();
        assert_eq!(got, [line(1), line(3)]);
        assert_eq!(q.records_lost(), 0, "a torn tail was never whole");
    }

    #[tokio::test]
    async fn a_full_queue_makes_appends_wait_until_an_ack() {
        let dir = tempfile::tempdir().unwrap();
        let one = HEADER_BYTES + line(0).len() as u64;
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
        q.ack(1).await.unwrap();
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
        for _ in 0..5 {
            let got = q.next_lines(10).await.unwrap().unwrap();
            assert!(got.iter().all(|l| *l == big));
            n += got.len();
            q.ack(got.len()).await.unwrap();
            if n == 5 {
                break;
            }
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
    async fn files_are_private_to_the_agent() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("q");
        let q = DiskQueue::open(&dir, DEFAULT_MAX_SIZE).unwrap();
        q.append(&line(0)).await.unwrap();
        q.next_lines(1).await.unwrap().unwrap();
        q.ack(1).await.unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir) & 0o077, 0, "directory {:o}", mode(&dir));
        assert_eq!(mode(&dir.join(LEDGER_FILE)), 0o600);
        assert_eq!(mode(&seg(&dir, 1)), 0o600);
    }

    /// Appends records `range` of `size` bytes each.
    async fn fill(q: &DiskQueue, range: std::ops::Range<usize>, size: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for n in range {
            let mut l = format!("{{\"n\":{n},\"pad\":\"").into_bytes();
            l.resize(size - 3, b'x');
            l.extend_from_slice(b"\"}\n");
            q.append(&l).await.unwrap();
            out.push(l);
        }
        out
    }

    /// Damage to the framing (a record's length) leaves no way to find the
    /// next record: the rest of the segment is set aside.
    #[tokio::test]
    async fn a_damaged_length_sets_its_segment_aside_and_the_next_segment_flows() {
        let dir = tempfile::tempdir().unwrap();
        let q = DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap();
        // 1000-byte lines: 64 records fill segment 1, then segment 2.
        let lines = fill(&q, 0..100, 1000).await;
        q.close_and_join();
        let per = (SEGMENT_BYTES).div_ceil(1000 + HEADER_BYTES) as usize;
        // Damage the length field of record 10 of segment 1.
        let path = seg(dir.path(), 1);
        let mut data = fs::read(&path).unwrap();
        let at = 10 * (1000 + HEADER_BYTES as usize);
        data[at + 1] ^= 0xff;
        fs::write(&path, &data).unwrap();

        let q = DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap();
        let got = drain(&q, 100 - (per - 10)).await;
        assert_eq!(got[..10], lines[..10], "the records before the damage");
        assert_eq!(got[10..], lines[per..], "the next segment");
        // Past a damaged length the records cannot be counted: at least
        // the damaged one is.
        assert_eq!(q.records_lost(), 1);
        assert!(!path.exists());
        assert!(
            path.with_file_name("segment-0000000000000001.rec.bad")
                .exists()
        );
        assert_eq!(q.depth(), got.len(), "the lost ones are not counted");
        q.ack(got.len()).await.unwrap();
        assert_eq!(q.depth(), 0);
    }

    #[tokio::test]
    async fn damage_found_while_running_is_set_aside_too() {
        let dir = tempfile::tempdir().unwrap();
        let q = DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap();
        let lines = fill(&q, 0..100, 1000).await;
        let per = (SEGMENT_BYTES).div_ceil(1000 + HEADER_BYTES) as usize;
        let path = seg(dir.path(), 1);
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        // The length field of record 3: the rest of the segment is lost.
        file.write_all_at(&[0xee], 3 * (1000 + HEADER_BYTES))
            .unwrap();
        let got = drain(&q, 100 - (per - 3)).await;
        assert_eq!(got[..3], lines[..3]);
        assert_eq!(got[3..], lines[per..]);
        assert_eq!(q.records_lost(), (per - 3) as u64, "counted as appended");
        assert_eq!(q.depth(), got.len());
        q.append(&line(7)).await.unwrap();
        assert_eq!(q.next_lines(10).await.unwrap().unwrap(), [line(7)]);
    }

    #[tokio::test]
    async fn an_unreadable_segment_is_set_aside_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let q = DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap();
        fill(&q, 0..100, 1000).await;
        q.close_and_join();
        // A directory where a segment should be: it cannot be read.
        let path = seg(dir.path(), 1);
        fs::remove_file(&path).unwrap();
        fs::create_dir(&path).unwrap();
        let q = DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap();
        let per = (SEGMENT_BYTES).div_ceil(1000 + HEADER_BYTES) as usize;
        let got = drain(&q, 100 - per).await;
        assert_eq!(got.len(), 100 - per);
        assert_eq!(q.records_lost(), 1, "unknown: counted as one");
    }

    #[tokio::test]
    async fn an_empty_or_damaged_ledger_does_not_prevent_opening() {
        for damage in [&b""[..], b"v1 1 4", b"v1 1 40 00000000\n", b"\xff\xfe"] {
            let dir = tempfile::tempdir().unwrap();
            let q = DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap();
            for n in 0..3 {
                q.append(&line(n)).await.unwrap();
            }
            q.next_lines(2).await.unwrap().unwrap();
            q.ack(2).await.unwrap();
            q.close_and_join();
            fs::write(dir.path().join(LEDGER_FILE), damage).unwrap();
            fs::write(dir.path().join(LEDGER_TMP), b"v1 9 ").unwrap();
            let q = DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap();
            // From the oldest segment: delivered ones come again.
            assert_eq!(q.depth(), 3);
            assert_eq!(drain(&q, 3).await, [line(0), line(1), line(2)]);
            assert!(!dir.path().join(LEDGER_TMP).exists());
        }
    }

    #[tokio::test]
    async fn a_queue_of_an_earlier_version_is_read_as_ndjson_lines() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("segment-0000000000000003.ndjson");
        let mut text = Vec::new();
        for n in 0..4 {
            text.extend(line(n));
        }
        text.extend_from_slice(b"{\"torn");
        fs::write(&old, &text).unwrap();
        let first = line(0).len();
        fs::write(dir.path().join(OLD_ACK_FILE), format!("3 {first}\n")).unwrap();
        let q = DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap();
        assert_eq!(q.depth(), 3);
        q.append(&line(9)).await.unwrap();
        let got = drain(&q, 4).await;
        assert_eq!(got, [line(1), line(2), line(3), line(9)]);
        q.ack(4).await.unwrap();
        assert!(!old.exists(), "delivered");
        assert!(
            !dir.path().join(OLD_ACK_FILE).exists(),
            "replaced by the ledger"
        );
        assert!(dir.path().join(LEDGER_FILE).exists());
    }

    #[tokio::test]
    async fn the_async_side_never_waits_for_a_stalled_disk() {
        let dir = tempfile::tempdir().unwrap();
        let q = Arc::new(DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap());
        q.append(&line(0)).await.unwrap();
        let stall = q.stall();
        let started = std::time::Instant::now();
        assert_eq!(q.depth(), 1);
        let r = tokio::time::timeout(Duration::from_millis(100), q.append(&line(1))).await;
        assert!(r.is_err(), "waits for the thread, without blocking");
        let reader = tokio::spawn({
            let q = Arc::clone(&q);
            async move { q.next_lines(10).await }
        });
        let acker = tokio::spawn({
            let q = Arc::clone(&q);
            async move { q.ack(1).await }
        });
        q.abort();
        assert!(reader.await.unwrap().unwrap().is_none());
        assert!(acker.await.unwrap().is_err());
        let e = q.append(&line(2)).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
        assert!(started.elapsed() < Duration::from_secs(2));
        drop(stall);
    }

    /// A crash's damage to the files, applied after the queue is dropped.
    #[derive(Debug, Clone)]
    enum Damage {
        None,
        /// The newest segment cut at this fraction (of 65536) of its size.
        CutSegment(u16),
        EmptyLedger,
        /// The ledger cut at this fraction of its size.
        CutLedger(u16),
        TornLedgerTmp,
    }

    #[derive(Debug, Clone)]
    enum Op {
        Append(usize),
        Read(usize),
        Ack(usize),
        Crash(Damage),
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        let damage = prop_oneof![
            Just(Damage::None),
            any::<u16>().prop_map(Damage::CutSegment),
            Just(Damage::EmptyLedger),
            any::<u16>().prop_map(Damage::CutLedger),
            Just(Damage::TornLedgerTmp),
        ];
        prop_oneof![
            4 => (1usize..3000).prop_map(Op::Append),
            2 => (1usize..6).prop_map(Op::Read),
            2 => (0usize..6).prop_map(Op::Ack),
            1 => damage.prop_map(Op::Crash),
        ]
    }

    fn record(id: u64, size: usize) -> Vec<u8> {
        let mut l = format!("{{\"id\":{id},\"pad\":\"").into_bytes();
        l.resize(l.len() + size, b'p');
        l.extend_from_slice(b"\"}\n");
        l
    }

    fn id_of(line: &[u8]) -> u64 {
        let text = std::str::from_utf8(line).unwrap();
        let rest = text.strip_prefix("{\"id\":").unwrap();
        rest[..rest.find(',').unwrap()].parse().unwrap()
    }

    fn apply(dir: &Path, damage: &Damage) -> (bool, u64) {
        let cut = |path: &Path, frac: u16| -> u64 {
            let Ok(len) = fs::metadata(path).map(|m| m.len()) else {
                return 0;
            };
            let at = len * u64::from(frac) / 65536;
            OpenOptions::new()
                .write(true)
                .open(path)
                .unwrap()
                .set_len(at)
                .unwrap();
            len - at
        };
        let ledger = dir.join(LEDGER_FILE);
        match damage {
            Damage::None => (false, 0),
            Damage::CutSegment(frac) => {
                let newest = list_segments(dir)
                    .unwrap()
                    .into_keys()
                    .rev()
                    .map(|n| seg(dir, n))
                    .find(|p| fs::metadata(p).is_ok_and(|m| m.len() > 0));
                (false, newest.map_or(0, |p| cut(&p, *frac)))
            }
            Damage::EmptyLedger => {
                if ledger.exists() {
                    fs::write(&ledger, b"").unwrap();
                }
                (true, 0)
            }
            Damage::CutLedger(frac) => {
                cut(&ledger, *frac);
                (true, 0)
            }
            Damage::TornLedgerTmp => {
                fs::write(dir.join(LEDGER_TMP), b"v1 12 3").unwrap();
                (false, 0)
            }
        }
    }

    /// Runs `ops` against a model: `stored` holds the records appended
    /// (Ok) and not acknowledged, oldest first, `handed` how many of them
    /// the reader has; `acked` the records acknowledged as delivered.
    async fn check(ops: Vec<Op>) {
        let dir = tempfile::tempdir().unwrap();
        let mut q = DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap();
        let mut sizes = HashMap::new();
        let mut stored: VecDeque<u64> = VecDeque::new();
        let mut handed = 0usize;
        let mut acked = std::collections::HashSet::new();
        let mut next_id = 0u64;
        let limit = Duration::from_secs(5);
        for op in ops {
            match op {
                Op::Append(size) => {
                    let l = record(next_id, size);
                    tokio::time::timeout(limit, q.append(&l))
                        .await
                        .unwrap()
                        .unwrap();
                    sizes.insert(next_id, l.len() as u64 + HEADER_BYTES);
                    stored.push_back(next_id);
                    next_id += 1;
                }
                Op::Read(max) => {
                    if handed == stored.len() {
                        continue;
                    }
                    let got = tokio::time::timeout(limit, q.next_lines(max))
                        .await
                        .unwrap()
                        .unwrap()
                        .unwrap();
                    let ids: Vec<u64> = got.iter().map(|l| id_of(l)).collect();
                    let want: Vec<u64> = stored.iter().skip(handed).take(max).copied().collect();
                    assert_eq!(ids, want);
                    handed += ids.len();
                }
                Op::Ack(n) => {
                    let n = n.min(handed);
                    tokio::time::timeout(limit, q.ack(n))
                        .await
                        .unwrap()
                        .unwrap();
                    for _ in 0..n {
                        acked.extend(stored.pop_front());
                    }
                    handed -= n;
                }
                Op::Crash(damage) => {
                    q.close_and_join();
                    let (ledger_damaged, cut) = apply(dir.path(), &damage);
                    q = DiskQueue::open(dir.path(), DEFAULT_MAX_SIZE).unwrap();
                    let depth = q.depth();
                    let got: Vec<u64> = drain(&q, depth).await.iter().map(|l| id_of(l)).collect();
                    assert_eq!(got.len(), depth, "depth counts what is sent");
                    let again: Vec<u64> =
                        got.iter().copied().filter(|i| acked.contains(i)).collect();
                    assert!(
                        again.is_empty() || ledger_damaged,
                        "delivered {again:?} again with an intact ledger"
                    );
                    let fresh: Vec<u64> =
                        got.iter().copied().filter(|i| !acked.contains(i)).collect();
                    let expected: Vec<u64> = stored.iter().copied().collect();
                    assert_eq!(fresh[..], expected[..fresh.len()], "in order, none skipped");
                    if fresh.len() < expected.len() {
                        // Only a cut can lose records, all in the cut bytes.
                        let after: u64 = expected[fresh.len() + 1..].iter().map(|i| sizes[i]).sum();
                        assert!(
                            cut > after,
                            "lost {:?}, cut {cut} bytes",
                            &expected[fresh.len()..]
                        );
                    }
                    assert_eq!(q.records_lost(), 0);
                    tokio::time::timeout(limit, q.ack(got.len()))
                        .await
                        .unwrap()
                        .unwrap();
                    acked.extend(got);
                    stored.clear();
                    handed = 0;
                    assert_eq!(q.depth(), 0);
                }
            }
        }
        q.close_and_join();
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 48,
            failure_persistence: None,
            ..proptest::prelude::ProptestConfig::default()
        })]

        #[test]
        fn whatever_a_crash_does_stored_records_come_back(ops in proptest::collection::vec(op(), 1..60)) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(check(ops));
        }
    }
}
