//! A writer thread per output file descriptor, fed by a channel whose
//! sender never blocks.
//!
//! elect's stdout and stderr are often pipes read by someone else, and a
//! reader that stops reading fills the pipe: from then on every write
//! blocks. Only the pump's own thread ever writes to the descriptor, so a
//! stalled reader delays that thread and nothing else: not the election,
//! not a step-down, not the command's stop.
//!
//! The pump writes with write(2) on the raw descriptor, bypassing std's
//! stdout buffer and lock, so nothing at process exit can block on them.

use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

enum Msg {
    Data(Vec<u8>),
    /// Answered once everything sent before it has been written.
    Flush(mpsc::Sender<()>),
}

enum Tx {
    Unbounded(mpsc::Sender<Msg>),
    Bounded(mpsc::SyncSender<Msg>),
}

/// The sending side of a writer thread.
pub struct Pump {
    tx: Tx,
    dropped: Arc<AtomicU64>,
}

impl Pump {
    /// A pump that keeps everything sent (memory grows while the reader
    /// stalls; for output that is small and rare, like state changes).
    pub fn unbounded(fd: RawFd, name: &str) -> std::io::Result<Pump> {
        let (tx, rx) = mpsc::channel();
        Pump::start(fd, name, Tx::Unbounded(tx), rx)
    }

    /// A pump that holds at most `capacity` messages and drops what is
    /// sent while it is full, counting the drops and writing how many were
    /// lost once the reader catches up (for logs: losing log lines is
    /// better than delaying anything).
    pub fn lossy(fd: RawFd, name: &str, capacity: usize) -> std::io::Result<Pump> {
        let (tx, rx) = mpsc::sync_channel(capacity);
        Pump::start(fd, name, Tx::Bounded(tx), rx)
    }

    fn start(fd: RawFd, name: &str, tx: Tx, rx: mpsc::Receiver<Msg>) -> std::io::Result<Pump> {
        let dropped = Arc::new(AtomicU64::new(0));
        let counter = dropped.clone();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || drain(fd, &rx, &counter))?;
        Ok(Pump { tx, dropped })
    }

    /// Queues `data` without blocking; false if it was dropped.
    pub fn send(&self, data: Vec<u8>) -> bool {
        let sent = match &self.tx {
            Tx::Unbounded(tx) => tx.send(Msg::Data(data)).is_ok(),
            Tx::Bounded(tx) => tx.try_send(Msg::Data(data)).is_ok(),
        };
        if !sent {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        sent
    }

    /// Waits until everything queued so far is written, or `deadline`
    /// passes (a reader that never reads must not hang the exit); true if
    /// written.
    pub fn flush(&self, deadline: Instant) -> bool {
        let (ack_tx, ack_rx) = mpsc::channel();
        let mut msg = Msg::Flush(ack_tx);
        loop {
            let full = match &self.tx {
                Tx::Unbounded(tx) => return tx.send(msg).is_ok() && wait_ack(&ack_rx, deadline),
                Tx::Bounded(tx) => match tx.try_send(msg) {
                    Ok(()) => return wait_ack(&ack_rx, deadline),
                    Err(mpsc::TrySendError::Disconnected(_)) => return false,
                    Err(mpsc::TrySendError::Full(m)) => m,
                },
            };
            if Instant::now() >= deadline {
                return false;
            }
            msg = full;
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn wait_ack(ack: &mpsc::Receiver<()>, deadline: Instant) -> bool {
    ack.recv_timeout(deadline.saturating_duration_since(Instant::now()))
        .is_ok()
}

fn drain(fd: RawFd, rx: &mpsc::Receiver<Msg>, dropped: &AtomicU64) {
    let mut reported = 0;
    while let Ok(msg) = rx.recv() {
        match msg {
            Msg::Data(data) => write_all(fd, &data),
            Msg::Flush(ack) => {
                let _ = ack.send(());
                continue;
            }
        }
        let lost = dropped.load(Ordering::Relaxed);
        if lost > reported {
            let note = format!(
                "leasehold: {} log lines dropped while this output was not read\n",
                lost - reported
            );
            write_all(fd, note.as_bytes());
            reported = lost;
        }
    }
}

/// Writes all of `data`, retrying on EINTR; gives up on any other error (a
/// closed reader: the output is lost, elect goes on).
fn write_all(fd: RawFd, mut data: &[u8]) {
    while !data.is_empty() {
        // SAFETY: `data` is valid for reads of its length.
        let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
        if n > 0 {
            data = &data[n as usize..];
        } else if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        } else {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pipe() -> (RawFd, RawFd) {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        (fds[0], fds[1])
    }

    fn read_some(fd: RawFd) -> String {
        let mut buf = vec![0u8; 65536];
        // SAFETY: `buf` is valid for writes of its length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        String::from_utf8_lossy(&buf[..n.max(0) as usize]).into_owned()
    }

    #[test]
    fn a_reader_that_never_reads_blocks_neither_sender_nor_flush() {
        let (r, w) = pipe();
        // A pipe of one page, filled by the pump itself.
        // SAFETY: fcntl on a descriptor we own.
        unsafe { libc::fcntl(w, libc::F_SETPIPE_SZ, 4096) };
        let pump = Pump::unbounded(w, "test-out").unwrap();
        let started = Instant::now();
        for _ in 0..1000 {
            assert!(pump.send(vec![b'x'; 100]));
        }
        assert!(!pump.flush(Instant::now() + Duration::from_millis(50)));
        assert!(started.elapsed() < Duration::from_secs(5));
        // Once read, it all comes out, in order.
        let mut got = 0;
        while got < 100_000 {
            got += read_some(r).len();
        }
        assert!(pump.flush(Instant::now() + Duration::from_secs(5)));
    }

    #[test]
    fn a_lossy_pump_counts_and_reports_its_drops() {
        let (r, w) = pipe();
        // SAFETY: fcntl on a descriptor we own.
        unsafe { libc::fcntl(w, libc::F_SETPIPE_SZ, 4096) };
        let pump = Pump::lossy(w, "test-log", 2).unwrap();
        let sent = (0..100).filter(|_| pump.send(vec![b'y'; 1000])).count();
        assert!(sent < 100, "nothing dropped");
        let mut all = String::new();
        while !all.contains("log lines dropped") {
            all += &read_some(r);
        }
    }
}
