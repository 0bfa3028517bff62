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

mod format;
mod ledger;
mod recovery;
mod shared;
#[cfg(test)]
mod tests;
mod thread;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::counter::Counter;
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;

use crate::pipeline::event::Carried;

use shared::*;
pub use shared::{DEFAULT_MAX_SIZE, HEADER_BYTES, QueueClosedError, SYNC_EVERY, Stored};
use thread::Io;

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
