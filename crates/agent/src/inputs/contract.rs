//! What every input kind codes against: the context a running input gets
//! (where its events go, when to stop, its health, its registries) and the
//! trait it implements. The kinds import this, never the dispatch in the
//! parent module, so the parent and the kinds do not import each other.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::pipeline::publisher::EventSink;

/// What a running input gets.
pub struct InputContext {
    /// Where its events go.
    pub sink: EventSink,
    /// Fires when the input must stop (removed, reloaded, step-down,
    /// shutdown).
    pub cancel: CancellationToken,
    /// Fires when the input is gone for good and nothing else will read
    /// what it was reading (its container restarted or went): an input
    /// that keeps state ([`Input::state_keys`]) reads what is there to
    /// its end, hands it over, then returns `Ok`. `cancel` still fires
    /// if that takes too long.
    pub finish: CancellationToken,
    /// How long a child process gets between SIGTERM and SIGKILL.
    pub stop_grace: Duration,
    /// How to reach the cluster, for inputs that read the API.
    pub cluster: ClusterAccess,
    /// Where inputs that resume after a restart keep their progress.
    pub registries: Arc<crate::inputs::filestream::registry::Registries>,
    /// Where an input that keeps running says its work fails.
    pub health: InputHealth,
    /// Keeps the policy's secrets out of what the input logs of others'
    /// text (a child's stderr).
    pub redactor: crate::redact::Redactor,
}

/// Where inputs' health is shown (`/status`).
pub trait HealthBoard: Send + Sync {
    /// Input `id`'s work fails with `error`.
    fn input_failing(&self, id: &str, error: &str);
    /// Input `id`'s work succeeds again.
    fn input_recovered(&self, id: &str);
}

/// How a running input reports that its work fails (a scrape refused
/// every period) and recovers, so `/status` does not show it healthy.
#[derive(Clone, Default)]
pub struct InputHealth {
    board: Option<(Arc<dyn HealthBoard>, Arc<str>)>,
}

impl InputHealth {
    /// Reports input `id` on `board`.
    pub fn new(board: Arc<dyn HealthBoard>, id: &str) -> InputHealth {
        InputHealth {
            board: Some((board, id.into())),
        }
    }

    /// Its work failed with `error` (it goes on trying).
    pub fn failing(&self, error: &str) {
        if let Some((b, id)) = &self.board {
            b.input_failing(id, error);
        }
    }

    /// Its work succeeds again.
    pub fn recovered(&self) {
        if let Some((b, id)) = &self.board {
            b.input_recovered(id);
        }
    }
}

/// What an input that reads the Kubernetes API needs from the agent.
#[derive(Clone, Default)]
pub struct ClusterAccess {
    /// `--kubeconfig` (else in-cluster or the usual defaults).
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The handover checkpoints of the election a gated input runs under.
    pub checkpoints: Option<leasehold_election::Checkpoints>,
}

/// A runnable input.
pub trait Input: Send + Sync + 'static {
    /// Runs until `ctx.cancel` fires (then `Ok`), or fails.
    fn run(self: Arc<Self>, ctx: InputContext) -> BoxFuture<'static, Result<(), String>>;

    /// The registries this input resumes from (a filestream's stream
    /// ids). Two inputs naming the same one would read and delete each
    /// other's offsets; an input with any is drained, not cut off, when
    /// it stops for good (see [`InputContext::finish`]).
    fn state_keys(&self) -> Vec<String> {
        Vec::new()
    }
}
