//! The `console` output: NDJSON on standard output, one batch per write.

use std::io::{self, Write};

use super::queue::{Batch, BlockingSink};

/// Writes batches to standard output (or, in tests, to any writer).
pub(super) struct ConsoleSink {
    out: Box<dyn Write + Send>,
    buf: Vec<u8>,
}

impl ConsoleSink {
    /// A sink on the process's standard output.
    pub(super) fn stdout() -> Self {
        Self::new(Box::new(LockedStdout))
    }

    pub(super) fn new(out: Box<dyn Write + Send>) -> Self {
        ConsoleSink {
            out,
            buf: Vec::new(),
        }
    }
}

impl BlockingSink for ConsoleSink {
    fn write(&mut self, batch: &mut Batch) -> io::Result<()> {
        self.buf.clear();
        for line in batch.pending() {
            self.buf.extend_from_slice(line);
        }
        self.out.write_all(&self.buf)?;
        self.out.flush()?;
        batch.done = batch.lines.len();
        if self.buf.capacity() > 1 << 20 {
            self.buf = Vec::new();
        }
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    fn target(&self) -> String {
        "stdout".to_string()
    }
}

/// Standard output, locked for each whole write so that no other writer's
/// output lands inside a batch.
struct LockedStdout;

impl Write for LockedStdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        io::stdout().lock().write(buf)
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        io::stdout().lock().write_all(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stdout().lock().flush()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn console_writes_pending_lines_as_ndjson() {
        let out = Shared::default();
        let mut sink = ConsoleSink::new(Box::new(out.clone()));
        let mut batch = Batch {
            lines: vec![
                b"{\"a\":1}\n".to_vec(),
                b"{\"b\":2}\n".to_vec(),
                b"{}\n".to_vec(),
            ],
            done: 1,
            ..Batch::default()
        };
        sink.write(&mut batch).unwrap();
        assert_eq!(batch.done, 3);
        assert_eq!(&*out.0.lock().unwrap(), b"{\"b\":2}\n{}\n");
        assert_eq!(sink.target(), "stdout");
    }
}
