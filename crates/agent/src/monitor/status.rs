//! The status document served at `/status` and the board the runtime keeps
//! it on.
//!
//! The board shows exactly what its setters were given and nothing else.
//! Callers pass identities, names, ids, types, paths and error messages;
//! they must never pass settings values, credentials or tokens, because
//! everything on the board is readable by anyone who can reach the
//! monitoring port. As a second line, every error message and reason is
//! passed through the board's [`Redactor`] when the document is read: URL
//! userinfo is cut and the secrets of the configuration are replaced.

use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;

use crate::redact::Redactor;

/// The whole `/status` document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StatusDoc {
    /// This agent's identity (its candidate name in every election).
    pub identity: String,
    /// Every election, in the order they were first reported.
    pub elections: Vec<ElectionEntry>,
    /// The inputs that run and those the policy named but the agent dropped.
    pub inputs: InputsStatus,
    /// Every output with its current queue depth.
    pub outputs: Vec<OutputStatus>,
    /// The policy in force, `null` until one was loaded or rejected.
    pub policy: Option<PolicyStatus>,
    /// What is wrong with the agent beyond one input or output (a registry
    /// that cannot be written, an election that cannot start, a change
    /// that waits for a restart), each with the fix; empty when nothing.
    pub problems: Vec<AgentProblem>,
}

/// One problem of the agent as a whole.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AgentProblem {
    /// What it concerns, e.g. `filestream registry`.
    pub component: String,
    /// What is wrong, and the fix.
    pub error: String,
    /// Since when, RFC 3339 in UTC.
    pub since: String,
    /// Whether `/readyz` fails while it lasts.
    pub affects_readiness: bool,
}

/// What this agent knows of one election.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ElectionState {
    /// This agent holds the lease.
    Leading,
    /// Another candidate holds the lease.
    Following,
    /// Not known yet, or the lease could not be read lately.
    Unknown,
    /// The elector has stopped.
    Stopped,
}

/// One election as the runtime reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ElectionStatus {
    /// The Lease's name.
    pub lease: String,
    /// The Lease's namespace.
    pub namespace: String,
    /// Where this agent stands.
    pub state: ElectionState,
    /// The holder the lease names, if any.
    pub holder: Option<String>,
    /// The current term, if known.
    pub term: Option<u64>,
}

/// An election under the name the policy gave it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ElectionEntry {
    /// The election's name in the policy.
    pub name: String,
    /// Its status.
    #[serde(flatten)]
    pub status: ElectionStatus,
}

/// Whether a running input is producing or waiting to be restarted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum InputState {
    /// Producing.
    Running,
    /// Failed; waiting before the next restart.
    Backoff,
    /// Running, but its work fails (every scrape of a target that answers
    /// too much, say): `last_error` says why.
    Failing,
}

/// One input the runtime keeps running.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InputStatus {
    /// The input's id.
    pub id: String,
    /// The input's type, e.g. `exec`.
    #[serde(rename = "type")]
    pub kind: String,
    /// When it last (re)started, RFC 3339 in UTC.
    pub since: String,
    /// Restarts so far.
    pub restarts: u64,
    /// The error of its latest failure, if it ever failed.
    pub last_error: Option<String>,
    /// Running or in backoff.
    pub state: InputState,
}

/// An input the agent does not run, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DroppedInput {
    /// The input's id.
    pub id: String,
    /// Why it is not running.
    pub reason: String,
}

/// The `inputs` object of the document.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct InputsStatus {
    /// Inputs the runtime keeps running, in the order they were started.
    pub running: Vec<InputStatus>,
    /// Inputs not run.
    pub dropped: Vec<DroppedInput>,
}

/// One output and the events waiting in its queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OutputStatus {
    /// The output's name.
    pub name: String,
    /// The output's type, e.g. `file`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Events queued and not yet written.
    pub queue_depth: usize,
    /// Bytes of events held in memory (queue and batch being written).
    pub queue_bytes: usize,
    /// Whether it is delivering, and its latest error.
    #[serde(flatten)]
    pub health: crate::outputs::OutputHealth,
}

/// The policy in force and how its reloads went.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PolicyStatus {
    /// The policy file.
    pub path: String,
    /// When the policy in force was loaded, RFC 3339 in UTC; `null` if none
    /// was ever loaded.
    pub loaded_at: Option<String>,
    /// Why the latest load attempt was rejected; `null` when it succeeded.
    pub last_error: Option<String>,
    /// Successful loads after the first one.
    pub reloads: u64,
    /// Rejected load attempts.
    pub reload_failures: u64,
}

/// Reports every output as it is now (queue depth, health), read each
/// time the document is served.
pub type OutputSource = Arc<dyn Fn() -> Vec<OutputStatus> + Send + Sync>;

pub use crate::pipeline::event::now_rfc3339;

#[derive(Debug)]
struct Readiness {
    ready: bool,
    reason: String,
}

struct Board {
    identity: String,
    elections: Vec<ElectionEntry>,
    inputs: InputsStatus,
    outputs: Option<OutputSource>,
    policy: Option<PolicyStatus>,
    readiness: Readiness,
    redactor: Redactor,
    problems: Vec<AgentProblem>,
}

impl Default for Board {
    fn default() -> Self {
        Board {
            identity: String::new(),
            elections: Vec::new(),
            inputs: InputsStatus::default(),
            outputs: None,
            policy: None,
            readiness: Readiness {
                ready: false,
                reason: "starting".into(),
            },
            redactor: Redactor::new(),
            problems: Vec::new(),
        }
    }
}

/// The agent's status, shared by the runtime (which writes it) and the
/// monitoring server (which reads it). Clones share one board.
///
/// Setters must never receive settings values or secrets: whatever is set
/// here is served to anyone who can reach `/status`.
#[derive(Clone, Default)]
pub struct StatusBoard {
    inner: Arc<Mutex<Board>>,
}

impl std::fmt::Debug for StatusBoard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusBoard").finish_non_exhaustive()
    }
}

impl StatusBoard {
    /// An empty board: no identity, nothing running, not ready ("starting").
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Board> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets this agent's identity.
    pub fn set_identity(&self, identity: impl Into<String>) {
        self.lock().identity = identity.into();
    }

    /// Adds or replaces the election called `name`.
    pub fn set_election(&self, name: impl Into<String>, status: ElectionStatus) {
        let name = name.into();
        let mut b = self.lock();
        match b.elections.iter_mut().find(|e| e.name == name) {
            Some(e) => e.status = status,
            None => b.elections.push(ElectionEntry { name, status }),
        }
    }

    /// Removes the election called `name`, if present.
    pub fn remove_election(&self, name: &str) {
        self.lock().elections.retain(|e| e.name != name);
    }

    /// Replaces every input at once.
    pub fn set_inputs(&self, running: Vec<InputStatus>, dropped: Vec<DroppedInput>) {
        self.lock().inputs = InputsStatus { running, dropped };
    }

    /// Input `id` of type `kind` started now. A known input keeps its
    /// restart count and last error.
    pub fn input_started(&self, id: impl Into<String>, kind: impl Into<String>) {
        let (id, kind) = (id.into(), kind.into());
        let since = now_rfc3339();
        let mut b = self.lock();
        b.inputs.dropped.retain(|d| d.id != id);
        match b.inputs.running.iter_mut().find(|i| i.id == id) {
            Some(i) => {
                i.kind = kind;
                i.since = since;
                i.state = InputState::Running;
            }
            None => b.inputs.running.push(InputStatus {
                id,
                kind,
                since,
                restarts: 0,
                last_error: None,
                state: InputState::Running,
            }),
        }
    }

    /// Input `id` failed with `error` and waits to be restarted.
    pub fn input_failed(&self, id: &str, error: impl Into<String>) {
        let mut b = self.lock();
        if let Some(i) = b.inputs.running.iter_mut().find(|i| i.id == id) {
            i.last_error = Some(error.into());
            i.state = InputState::Backoff;
        }
    }

    /// Input `id` was restarted now; it keeps its last error.
    pub fn input_restarted(&self, id: &str) {
        let since = now_rfc3339();
        let mut b = self.lock();
        if let Some(i) = b.inputs.running.iter_mut().find(|i| i.id == id) {
            i.restarts += 1;
            i.since = since;
            i.state = InputState::Running;
        }
    }

    /// Input `id` stopped for good (its term ended, or the policy no longer
    /// names it).
    pub fn input_stopped(&self, id: &str) {
        self.lock().inputs.running.retain(|i| i.id != id);
    }

    /// Replaces the list of inputs not run (after each rendering).
    pub fn set_dropped(&self, dropped: Vec<DroppedInput>) {
        self.lock().inputs.dropped = dropped;
    }

    /// Input `id` is not run, for `reason`.
    pub fn input_dropped(&self, id: impl Into<String>, reason: impl Into<String>) {
        let (id, reason) = (id.into(), reason.into());
        let mut b = self.lock();
        b.inputs.running.retain(|i| i.id != id);
        match b.inputs.dropped.iter_mut().find(|d| d.id == id) {
            Some(d) => d.reason = reason,
            None => b.inputs.dropped.push(DroppedInput { id, reason }),
        }
    }

    /// Reports outputs through `source`, called each time the document is
    /// read (no outputs until it is set).
    pub fn set_outputs(&self, source: OutputSource) {
        self.lock().outputs = Some(source);
    }

    /// The policy at `path` was loaded now and is in force.
    pub fn policy_loaded(&self, path: impl Into<String>) {
        let path = path.into();
        let loaded_at = now_rfc3339();
        let mut b = self.lock();
        let p = b.policy.get_or_insert_with(PolicyStatus::default);
        if p.loaded_at.is_some() {
            p.reloads += 1;
        }
        p.path = path;
        p.loaded_at = Some(loaded_at);
        p.last_error = None;
    }

    /// A load attempt was rejected with `error`; the policy in force, if
    /// any, stays.
    pub fn policy_rejected(&self, error: impl Into<String>) {
        let mut b = self.lock();
        let p = b.policy.get_or_insert_with(PolicyStatus::default);
        p.last_error = Some(error.into());
        p.reload_failures += 1;
    }

    /// Sets what is redacted from messages: the secrets of the
    /// configuration in force (and of a rejected one).
    pub fn set_redactor(&self, redactor: Redactor) {
        self.lock().redactor = redactor;
    }

    /// Sets readiness; `reason` says why the agent is not ready (it is
    /// ignored when `ready`).
    pub fn set_ready(&self, ready: bool, reason: impl Into<String>) {
        self.lock().readiness = Readiness {
            ready,
            reason: reason.into(),
        };
    }

    /// `Ok` when ready, else `Err` with the reason: not started or
    /// shutting down, or a problem that affects readiness.
    pub fn readiness(&self) -> Result<(), String> {
        let b = self.lock();
        if !b.readiness.ready {
            return Err(b.readiness.reason.clone());
        }
        match b.problems.iter().find(|p| p.affects_readiness) {
            Some(p) => Err(b.redactor.redact(&format!("{}: {}", p.component, p.error))),
            None => Ok(()),
        }
    }

    /// Sets (`Some`) or clears (`None`) the problem of `component`; a
    /// problem set again keeps its `since`.
    pub fn set_problem(&self, component: &str, problem: Option<(String, bool)>) {
        let mut b = self.lock();
        match problem {
            None => b.problems.retain(|p| p.component != component),
            Some((error, affects_readiness)) => {
                match b.problems.iter_mut().find(|p| p.component == component) {
                    Some(p) => {
                        p.error = error;
                        p.affects_readiness = affects_readiness;
                    }
                    None => b.problems.push(AgentProblem {
                        component: component.to_string(),
                        error,
                        since: now_rfc3339(),
                        affects_readiness,
                    }),
                }
            }
        }
    }

    /// Input `id` runs but its work fails with `error`.
    pub fn input_failing(&self, id: &str, error: impl Into<String>) {
        let mut b = self.lock();
        if let Some(i) = b.inputs.running.iter_mut().find(|i| i.id == id) {
            i.last_error = Some(error.into());
            i.state = InputState::Failing;
        }
    }

    /// Input `id`'s work succeeds again; it keeps its last error.
    pub fn input_recovered(&self, id: &str) {
        let mut b = self.lock();
        if let Some(i) = b.inputs.running.iter_mut().find(|i| i.id == id)
            && i.state == InputState::Failing
        {
            i.state = InputState::Running;
        }
    }

    /// The document as it stands now.
    pub fn snapshot(&self) -> StatusDoc {
        let (mut doc, source, redactor) = {
            let b = self.lock();
            let doc = StatusDoc {
                identity: b.identity.clone(),
                elections: b.elections.clone(),
                inputs: b.inputs.clone(),
                outputs: Vec::new(),
                policy: b.policy.clone(),
                problems: b.problems.clone(),
            };
            (doc, b.outputs.clone(), b.redactor.clone())
        };
        // Called outside the lock: it reads the outputs' own state.
        if let Some(source) = source {
            doc.outputs = source();
        }
        let clean = |text: &mut String| *text = redactor.redact(text);
        for i in &mut doc.inputs.running {
            i.last_error.iter_mut().for_each(clean);
        }
        for d in &mut doc.inputs.dropped {
            clean(&mut d.reason);
        }
        for o in &mut doc.outputs {
            o.health.last_error.iter_mut().for_each(clean);
            o.health.last_drop_reason.iter_mut().for_each(clean);
        }
        if let Some(p) = &mut doc.policy {
            p.last_error.iter_mut().for_each(clean);
        }
        for p in &mut doc.problems {
            clean(&mut p.error);
        }
        doc
    }
}

impl crate::inputs::HealthBoard for StatusBoard {
    fn input_failing(&self, id: &str, error: &str) {
        StatusBoard::input_failing(self, id, error);
    }

    fn input_recovered(&self, id: &str) {
        StatusBoard::input_recovered(self, id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_are_listed_and_those_that_affect_readiness_fail_it() {
        let b = StatusBoard::new();
        b.set_ready(true, "");
        b.input_started("s", "prometheus/metrics");
        b.input_failing("s", "body over 64 MiB");
        assert_eq!(b.snapshot().inputs.running[0].state, InputState::Failing);
        b.input_recovered("s");
        assert_eq!(b.snapshot().inputs.running[0].state, InputState::Running);
        b.set_problem(
            "policy",
            Some(("restart to apply `outputs:`".into(), false)),
        );
        assert_eq!(
            b.readiness(),
            Ok(()),
            "a pending restart leaves the agent ready"
        );
        b.set_problem("filestream registry", Some(("cannot write".into(), true)));
        assert!(
            b.readiness()
                .unwrap_err()
                .contains("filestream registry: cannot write")
        );
        let doc = b.snapshot();
        assert_eq!(doc.problems.len(), 2);
        b.set_problem("filestream registry", None);
        assert_eq!(b.readiness(), Ok(()));
        assert_eq!(b.snapshot().problems.len(), 1);
    }

    #[test]
    fn input_lifecycle_updates_state_restarts_and_error() {
        let b = StatusBoard::new();
        b.input_started("x", "exec");
        b.input_failed("x", "exit status 1");
        let i = b.snapshot().inputs.running[0].clone();
        assert_eq!(i.state, InputState::Backoff);
        assert_eq!(i.last_error.as_deref(), Some("exit status 1"));
        b.input_restarted("x");
        let i = b.snapshot().inputs.running[0].clone();
        assert_eq!((i.state, i.restarts), (InputState::Running, 1));
        assert_eq!(i.last_error.as_deref(), Some("exit status 1"));
        b.input_stopped("x");
        assert!(b.snapshot().inputs.running.is_empty());
        b.input_dropped("y", "not leader-only");
        b.input_started("y", "exec");
        let inputs = b.snapshot().inputs;
        assert!(inputs.dropped.is_empty());
        assert_eq!(inputs.running[0].id, "y");
    }

    #[test]
    fn policy_counts_reloads_after_the_first_load_and_failures() {
        let b = StatusBoard::new();
        assert_eq!(b.snapshot().policy, None);
        b.policy_loaded("/etc/p.yaml");
        b.policy_rejected("bad yaml");
        let p = b.snapshot().policy.unwrap();
        assert_eq!((p.reloads, p.reload_failures), (0, 1));
        assert_eq!(p.last_error.as_deref(), Some("bad yaml"));
        assert!(p.loaded_at.is_some());
        b.policy_loaded("/etc/p.yaml");
        let p = b.snapshot().policy.unwrap();
        assert_eq!((p.reloads, p.reload_failures), (1, 1));
        assert_eq!(p.last_error, None);
    }

    #[test]
    fn elections_keep_their_order_and_are_replaced_by_name() {
        let b = StatusBoard::new();
        let st = |state| ElectionStatus {
            lease: "l".into(),
            namespace: "ns".into(),
            state,
            holder: None,
            term: None,
        };
        b.set_election("a", st(ElectionState::Unknown));
        b.set_election("b", st(ElectionState::Following));
        b.set_election("a", st(ElectionState::Leading));
        let names: Vec<_> = b
            .snapshot()
            .elections
            .into_iter()
            .map(|e| (e.name, e.status.state))
            .collect();
        assert_eq!(
            names,
            [
                ("a".to_string(), ElectionState::Leading),
                ("b".to_string(), ElectionState::Following)
            ]
        );
        b.remove_election("a");
        assert_eq!(b.snapshot().elections.len(), 1);
    }

    #[test]
    fn outputs_are_read_from_their_source_at_every_snapshot() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let b = StatusBoard::new();
        assert!(b.snapshot().outputs.is_empty());
        let depth = Arc::new(AtomicUsize::new(0));
        let d = Arc::clone(&depth);
        b.set_outputs(Arc::new(move || {
            vec![OutputStatus {
                name: "default".into(),
                kind: "file".into(),
                queue_depth: d.load(Ordering::Relaxed),
                queue_bytes: 0,
                health: Default::default(),
            }]
        }));
        assert_eq!(b.snapshot().outputs[0].queue_depth, 0);
        depth.store(7, Ordering::Relaxed);
        assert_eq!(b.snapshot().outputs[0].queue_depth, 7);
    }

    #[test]
    fn errors_are_shown_without_url_userinfo_or_known_secrets() {
        let b = StatusBoard::new();
        let mut r = Redactor::new();
        r.add("s3cr3t-pw");
        b.set_redactor(r);
        b.input_started("x", "prometheus/metrics");
        b.input_failed("x", "http://u:pw-in-url@node:9100/metrics: refused");
        b.input_dropped("y", "token s3cr3t-pw is not allowed");
        b.policy_rejected("`outputs.es.password`: found s3cr3t-pw");
        b.set_outputs(Arc::new(|| {
            vec![OutputStatus {
                name: "default".into(),
                kind: "elasticsearch".into(),
                queue_depth: 1,
                queue_bytes: 0,
                health: crate::outputs::OutputHealth {
                    last_error: Some(
                        "HTTP 401: bad password s3cr3t-pw for http://u:s3cr3t-pw@es:9200".into(),
                    ),
                    last_drop_reason: Some("HTTP 400: field s3cr3t-pw".into()),
                    ..Default::default()
                },
            }]
        }));
        let doc = serde_json::to_string(&b.snapshot()).unwrap();
        assert!(
            !doc.contains("s3cr3t") && !doc.contains("pw-in-url"),
            "{doc}"
        );
        assert!(doc.contains("http://node:9100/metrics: refused"), "{doc}");
        assert!(
            doc.contains("bad password [redacted] for http://es:9200"),
            "{doc}"
        );
    }

    #[test]
    fn readiness_starts_false_with_a_reason() {
        let b = StatusBoard::new();
        assert_eq!(b.readiness(), Err("starting".into()));
        b.set_ready(true, "");
        assert_eq!(b.readiness(), Ok(()));
    }
}
