//! The `console` output: NDJSON on standard output, one batch per write.

use std::io::{self, Write};

use super::kind::{OutputKind, OutputType, SinkSettings, no_notes, same};
use super::sink::{Answers, Blocking, BlockingSink, Outgoing, Sink};

/// The `console` output type: no settings of its own.
pub(crate) const TYPE: OutputType = OutputType {
    name: "console",
    keys: &[],
    parse: |_, _, _| OutputKind::console(),
    notes: no_notes,
};

impl OutputKind {
    /// NDJSON on standard output.
    pub fn console() -> OutputKind {
        OutputKind::new(ConsoleSettings)
    }
}

/// A `console` output has no settings of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleSettings;

impl SinkSettings for ConsoleSettings {
    fn type_name(&self) -> &'static str {
        "console"
    }

    fn open(&self) -> io::Result<Box<dyn Sink>> {
        Ok(Box::new(Blocking::new(ConsoleSink::stdout())))
    }

    fn same_as(&self, other: &dyn SinkSettings) -> bool {
        same(self, other)
    }
}

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
    fn send(&mut self, out: &Outgoing) -> Answers {
        self.buf.clear();
        for line in out.lines() {
            self.buf.extend_from_slice(line);
        }
        let written = self
            .out
            .write_all(&self.buf)
            .and_then(|()| self.out.flush());
        if self.buf.capacity() > 1 << 20 {
            self.buf = Vec::new();
        }
        match written {
            Ok(()) => Answers::delivered(out.len()),
            // How much of a failed write reached the reader is unknown:
            // all again.
            Err(e) => Answers::written_then_failed(0, out.len(), format!("stdout: {e}")),
        }
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
    fn console_writes_the_lines_it_is_given_as_ndjson() {
        let out = Shared::default();
        let mut sink = ConsoleSink::new(Box::new(out.clone()));
        let lines = Outgoing::of_lines(vec![b"{\"b\":2}\n".to_vec(), b"{}\n".to_vec()]);
        assert_eq!(sink.send(&lines), Answers::delivered(2));
        assert_eq!(&*out.0.lock().unwrap(), b"{\"b\":2}\n{}\n");
        assert_eq!(sink.target(), "stdout");
    }
}
