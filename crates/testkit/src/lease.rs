//! What an administrator (or a misbehaving controller) does to a Lease with
//! `kubectl`: delete it, patch its holder or duration, strip a field. Each
//! edit is a single request of the admin identity and returns the wall
//! time just before it was sent, so tests can measure from it.

use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use futures_util::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{DeleteParams, Patch, PatchParams, WatchEvent, WatchParams};
use kube::{Api, Client, Resource};
use serde_json::Value;

use crate::overlap::now_micros;

/// One Lease, edited as the admin.
#[derive(Clone)]
pub struct LeaseAdmin {
    client: Client,
    namespace: String,
    name: String,
}

impl LeaseAdmin {
    /// The Lease `namespace/name`, edited through `client` (an admin).
    pub fn new(client: Client, namespace: &str, name: &str) -> LeaseAdmin {
        LeaseAdmin {
            client,
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    fn api(&self) -> Api<Lease> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The Lease, or `None` if it does not exist.
    pub async fn get(&self) -> Result<Option<Lease>> {
        self.api()
            .get_opt(&self.name)
            .await
            .with_context(|| format!("reading lease {}/{}", self.namespace, self.name))
    }

    /// Creates the Lease with no holder, as the shipped manifests and
    /// chart do; returns the wall time (µs) just before.
    pub async fn create_empty(&self) -> Result<i64> {
        let at = now_micros();
        let lease: Lease = serde_json::from_value(serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {},
        }))?;
        self.api()
            .create(&Default::default(), &lease)
            .await
            .with_context(|| format!("creating lease {}/{}", self.namespace, self.name))?;
        Ok(at)
    }

    /// `kubectl delete lease`; returns the wall time (µs) just before.
    pub async fn delete(&self) -> Result<i64> {
        let at = now_micros();
        self.api()
            .delete(&self.name, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting lease {}/{}", self.namespace, self.name))?;
        Ok(at)
    }

    /// `kubectl patch --type=merge`; returns the wall time (µs) just before.
    pub async fn merge_patch(&self, patch: Value) -> Result<i64> {
        let at = now_micros();
        self.api()
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("merge-patching lease {} with {patch}", self.name))?;
        Ok(at)
    }

    /// `kubectl patch --type=json` (RFC 6902 operations); returns the wall
    /// time (µs) just before.
    pub async fn json_patch(&self, ops: Value) -> Result<i64> {
        let url = Lease::url_path(&(), Some(&self.namespace));
        // kube only builds JSON patches with an optional feature; the
        // request is a merge patch of the same body with its content type
        // changed.
        let mut req = kube::core::Request::new(url)
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&ops))
            .context("building the JSON patch request")?;
        req.headers_mut().insert(
            "content-type",
            "application/json-patch+json"
                .parse()
                .context("content type")?,
        );
        let at = now_micros();
        self.client
            .request::<Lease>(req)
            .await
            .with_context(|| format!("JSON-patching lease {} with {ops}", self.name))?;
        Ok(at)
    }

    /// Clears the holder the way a person would, not the release shape:
    /// `{"spec":{"holderIdentity":""}}`, everything else unchanged.
    pub async fn clear_holder(&self) -> Result<i64> {
        self.merge_patch(serde_json::json!({"spec": {"holderIdentity": ""}}))
            .await
    }

    /// Writes `holder` as the holder, everything else unchanged.
    pub async fn overwrite_holder(&self, holder: &str) -> Result<i64> {
        self.merge_patch(serde_json::json!({"spec": {"holderIdentity": holder}}))
            .await
    }

    /// Sets `leaseDurationSeconds`, everything else unchanged.
    pub async fn set_duration(&self, seconds: i32) -> Result<i64> {
        self.merge_patch(serde_json::json!({"spec": {"leaseDurationSeconds": seconds}}))
            .await
    }

    /// Starts a watch of this Lease from `resource_version`, as a candidate
    /// resuming its watch would, and returns the error code the server
    /// answered with first (`Some(410)` for Gone), or `None` if the watch
    /// started without an error.
    pub async fn watch_error_from(&self, resource_version: &str) -> Result<Option<u16>> {
        let wp = WatchParams::default()
            .fields(&format!("metadata.name={}", self.name))
            .timeout(2);
        let api = self.api();
        let answer = async {
            match api.watch(&wp, resource_version).await {
                Err(kube::Error::Api(s)) => Ok(Some(s.code)),
                Err(e) => Err(anyhow!(e)),
                Ok(stream) => {
                    let mut stream = std::pin::pin!(stream);
                    match stream.next().await {
                        Some(Ok(WatchEvent::Error(s))) => Ok(Some(s.code)),
                        Some(Err(kube::Error::Api(s))) => Ok(Some(s.code)),
                        Some(Err(e)) => Err(anyhow!(e)),
                        Some(Ok(_)) | None => Ok(None),
                    }
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(10), answer)
            .await
            .map_err(|_| anyhow!("watch from {resource_version}: no answer within 10 s"))?
    }

    /// Waits (bounded) for the next write to this Lease, usually the
    /// holder's renewal, and returns the Lease as written. An edit made
    /// right after it gives the holder the longest wait until its next
    /// renewal, the hardest case for edits that race with it.
    pub async fn next_write(&self, within: Duration) -> Result<LeaseView> {
        let current = self
            .get()
            .await?
            .ok_or_else(|| anyhow!("lease {} does not exist", self.name))?;
        let rv = current
            .metadata
            .resource_version
            .clone()
            .unwrap_or_default();
        let wp = WatchParams::default()
            .fields(&format!("metadata.name={}", self.name))
            .timeout(u32::try_from(within.as_secs() + 1).unwrap_or(u32::MAX));
        let api = self.api();
        let change = async {
            let stream = api.watch(&wp, &rv).await?;
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                match event? {
                    WatchEvent::Added(l) | WatchEvent::Modified(l) => return Ok(LeaseView::of(&l)),
                    WatchEvent::Deleted(_) => return Err(anyhow!("lease {} deleted", self.name)),
                    WatchEvent::Bookmark(_) => {}
                    WatchEvent::Error(s) => return Err(anyhow!("watch error: {s:?}")),
                }
            }
            Err(anyhow!("watch of lease {} ended", self.name))
        };
        tokio::time::timeout(within, change)
            .await
            .map_err(|_| anyhow!("lease {} not written within {within:?}", self.name))?
    }

    /// Removes `spec.leaseTransitions` with a JSON patch.
    pub async fn remove_transitions(&self) -> Result<i64> {
        self.json_patch(serde_json::json!([
            {"op": "remove", "path": "/spec/leaseTransitions"}
        ]))
        .await
    }
}

/// Fields of a Lease spec that elections read, flattened.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseView {
    /// `spec.holderIdentity`.
    pub holder: Option<String>,
    /// `spec.leaseDurationSeconds`.
    pub duration_seconds: Option<i32>,
    /// `spec.leaseTransitions`.
    pub transitions: Option<i32>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<String>,
}

impl LeaseView {
    /// The fields of `lease`.
    pub fn of(lease: &Lease) -> LeaseView {
        let spec = lease.spec.clone().unwrap_or_default();
        LeaseView {
            holder: spec.holder_identity,
            duration_seconds: spec.lease_duration_seconds,
            transitions: spec.lease_transitions,
            resource_version: lease.metadata.resource_version.clone(),
        }
    }
}
