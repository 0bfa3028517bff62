//! The `state_*` metricsets whose documents follow kube-state-metrics'
//! families one to one, written as tables (as Metricbeat writes its
//! mappings): which labels name the object, which labels are copied, and
//! what each family's sample becomes. Field names are those of Elastic's
//! Kubernetes integration, under `kubernetes.<object kind>`;
//! `namespace` is `kubernetes.namespace` and `*_labels` families give
//! `kubernetes.labels.*`.
//!
//! | metricset | object | fields under `kubernetes.<kind>` |
//! |---|---|---|
//! | `state_statefulset` | namespace/statefulset | `name`, `created`, `generation.{desired,observed}`, `replicas.{desired,observed,ready}` |
//! | `state_replicaset` | namespace/replicaset | `name`, `replicas.{desired,available,ready,labeled,observed}` |
//! | `state_job` | namespace/job | `name`, `pods.{active,failed,succeeded}`, `completions.desired`, `parallelism.desired`, `time.{created,completed}`, `status.{complete,failed}`, `owner.{kind,name,is_controller}` |
//! | `state_cronjob` | namespace/cronjob | `name`, `created.sec`, `active.count`, `last_schedule.sec`, `next_schedule.sec`, `is_suspended`, `deadline.sec`, `schedule`, `concurrency` |
//! | `state_service` | namespace/service | `name`, `created`, `type`, `cluster_ip`, `external_name`, `external_ip`, `load_balancer_ip`, `ingress_ip`, `ingress_hostname` |
//! | `state_persistentvolume` | persistentvolume | `name`, `capacity.bytes`, `phase`, `storage_class` |
//! | `state_persistentvolumeclaim` | namespace/claim | `name`, `created`, `access_mode`, `request_storage.bytes`, `phase`, `storage_class`, `volume_name` |
//! | `state_resourcequota` | namespace/quota(/resource/type) | `name`, `created.sec`; per resource and type: `resource`, `type`, `quota` |
//! | `state_storageclass` | storageclass | `name`, `created`, `provisioner`, `reclaim_policy`, `volume_binding_mode` |

use std::collections::BTreeMap;

use leasehold_prometheus_text::Family;
use serde_json::{Map, Value as Json, json};

use super::doc::set_path;
use crate::inputs::prometheus::number;
use crate::inputs::scrape::Doc;

/// What one sample of a family becomes.
#[derive(Debug, Clone, Copy)]
enum Field {
    /// The value, a number.
    Number(&'static str),
    /// `true` when the value is 1.
    Bool(&'static str),
    /// When the value is 1: the value of `label` (lower-cased when asked).
    Label(&'static str, &'static str, bool),
    /// The value as seconds since the epoch, written as an RFC 3339 time.
    Time(&'static str),
    /// Only labels: the object's identity and its copied labels.
    Info,
    /// `label_*` labels as `kubernetes.labels.*`.
    Labels,
}

/// One metricset's table.
struct Table {
    name: &'static str,
    /// `kubernetes.<kind>` holds its fields.
    kind: &'static str,
    /// Labels that name the object, with their field (`namespace` is
    /// `kubernetes.namespace`); a sample without one of them belongs to a
    /// coarser object (a quota's own document beside its per-resource ones).
    keys: &'static [(&'static str, &'static str)],
    /// Labels copied to fields wherever they appear.
    copied: &'static [(&'static str, &'static str)],
    families: &'static [(&'static str, Field)],
}

const NS: (&str, &str) = ("namespace", "namespace");

const TABLES: [Table; 9] = [
    Table {
        name: "state_statefulset",
        kind: "statefulset",
        keys: &[NS, ("statefulset", "name")],
        copied: &[],
        families: &[
            ("kube_statefulset_created", Field::Number("created")),
            (
                "kube_statefulset_metadata_generation",
                Field::Number("generation.desired"),
            ),
            (
                "kube_statefulset_status_observed_generation",
                Field::Number("generation.observed"),
            ),
            (
                "kube_statefulset_replicas",
                Field::Number("replicas.desired"),
            ),
            (
                "kube_statefulset_status_replicas",
                Field::Number("replicas.observed"),
            ),
            (
                "kube_statefulset_status_replicas_ready",
                Field::Number("replicas.ready"),
            ),
        ],
    },
    Table {
        name: "state_replicaset",
        kind: "replicaset",
        keys: &[NS, ("replicaset", "name")],
        copied: &[],
        families: &[
            ("kube_replicaset_metadata_generation", Field::Info),
            (
                "kube_replicaset_status_fully_labeled_replicas",
                Field::Number("replicas.labeled"),
            ),
            (
                "kube_replicaset_status_observed_generation",
                Field::Number("replicas.observed"),
            ),
            (
                "kube_replicaset_status_ready_replicas",
                Field::Number("replicas.ready"),
            ),
            (
                "kube_replicaset_spec_replicas",
                Field::Number("replicas.desired"),
            ),
            (
                "kube_replicaset_status_replicas",
                Field::Number("replicas.available"),
            ),
        ],
    },
    Table {
        name: "state_job",
        kind: "job",
        keys: &[NS, ("job_name", "name")],
        copied: &[
            ("owner_kind", "owner.kind"),
            ("owner_name", "owner.name"),
            ("owner_is_controller", "owner.is_controller"),
        ],
        families: &[
            ("kube_job_owner", Field::Info),
            ("kube_job_status_active", Field::Number("pods.active")),
            ("kube_job_status_failed", Field::Number("pods.failed")),
            ("kube_job_status_succeeded", Field::Number("pods.succeeded")),
            (
                "kube_job_spec_completions",
                Field::Number("completions.desired"),
            ),
            (
                "kube_job_spec_parallelism",
                Field::Number("parallelism.desired"),
            ),
            ("kube_job_created", Field::Time("time.created")),
            (
                "kube_job_status_completion_time",
                Field::Time("time.completed"),
            ),
            (
                "kube_job_complete",
                Field::Label("status.complete", "condition", true),
            ),
            (
                "kube_job_failed",
                Field::Label("status.failed", "condition", true),
            ),
        ],
    },
    Table {
        name: "state_cronjob",
        kind: "cronjob",
        keys: &[NS, ("cronjob", "name")],
        copied: &[
            ("schedule", "schedule"),
            ("concurrency_policy", "concurrency"),
        ],
        families: &[
            ("kube_cronjob_info", Field::Info),
            ("kube_cronjob_created", Field::Number("created.sec")),
            ("kube_cronjob_status_active", Field::Number("active.count")),
            (
                "kube_cronjob_status_last_schedule_time",
                Field::Number("last_schedule.sec"),
            ),
            (
                "kube_cronjob_next_schedule_time",
                Field::Number("next_schedule.sec"),
            ),
            ("kube_cronjob_spec_suspend", Field::Bool("is_suspended")),
            (
                "kube_cronjob_spec_starting_deadline_seconds",
                Field::Number("deadline.sec"),
            ),
        ],
    },
    Table {
        name: "state_service",
        kind: "service",
        keys: &[NS, ("service", "name")],
        copied: &[
            ("cluster_ip", "cluster_ip"),
            ("external_name", "external_name"),
            ("external_ip", "external_ip"),
            ("load_balancer_ip", "load_balancer_ip"),
            ("type", "type"),
            ("ip", "ingress_ip"),
            ("hostname", "ingress_hostname"),
        ],
        families: &[
            ("kube_service_info", Field::Info),
            ("kube_service_labels", Field::Labels),
            ("kube_service_created", Field::Time("created")),
            ("kube_service_spec_type", Field::Info),
            ("kube_service_spec_external_ip", Field::Info),
            ("kube_service_status_load_balancer_ingress", Field::Info),
        ],
    },
    Table {
        name: "state_persistentvolume",
        kind: "persistentvolume",
        keys: &[("persistentvolume", "name")],
        copied: &[("storageclass", "storage_class")],
        families: &[
            (
                "kube_persistentvolume_capacity_bytes",
                Field::Number("capacity.bytes"),
            ),
            (
                "kube_persistentvolume_status_phase",
                Field::Label("phase", "phase", false),
            ),
            ("kube_persistentvolume_labels", Field::Labels),
            ("kube_persistentvolume_info", Field::Info),
        ],
    },
    Table {
        name: "state_persistentvolumeclaim",
        kind: "persistentvolumeclaim",
        keys: &[NS, ("persistentvolumeclaim", "name")],
        copied: &[
            ("storageclass", "storage_class"),
            ("volumename", "volume_name"),
        ],
        families: &[
            (
                "kube_persistentvolumeclaim_access_mode",
                Field::Label("access_mode", "access_mode", false),
            ),
            ("kube_persistentvolumeclaim_created", Field::Time("created")),
            ("kube_persistentvolumeclaim_info", Field::Info),
            ("kube_persistentvolumeclaim_labels", Field::Labels),
            (
                "kube_persistentvolumeclaim_resource_requests_storage_bytes",
                Field::Number("request_storage.bytes"),
            ),
            (
                "kube_persistentvolumeclaim_status_phase",
                Field::Label("phase", "phase", false),
            ),
        ],
    },
    Table {
        name: "state_resourcequota",
        kind: "resourcequota",
        keys: &[
            NS,
            ("resourcequota", "name"),
            ("resource", "resource"),
            ("type", "type"),
        ],
        copied: &[],
        families: &[
            ("kube_resourcequota_created", Field::Number("created.sec")),
            ("kube_resourcequota", Field::Number("quota")),
        ],
    },
    Table {
        name: "state_storageclass",
        kind: "storageclass",
        keys: &[("storageclass", "name")],
        copied: &[
            ("provisioner", "provisioner"),
            ("reclaimPolicy", "reclaim_policy"),
            ("reclaim_policy", "reclaim_policy"),
            ("volumeBindingMode", "volume_binding_mode"),
            ("volume_binding_mode", "volume_binding_mode"),
        ],
        families: &[
            ("kube_storageclass_info", Field::Info),
            ("kube_storageclass_labels", Field::Labels),
            ("kube_storageclass_created", Field::Time("created")),
        ],
    },
];

/// The metricsets written as tables, by name.
pub fn names() -> impl Iterator<Item = &'static str> {
    TABLES.iter().map(|t| t.name)
}

/// Every family the tables read.
pub fn families() -> impl Iterator<Item = &'static str> {
    TABLES
        .iter()
        .flat_map(|t| t.families.iter().map(|(f, _)| *f))
}

/// The documents of metricset `name` (one of [`names`]) from a scrape;
/// `None` for another name.
pub fn documents(name: &str, scraped: &[Family]) -> Option<Vec<Doc>> {
    let table = TABLES.iter().find(|t| t.name == name)?;
    let mut objects: BTreeMap<String, Map<String, Json>> = BTreeMap::new();
    for (family, field) in table.families {
        for sample in scraped
            .iter()
            .filter(|f| f.name == *family || f.name.strip_suffix("_total") == Some(family))
            .flat_map(|f| f.samples.iter())
        {
            let labels = &sample.labels;
            let label = |name: &str| labels.iter().find(|(k, _)| &**k == name).map(|(_, v)| &**v);
            // The object: every key label the sample has; the name is
            // required.
            let present: Vec<(&str, &str)> = table
                .keys
                .iter()
                .filter_map(|(l, path)| label(l).map(|v| (*path, v)))
                .collect();
            if !present.iter().any(|(path, _)| *path == "name") {
                continue;
            }
            let key: Vec<&str> = present.iter().map(|(_, v)| *v).collect();
            let doc = objects.entry(key.join("/")).or_default();
            let at = |path: &str| format!("kubernetes.{}.{path}", table.kind);
            for (path, value) in &present {
                let full = if *path == "namespace" {
                    "kubernetes.namespace".to_string()
                } else {
                    at(path)
                };
                set_path(doc, &full, json!(value));
            }
            for (l, path) in table.copied {
                if let Some(v) = label(l) {
                    set_path(doc, &at(path), json!(v));
                }
            }
            let v = sample.value;
            match *field {
                Field::Number(path) => set_path(doc, &at(path), number(v)),
                Field::Bool(path) => set_path(doc, &at(path), json!(v == 1.0)),
                Field::Label(path, from, lower) => {
                    if v == 1.0
                        && let Some(value) = label(from)
                    {
                        let value = if lower {
                            value.to_lowercase()
                        } else {
                            value.to_string()
                        };
                        set_path(doc, &at(path), json!(value));
                    }
                }
                Field::Time(path) => {
                    if let Ok(t) = jiff::Timestamp::from_second(v as i64) {
                        set_path(doc, &at(path), json!(t.to_string()));
                    }
                }
                Field::Info => {}
                Field::Labels => {
                    for (k, value) in labels {
                        if let Some(name) = k.strip_prefix("label_") {
                            set_path(doc, &format!("kubernetes.labels.{name}"), json!(&**value));
                        }
                    }
                }
            }
        }
    }
    Some(
        objects
            .into_iter()
            .map(|(object, fields)| Doc { object, fields })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(text: &str) -> Vec<Family> {
        leasehold_prometheus_text::parse(text, leasehold_prometheus_text::Format::Text).unwrap()
    }

    #[test]
    fn statefulsets_jobs_and_quotas_become_elastics_documents() {
        let families = scrape(
            "# TYPE kube_statefulset_replicas gauge\n\
             kube_statefulset_replicas{namespace=\"ns\",statefulset=\"db\"} 3\n\
             # TYPE kube_statefulset_status_replicas_ready gauge\n\
             kube_statefulset_status_replicas_ready{namespace=\"ns\",statefulset=\"db\"} 2\n\
             # TYPE kube_job_complete gauge\n\
             kube_job_complete{namespace=\"ns\",job_name=\"j\",condition=\"true\"} 1\n\
             kube_job_complete{namespace=\"ns\",job_name=\"j\",condition=\"false\"} 0\n\
             # TYPE kube_job_owner gauge\n\
             kube_job_owner{namespace=\"ns\",job_name=\"j\",owner_kind=\"CronJob\",owner_name=\"c\",owner_is_controller=\"true\"} 1\n\
             # TYPE kube_job_created gauge\n\
             kube_job_created{namespace=\"ns\",job_name=\"j\"} 1.7e+09\n\
             # TYPE kube_resourcequota gauge\n\
             kube_resourcequota{namespace=\"ns\",resourcequota=\"q\",resource=\"pods\",type=\"hard\"} 10\n\
             kube_resourcequota{namespace=\"ns\",resourcequota=\"q\",resource=\"pods\",type=\"used\"} 4\n\
             # TYPE kube_resourcequota_created gauge\n\
             kube_resourcequota_created{namespace=\"ns\",resourcequota=\"q\"} 1.7e+09\n\
             # TYPE kube_storageclass_info gauge\n\
             kube_storageclass_info{storageclass=\"slow\",provisioner=\"p\",reclaim_policy=\"Delete\",volume_binding_mode=\"Immediate\"} 1\n\
             # TYPE kube_storageclass_labels gauge\n\
             kube_storageclass_labels{storageclass=\"slow\",label_tier=\"cold\"} 1\n",
        );
        let sts = documents("state_statefulset", &families).unwrap();
        assert_eq!(sts.len(), 1);
        assert_eq!(sts[0].object, "ns/db");
        assert_eq!(
            Json::Object(sts[0].fields.clone()),
            json!({"kubernetes": {"namespace": "ns", "statefulset": {"name": "db", "replicas": {"desired": 3, "ready": 2}}}})
        );
        let job = &documents("state_job", &families).unwrap()[0];
        let j = &job.fields["kubernetes"]["job"];
        assert_eq!(j["status"]["complete"], "true");
        assert_eq!(j["owner"]["kind"], "CronJob");
        assert_eq!(j["owner"]["is_controller"], "true");
        assert_eq!(j["time"]["created"], "2023-11-14T22:13:20Z");
        let quotas = documents("state_resourcequota", &families).unwrap();
        let objects: Vec<&str> = quotas.iter().map(|d| d.object.as_str()).collect();
        assert_eq!(objects, ["ns/q", "ns/q/pods/hard", "ns/q/pods/used"]);
        assert_eq!(quotas[1].fields["kubernetes"]["resourcequota"]["quota"], 10);
        assert_eq!(
            quotas[2].fields["kubernetes"]["resourcequota"]["type"],
            "used"
        );
        let sc = &documents("state_storageclass", &families).unwrap()[0];
        assert_eq!(
            sc.fields["kubernetes"]["storageclass"]["reclaim_policy"],
            "Delete"
        );
        assert_eq!(sc.fields["kubernetes"]["labels"]["tier"], "cold");
        assert!(sc.fields["kubernetes"].get("namespace").is_none());
        assert!(documents("state_pod", &families).is_none());
    }
}
