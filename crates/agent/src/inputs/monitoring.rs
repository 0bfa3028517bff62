//! The agent's own logs and metrics, shipped as Elastic Agent ships its
//! own (`agent.monitoring`): `monitoring/logs` writes each log record to
//! `logs-elastic_agent-<namespace>`, `monitoring/metrics` the process's CPU,
//! memory, file descriptors and cgroup memory to
//! `metrics-elastic_agent.elastic_agent-<namespace>` every `period`, with
//! the field names of Elastic's `elastic_agent` integration (what its
//! dashboards read). The runtime adds both inputs when the policy asks for
//! monitoring (`runtime::monitoring`); a policy may also write them.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use leasehold_policy::Map;
use serde_json::{Value, json};

use super::scrape::duration;
use super::settings::{Problem, unknown_keys};
use crate::inputs::contract::{Input, InputContext};
use crate::inputs::schedule::{document_id, next_aligned, now_us, sleep_until_wall};
use crate::logtap::{self, Record};

/// The process the documents describe, as Elastic names its own.
const PROCESS: &str = "elastic-agent";
/// Elastic Agent's default `agent.monitoring.metrics_period`.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(60);

/// `monitoring/logs`: the agent's log records.
pub struct AgentLogs {
    id: String,
}

impl AgentLogs {
    /// No settings of its own.
    pub fn from_settings(id: &str, map: &Map, out: &mut Vec<Problem>) -> Option<AgentLogs> {
        unknown_keys(map, &[], "monitoring/logs", out);
        Some(AgentLogs { id: id.to_string() })
    }
}

/// One record as Elastic's `elastic_agent` logs data stream holds it.
fn log_document(r: &Record, redactor: &crate::redact::Redactor) -> serde_json::Map<String, Value> {
    object(json!({
        "message": redactor.redact(&r.message),
        "log": {"level": r.level, "logger": r.target},
        "event": {"dataset": "elastic_agent"},
        "elastic_agent": {"process": PROCESS},
    }))
}

/// The map of a document built with `json!({...})`.
fn object(doc: Value) -> serde_json::Map<String, Value> {
    match doc {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    }
}

impl Input for AgentLogs {
    fn run(self: Arc<Self>, ctx: InputContext) -> BoxFuture<'static, Result<(), String>> {
        Box::pin(async move {
            // Usually open already: the runtime opens it at start, so the
            // records logged before this input runs are shipped too.
            let tap = logtap::tap();
            tap.open();
            loop {
                let (records, dropped) = tap.take();
                if dropped > 0 {
                    let note = Record {
                        at_us: now_us(),
                        level: "warn",
                        target: "leasehold::monitoring".into(),
                        message: format!(
                            "{dropped} log records were not shipped: more than {} waited for the output",
                            logtap::CAPACITY
                        ),
                    };
                    if emit(&ctx, &self.id, &note).await.is_err() {
                        return Ok(());
                    }
                }
                let mut refused = false;
                for r in &records {
                    if emit(&ctx, &self.id, r).await.is_err() {
                        refused = true;
                        break;
                    }
                }
                if refused {
                    return Ok(());
                }
                tokio::select! {
                    () = tap.arrived() => {}
                    () = ctx.cancel.cancelled() => return Ok(()),
                }
            }
        })
    }
}

async fn emit(
    ctx: &InputContext,
    id: &str,
    r: &Record,
) -> Result<(), crate::pipeline::publisher::Refused> {
    let at = r.at_us.to_string();
    let doc_id = document_id(&[id, &at, &r.message]);
    ctx.sink
        .emit_at(r.at_us, &doc_id, log_document(r, &ctx.redactor))
        .await
}

/// `monitoring/metrics`: the agent process's own figures every `period`.
pub struct AgentMetrics {
    id: String,
    period: Duration,
}

impl AgentMetrics {
    /// `period` (default 60 s, Elastic's `metrics_period`).
    pub fn from_settings(id: &str, map: &Map, out: &mut Vec<Problem>) -> Option<AgentMetrics> {
        unknown_keys(map, &["period"], "monitoring/metrics", out);
        let period = duration(map, "period", DEFAULT_PERIOD, out);
        Some(AgentMetrics {
            id: id.to_string(),
            period,
        })
    }
}

impl Input for AgentMetrics {
    fn run(self: Arc<Self>, ctx: InputContext) -> BoxFuture<'static, Result<(), String>> {
        Box::pin(async move {
            // One document at start, so a fresh agent shows up at once.
            let mut at = now_us();
            loop {
                let fields = tokio::task::spawn_blocking(|| process_document(&ProcFs::default()))
                    .await
                    .map_err(|e| format!("reading the process's figures panicked: {e}"))?;
                let doc_id = document_id(&[&self.id, &at.to_string()]);
                if ctx.sink.emit_at(at, &doc_id, fields).await.is_err() {
                    return Ok(());
                }
                at = next_aligned(now_us(), self.period);
                tokio::select! {
                    () = sleep_until_wall(at) => {}
                    () = ctx.cancel.cancelled() => return Ok(()),
                }
            }
        })
    }
}

/// Where the process's figures are read: `/proc/self` and the cgroup
/// file system (other roots in tests).
pub struct ProcFs {
    proc_self: std::path::PathBuf,
    cgroup_root: std::path::PathBuf,
}

impl Default for ProcFs {
    fn default() -> Self {
        ProcFs {
            proc_self: "/proc/self".into(),
            cgroup_root: "/sys/fs/cgroup".into(),
        }
    }
}

impl ProcFs {
    fn read(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.proc_self.join(name)).ok()
    }

    /// The process's cgroup (v2) directory: its own path, or the root when
    /// the container's cgroup namespace shows it as `/`.
    fn cgroup_dir(&self) -> Option<std::path::PathBuf> {
        let text = self.read("cgroup")?;
        let path = text.lines().find_map(|l| l.strip_prefix("0::"))?.trim();
        let dir = self.cgroup_root.join(path.trim_start_matches('/'));
        dir.join("memory.current")
            .exists()
            .then_some(dir)
            .or_else(|| {
                self.cgroup_root
                    .join("memory.current")
                    .exists()
                    .then(|| self.cgroup_root.clone())
            })
    }
}

/// The process's figures with the names of Elastic's
/// `elastic_agent.elastic_agent` data stream (`system.process.*`: CPU in
/// milliseconds, memory in bytes, file descriptors, cgroup memory).
pub fn process_document(fs: &ProcFs) -> serde_json::Map<String, Value> {
    let mut process = serde_json::Map::new();
    if let Some((user, system)) = fs.read("stat").as_deref().and_then(cpu_ms) {
        let total = user + system;
        process.insert(
            "cpu".into(),
            json!({
                "user": {"ticks": user, "time": {"ms": user}},
                "system": {"ticks": system, "time": {"ms": system}},
                "total": {"ticks": total, "value": total, "time": {"ms": total}},
            }),
        );
    }
    if let Some(rss) = fs.read("status").as_deref().and_then(rss_bytes) {
        process.insert("memory".into(), json!({"size": rss}));
    }
    let mut fd = serde_json::Map::new();
    if let Ok(entries) = std::fs::read_dir(fs.proc_self.join("fd")) {
        fd.insert("open".into(), json!(entries.count()));
    }
    if let Some((soft, hard)) = fs.read("limits").as_deref().and_then(open_files_limit) {
        fd.insert("limit".into(), json!({"soft": soft, "hard": hard}));
    }
    if !fd.is_empty() {
        process.insert("fd".into(), Value::Object(fd));
    }
    if let Some(dir) = fs.cgroup_dir() {
        let number = |name: &str| -> Option<u64> {
            std::fs::read_to_string(dir.join(name))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        let mut mem = serde_json::Map::new();
        if let Some(u) = number("memory.current") {
            mem.insert("usage".into(), json!({"bytes": u}));
        }
        // `max` (no limit) is not a number: left out.
        if let Some(l) = number("memory.max") {
            mem.insert("limit".into(), json!({"bytes": l}));
        }
        if !mem.is_empty() {
            process.insert("cgroup".into(), json!({"memory": {"mem": mem}}));
        }
    }
    object(json!({
        "system": {"process": process},
        "event": {"dataset": "elastic_agent.elastic_agent"},
        "elastic_agent": {"process": PROCESS},
    }))
}

/// User and system CPU time in milliseconds, from `/proc/<pid>/stat`.
fn cpu_ms(stat: &str) -> Option<(u64, u64)> {
    let s = super::system::parse_stat(stat)?;
    let per_s = super::system::ticks_per_second();
    Some((s.user_ticks * 1000 / per_s, s.system_ticks * 1000 / per_s))
}

/// Resident memory in bytes, from `/proc/<pid>/status`.
fn rss_bytes(status: &str) -> Option<u64> {
    let kib = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    kib.trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .ok()
        .map(|k| k * 1024)
}

/// The soft and hard limits of open files, from `/proc/<pid>/limits`
/// (`unlimited` as `u64::MAX`).
fn open_files_limit(limits: &str) -> Option<(u64, u64)> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let mut words = line["Max open files".len()..].split_whitespace();
    let value = |w: Option<&str>| match w? {
        "unlimited" => Some(u64::MAX),
        n => n.parse().ok(),
    };
    Some((value(words.next())?, value(words.next())?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_processs_figures_have_elastics_names_and_units() {
        let dir = tempfile::tempdir().unwrap();
        let proc_self = dir.path().join("self");
        std::fs::create_dir_all(proc_self.join("fd")).unwrap();
        for fd in ["0", "1", "2"] {
            std::fs::write(proc_self.join("fd").join(fd), "").unwrap();
        }
        let per_s = super::super::system::ticks_per_second();
        std::fs::write(
            proc_self.join("stat"),
            format!(
                "42 (leasehold (x)) S 1 42 42 0 -1 4194560 100 0 0 0 {} {} 0 0 20 0 8 0 5 1000 250 0",
                3 * per_s,
                per_s / 2
            ),
        )
        .unwrap();
        std::fs::write(
            proc_self.join("status"),
            "Name:\tleasehold\nVmRSS:\t  20480 kB\n",
        )
        .unwrap();
        std::fs::write(
            proc_self.join("limits"),
            "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1048576              unlimited            files\n",
        )
        .unwrap();
        std::fs::write(proc_self.join("cgroup"), "0::/kubepods/pod1/agent\n").unwrap();
        let cg = dir.path().join("cgroup");
        std::fs::create_dir_all(cg.join("kubepods/pod1/agent")).unwrap();
        std::fs::write(cg.join("kubepods/pod1/agent/memory.current"), "52428800\n").unwrap();
        std::fs::write(cg.join("kubepods/pod1/agent/memory.max"), "1258291200\n").unwrap();
        let doc = process_document(&ProcFs {
            proc_self,
            cgroup_root: cg,
        });
        let p = &doc["system"]["process"];
        assert_eq!(p["cpu"]["user"]["ticks"], 3000);
        assert_eq!(p["cpu"]["system"]["time"]["ms"], 500);
        assert_eq!(p["cpu"]["total"]["value"], 3500);
        assert_eq!(p["memory"]["size"], 20 * 1024 * 1024);
        assert_eq!(
            p["fd"],
            json!({"open": 3, "limit": {"soft": 1048576u64, "hard": u64::MAX}})
        );
        assert_eq!(
            p["cgroup"]["memory"]["mem"],
            json!({"usage": {"bytes": 52428800}, "limit": {"bytes": 1258291200}})
        );
        assert_eq!(doc["event"]["dataset"], "elastic_agent.elastic_agent");
        assert_eq!(doc["elastic_agent"]["process"], "elastic-agent");
    }

    #[test]
    fn this_process_reads_its_own_figures() {
        let doc = process_document(&ProcFs::default());
        let p = &doc["system"]["process"];
        assert!(p["memory"]["size"].as_u64().unwrap_or(0) > 0, "{doc:?}");
        assert!(p["fd"]["open"].as_u64().unwrap_or(0) > 0, "{doc:?}");
        assert!(p["cpu"]["total"]["value"].is_u64(), "{doc:?}");
    }

    #[test]
    fn a_log_record_reads_as_elastics_and_its_secrets_are_redacted() {
        let mut redactor = crate::redact::Redactor::new();
        redactor.add_text("outputs:\n  default:\n    password: s3cret-pw\n");
        let doc = log_document(
            &Record {
                at_us: 1,
                level: "error",
                target: "leasehold::outputs".into(),
                message: "login with s3cret-pw refused".into(),
            },
            &redactor,
        );
        assert_eq!(
            doc["log"],
            json!({"level": "error", "logger": "leasehold::outputs"})
        );
        assert_eq!(doc["event"]["dataset"], "elastic_agent");
        assert!(
            !doc["message"].as_str().unwrap().contains("s3cret-pw"),
            "{doc:?}"
        );
    }
}
