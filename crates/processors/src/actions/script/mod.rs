//! `script`: Beats' JavaScript processor. The script defines
//! `process(event)` and works on the event through Beats' Event API
//! (`Get`, `Put`, `Rename`, `Delete`, `Tag`, `AppendTo`, `Cancel`, and
//! `event.fields`); `register(params)` and `test()` run when it loads.
//!
//! The engine is QuickJS (the `rquickjs` crate; `bench/js-engines` has the
//! comparison with boa that chose it). Each session is capped in memory and
//! stack, and every call has a deadline, so a script can fail an event but
//! cannot hang or crash the agent. A failed call leaves the event as the
//! script left it, tagged `tag_on_exception` and with the error appended
//! to `error.message`, as Beats does.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;

use super::{Action, Event, Flow};
use crate::path;
use crate::settings::{Diag, Settings, kind};

mod crossing;
mod exact;
mod session;

use exact::BigInts;
use session::{Ran, Script, Session};

/// The deadline of a call when `timeout` is not set. Beats has none; here
/// a script that never returns would stall its input for good.
pub(crate) const UNSET_TIMEOUT: Duration = Duration::from_secs(1);
/// A call taking more CPU than this marks the script slow: its later calls
/// are run off the async threads ([`Action::blocks`]). CPU, not wall time:
/// a thread that was merely preempted did not run a slow script.
const SLOW_CALL: Duration = Duration::from_millis(20);

/// A loaded script and its idle sessions.
pub(crate) struct ScriptProcessor {
    /// `id` or `tag`, for messages.
    name: Option<String>,
    script: Script,
    timeout: Duration,
    tag_on_exception: Option<String>,
    max_cached_sessions: usize,
    idle: Mutex<Vec<Session>>,
    /// A call took longer than [`SLOW_CALL`] (or timed out).
    slow: AtomicBool,
}

impl std::fmt::Debug for ScriptProcessor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptProcessor")
            .field("name", &self.name)
            .field("script", &self.script.name)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

const KEYS: &[&str] = &[
    "lang",
    "id",
    "tag",
    "source",
    "file",
    "files",
    "params",
    "timeout",
    "tag_on_exception",
    "max_cached_sessions",
];

/// `lang` (`javascript` or `js`), one of `source`, `file`, `files`, and
/// `params`, `timeout`, `tag_on_exception` (default `_js_exception`),
/// `max_cached_sessions` (default 4), `id`/`tag`. The script is loaded
/// once here, so a syntax error, a missing `process` or a failing `test()`
/// stops the policy from loading, naming the processor.
pub(crate) fn build(s: Settings<'_>, d: &mut Diag) -> Option<ScriptProcessor> {
    s.check_keys(d, "script", KEYS, true);
    match s.required_string(d, "lang", "javascript") {
        Some(lang) if matches!(lang.to_ascii_lowercase().as_str(), "javascript" | "js") => {}
        Some(lang) => d.error(
            s.at("lang"),
            format!("the script processor runs `javascript` only, not `{lang}`"),
        ),
        None => {}
    }
    let name = s.string(d, "id").or_else(|| s.string(d, "tag"));
    let (script_name, source) = source(&s, d)?;
    let params = match s.raw("params") {
        None => None,
        Some(Value::Object(m)) if m.is_empty() => None,
        Some(v @ Value::Object(_)) => Some(v.to_string()),
        Some(other) => {
            d.error(
                s.at("params"),
                format!(
                    "expected a map of parameters for `register(params)`, found {}",
                    kind(other)
                ),
            );
            return None;
        }
    };
    let timeout = timeout(&s, d);
    let tag_on_exception = match s.raw("tag_on_exception") {
        None => Some("_js_exception".to_owned()),
        Some(_) => s.string(d, "tag_on_exception").filter(|t| !t.is_empty()),
    };
    let max_cached_sessions = s.int(d, "max_cached_sessions", 4);
    if max_cached_sessions < 0 {
        d.error(
            s.at("max_cached_sessions"),
            "must be 0 or more (the sessions kept idle between events)",
        );
    }
    let script = Script {
        name: script_name,
        source,
        params,
    };
    let first = match Session::load(&script) {
        Ok(session) => session,
        Err(e) => {
            d.error(s.path, e);
            return None;
        }
    };
    Some(ScriptProcessor {
        name,
        script,
        timeout: timeout?,
        tag_on_exception,
        max_cached_sessions: usize::try_from(max_cached_sessions).unwrap_or(0),
        idle: Mutex::new(vec![first]),
        slow: AtomicBool::new(false),
    })
}

/// The script's text and the name its stack traces give it: `source`, or
/// the files of `file`/`files` joined in order. Exactly one must be given.
fn source(s: &Settings<'_>, d: &mut Diag) -> Option<(String, String)> {
    let inline = s.string(d, "source");
    let file = s.string(d, "file");
    let files = s.string_list(d, "files");
    let given = [inline.is_some(), file.is_some(), files.is_some()]
        .iter()
        .filter(|g| **g)
        .count();
    if given != 1 {
        d.error(
            s.path,
            if given == 0 {
                "the script must be given inline as `source`, or in `file` or `files`"
            } else {
                "give the script in only one of `source`, `file` and `files`"
            },
        );
        return None;
    }
    if let Some(text) = inline {
        return Some(("inline.js".to_owned(), text));
    }
    let (key, paths) = match (file, files) {
        (Some(f), _) => ("file", vec![f]),
        (None, Some(fs)) => ("files", fs),
        (None, None) => return None,
    };
    if paths.is_empty() {
        d.error(s.at(key), "name at least one script file");
        return None;
    }
    let mut text = String::new();
    for p in &paths {
        match std::fs::read_to_string(p) {
            Ok(t) => {
                if !text.is_empty() {
                    text.push_str("\n;\n");
                }
                text.push_str(&t);
            }
            Err(e) => {
                d.error(s.at(key), format!("cannot read the script file {p}: {e}"));
                return None;
            }
        }
    }
    let name = std::path::Path::new(&paths[0])
        .file_name()
        .map_or_else(|| paths[0].clone(), |n| n.to_string_lossy().into_owned());
    Some((name, text))
}

/// `timeout`: a duration such as `100ms` or `2s` (a number is seconds); not
/// set, or 0, is [`UNSET_TIMEOUT`].
fn timeout(s: &Settings<'_>, d: &mut Diag) -> Option<Duration> {
    let bad = |d: &mut Diag| {
        d.error(
            s.at("timeout"),
            "expected a duration such as `100ms` or `2s`",
        );
        None
    };
    let given = match s.raw("timeout") {
        None => return Some(UNSET_TIMEOUT),
        Some(Value::Number(n)) => match n.as_f64().map(Duration::try_from_secs_f64) {
            Some(Ok(t)) => t,
            _ => return bad(d),
        },
        Some(Value::String(t)) => match t.trim().parse::<jiff::SignedDuration>() {
            Ok(t) if !t.is_negative() => t.unsigned_abs(),
            _ => return bad(d),
        },
        Some(_) => return bad(d),
    };
    Some(if given.is_zero() {
        UNSET_TIMEOUT
    } else {
        given
    })
}

impl ScriptProcessor {
    fn session(&self) -> Result<Session, String> {
        let idle = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        match idle {
            Some(s) => Ok(s),
            None => Session::load(&self.script),
        }
    }

    fn put_back(&self, session: Session) {
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < self.max_cached_sessions
        {
            idle.push(session);
        }
    }

    /// Beats' marks of a failed call: the tag and the error, appended.
    fn mark_failed(&self, event: &mut Event, message: &str) {
        if let Some(tag) = &self.tag_on_exception {
            // Beats' AddTags: appended even when already there.
            let _ = super::add_tags::append_tags(event, "tags", std::slice::from_ref(tag));
        }
        append_string(event, "error.message", message);
    }
}

impl Action for ScriptProcessor {
    fn run(&self, event: &mut Event) -> Result<Flow, String> {
        let big = BigInts::find(event);
        let session = match self.session() {
            Ok(s) => s,
            Err(e) => {
                let message = format!("cannot start a session: {e}");
                self.mark_failed(event, &message);
                return Err(message);
            }
        };
        let started = thread_cpu();
        let ran = session.run(event, self.timeout);
        if thread_cpu().saturating_sub(started) > SLOW_CALL {
            self.slow.store(true, Ordering::Relaxed);
        }
        match ran {
            Ran::Cancelled => {
                self.put_back(session);
                Ok(Flow::Drop)
            }
            Ran::Kept(mut fields) => {
                self.put_back(session);
                big.restore(&mut fields);
                *event = fields;
                Ok(Flow::Continue)
            }
            Ran::Failed(failure) => {
                if let Some(mut left) = failure.leftover {
                    big.restore(&mut left);
                    *event = left;
                }
                if failure.reusable {
                    self.put_back(session);
                }
                self.mark_failed(event, &failure.message);
                Err(format!("failed in process function: {}", failure.message))
            }
        }
    }

    /// Calls run inline while they are fast (tens of microseconds, like
    /// every other processor); once one took longer than [`SLOW_CALL`], the
    /// script's calls move to blocking threads for good, so a slow or
    /// hostile script holds back only its own input. The one slow call
    /// itself held its thread at most `timeout`.
    fn blocks(&self) -> bool {
        self.slow.load(Ordering::Relaxed)
    }
}

/// The CPU time the calling thread has used.
fn thread_cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// Beats' `appendString` without forcing a list: absent becomes the value, a
/// different string becomes a list of both, a list gains the value unless
/// it holds it. Anything else at `field` is left alone.
fn append_string(event: &mut Event, field: &str, value: &str) {
    match path::get_mut(event, field) {
        Ok(slot) => match slot {
            Value::String(old) if old != value => {
                let old = std::mem::take(old);
                *slot = Value::Array(vec![Value::String(old), Value::String(value.to_owned())]);
            }
            Value::Array(list) if !list.iter().any(|v| v.as_str() == Some(value)) => {
                list.push(Value::String(value.to_owned()));
            }
            Value::Null => *slot = Value::String(value.to_owned()),
            _ => {}
        },
        Err(path::PathError::Missing) => {
            let _ = path::insert(event, field, Value::String(value.to_owned()));
        }
        Err(_) => {}
    }
}

#[cfg(test)]
mod tests;
