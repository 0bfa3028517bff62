//! Optional Kubernetes Events on the Lease (`<id> became leader` /
//! `<id> stopped leading`, reason `LeaderElection`), as client-go records.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, PostParams};

/// Posts one Event; failures are logged, never fatal.
pub(crate) fn post(
    client: kube::Client,
    namespace: String,
    lease: String,
    identity: String,
    message: String,
    timeout: Duration,
) {
    let now = k8s_openapi::jiff::Timestamp::now();
    tokio::spawn(async move {
        let api: Api<Event> = Api::namespaced(client, &namespace);
        let event = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{lease}.")),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                api_version: Some("coordination.k8s.io/v1".into()),
                kind: Some("Lease".into()),
                name: Some(lease.clone()),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            reason: Some("LeaderElection".into()),
            message: Some(message),
            type_: Some("Normal".into()),
            source: Some(EventSource {
                component: Some(format!("{identity}_leasehold")),
                host: None,
            }),
            count: Some(1),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            ..Default::default()
        };
        match tokio::time::timeout(timeout, api.create(&PostParams::default(), &event)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::debug!(lease, error = %e, "could not post leader election event")
            }
            Err(_) => tracing::debug!(lease, "posting leader election event timed out"),
        }
    });
}
