//! Stream ids of the inputs that keep a registry (`filestream`, `log`):
//! the registry is named after the stream id, so two streams with one id
//! would read and delete each other's offsets. The agent refuses the
//! second at run time; `check` says so first, for ids written twice and
//! for ids that every Pod an input is rendered for would share.

use std::collections::HashMap;

use super::{Report, Severity};
use crate::dynamic::{self, POD_PROVIDER};
use crate::error::Pos;
use crate::model::{Node, NodeKind, Policy};
use crate::subst;

/// Input types whose streams keep a registry under their id.
const REGISTRY_TYPES: [&str; 3] = ["filestream", "log", "logfile"];

/// Reports duplicate literal stream ids (errors) and stream ids of inputs
/// rendered per Pod or container that name nothing of it (warnings).
pub(crate) fn check(policy: &Policy, report: &mut Report<'_>) {
    let provider = policy.default_provider();
    let mut seen: HashMap<&str, Pos> = HashMap::new();
    for input in policy.inputs() {
        let Some(kind) = input.get("type").and_then(Node::as_str) else {
            continue;
        };
        if !REGISTRY_TYPES.contains(&kind) {
            continue;
        }
        let Some(NodeKind::List(streams)) = input.get("streams").map(|s| &s.kind) else {
            // The input is its own stream, named after the rendered
            // input id, which is unique.
            continue;
        };
        let per_mapping = reads_a_mappings_own(input, &provider);
        for stream in streams {
            let Some(id) = stream.get("id") else {
                continue;
            };
            let Some(value) = id.as_str() else {
                continue;
            };
            if !subst::may_contain_vars(value) {
                if let Some(first) = seen.get(value) {
                    report.push(
                        Severity::Error,
                        id.pos,
                        format!(
                            "stream id {value:?} is already the id of the stream at line {} column {}: two streams with one id would share one registry, reading and deleting each other's offsets; the agent runs only the first",
                            first.line, first.column
                        ),
                        Some("give every stream an `id` of its own".into()),
                    );
                } else {
                    seen.insert(value, id.pos);
                }
            }
            if per_mapping && !names_a_mappings_own(value, &provider) {
                report.push(
                    Severity::Warning,
                    id.pos,
                    format!(
                        "stream id {value:?} is the same for every Pod and container this input is rendered for: at run time only the first one's input runs, the others are refused"
                    ),
                    Some("put what tells them apart in the id, e.g. `...-${kubernetes.container.id}` as Elastic's container-log template does".into()),
                );
            }
        }
    }
}

fn names_a_mappings_own(s: &str, provider: &str) -> bool {
    dynamic::own_var_in(s, POD_PROVIDER, provider).is_some()
}

/// Whether `node` (outside conditions, which only select) reads a Pod's
/// or a container's own variables: the input is then rendered once per
/// mapping.
fn reads_a_mappings_own(node: &Node, provider: &str) -> bool {
    match &node.kind {
        NodeKind::Str { value, .. } => names_a_mappings_own(value, provider),
        NodeKind::List(items) => items.iter().any(|n| reads_a_mappings_own(n, provider)),
        NodeKind::Map(entries) => entries
            .iter()
            .filter(|(k, _)| k.name != "condition")
            .any(|(_, v)| reads_a_mappings_own(v, provider)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use crate::lint::{Severity, check};
    use crate::model::Policy;

    fn diagnostics(yaml: &str) -> Vec<(Severity, String)> {
        let p = Policy::parse(yaml, "p.yml").expect("policy parses");
        check(&p, None)
            .into_iter()
            .filter(|d| d.message.contains("stream id"))
            .map(|d| (d.severity, d.message))
            .collect()
    }

    #[test]
    fn a_stream_id_written_twice_is_an_error_naming_the_first() {
        let d = diagnostics(
            "inputs:\n  - id: a\n    type: filestream\n    streams:\n      - id: app\n        paths: [/a]\n  - id: b\n    type: filestream\n    streams:\n      - id: app\n        paths: [/b]\n",
        );
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].0, Severity::Error);
        assert!(d[0].1.contains("line 5"), "{}", d[0].1);
    }

    #[test]
    fn a_per_pod_input_whose_stream_id_names_no_pod_is_warned_about() {
        let shared = diagnostics(
            "inputs:\n  - id: logs-${kubernetes.pod.name}\n    type: filestream\n    streams:\n      - id: container-logs-${kubernetes.node.name}\n        paths: ['/var/log/containers/*${kubernetes.container.id}.log']\n",
        );
        assert_eq!(shared.len(), 1, "{shared:?}");
        assert_eq!(shared[0].0, Severity::Warning);
        // Elastic's template names the container: nothing to say.
        let own = diagnostics(
            "inputs:\n  - id: logs\n    type: filestream\n    streams:\n      - id: kubernetes-container-logs-${kubernetes.pod.name}-${kubernetes.container.id}\n        paths: ['/var/log/containers/*${kubernetes.container.id}.log']\n",
        );
        assert!(own.is_empty(), "{own:?}");
        // Selected by a condition only, it renders once: nothing to say.
        let selected = diagnostics(
            "inputs:\n  - id: logs\n    type: filestream\n    condition: ${kubernetes.labels.app} == 'x'\n    streams:\n      - id: node-logs\n        paths: [/var/log/syslog]\n",
        );
        assert!(selected.is_empty(), "{selected:?}");
    }
}
