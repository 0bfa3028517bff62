//! The JSON lines of `leasehold elect` on stdout.
//!
//! Other tools (interop tests, benchmarks) parse them, so their shape is
//! fixed: `{"ts","identity","state","holder","term"}` per line, with
//! `state` one of `leading`, `following`, `stopped`.
//!
//! `ts` is the instant of the state change as the elector took it, not the
//! instant of printing, and lines go through an unbounded writer thread
//! ([`Pump::unbounded`]): a stdout nobody reads delays the lines, never the
//! election, and the lines stay true once they come out. Nothing is
//! dropped: there is one line per state change, so the queue stays small.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime};

use leasehold_election::Leadership;
use leasehold_election::core::WallTime;

use super::pump::Pump;

/// What a line says, without its timestamp: state name, holder, term. It
/// is also the key to print changes only.
type Key = (&'static str, Option<String>, Option<i32>);

const STOPPED: &str = "stopped";

fn describe(state: &Leadership) -> Key {
    match state {
        Leadership::Leading { term, .. } => {
            ("leading", Some(term.holder.clone()), Some(term.transitions))
        }
        Leadership::Following { holder } => ("following", holder.clone(), None),
        Leadership::Stopped => (STOPPED, None, None),
        // Unknown yet, or a state this version does not know: not leading.
        _ => ("following", None, None),
    }
}

/// One output line for `state`, reached at `at`.
pub fn line(identity: &str, state: &Leadership, at: SystemTime) -> String {
    let micros = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
    let (name, holder, term) = describe(state);
    serde_json::json!({
        "ts": WallTime::from_unix_micros(micros).to_micro_time(),
        "identity": identity,
        "state": name,
        "holder": holder,
        "term": term,
    })
    .to_string()
}

/// Turns state changes into lines: one per change of what a line says,
/// and nothing after `stopped`.
pub struct Reporter {
    identity: String,
    pump: Arc<Pump>,
    last: Mutex<Key>,
    stopped: Condvar,
}

impl Reporter {
    /// A reporter that has printed the first line (`following`, no holder
    /// yet) at once, so readers know elect is up and its signals handled.
    pub fn start(identity: String, pump: Arc<Pump>) -> Reporter {
        let this = Reporter {
            identity,
            pump,
            last: Mutex::new(describe(&Leadership::Unknown)),
            stopped: Condvar::new(),
        };
        this.emit(&Leadership::Unknown, SystemTime::now());
        this
    }

    /// Reports a change that happened at `at`. Never blocks on stdout.
    pub fn report(&self, state: &Leadership, at: SystemTime) {
        let k = describe(state);
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if *last == k || last.0 == STOPPED {
            return;
        }
        *last = k;
        self.emit(state, at);
        if matches!(state, Leadership::Stopped) {
            self.stopped.notify_all();
        }
    }

    /// Makes sure the `stopped` line is queued: waits up to `within` for the
    /// elector's own (with its true instant), then writes it with now.
    pub fn finish(&self, within: Duration) {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let (last, _) = self
            .stopped
            .wait_timeout_while(last, within, |k| k.0 != STOPPED)
            .unwrap_or_else(|p| p.into_inner());
        drop(last);
        self.report(&Leadership::Stopped, SystemTime::now());
    }

    fn emit(&self, state: &Leadership, at: SystemTime) {
        let mut text = line(&self.identity, state, at);
        text.push('\n');
        self.pump.send(text.into_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_election::Term;

    #[test]
    fn lines_have_the_fixed_shape_and_the_given_instant() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        let v: serde_json::Value =
            serde_json::from_str(&line("pod-a", &Leadership::Following { holder: None }, at))
                .unwrap();
        assert_eq!(v["state"], "following");
        assert!(v["holder"].is_null() && v["term"].is_null());
        assert_eq!(v["ts"], "2023-11-14T22:13:20.123456Z");
        let term = Term {
            holder: "pod-a".into(),
            acquire_time: WallTime::from_unix_micros(0),
            transitions: 4,
        };
        let leading = Leadership::Leading {
            term,
            since: std::time::Instant::now(),
        };
        let v: serde_json::Value = serde_json::from_str(&line("pod-a", &leading, at)).unwrap();
        assert_eq!(
            (
                v["state"].as_str(),
                v["holder"].as_str(),
                v["term"].as_i64()
            ),
            (Some("leading"), Some("pod-a"), Some(4))
        );
    }

    #[test]
    fn only_changes_are_reported_and_nothing_after_stopped() {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        let pump = Arc::new(Pump::unbounded(fds[1], "test-lines").unwrap());
        let r = Reporter::start("a".into(), pump.clone());
        let now = SystemTime::now();
        r.report(&Leadership::Following { holder: None }, now);
        r.report(
            &Leadership::Following {
                holder: Some("b".into()),
            },
            now,
        );
        r.finish(Duration::ZERO);
        r.report(&Leadership::Following { holder: None }, now);
        assert!(pump.flush(std::time::Instant::now() + Duration::from_secs(5)));
        let mut buf = vec![0u8; 4096];
        // SAFETY: `buf` is valid for writes of its length.
        let n = unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len()) };
        let text = String::from_utf8_lossy(&buf[..n as usize]).into_owned();
        let states: Vec<String> = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["state"].to_string())
            .collect();
        assert_eq!(
            states,
            ["\"following\"", "\"following\"", "\"stopped\""],
            "{text}"
        );
    }
}
