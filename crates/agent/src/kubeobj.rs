//! Pods, Nodes and Services as leasehold reads them: the object's metadata
//! and the few spec and status fields its code uses; every other field of
//! the API's JSON is skipped while it is read.
//!
//! k8s-openapi's full types nest about 150 others under a Pod alone
//! (volume sources, probes, affinities, security contexts), and each one
//! read brings its deserializer, clone and drop code into the binary:
//! reading these instead keeps about 1 MB out of it, and a watched Pod or
//! Node costs only the fields kept. The shapes and names follow
//! k8s-openapi's, so code reads `pod.spec.node_name` either way.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

/// `core/v1` Pod: metadata, where it runs, its containers and their ids.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Pod {
    /// The object's metadata.
    pub metadata: ObjectMeta,
    /// The part of `spec` read.
    pub spec: Option<PodSpec>,
    /// The part of `status` read.
    pub status: Option<PodStatus>,
}

/// The part of a Pod's spec read: its node and its containers.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct PodSpec {
    /// `spec.nodeName`.
    pub node_name: Option<String>,
    /// `spec.containers`.
    pub containers: Vec<Container>,
    /// `spec.initContainers`.
    pub init_containers: Option<Vec<Container>>,
    /// `spec.ephemeralContainers` (no ports, no resources).
    pub ephemeral_containers: Option<Vec<Container>>,
}

/// A container of a Pod's spec.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Container {
    /// Its name.
    pub name: String,
    /// Its image.
    pub image: Option<String>,
    /// The ports it declares.
    pub ports: Option<Vec<ContainerPort>>,
    /// Its requests and limits; only the limits are read.
    pub resources: Option<ResourceRequirements>,
}

/// A port a container declares.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerPort {
    /// `containerPort`.
    pub container_port: i32,
    /// Its name, if any.
    pub name: Option<String>,
}

/// A container's resources: the limits (`cpu`, `memory`, …).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct ResourceRequirements {
    /// `resources.limits`.
    pub limits: Option<BTreeMap<String, Quantity>>,
}

/// The part of a Pod's status read: its phase, address and container ids.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct PodStatus {
    /// `status.phase`.
    pub phase: Option<String>,
    /// `status.podIP`.
    #[serde(rename = "podIP")]
    pub pod_ip: Option<String>,
    /// `status.containerStatuses`.
    pub container_statuses: Option<Vec<ContainerStatus>>,
    /// `status.initContainerStatuses`.
    pub init_container_statuses: Option<Vec<ContainerStatus>>,
    /// `status.ephemeralContainerStatuses`.
    pub ephemeral_container_statuses: Option<Vec<ContainerStatus>>,
}

/// A container's status: its name and runtime id.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerStatus {
    /// The container's name.
    pub name: String,
    /// `containerd://…` once the runtime started it.
    #[serde(rename = "containerID")]
    pub container_id: Option<String>,
}

/// `core/v1` Node: metadata, readiness, addresses and allocatable resources.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Node {
    /// The object's metadata.
    pub metadata: ObjectMeta,
    /// The part of `status` read.
    pub status: Option<NodeStatus>,
}

/// The part of a Node's status read.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct NodeStatus {
    /// `status.allocatable` (`cpu`, `memory`, …).
    pub allocatable: Option<BTreeMap<String, Quantity>>,
    /// `status.conditions`: only their type and status.
    pub conditions: Option<Vec<Condition>>,
    /// `status.addresses`.
    pub addresses: Option<Vec<NodeAddress>>,
}

/// A condition: its type and status only.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Condition {
    /// `type` (`Ready`, …).
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
}

/// An address of a Node.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct NodeAddress {
    /// `InternalIP`, `ExternalIP`, `Hostname`, …
    #[serde(rename = "type")]
    pub type_: String,
    /// The address.
    pub address: String,
}

/// `core/v1` Service: metadata and cluster IP.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Service {
    /// The object's metadata.
    pub metadata: ObjectMeta,
    /// The part of `spec` read.
    pub spec: Option<ServiceSpec>,
}

/// The part of a Service's spec read.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct ServiceSpec {
    /// `spec.clusterIP` (`None` for a headless Service).
    #[serde(rename = "clusterIP")]
    pub cluster_ip: Option<String>,
}

/// Makes a type an API resource of `core/v1`, as kube-rs addresses it.
macro_rules! core_v1 {
    ($ty:ty, $kind:literal, $plural:literal, $scope:ty) => {
        impl k8s_openapi::Resource for $ty {
            const API_VERSION: &'static str = "v1";
            const GROUP: &'static str = "";
            const KIND: &'static str = $kind;
            const VERSION: &'static str = "v1";
            const URL_PATH_SEGMENT: &'static str = $plural;
            type Scope = $scope;
        }

        impl k8s_openapi::Metadata for $ty {
            type Ty = ObjectMeta;

            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }

            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

core_v1!(Pod, "Pod", "pods", k8s_openapi::NamespaceResourceScope);
core_v1!(Node, "Node", "nodes", k8s_openapi::ClusterResourceScope);
core_v1!(
    Service,
    "Service",
    "services",
    k8s_openapi::NamespaceResourceScope
);

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    #[test]
    fn addressed_as_the_api_addresses_them() {
        assert_eq!(
            (Pod::kind(&()), Pod::api_version(&()), Pod::plural(&())),
            ("Pod".into(), "v1".into(), "pods".into())
        );
        assert_eq!(Node::plural(&()), "nodes");
        assert_eq!(Service::plural(&()), "services");
        assert_eq!(Node::group(&()), "");
    }

    /// A Pod as the API server sends it, with the fields not kept (volumes,
    /// probes, conditions) and explicit nulls, reads as the fields kept.
    #[test]
    fn reads_the_fields_kept_and_skips_the_rest() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "shop", "uid": "u", "creationTimestamp": null,
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "x"}]},
            "spec": {"nodeName": "n1",
                     "volumes": [{"name": "data", "projected": {"sources": [{"configMap": {"name": "c"}}]}}],
                     "containers": [{"name": "app", "image": "app:1",
                                     "livenessProbe": {"httpGet": {"path": "/", "port": 80}},
                                     "ports": [{"containerPort": 80, "name": "http", "protocol": "TCP"}],
                                     "resources": {"limits": {"cpu": "500m"}, "requests": {"memory": "1Mi"}}}],
                     "securityContext": {"runAsUser": 1000},
                     "initContainers": null},
            "status": {"phase": "Running", "podIP": "10.0.0.9", "conditions": [{"type": "Ready", "status": "True"}],
                       "containerStatuses": [{"name": "app", "containerID": "containerd://c1", "ready": true,
                                              "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}
        }))
        .unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("web-1"));
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert_eq!(spec.init_containers, None);
        let c = &spec.containers[0];
        assert_eq!(
            (c.name.as_str(), c.image.as_deref()),
            ("app", Some("app:1"))
        );
        assert_eq!(
            c.ports.as_deref(),
            Some(
                &[ContainerPort {
                    container_port: 80,
                    name: Some("http".into())
                }][..]
            )
        );
        let limits = c.resources.as_ref().unwrap().limits.as_ref().unwrap();
        assert_eq!(limits["cpu"].0, "500m");
        let status = pod.status.as_ref().unwrap();
        assert_eq!(
            (status.phase.as_deref(), status.pod_ip.as_deref()),
            (Some("Running"), Some("10.0.0.9"))
        );
        let st = &status.container_statuses.as_ref().unwrap()[0];
        assert_eq!(st.container_id.as_deref(), Some("containerd://c1"));
    }

    #[test]
    fn a_node_keeps_readiness_addresses_and_allocatable() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "uid": "u1", "labels": {"kubernetes.io/hostname": "n1"}},
            "spec": {"podCIDR": "10.0.0.0/24"},
            "status": {"allocatable": {"cpu": "2", "memory": "4Gi"},
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "lastHeartbeatTime": "2026-01-01T00:00:00Z"}],
                       "addresses": [{"type": "InternalIP", "address": "10.1.0.1"}],
                       "images": [{"names": ["a:1"], "sizeBytes": 1}],
                       "nodeInfo": {"kubeletVersion": "v1.34.0"}}
        }))
        .unwrap();
        let status = node.status.unwrap();
        assert_eq!(status.allocatable.unwrap()["memory"].0, "4Gi");
        assert_eq!(status.conditions.unwrap()[0].type_, "Ready");
        assert_eq!(status.addresses.unwrap()[0].address, "10.1.0.1");
    }

    #[test]
    fn a_service_keeps_its_cluster_ip_and_nothing_else() {
        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "s", "uid": "u"},
            "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}], "selector": {"app": "a"}}
        }))
        .unwrap();
        assert_eq!(svc.spec.unwrap().cluster_ip.as_deref(), Some("10.96.0.10"));
    }
}
