//! elect's logs: tracing, formatted as usual, handed to a lossy writer
//! thread on stderr ([`Pump::lossy`]). Logging never blocks the thread that
//! logs, even when nobody reads stderr: while the queue is full, log lines
//! are dropped (and the number dropped is written once stderr moves again).
//! Losing log lines is acceptable; delaying a step-down is not.

use std::sync::Arc;

use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::prelude::*;

use super::pump::Pump;

/// How many formatted log lines may wait for a slow stderr.
const CAPACITY: usize = 1024;

/// A `MakeWriter` whose writers queue each formatted event on the pump.
#[derive(Clone)]
struct PumpWriter(Arc<Pump>);

impl std::io::Write for PumpWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // The fmt layer hands over one whole event per write_all.
        self.0.send(buf.to_vec());
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for PumpWriter {
    type Writer = PumpWriter;

    fn make_writer(&'a self) -> PumpWriter {
        self.clone()
    }
}

/// Starts the stderr pump and installs the tracing subscriber writing to
/// it; returns the pump, to flush at exit.
pub fn init() -> std::io::Result<Arc<Pump>> {
    init_with(false, None)
}

/// As [`init`], with JSON lines instead of text when `json`, and `level`
/// (a `tracing` filter such as `info` or `leasehold=debug`) instead of
/// `RUST_LOG`.
pub fn init_with(json: bool, level: Option<&str>) -> std::io::Result<Arc<Pump>> {
    let pump = Arc::new(Pump::lossy(
        libc::STDERR_FILENO,
        "leasehold-stderr",
        CAPACITY,
    )?);
    let filter = match level {
        Some(l) => tracing_subscriber::EnvFilter::new(l),
        None => tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
    };
    // Records also go to the tap `agent.monitoring.logs` ships from
    // (kept only while it is open).
    let layers = tracing_subscriber::registry()
        .with(filter)
        .with(crate::logtap::TapLayer);
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(PumpWriter(pump.clone()))
        .with_ansi(false);
    let _ = if json {
        layers.with(fmt.json().flatten_event(true)).try_init()
    } else {
        layers.with(fmt).try_init()
    };
    Ok(pump)
}
