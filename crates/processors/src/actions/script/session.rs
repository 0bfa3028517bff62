//! One JavaScript engine holding a loaded script (Beats' "session"): a
//! QuickJS runtime with a memory cap, a stack cap and a wall-clock deadline
//! on every call, so no script can take more than it is given.

use std::sync::Arc;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rquickjs::context::EvalOptions;
use rquickjs::{Context, Ctx, Function, Object, Runtime, Value};
use serde_json::Map;

use super::crossing;

/// Beats' Event API, evaluated before the user's script.
const EVENT_API: &str = include_str!("event_api.js");

/// The most memory one session's heap may take. A script over it gets an
/// out-of-memory exception, not the agent.
pub(super) const MEMORY_LIMIT: usize = 32 << 20;
/// The deepest the engine's own stack may grow: deep recursion is a
/// `RangeError`, never an overflow of the thread's stack.
const STACK_LIMIT: usize = 256 << 10;
/// How long loading may take: the script's top level, `register` and `test`.
pub(super) const LOAD_DEADLINE: Duration = Duration::from_secs(5);
/// How long reading back what a failed call left may take.
const LEFTOVER_DEADLINE: Duration = Duration::from_millis(100);
/// Beats' words for a call stopped at its deadline.
pub(super) const TIMEOUT_MESSAGE: &str = "javascript processor execution timeout";
/// The longest message kept from an exception.
const MESSAGE_LIMIT: usize = 512;

/// No deadline set.
const NO_DEADLINE: u64 = u64::MAX;
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

fn now_nanos() -> u64 {
    u64::try_from(EPOCH.elapsed().as_nanos()).unwrap_or(NO_DEADLINE - 1)
}

/// The script of one processor, as loaded into every session.
#[derive(Debug)]
pub(super) struct Script {
    /// The name stack traces give it (`inline.js` or the file's).
    pub name: String,
    pub source: String,
    /// `params` as JSON, handed to `register` when given.
    pub params: Option<String>,
}

/// A runtime with the Event API and the script loaded.
pub(super) struct Session {
    // The context before the runtime: it is dropped first.
    ctx: Context,
    _runtime: Runtime,
    deadline: Arc<AtomicU64>,
}

/// What one call of `process` did.
#[derive(Debug)]
pub(super) enum Ran {
    /// The event's fields afterwards.
    Kept(Map<String, serde_json::Value>),
    /// `event.Cancel()` was called.
    Cancelled,
    Failed(Failure),
}

/// A call that threw, ran out of time or out of memory.
#[derive(Debug)]
pub(super) struct Failure {
    pub message: String,
    /// The fields as the script left them (Beats keeps its changes), when
    /// they could still be read.
    pub leftover: Option<Map<String, serde_json::Value>>,
    /// Whether the session may serve another event: not after a timeout or
    /// running out of memory, which may leave it half way through anything.
    pub reusable: bool,
}

impl Session {
    /// A new engine with `script` loaded, its `register(params)` called and
    /// its `test()` passed, as Beats does for every session.
    pub fn load(script: &Script) -> Result<Session, String> {
        let runtime = Runtime::new().map_err(|e| format!("cannot start the engine: {e}"))?;
        runtime.set_memory_limit(MEMORY_LIMIT);
        runtime.set_max_stack_size(STACK_LIMIT);
        let deadline = Arc::new(AtomicU64::new(NO_DEADLINE));
        let seen = Arc::clone(&deadline);
        runtime.set_interrupt_handler(Some(Box::new(move || {
            now_nanos() >= seen.load(Ordering::Relaxed)
        })));
        let ctx = Context::full(&runtime).map_err(|e| format!("cannot start the engine: {e}"))?;
        let session = Session {
            ctx,
            _runtime: runtime,
            deadline,
        };
        session.set_deadline(LOAD_DEADLINE);
        let loaded = session.ctx.with(|ctx| -> Result<(), String> {
            eval(&ctx, EVENT_API, "event_api.js").map_err(|e| format!("the Event API: {e}"))?;
            eval(&ctx, &script.source, &script.name)?;
            let api = api(&ctx)?;
            call(&ctx, &api, "bind", ())?;
            if let Some(params) = &script.params {
                call(&ctx, &api, "register", (params.as_str(),))
                    .map_err(|e| format!("failed to register params: {e}"))?;
            }
            call(&ctx, &api, "test", ()).map_err(|e| format!("failed in test() function: {e}"))
        });
        let timed_out = session.passed();
        session.clear_deadline();
        match loaded {
            Ok(()) => Ok(session),
            Err(_) if timed_out => Err(format!(
                "loading the script took longer than {}s (its top level, `register` and `test` must return)",
                LOAD_DEADLINE.as_secs()
            )),
            Err(e) => Err(e),
        }
    }

    /// Runs `process` on the event `fields`, stopped after `timeout`.
    pub fn run(&self, fields: &Map<String, serde_json::Value>, timeout: Duration) -> Ran {
        self.set_deadline(timeout);
        let ran = self.ctx.with(|ctx| -> Result<Ran, String> {
            let run: Function = api(&ctx)?.get("run").map_err(|e| e.to_string())?;
            let object = crossing::object_to_js(&ctx, fields).map_err(|e| describe(&ctx, e))?;
            match run.call::<_, Value>((object,)) {
                Ok(v) if v.is_null() => Ok(Ran::Cancelled),
                Ok(v) => crossing::object_from_js(&v).map(Ran::Kept),
                Err(e) => Err(describe(&ctx, e)),
            }
        });
        let timed_out = self.passed();
        self.clear_deadline();
        match ran {
            Ok(ran) => ran,
            Err(message) => {
                let out_of_memory = message.contains("out of memory");
                Ran::Failed(Failure {
                    message: if timed_out {
                        format!("{TIMEOUT_MESSAGE} after {timeout:?}")
                    } else {
                        message
                    },
                    leftover: self.leftover(),
                    reusable: !timed_out && !out_of_memory,
                })
            }
        }
    }

    /// The fields as the last call left them.
    fn leftover(&self) -> Option<Map<String, serde_json::Value>> {
        self.set_deadline(LEFTOVER_DEADLINE);
        let fields = self.ctx.with(|ctx| {
            let api = api(&ctx).ok()?;
            let f: Function = api.get("leftover").ok()?;
            let v: Value = f.call(()).ok()?;
            crossing::object_from_js(&v).ok()
        });
        self.clear_deadline();
        fields
    }

    fn set_deadline(&self, after: Duration) {
        let at = now_nanos().saturating_add(u64::try_from(after.as_nanos()).unwrap_or(u64::MAX));
        self.deadline
            .store(at.min(NO_DEADLINE - 1), Ordering::Relaxed);
    }

    fn clear_deadline(&self) {
        self.deadline.store(NO_DEADLINE, Ordering::Relaxed);
    }

    fn passed(&self) -> bool {
        now_nanos() >= self.deadline.load(Ordering::Relaxed)
    }
}

fn eval(ctx: &Ctx<'_>, source: &str, name: &str) -> Result<(), String> {
    let mut options = EvalOptions::default();
    options.strict = true;
    options.filename = Some(name.to_owned());
    ctx.eval_with_options::<(), _>(source, options)
        .map_err(|e| describe(ctx, e))
}

/// The Event API's own entry points.
fn api<'js>(ctx: &Ctx<'js>) -> Result<Object<'js>, String> {
    ctx.globals()
        .get("__leasehold")
        .map_err(|e| format!("the Event API is missing: {e}"))
}

fn call<'js, A: rquickjs::function::IntoArgs<'js>>(
    ctx: &Ctx<'js>,
    api: &Object<'js>,
    name: &str,
    args: A,
) -> Result<(), String> {
    let f: Function = api.get(name).map_err(|e| e.to_string())?;
    f.call::<_, ()>(args).map_err(|e| describe(ctx, e))
}

/// An error as Beats words it: `TypeError: message at process (inline.js:3)`,
/// or the thrown value's text; cut to [`MESSAGE_LIMIT`] bytes.
fn describe(ctx: &Ctx<'_>, error: rquickjs::Error) -> String {
    let text = match error {
        rquickjs::Error::Exception => thrown(&ctx.catch()),
        other => other.to_string(),
    };
    cut(text, MESSAGE_LIMIT)
}

fn thrown(v: &Value<'_>) -> String {
    if let Some(o) = v.as_object() {
        let field = |k: &str| o.get::<_, Option<String>>(k).ok().flatten();
        if let Some(message) = field("message") {
            let name = field("name").unwrap_or_else(|| "Error".to_owned());
            let mut text = format!("{name}: {message}");
            if let Some(at) = field("stack")
                .as_deref()
                .and_then(|s| s.lines().map(str::trim).find(|l| l.starts_with("at ")))
            {
                text.push(' ');
                text.push_str(at);
            }
            return text;
        }
    }
    if let Some(s) = v.as_string().and_then(|s| s.to_string().ok()) {
        return s;
    }
    if let Some(n) = v.as_number() {
        return n.to_string();
    }
    if let Some(b) = v.as_bool() {
        return b.to_string();
    }
    format!("a {} was thrown", v.type_name())
}

fn cut(mut text: String, limit: usize) -> String {
    if text.len() > limit {
        let mut end = limit;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}
