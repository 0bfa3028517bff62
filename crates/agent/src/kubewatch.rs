//! One way to keep a local copy of Kubernetes objects: a kube-rs reflector
//! driven on the runtime, objects trimmed of what is never read, failures
//! logged once per distinct error with what they cost.

use futures_util::StreamExt;
use kube::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// An object kube-rs can watch and a reflector can keep.
pub trait Watchable:
    kube::Resource<DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Watchable for K where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// What a metadata-only copy never reads: managed fields and annotations.
pub fn trim_metadata<K: kube::Resource>(o: &mut kube::api::PartialObjectMeta<K>) {
    o.metadata.managed_fields = None;
    o.metadata.annotations = None;
}

/// What a [`reflect`]ed copy does besides being kept.
pub struct Reflect {
    /// What is watched, for messages (`pods`, `node n1`).
    pub what: String,
    /// What a failing watch costs, for messages.
    pub cost: &'static str,
    /// Told of every change.
    pub changed: Option<mpsc::UnboundedSender<()>>,
    /// Ends the watch; without it, it lasts as long as the process.
    pub stop: Option<CancellationToken>,
}

/// The store of a reflector of `api` with `config`, each object passed
/// through `trim` before it is kept.
pub fn reflect<K>(api: Api<K>, config: watcher::Config, trim: fn(&mut K), how: Reflect) -> Store<K>
where
    K: Watchable,
{
    let (store, writer) = reflector::store();
    tokio::spawn(async move {
        let stream =
            reflector::reflector(writer, watcher(api, config).modify(trim)).default_backoff();
        futures_util::pin_mut!(stream);
        let never = CancellationToken::new();
        let stop = how.stop.unwrap_or(never);
        let mut last_error: Option<String> = None;
        loop {
            let ev = tokio::select! {
                () = stop.cancelled() => return,
                ev = stream.next() => ev,
            };
            match ev {
                None => return,
                Some(Ok(_)) => {
                    if last_error.take().is_some() {
                        tracing::info!("watching {} again", how.what);
                    }
                    if let Some(c) = &how.changed {
                        let _ = c.send(());
                    }
                }
                Some(Err(e)) => {
                    let text = e.to_string();
                    if last_error.as_deref() != Some(text.as_str()) {
                        tracing::warn!("cannot watch {} ({text}); {}", how.what, how.cost);
                        last_error = Some(text);
                    }
                }
            }
        }
    });
    store
}
