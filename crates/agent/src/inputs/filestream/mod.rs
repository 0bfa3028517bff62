//! `filestream`: tails files (container logs under `/var/log/containers`,
//! any text log) with Filebeat's settings, and delivers each line at
//! least once across restarts: every event carries an acknowledgement
//! back to its file's cursor, and the registry under the data path
//! records, per file, the offset before which everything was delivered.
//!
//! Each stream runs a scanner every `prospector.scanner.check_interval`
//! and one reader per open file. Node-local: every agent reads its own
//! node's files.

pub mod identity;
pub mod parsers;
pub mod pipeline;
pub mod reader;
pub mod registry;
pub mod scanner;
pub mod settings;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::SystemTime;

use futures_util::future::BoxFuture;
use leasehold_policy::Map;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use self::identity::FileId;
use self::reader::{Closed, Reader};
use self::registry::{Cursor, StreamRegistry};
use self::scanner::Found;
use self::settings::StreamSettings;
use super::settings::{DataStream, Problem};
use crate::inputs::contract::{Input, InputContext};
use crate::pipeline::publisher::EventSink;

/// A `filestream` input: one or more streams.
#[derive(Debug)]
pub struct Filestream {
    streams: Vec<Arc<StreamSettings>>,
}

impl Filestream {
    /// Reads the input's settings (a stream per entry of `streams`, or
    /// the input itself).
    pub fn from_settings(
        id: &str,
        map: &Map,
        ds: &DataStream,
        out: &mut Vec<Problem>,
    ) -> Option<Filestream> {
        let before = out.len();
        let many =
            matches!(map.get("streams"), Some(leasehold_policy::Value::List(l)) if l.len() > 1);
        let mut streams = Vec::new();
        let maps = super::prometheus::stream_maps(map, &[], out);
        for (i, (prefix, m)) in maps.iter().enumerate() {
            let mut p = Vec::new();
            let default_id = if many {
                format!("{id}-{i}")
            } else {
                id.to_string()
            };
            let s = settings::read_stream(m, default_id, ds, &mut p);
            super::prometheus::push_with_prefix(out, prefix, p);
            streams.push(Arc::new(s));
        }
        let ids: HashSet<&str> = streams.iter().map(|s| s.id.as_str()).collect();
        if ids.len() != streams.len() {
            out.push(
                Problem::new("streams", "two streams have the same id").hint(
                    "each stream keeps its own registry under its id: give each a distinct `id`",
                ),
            );
        }
        if out[before..].iter().any(|p| !p.warning) {
            return None;
        }
        Some(Filestream { streams })
    }
}

impl Input for Filestream {
    fn run(self: Arc<Self>, ctx: InputContext) -> BoxFuture<'static, Result<(), String>> {
        Box::pin(async move {
            let mut tasks = JoinSet::new();
            for s in &self.streams {
                let registry = ctx.registries.open_for(ctx.sink.input_id(), &s.id);
                let sink = ctx.sink.with_data_stream(&s.data_stream);
                let metrics = ctx.registries.metrics(&s.id);
                tasks.spawn(prospect(
                    Arc::clone(s),
                    registry,
                    sink,
                    Stop {
                        cancel: ctx.cancel.clone(),
                        finish: ctx.finish.clone(),
                    },
                    metrics,
                    ctx.health.clone(),
                ));
            }
            let mut result = Ok(());
            while let Some(joined) = tasks.join_next().await {
                if let Ok(Err(e)) = joined {
                    result = Err(e);
                    ctx.cancel.cancel();
                }
            }
            result
        })
    }

    fn state_keys(&self) -> Vec<String> {
        self.streams.iter().map(|s| s.id.clone()).collect()
    }
}

/// How a stream is told to stop: at once (`cancel`), or after reading
/// each file to its end (`finish`).
struct Stop {
    cancel: CancellationToken,
    finish: CancellationToken,
}

/// Scans and reads one stream until cancelled, or until finished: then
/// the files found by one last scan are read to their ends, and it
/// returns once every reader did.
async fn prospect(
    s: Arc<StreamSettings>,
    reg: Arc<StreamRegistry>,
    sink: EventSink,
    stop: Stop,
    metrics: registry::StreamMetrics,
    health: super::InputHealth,
) -> Result<(), String> {
    let mut readers: JoinSet<(FileId, Result<Closed, String>)> = JoinSet::new();
    let mut reading: HashMap<FileId, String> = HashMap::new();
    let mut nothing = NoFiles::default();
    loop {
        let (scan_s, scan_reg) = (Arc::clone(&s), Arc::clone(&reg));
        let busy: HashSet<FileId> = reading.keys().copied().collect();
        let (starts, matched) =
            tokio::task::spawn_blocking(move || plan(&scan_s, &scan_reg, &busy))
                .await
                .map_err(|e| e.to_string())?;
        nothing.scanned(&s, matched + reading.len(), &health);
        for (f, cursor) in starts {
            let reader = Reader {
                settings: Arc::clone(&s),
                path: f.path.clone(),
                id: f.id,
                cursor,
                sink: sink.clone(),
                cancel: stop.cancel.child_token(),
                finish: stop.finish.clone(),
                metrics: metrics.clone(),
            };
            reading.insert(f.id, f.path);
            readers.spawn(async move { (reader.id, reader.run().await) });
        }
        if stop.finish.is_cancelled() {
            // The last scan's files are started: wait for every reader.
            while let Some(joined) = readers.join_next().await {
                if let Ok((id, r)) = joined {
                    report(&s, reading.get(&id), r);
                }
            }
            return Ok(());
        }
        let next_scan = tokio::time::Instant::now() + s.check_interval;
        loop {
            tokio::select! {
                biased;
                () = stop.cancel.cancelled() => {
                    while let Some(joined) = readers.join_next().await {
                        if let Ok((id, r)) = joined {
                            report(&s, reading.get(&id), r);
                        }
                    }
                    return Ok(());
                }
                // One last scan, then wait for the readers.
                () = stop.finish.cancelled() => break,
                Some(joined) = readers.join_next() => {
                    if let Ok((id, r)) = joined {
                        report(&s, reading.get(&id), r);
                        reading.remove(&id);
                    }
                }
                () = tokio::time::sleep_until(next_scan) => break,
            }
        }
    }
}

/// A stream whose paths match no file says so: once in the log and in
/// `/status` (the input shows failing with the reason) after two scans in
/// a row found nothing, and recovers when a file appears. A policy's
/// stream for a source this node lacks (Elastic's audit log on a node
/// without one) is then visible instead of silent.
#[derive(Default)]
struct NoFiles {
    empty_scans: u32,
    said: bool,
}

impl NoFiles {
    fn scanned(&mut self, s: &StreamSettings, files: usize, health: &super::InputHealth) {
        if files > 0 {
            if self.said {
                tracing::info!(stream = %s.id, "files match the stream's paths now; reading them");
                health.recovered();
            }
            *self = NoFiles::default();
            return;
        }
        self.empty_scans += 1;
        if self.empty_scans >= 2 && !self.said {
            self.said = true;
            let why = format!(
                "stream {}: no file matches {}; read as soon as one appears",
                s.id,
                s.paths.join(", ")
            );
            tracing::warn!("{why}");
            health.failing(&why);
        }
    }
}

/// One scan: which files to start reading (and how many match), and the
/// registry cleaned. A known file renamed since it was closed is followed
/// to its new name before anything is forgotten ([`scanner::follow_moved`]).
fn plan(
    s: &StreamSettings,
    reg: &StreamRegistry,
    busy: &HashSet<FileId>,
) -> (Vec<(Found, Arc<Cursor>)>, usize) {
    let found = scanner::scan(s);
    let now = SystemTime::now();
    let mut starts = Vec::new();
    for f in &found {
        if busy.contains(&f.id) {
            continue;
        }
        match scanner::decide(reg, s, f, now) {
            Ok(Some(cursor)) => starts.push((f.clone(), cursor)),
            Ok(None) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(stream = %s.id, path = %f.path, error = %e, "cannot open file; trying again at the next scan")
            }
        }
    }
    let matched: HashSet<FileId> = found.iter().map(|f| f.id).collect();
    starts.extend(scanner::follow_moved(reg, s, &matched, busy));
    if s.clean_removed {
        let mut keep = busy.clone();
        keep.extend(starts.iter().map(|(f, _)| f.id));
        scanner::forget_gone(reg, &keep);
    }
    // A file is recorded before its first line ships: if it is rotated
    // away while the agent is down, the next start still finds it.
    if !starts.is_empty()
        && let Err(e) = reg.flush()
    {
        tracing::warn!(stream = %s.id, error = %e, "cannot write the filestream registry; retrying");
    }
    (starts, found.len())
}

fn report(s: &StreamSettings, path: Option<&String>, r: Result<Closed, String>) {
    let path = path.map_or("", String::as_str);
    match r {
        Ok(Closed::Cancelled | Closed::Refused) => {}
        Ok(Closed::Finished) => {
            tracing::debug!(stream = %s.id, path, "file read to its end before the input stopped for good");
        }
        Ok(why) => tracing::debug!(stream = %s.id, path, reason = ?why, "file closed"),
        Err(e) => {
            tracing::warn!(stream = %s.id, path, error = %e, "file closed after an error; it is opened again at the next scan")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream() -> StreamSettings {
        let json = serde_json::json!({"paths": ["/var/log/kubernetes/kube-apiserver-audit.log"]});
        let leasehold_policy::Value::Map(m) = leasehold_policy::Value::from_json(&json) else {
            unreachable!("a map")
        };
        settings::read_stream(
            &m,
            "audit".into(),
            &crate::pipeline::routing::DataStream::default(),
            &mut Vec::new(),
        )
    }

    #[test]
    fn a_stream_matching_no_file_says_so_once_after_two_scans_and_again_after_it_recovered() {
        let (s, health) = (stream(), crate::inputs::contract::InputHealth::default());
        let mut n = NoFiles::default();
        n.scanned(&s, 0, &health);
        assert!(!n.said, "one empty scan: a file may be on its way");
        n.scanned(&s, 0, &health);
        assert!(n.said);
        n.scanned(&s, 0, &health);
        assert_eq!(n.empty_scans, 3);
        n.scanned(&s, 1, &health);
        assert!(!n.said && n.empty_scans == 0, "a file appeared");
        n.scanned(&s, 0, &health);
        n.scanned(&s, 0, &health);
        assert!(n.said, "gone again: said again");
    }
}
