//! [`LeaseLock`] on a real API server through kube-rs. Writes take the
//! object read at exactly the resourceVersion the core chose, so fields
//! the election does not manage (`preferredHolder`, `strategy`, labels,
//! annotations) are never reverted by a write based on an older body.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use kube::api::{Api, DynamicObject, PostParams, WatchEvent as KubeEvent, WatchParams};

use super::checkpoint::Checkpoints;
use super::errors::{ApiOutcome, Endpoint, classify, code_label, explain, forbidden_message};
use super::lease::{build_ack, build_new, build_update, lease_resource, parse};
use super::lock::{LeaseLock, LockError, LockWatchEvent};
use super::metrics::Metrics;
use crate::core::{Failure, LeaseRecord, Observed, Term};

/// How long a 403 must last before it is explained as missing RBAC rights.
const FORBIDDEN_LASTS: std::time::Duration = std::time::Duration::from_secs(10);

/// How many objects (by resourceVersion) are kept as bases for writes.
const KEPT_OBJECTS: usize = 16;

/// The last objects read, so a write is based on exactly the object read
/// at the resourceVersion the core chose (never on whatever was read last).
#[derive(Default)]
pub(crate) struct ObjectsByVersion(Mutex<VecDeque<DynamicObject>>);

impl ObjectsByVersion {
    pub(crate) fn keep(&self, obj: DynamicObject) {
        let mut objects = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if objects.len() >= KEPT_OBJECTS {
            objects.pop_front();
        }
        objects.push_back(obj);
    }

    pub(crate) fn at(&self, rv: &str) -> Option<DynamicObject> {
        let objects = self.0.lock().unwrap_or_else(|p| p.into_inner());
        objects
            .iter()
            .rev()
            .find(|o| o.metadata.resource_version.as_deref() == Some(rv))
            .cloned()
    }
}

/// One Lease on the API server.
#[derive(Clone)]
pub(crate) struct KubeLock {
    inner: Arc<Inner>,
}

struct Inner {
    api: Api<DynamicObject>,
    namespace: String,
    lease: String,
    metrics: Arc<dyn Metrics>,
    /// Objects as read, to base writes on.
    objects: ObjectsByVersion,
    /// Verbs refused with 403: since when, and whether the refusal was
    /// explained (once it lasted; once per outage).
    forbidden: Mutex<Vec<(&'static str, std::time::Instant, bool)>>,
    /// Who connects where, for error messages.
    endpoint: Endpoint,
    /// The last connection or credentials problem explained (once per outage).
    explained: Mutex<Option<String>>,
    /// Handover checkpoints, written on our writes and read from every object.
    checkpoints: Checkpoints,
    /// Our identity, to tell our writes from others'.
    identity: String,
    /// Whether a missing Lease's namespace was checked since the Lease was
    /// last found (once per absence: a dry-run create tells a missing
    /// namespace from a missing Lease at once, instead of at the first
    /// real create one lease duration later).
    namespace_checked: std::sync::atomic::AtomicBool,
    /// Labels every write puts on the Lease (the rename fence's).
    labels: Vec<(String, String)>,
}

impl KubeLock {
    pub(crate) fn new(
        client: kube::Client,
        namespace: &str,
        lease: &str,
        metrics: Arc<dyn Metrics>,
        endpoint: Endpoint,
        checkpoints: Checkpoints,
        identity: &str,
    ) -> KubeLock {
        KubeLock {
            inner: Arc::new(Inner {
                api: Api::namespaced_with(client, namespace, &lease_resource()),
                namespace: namespace.into(),
                lease: lease.into(),
                metrics,
                objects: ObjectsByVersion::default(),
                forbidden: Mutex::default(),
                endpoint,
                explained: Mutex::default(),
                checkpoints,
                identity: identity.to_string(),
                namespace_checked: std::sync::atomic::AtomicBool::new(false),
                labels: Vec::new(),
            }),
        }
    }

    /// The same lock, putting `labels` on every Lease it writes (the
    /// rename fence's). Only on a lock not yet shared.
    pub(crate) fn labelled(mut self, labels: Vec<(String, String)>) -> KubeLock {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.labels = labels;
        }
        self
    }
}

impl Inner {
    /// The Lease is missing: says at once, with the fix, when its namespace
    /// is missing too (a dry-run create answers 404 for the namespace), so
    /// nobody waits for a leader that can never be elected.
    async fn check_namespace(&self) {
        use std::sync::atomic::Ordering;
        if self.namespace_checked.swap(true, Ordering::Relaxed) {
            return;
        }
        let probe = build_new(&self.namespace, &self.lease, &Default::default());
        let params = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        if let Err(kube::Error::Api(status)) = self.api.create(&params, &probe).await
            && status.code == 404
        {
            tracing::error!(
                lease = %self.lease,
                namespace = %self.namespace,
                "namespace \"{}\" does not exist, so Lease \"{}\" cannot be created and nobody can lead: create it (kubectl create namespace {}) or set the election's namespace to an existing one",
                self.namespace,
                self.lease,
                self.namespace
            );
        }
    }

    /// Puts our labels on an object about to be written.
    fn label(&self, obj: &mut DynamicObject) {
        if self.labels.is_empty() {
            return;
        }
        let labels = obj.metadata.labels.get_or_insert_default();
        for (k, v) in &self.labels {
            labels.insert(k.clone(), v.clone());
        }
    }

    fn keep(&self, obj: DynamicObject) -> Observed {
        let (observed, notes) = parse(&obj);
        self.checkpoints
            .observe(&obj, &observed.record.holder, &self.identity);
        for note in notes {
            tracing::warn!(lease = %self.lease, namespace = %self.namespace, "malformed lease: {note}");
        }
        self.objects.keep(obj);
        observed
    }

    fn count(&self, verb: &'static str, result: &Result<DynamicObject, kube::Error>) {
        let code = match result {
            Ok(_) if verb == "create" => "201".to_string(),
            Ok(_) => "200".to_string(),
            Err(e) => code_label(e),
        };
        self.metrics.request(&self.lease, verb, &code);
        self.explain(verb, result.as_ref().err());
        let mut f = self.forbidden.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Err(e) if classify(e) == ApiOutcome::Failed(Failure::Forbidden) => {
                // An API server that just restarted refuses (403) until its
                // RBAC cache is filled: advise about the Role only when the
                // refusal lasts.
                let now = std::time::Instant::now();
                let i = match f.iter().position(|(v, _, _)| *v == verb) {
                    Some(i) => i,
                    None => {
                        f.push((verb, now, false));
                        f.len() - 1
                    }
                };
                let (_, since, explained) = &mut f[i];
                if !*explained && now.duration_since(*since) >= FORBIDDEN_LASTS {
                    *explained = true;
                    tracing::warn!("{}", forbidden_message(verb, &self.namespace, &self.lease));
                } else if !*explained {
                    tracing::debug!(lease = %self.lease, verb, "refused (403); retrying, as an API server refuses for a moment after a restart");
                }
            }
            Err(e) => {
                tracing::debug!(lease = %self.lease, verb, error = %e, "lease request failed")
            }
            Ok(_) => {
                if f.iter().any(|(v, _, explained)| *v == verb && *explained) {
                    tracing::info!(lease = %self.lease, verb, "access to the lease restored");
                }
                f.retain(|(v, _, _)| *v != verb);
            }
        }
    }

    /// Says once per outage what is wrong with the connection or the
    /// credentials; a success ends the outage.
    fn explain(&self, verb: &str, error: Option<&kube::Error>) {
        let mut last = self.explained.lock().unwrap_or_else(|p| p.into_inner());
        match error.and_then(|e| explain(e, &self.endpoint)) {
            Some(text) if last.as_deref() != Some(text.as_str()) => {
                tracing::error!(lease = %self.lease, namespace = %self.namespace, verb, "{text}");
                *last = Some(text);
            }
            Some(_) => {}
            None if error.is_none() => *last = None,
            None => {}
        }
    }

    fn answer(
        &self,
        verb: &'static str,
        result: Result<DynamicObject, kube::Error>,
    ) -> Result<Observed, LockError> {
        self.count(verb, &result);
        match result {
            Ok(obj) => Ok(self.keep(obj)),
            Err(e) => Err(match classify(&e) {
                ApiOutcome::Conflict => LockError::Conflict,
                ApiOutcome::NotFound => LockError::NotFound,
                ApiOutcome::Gone => LockError::Gone,
                ApiOutcome::Failed(f) => LockError::Failed(f),
            }),
        }
    }
}

impl LeaseLock for KubeLock {
    fn describe(&self) -> String {
        format!("{}/{}", self.inner.namespace, self.inner.lease)
    }

    fn get(&self) -> BoxFuture<'static, Result<Observed, LockError>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            let result = inner.api.get(&inner.lease).await;
            let answer = inner.answer("get", result);
            match &answer {
                Err(LockError::NotFound) => inner.check_namespace().await,
                Ok(_) => inner
                    .namespace_checked
                    .store(false, std::sync::atomic::Ordering::Relaxed),
                Err(_) => {}
            }
            answer
        })
    }

    fn create(&self, record: LeaseRecord) -> BoxFuture<'static, Result<Observed, LockError>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            let mut obj = build_new(&inner.namespace, &inner.lease, &record);
            inner.label(&mut obj);
            // Creating is acquiring: a new term writes no earlier values.
            inner.checkpoints.forget_own();
            let result = inner.api.create(&PostParams::default(), &obj).await;
            inner.answer("create", result)
        })
    }

    fn update(
        &self,
        resource_version: String,
        record: LeaseRecord,
    ) -> BoxFuture<'static, Result<Observed, LockError>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            let base = inner.objects.at(&resource_version);
            // Taking over (every new term raises `leaseTransitions`)
            // carries no value an earlier term of ours set.
            let base_transitions = base.as_ref().and_then(|b| parse(b).0.record.transitions);
            if !record.holder.is_empty() && record.transitions != base_transitions {
                inner.checkpoints.forget_own();
            }
            let mut obj = build_update(
                base.as_ref(),
                &inner.namespace,
                &inner.lease,
                &record,
                &resource_version,
            );
            inner.checkpoints.apply(&mut obj);
            inner.label(&mut obj);
            let result = inner
                .api
                .replace(&inner.lease, &PostParams::default(), &obj)
                .await;
            inner.answer("update", result)
        })
    }

    fn acknowledge(
        &self,
        resource_version: String,
        stopped: Term,
    ) -> BoxFuture<'static, Result<Observed, LockError>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            // The acknowledgement is based on the object read at that
            // version; without it, a re-read decides again.
            let Some(base) = inner.objects.at(&resource_version) else {
                return Err(LockError::Conflict);
            };
            let obj = build_ack(&base, &resource_version, &stopped);
            let result = inner
                .api
                .replace(&inner.lease, &PostParams::default(), &obj)
                .await;
            inner.answer("update", result)
        })
    }

    fn watch(
        &self,
        from: Option<String>,
    ) -> BoxFuture<'static, Result<BoxStream<'static, LockWatchEvent>, LockError>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            let wp = WatchParams::default()
                .fields(&format!("metadata.name={}", inner.lease))
                .timeout(290);
            let version = from.unwrap_or_else(|| "0".into());
            let stream = match inner.api.watch(&wp, &version).await {
                Ok(s) => s,
                Err(e) => {
                    inner
                        .metrics
                        .request(&inner.lease, "watch", &code_label(&e));
                    return Err(match classify(&e) {
                        ApiOutcome::Gone => LockError::Gone,
                        ApiOutcome::Failed(f) => LockError::Failed(f),
                        _ => LockError::Failed(Failure::Other),
                    });
                }
            };
            inner.metrics.request(&inner.lease, "watch", "200");
            let name = inner.lease.clone();
            let events = stream
                .map(move |item| match item {
                    // Outer None ends the stream; inner None skips an item.
                    Ok(KubeEvent::Added(obj) | KubeEvent::Modified(obj)) => {
                        if obj.metadata.name.as_deref() == Some(name.as_str()) {
                            Some(Some(LockWatchEvent::Upsert(inner.keep(obj))))
                        } else {
                            Some(None)
                        }
                    }
                    Ok(KubeEvent::Deleted(obj)) => Some(
                        (obj.metadata.name.as_deref() == Some(name.as_str()))
                            .then_some(LockWatchEvent::Deleted),
                    ),
                    Ok(KubeEvent::Bookmark(b)) => {
                        Some(Some(LockWatchEvent::Bookmark(b.metadata.resource_version)))
                    }
                    // 410 arrives as an ERROR event inside a 200 stream.
                    Ok(KubeEvent::Error(status)) if status.code == 410 => {
                        Some(Some(LockWatchEvent::Expired))
                    }
                    Ok(KubeEvent::Error(status)) => {
                        tracing::debug!(?status, "lease watch error event");
                        None
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "lease watch stream failed");
                        None
                    }
                })
                .take_while(|item| futures_util::future::ready(item.is_some()))
                .filter_map(futures_util::future::ready)
                .filter_map(futures_util::future::ready);
            Ok(events.boxed())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(rv: &str, preferred: &str) -> DynamicObject {
        let mut o = DynamicObject::new("l", &lease_resource()).within("ns");
        o.metadata.resource_version = Some(rv.into());
        o.data =
            serde_json::json!({ "spec": { "holderIdentity": "a", "preferredHolder": preferred } });
        o
    }

    /// A write based on version 5 takes its body from version 5, even when
    /// a later read (version 6, where someone set another preferredHolder)
    /// arrived meanwhile: the server then refuses it with 409 instead of
    /// silently reverting the other writer's fields.
    #[test]
    fn writes_are_based_on_the_object_read_at_the_chosen_version() {
        let kept = ObjectsByVersion::default();
        kept.keep(obj("5", "pod-x"));
        kept.keep(obj("6", "pod-y"));
        let base = kept.at("5").expect("kept");
        let record = parse(&base).0.record;
        let update = build_update(Some(&base), "ns", "l", &record, "5");
        assert_eq!(update.data["spec"]["preferredHolder"], "pod-x");
        assert_eq!(
            kept.at("6").unwrap().data["spec"]["preferredHolder"],
            "pod-y"
        );
        assert!(kept.at("4").is_none());
        for rv in 100..100 + KEPT_OBJECTS {
            kept.keep(obj(&rv.to_string(), "p"));
        }
        assert!(kept.at("5").is_none(), "bounded: the oldest are dropped");
        assert!(kept.at("100").is_some());
    }
}
