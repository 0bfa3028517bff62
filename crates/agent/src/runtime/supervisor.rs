//! Runs one input instance: starts it, restarts it with exponential backoff
//! when it fails or exits, reports every failure, and stops for good when
//! its token is cancelled (removed, reloaded, step-down or shutdown). A
//! panicking input counts as a failure; it never takes the agent down.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use crate::inputs::{InputContext, InputSpec};
use crate::monitor::metrics::AgentMetrics;
use crate::monitor::status::StatusBoard;
use crate::pipeline::publisher::EventSink;

/// The first wait before a restart; it doubles up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait before a restart.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// A run at least this long resets the backoff and the failure count.
pub const HEALTHY_RUN: Duration = Duration::from_secs(60);

/// A failure of a gated input, for the handover rule.
#[derive(Debug, Clone)]
pub struct GatedFailure {
    /// The election key the input is bound to.
    pub election: usize,
    /// The term it runs under.
    pub term: i64,
    /// The input.
    pub id: String,
    /// Failures in a row.
    pub failures: u32,
}

/// Everything one supervised input needs.
pub struct Supervised {
    /// Input id.
    pub id: String,
    /// What to run.
    pub spec: InputSpec,
    /// Builds the sink of each run (a fresh one per run).
    pub sink: EventSink,
    /// Stops the input for good.
    pub cancel: CancellationToken,
    /// Asks it to finish what it was reading, then stop for good.
    pub finish: CancellationToken,
    /// The policy's secrets, kept out of what the input logs.
    pub redactor: crate::redact::Redactor,
    /// SIGTERM → SIGKILL grace of child processes.
    pub stop_grace: Duration,
    /// Cluster access for API-reading inputs.
    pub cluster: crate::inputs::ClusterAccess,
    /// Registries of inputs that resume after a restart.
    pub registries: Arc<crate::inputs::filestream::registry::Registries>,
    /// Set for gated inputs: (election key, term) and where to report
    /// failures.
    pub gated: Option<(usize, i64, UnboundedSender<GatedFailure>)>,
    /// Status page.
    pub board: StatusBoard,
    /// Metrics.
    pub metrics: AgentMetrics,
}

/// Runs until cancelled.
pub async fn supervise(s: Supervised) {
    let mut backoff = FIRST_BACKOFF;
    let mut failures: u32 = 0;
    s.metrics.input_started();
    loop {
        if s.stopped() {
            break;
        }
        let started = Instant::now();
        let ctx = InputContext {
            sink: s.sink.clone(),
            cancel: s.cancel.clone(),
            finish: s.finish.clone(),
            stop_grace: s.stop_grace,
            cluster: s.cluster.clone(),
            registries: Arc::clone(&s.registries),
            health: crate::inputs::InputHealth::new(Arc::new(s.board.clone()), &s.id),
            redactor: s.redactor.clone(),
        };
        let input = Arc::clone(&s.spec.input);
        // A task of its own, so a panic is caught and reported.
        let result = match tokio::spawn(input.run(ctx)).await {
            Ok(r) => r,
            Err(e) if e.is_panic() => Err(format!("input panicked: {}", panic_text(e))),
            Err(_) => Err("input task was aborted".into()),
        };
        if s.stopped() {
            break;
        }
        let error = result
            .err()
            .unwrap_or_else(|| "input ended without being asked to stop".into());
        if started.elapsed() >= HEALTHY_RUN {
            failures = 0;
            backoff = FIRST_BACKOFF;
        }
        failures += 1;
        tracing::warn!(input = %s.id, failures, "input failed: {error}; restarting in {backoff:?}");
        s.board.input_failed(&s.id, &error);
        s.metrics.input_failed(&s.id);
        if let Some((election, term, tx)) = &s.gated {
            let _ = tx.send(GatedFailure {
                election: *election,
                term: *term,
                id: s.id.clone(),
                failures,
            });
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = s.cancel.cancelled() => break,
            () = s.finish.cancelled() => break,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
        s.board.input_restarted(&s.id);
        s.metrics.input_restarted(&s.id);
    }
    s.metrics.input_stopped();
}

impl Supervised {
    /// Asked to stop (at once or after finishing), or its term ended.
    fn stopped(&self) -> bool {
        self.cancel.is_cancelled() || self.finish.is_cancelled() || self.sink.term_ended()
    }
}

fn panic_text(e: tokio::task::JoinError) -> String {
    let p = e.into_panic();
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}
