//! The agent's loop: signals, policy reloads, election events, provider
//! changes and retries, each handled in turn until SIGTERM or SIGINT.

use std::path::PathBuf;
use std::time::Duration;

use super::elections::Election;
use super::load::{Loaded, load, waiting_for_restart};
use super::{Agent, RESTART_PROBLEM, kubernetes};
use crate::kubeconn;

/// How often the policy file is checked for changes.
const POLICY_POLL: Duration = Duration::from_secs(1);

/// The next objects the provider changed, if one runs (never otherwise).
async fn next_changes(
    provider: &mut Option<(kubernetes::settings::ProviderSettings, kubernetes::Provider)>,
) -> Option<kubernetes::Changes> {
    match provider {
        Some((_, p)) => match p.changes.recv().await {
            Some(c) => Some(c),
            None => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

impl Agent {
    /// Runs until SIGTERM or SIGINT, then shuts down; returns the exit code.
    pub async fn run(mut self) -> i32 {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::hangup()),
        ) else {
            tracing::error!("cannot install signal handlers");
            return 1;
        };
        let specs = self.loaded.elections.clone();
        self.start_elections(specs).await;
        self.start_provider().await;
        self.reconcile();
        self.board.set_ready(true, "running");
        let mut poll = tokio::time::interval(POLICY_POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = term.recv() => { tracing::info!("SIGTERM: shutting down"); break; }
                _ = int.recv() => { tracing::info!("SIGINT: shutting down"); break; }
                _ = hup.recv() => self.reload("SIGHUP").await,
                _ = poll.tick() => {
                    if self.policy_changed() {
                        self.reload("policy file changed").await;
                    }
                    self.prune_stopping();
                }
                Some(ev) = self.events_rx.recv() => {
                    self.on_election_event(ev);
                    while let Ok(ev) = self.events_rx.try_recv() {
                        self.on_election_event(ev);
                    }
                    self.update_deferrals();
                    self.reconcile();
                }
                Some(f) = self.failures_rx.recv() => self.on_gated_failure(f),
                Some(changes) = next_changes(&mut self.provider) => {
                    self.on_provider_changes(changes);
                }
                Some(key) = self.retry_rx.recv() => {
                    self.connect_election(key).await;
                }
                Some(key) = self.balancers.release_rx.recv() => self.hand_over_shard(key),
            }
        }
        self.shutdown().await;
        0
    }

    /// Starts, restarts or stops the `kubernetes` provider to match the
    /// policy. Without a connection it is reported and retried at the next
    /// reload; inputs reading its variables wait.
    async fn start_provider(&mut self) {
        let want = self.loaded.kubernetes.clone();
        if self.provider.as_ref().map(|(s, _)| s) == want.as_ref() {
            return;
        }
        if let Some((_, p)) = self.provider.take() {
            p.shutdown().await;
        }
        let Some(settings) = want else {
            self.board.set_problem(kubernetes::PROVIDER_PROBLEM, None);
            return;
        };
        let kubeconfig = settings
            .kube_config
            .as_ref()
            .map(PathBuf::from)
            .or_else(|| self.opts.kubeconfig.clone());
        match kubeconn::connect(kubeconfig.as_deref()).await {
            Ok(conn) => {
                let p = kubernetes::Provider::start(
                    settings.clone(),
                    conn.client,
                    self.statics.fields.node.clone(),
                    self.board.clone(),
                );
                self.provider = Some((settings, p));
            }
            Err(e) => {
                let why = format!("kubernetes provider cannot connect: {e}");
                tracing::error!("{why}");
                self.board
                    .set_problem(kubernetes::PROVIDER_PROBLEM, Some((why, false)));
            }
        }
    }

    fn policy_changed(&self) -> bool {
        match self.opts.files.read() {
            Ok(snapshot) => snapshot != self.loaded.snapshot,
            // A missing file is reported at reload; the running policy stays.
            Err(_) => false,
        }
    }

    async fn reload(&mut self, why: &str) {
        let new = match load(&self.opts.files, &self.statics) {
            Ok(l) => l,
            Err(errors) => {
                // `load` redacted the rejected file's secrets; these are
                // of the policy in force.
                let errors: Vec<String> = errors
                    .iter()
                    .map(|e| self.loaded.redactor.redact(e))
                    .collect();
                // Status and metrics first: whoever sees the log line finds them updated.
                self.board.policy_rejected(errors.join("; "));
                self.metrics.policy_reload(false);
                for e in &errors {
                    tracing::error!("policy reload ({why}) rejected: {e}");
                }
                // Do not report the same bad file every second.
                if let Ok(snapshot) = self.opts.files.read() {
                    self.loaded.snapshot = snapshot;
                }
                return;
            }
        };
        tracing::info!("policy reloaded ({why})");
        let waiting = waiting_for_restart(&self.loaded, &new);
        self.pending_outputs = (new.outputs != self.loaded.outputs).then(|| new.outputs.clone());
        let restart = (!waiting.is_empty()).then(|| {
            let text = format!(
                "{}: the running ones stay until the agent restarts; restart it (delete the pod) to apply them",
                waiting.join("; ")
            );
            tracing::warn!("{text}");
            (text, false)
        });
        self.board.set_problem(RESTART_PROBLEM, restart);
        let old_specs: Vec<_> = self.elections.iter().map(|e| e.spec.clone()).collect();
        let (outputs, settings) = (self.loaded.outputs.clone(), self.loaded.settings.clone());
        // The outputs keep running with the old settings: keep their
        // secrets redacted too.
        let mut redactor = self.loaded.redactor.clone();
        redactor.extend(&new.redactor);
        self.loaded = Loaded {
            outputs,
            settings,
            redactor,
            ..new
        };
        if old_specs != self.loaded.elections {
            let keep: Vec<_> = self.loaded.elections.clone();
            let (stay, go): (Vec<Election>, Vec<Election>) = std::mem::take(&mut self.elections)
                .into_iter()
                .partition(|e| keep.contains(&e.spec));
            self.elections = stay;
            for e in go {
                self.board.remove_election(&e.spec.label());
                if let Some(h) = e.handle {
                    tracing::info!(lease = %e.spec.lease, "election removed from the policy: stepping down");
                    h.shutdown().await;
                }
            }
            let new_specs: Vec<_> = keep
                .into_iter()
                .filter(|s| !self.elections.iter().any(|e| &e.spec == s))
                .collect();
            self.start_elections(new_specs).await;
        }
        self.start_provider().await;
        self.board
            .policy_loaded(self.opts.files.policy.display().to_string());
        self.metrics.policy_reload(true);
        self.reconcile();
    }
}
