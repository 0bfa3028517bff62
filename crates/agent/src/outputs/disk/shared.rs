//! What every part of the disk queue shares: its constants, positions,
//! the counts both sides see, the requests to the I/O thread, and small
//! I/O helpers.

use std::fs;
use std::io;
use std::path::Path;
#[cfg(test)]
use std::sync::mpsc as std_mpsc;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;

use crate::pipeline::event::Carried;

/// A segment is closed and a new one started past this size.
pub(super) const SEGMENT_BYTES: u64 = if cfg!(test) {
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
pub(super) const MAX_RECORD: u64 = 1 << 30;
/// Bytes read from a segment at a time.
pub(super) const READ_CHUNK: u64 = 1 << 20;
pub(super) const LEDGER_FILE: &str = "ledger";
pub(super) const LEDGER_TMP: &str = "ledger.tmp";
/// The position file of earlier versions, read once.
pub(super) const OLD_ACK_FILE: &str = "ack";
pub(super) const OLD_ACK_TMP: &str = "ack.tmp";
pub(super) const SEGMENT_PREFIX: &str = "segment-";
pub(super) const RECORDS_EXT: &str = ".rec";
pub(super) const NDJSON_EXT: &str = ".ndjson";

/// A position in the queue: segment number and byte offset in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(super) struct Pos {
    pub(super) segment: u64,
    pub(super) offset: u64,
}

/// How a segment's events are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Format {
    /// Checksummed records (this version).
    Records,
    /// Plain NDJSON lines (earlier versions), read once.
    Ndjson,
}

/// What both sides see, without touching a file.
pub(super) struct Shared {
    pub(super) counts: Mutex<Counts>,
    /// Signalled when acknowledged or failed appends free room.
    pub(super) room: Notify,
    /// Signalled when a record is appended.
    pub(super) data: Notify,
    /// Cancelled by [`DiskQueue::abort`]: every waiter gives up.
    pub(super) aborted: CancellationToken,
    /// Records set aside as damaged.
    pub(super) lost: Counter,
}

#[derive(Default)]
pub(super) struct Counts {
    /// Bytes not acknowledged, appends under way included.
    pub(super) bytes: u64,
    /// Records stored and not acknowledged.
    pub(super) lines: u64,
    pub(super) closed: bool,
}

impl Shared {
    pub(super) fn counts(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub(super) type Reply<T> = oneshot::Sender<io::Result<T>>;

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
pub(super) enum Cmd {
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

/// The error inside [`DiskQueue::append`]'s `BrokenPipe` once closed.
#[derive(Debug)]
pub struct QueueClosedError;

impl std::fmt::Display for QueueClosedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the disk queue is closed")
    }
}

impl std::error::Error for QueueClosedError {}

pub(super) fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, QueueClosedError)
}

pub(super) fn stopped() -> io::Error {
    io::Error::other("the disk queue's I/O thread stopped")
}

/// Whether a read error says nothing about the file (retried, not set
/// aside).
pub(super) fn transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock | io::ErrorKind::OutOfMemory
    ) || matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM)
    )
}

pub(super) fn remove_logged(path: &Path) {
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot delete a delivered disk queue file; it is deleted at the next start")
        }
    }
}

pub(super) fn named(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}
