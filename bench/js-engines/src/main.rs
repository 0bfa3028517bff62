//! Runs one Beats-style `script` processor over many events on the engine
//! this binary was built with (`--features quickjs` or `boa`; neither: the
//! JSON round trip alone, the floor), and prints one JSON line: events per
//! second, microseconds per event, peak RSS, and whether a script that
//! never returns was stopped within its timeout.
//!
//! Each event crosses into the engine as JSON text and back, and the
//! Event API (`Get`, `Put`, `Delete`, `Rename`, `Tag`, `AppendTo`,
//! `Cancel`) is the same JavaScript prelude on every engine, so what
//! differs is the engine.

use std::time::{Duration, Instant};

/// Beats' Event API over a plain object, in JavaScript.
#[cfg_attr(not(any(feature = "quickjs", feature = "boa")), allow(dead_code))]
const PRELUDE: &str = r#"
function Event(fields) { this.fields = fields; this.cancelled = false; }
Event.prototype._walk = function (path, make) {
  var keys = path.split("."), o = this.fields;
  for (var i = 0; i < keys.length - 1; i++) {
    if (typeof o[keys[i]] !== "object" || o[keys[i]] === null) {
      if (!make) return null;
      o[keys[i]] = {};
    }
    o = o[keys[i]];
  }
  return [o, keys[keys.length - 1]];
};
Event.prototype.Get = function (p) { var w = this._walk(p, false); return w ? w[0][w[1]] : null; };
Event.prototype.Put = function (p, v) { var w = this._walk(p, true); var old = w[0][w[1]]; w[0][w[1]] = v; return old; };
Event.prototype.Delete = function (p) { var w = this._walk(p, false); if (!w || !(w[1] in w[0])) return false; delete w[0][w[1]]; return true; };
Event.prototype.Rename = function (a, b) { var v = this.Get(a); if (v === undefined || v === null || this.Get(b) != null) return false; this.Delete(a); this.Put(b, v); return true; };
Event.prototype.AppendTo = function (p, v) { var c = this.Get(p); if (c == null) this.Put(p, v); else if (Array.isArray(c)) c.push(v); else this.Put(p, [c, v]); };
Event.prototype.Tag = function (t) { this.AppendTo("tags", t); };
Event.prototype.Cancel = function () { this.cancelled = true; };
function __run(text) {
  var e = new Event(JSON.parse(text));
  process(e);
  return e.cancelled ? null : JSON.stringify(e.fields);
}
"#;

/// What Elastic's policies do in a script: read the message, split it,
/// put fields, tag, rename, delete.
#[cfg_attr(not(any(feature = "quickjs", feature = "boa")), allow(dead_code))]
const SCRIPT: &str = r#"
function process(event) {
  var msg = event.Get("message");
  var parts = msg.split(" ");
  event.Put("audit.verb", parts[0]);
  event.Put("audit.words", parts.length);
  if (event.Get("kubernetes.namespace") === "kube-system") { event.Tag("system"); }
  event.Rename("stream", "log.stream");
  event.Delete("unused");
}
"#;

/// A script that never returns.
#[cfg_attr(not(any(feature = "quickjs", feature = "boa")), allow(dead_code))]
const HOSTILE: &str = "function process(event) { while (true) {} }";

fn event(i: usize) -> String {
    serde_json::json!({
        "@timestamp": "2026-12-07T03:00:00.000Z",
        "message": format!("GET /api/v1/namespaces/kube-system/pods/coredns-{i} 200 OK user=system:node:worker-1 took=3ms"),
        "stream": "stdout",
        "unused": "x",
        "kubernetes": {"namespace": "kube-system", "pod": {"name": format!("coredns-{i}"), "uid": "0b1c5a52-6f0e-4c1e-9d55-2a1f6c0d9e12"},
                       "node": {"name": "worker-1"}, "container": {"name": "coredns"}, "labels": {"k8s-app": "kube-dns"}},
        "container": {"id": "0a1b2c3d4e5f", "runtime": "containerd", "image": {"name": "registry.k8s.io/coredns/coredns:v1.11.1"}},
        "data_stream": {"type": "logs", "dataset": "kubernetes.container_logs", "namespace": "default"},
        "agent": {"id": "e7b1", "name": "leasehold-x", "version": "0.1.0"},
    })
    .to_string()
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The engine under test: runs `__run` on one event's text.
trait Engine {
    fn name(&self) -> &'static str;
    fn run(&mut self, text: &str) -> Option<String>;
}

/// No engine: the JSON round trip every engine pays, the floor.
struct Floor;
impl Engine for Floor {
    fn name(&self) -> &'static str {
        "none (JSON round trip only)"
    }
    fn run(&mut self, text: &str) -> Option<String> {
        let v: serde_json::Value = serde_json::from_str(text).ok()?;
        Some(v.to_string())
    }
}

#[cfg(feature = "quickjs")]
mod quickjs {
    use rquickjs::{Context, Function, Runtime};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    pub struct QuickJs {
        _rt: Runtime,
        ctx: Context,
    }

    /// A runtime with `script` loaded; `deadline` is when a call is
    /// interrupted (set before each call).
    pub fn new(script: &str, deadline: Arc<Mutex<Option<Instant>>>) -> QuickJs {
        let rt = Runtime::new().expect("runtime");
        rt.set_memory_limit(64 * 1024 * 1024);
        rt.set_interrupt_handler(Some(Box::new(move || {
            deadline
                .lock()
                .map(|d| d.is_some_and(|d| Instant::now() >= d))
                .unwrap_or(false)
        })));
        let ctx = Context::full(&rt).expect("context");
        ctx.with(|c| {
            c.eval::<(), _>(super::PRELUDE).expect("prelude");
            c.eval::<(), _>(script).expect("script");
        });
        QuickJs { _rt: rt, ctx }
    }

    impl super::Engine for QuickJs {
        fn name(&self) -> &'static str {
            "rquickjs 0.14 (QuickJS)"
        }
        fn run(&mut self, text: &str) -> Option<String> {
            self.ctx.with(|c| {
                let f: Function = c.globals().get("__run").ok()?;
                f.call::<_, Option<String>>((text,)).ok().flatten()
            })
        }
    }

    pub fn stops_hostile(timeout: Duration) -> (bool, Duration) {
        let deadline = Arc::new(Mutex::new(None));
        let mut e = new(super::HOSTILE, deadline.clone());
        *deadline.lock().unwrap() = Some(Instant::now() + timeout);
        let t = Instant::now();
        let out = super::Engine::run(&mut e, &super::event(0));
        (out.is_none(), t.elapsed())
    }
}

#[cfg(feature = "boa")]
mod boa {
    use boa_engine::{Context, JsValue, Source, js_string};
    use std::time::{Duration, Instant};

    pub struct Boa {
        ctx: Context,
    }

    pub fn new(script: &str, loop_limit: u64) -> Boa {
        let mut ctx = Context::default();
        ctx.runtime_limits_mut()
            .set_loop_iteration_limit(loop_limit);
        ctx.eval(Source::from_bytes(super::PRELUDE))
            .expect("prelude");
        ctx.eval(Source::from_bytes(script)).expect("script");
        Boa { ctx }
    }

    impl super::Engine for Boa {
        fn name(&self) -> &'static str {
            "boa_engine 0.22"
        }
        fn run(&mut self, text: &str) -> Option<String> {
            let f = self
                .ctx
                .global_object()
                .get(js_string!("__run"), &mut self.ctx)
                .ok()?;
            let f = f.as_callable()?.clone();
            let out = f
                .call(
                    &JsValue::undefined(),
                    &[JsValue::from(js_string!(text))],
                    &mut self.ctx,
                )
                .ok()?;
            out.as_string().map(|s| s.to_std_string_escaped())
        }
    }

    /// boa has no time limit, only a loop iteration limit: the time it
    /// takes to reach one is what a timeout would be.
    pub fn stops_hostile(_timeout: Duration) -> (bool, Duration) {
        let mut e = new(super::HOSTILE, 10_000_000);
        let t = Instant::now();
        let out = super::Engine::run(&mut e, &super::event(0));
        (out.is_none(), t.elapsed())
    }
}

fn make() -> Box<dyn Engine> {
    #[cfg(feature = "quickjs")]
    {
        let deadline = std::sync::Arc::new(std::sync::Mutex::new(None));
        return Box::new(quickjs::new(SCRIPT, deadline));
    }
    #[cfg(all(feature = "boa", not(feature = "quickjs")))]
    {
        return Box::new(boa::new(SCRIPT, u64::MAX));
    }
    #[allow(unreachable_code)]
    Box::new(Floor)
}

fn stops_hostile(timeout: Duration) -> Option<(bool, Duration)> {
    #[cfg(feature = "quickjs")]
    {
        return Some(quickjs::stops_hostile(timeout));
    }
    #[cfg(all(feature = "boa", not(feature = "quickjs")))]
    {
        return Some(boa::stops_hostile(timeout));
    }
    #[allow(unreachable_code)]
    {
        let _ = timeout;
        None
    }
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let events: Vec<String> = (0..1000).map(event).collect();
    let started = Instant::now();
    let mut engine = make();
    let setup = started.elapsed();
    // The result of one event, to show the script did its work.
    let sample = engine.run(&events[0]).unwrap_or_default();
    assert!(
        engine.name().starts_with("none") || sample.contains("\"audit\""),
        "the script did not run: {sample}"
    );
    for e in events.iter().take(1000) {
        engine.run(e);
    }
    let t = Instant::now();
    let mut bytes = 0usize;
    for i in 0..n {
        bytes += engine.run(&events[i % events.len()]).map_or(0, |s| s.len());
    }
    let took = t.elapsed();
    let hostile = stops_hostile(Duration::from_millis(100));
    println!(
        "{}",
        serde_json::json!({
            "engine": engine.name(),
            "events": n,
            "events_per_s": (n as f64 / took.as_secs_f64()).round(),
            "us_per_event": (took.as_secs_f64() * 1e6 / n as f64 * 100.0).round() / 100.0,
            "setup_ms": (setup.as_secs_f64() * 1e5).round() / 100.0,
            "peak_rss_kib": peak_rss_kib(),
            "bytes_out": bytes,
            "hostile_stopped": hostile.map(|h| h.0),
            "hostile_stop_ms": hostile.map(|h| (h.1.as_secs_f64() * 1e5).round() / 100.0),
        })
    );
}
