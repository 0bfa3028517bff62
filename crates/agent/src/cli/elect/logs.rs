//! elect's logs: tracing, formatted as usual, handed to a lossy writer
//! thread on stderr ([`Pump::lossy`]). Logging never blocks the thread that
//! logs, even when nobody reads stderr: while the queue is full, log lines
//! are dropped (and the number dropped is written once stderr moves again).
//! Losing log lines is acceptable; delaying a step-down is not.

use std::sync::Arc;

use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::prelude::*;

use super::pump::Pump;

/// How many formatted log lines may wait for a slow stderr.
const CAPACITY: usize = 1024;

/// Parses a log filter: a level (`trace`, `debug`, `info`, `warn`,
/// `error`, `off`) or comma-separated `target=level` directives with an
/// optional bare default level, as in `RUST_LOG` (`leasehold=debug,warn`).
/// Span and field filters (`[span{field=value}]`) are not supported: the
/// plain target filter keeps a regex engine for log filters out of the
/// binary.
pub fn parse_filter(spec: &str) -> Result<Targets, String> {
    spec.trim()
        .parse::<Targets>()
        .map_err(|e| format!("{e}; expected a level (trace, debug, info, warn, error, off) or target=level directives such as leasehold=debug,info"))
}

/// `info` for every target.
fn default_filter() -> Targets {
    Targets::new().with_default(tracing::level_filters::LevelFilter::INFO)
}

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
/// (a filter such as `info` or `leasehold=debug`, see [`parse_filter`])
/// instead of `RUST_LOG`.
pub fn init_with(json: bool, level: Option<&str>) -> std::io::Result<Arc<Pump>> {
    let pump = Arc::new(Pump::lossy(
        libc::STDERR_FILENO,
        "leasehold-stderr",
        CAPACITY,
    )?);
    let filter = match level {
        Some(l) => parse_filter(l).unwrap_or_else(|_| default_filter()),
        None => match std::env::var("RUST_LOG") {
            Ok(l) if !l.trim().is_empty() => parse_filter(&l).unwrap_or_else(|e| {
                eprintln!("leasehold: RUST_LOG={l:?} ignored ({e}); logging at info");
                default_filter()
            }),
            _ => default_filter(),
        },
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

#[cfg(test)]
mod tests {
    use super::parse_filter;
    use tracing::Level;

    #[test]
    fn a_level_applies_to_every_target() {
        let f = parse_filter(" info ").unwrap();
        assert!(f.would_enable("leasehold::runtime", &Level::INFO));
        assert!(f.would_enable("kube_runtime::watcher", &Level::WARN));
        assert!(!f.would_enable("leasehold::runtime", &Level::DEBUG));
        let off = parse_filter("off").unwrap();
        assert!(!off.would_enable("leasehold", &Level::ERROR));
    }

    #[test]
    fn directives_set_a_level_per_target_over_the_default() {
        let f = parse_filter("leasehold=debug,kube_client=error,warn").unwrap();
        assert!(f.would_enable("leasehold::outputs::retry", &Level::DEBUG));
        assert!(!f.would_enable("kube_client::client", &Level::WARN));
        assert!(f.would_enable("hyper_util::client", &Level::WARN));
        assert!(!f.would_enable("hyper_util::client", &Level::INFO));
    }

    #[test]
    fn a_bad_level_is_an_error_that_says_what_is_expected() {
        let e = parse_filter("leasehold=loud").unwrap_err();
        assert!(e.contains("expected a level"), "{e}");
    }
}
