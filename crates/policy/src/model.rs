//! The policy model: a loaded document (see [`crate::yaml`]) whose shape has
//! been checked, with accessors for its sections. Unknown keys are kept as
//! they are for the input that owns them to validate.

use crate::error::PolicyError;
use crate::value::Value;
// The tree and the loader live in `yaml`; these paths are kept for callers.
pub use crate::yaml::{Key, Node, NodeKind, parse_tree};

/// Sections whose settings Elastic's policies often write as dotted
/// top-level keys (`providers.kubernetes:`, `agent.monitoring:`).
const FOLDED_SECTIONS: [&str; 3] = ["agent", "providers", "outputs"];

/// Moves top-level keys such as `providers.kubernetes` under their section
/// (`providers: {kubernetes: …}`), creating it when absent, as Elastic
/// Agent's configuration reads dotted keys. A key given both ways is an
/// error naming both places.
fn fold_dotted_sections(root: Node, file: &str) -> Result<Node, PolicyError> {
    let pos = root.pos;
    let NodeKind::Map(entries) = root.kind else {
        return Ok(root);
    };
    let mut out: Vec<(Key, Node)> = Vec::with_capacity(entries.len());
    let mut moved: Vec<(String, Key, Node)> = Vec::new();
    for (k, v) in entries {
        match k.name.split_once('.') {
            Some((section, rest)) if FOLDED_SECTIONS.contains(&section) && !rest.is_empty() => {
                moved.push((
                    section.to_string(),
                    Key {
                        name: rest.to_string(),
                        pos: k.pos,
                    },
                    v,
                ));
            }
            _ => out.push((k, v)),
        }
    }
    for (section, key, value) in moved {
        let at = match out.iter().position(|(k, _)| k.name == section) {
            Some(i) => i,
            None => {
                out.push((
                    Key {
                        name: section.clone(),
                        pos: key.pos,
                    },
                    Node {
                        kind: NodeKind::Map(Vec::new()),
                        pos: value.pos,
                    },
                ));
                out.len() - 1
            }
        };
        let node = &mut out[at].1;
        if matches!(node.kind, NodeKind::Null) {
            node.kind = NodeKind::Map(Vec::new());
        }
        let NodeKind::Map(inner) = &mut node.kind else {
            // Reported by the shape check of the section.
            continue;
        };
        if let Some((first, _)) = inner.iter().find(|(k, _)| k.name == key.name) {
            return Err(PolicyError::new(
                file,
                key.pos,
                format!(
                    "`{section}.{}` is given twice: here and at line {}",
                    key.name, first.pos.line
                ),
            )
            .with_hint("keep one of them"));
        }
        inner.push((key, value));
    }
    Ok(Node {
        kind: NodeKind::Map(out),
        pos,
    })
}

/// A loaded policy: `agent`, `providers`, `inputs`, `outputs` and any other
/// top-level keys, kept with their positions.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// The file name given to [`Policy::parse`], used in messages.
    pub file: String,
    /// The whole document.
    pub root: Node,
    /// Files whose `inputs` were added ([`Policy::add_inputs_file`]), in
    /// order: the lines of the k-th are numbered from k ×
    /// [`crate::inputs_d::LINE_STRIDE`].
    pub sources: Vec<String>,
}

impl Policy {
    /// Parses and checks the shape of a policy. Both YAML and JSON are
    /// accepted (JSON is read as YAML).
    pub fn parse(text: &str, file: &str) -> Result<Policy, PolicyError> {
        let root = fold_dotted_sections(parse_tree(text, file)?, file)?;
        let e = |pos, msg: String| PolicyError::new(file, pos, msg);
        match &root.kind {
            NodeKind::Map(_) | NodeKind::Null => {}
            _ => {
                return Err(e(
                    root.pos,
                    format!("a policy must be a mapping, found {}", root.type_name()),
                )
                .with_hint("start the file with top-level keys such as `inputs:`"));
            }
        }
        for section in ["agent", "providers", "outputs"] {
            if let Some(n) = root.get(section)
                && !matches!(n.kind, NodeKind::Map(_) | NodeKind::Null)
            {
                return Err(e(
                    n.pos,
                    format!("`{section}` must be a mapping, found {}", n.type_name()),
                )
                .with_hint(format!(
                    "write `{section}:` followed by indented `key: value` lines"
                )));
            }
        }
        if let Some(n) = root.get("inputs") {
            match &n.kind {
                NodeKind::Null => {}
                NodeKind::List(items) => {
                    for item in items {
                        if !matches!(item.kind, NodeKind::Map(_)) {
                            return Err(e(
                                item.pos,
                                format!("each input must be a mapping, found {}", item.type_name()),
                            )
                            .with_hint("write each input as `- type: ...` with its settings indented below"));
                        }
                    }
                }
                _ => {
                    return Err(e(
                        n.pos,
                        format!("`inputs` must be a list, found {}", n.type_name()),
                    )
                    .with_hint("write each input as a list item starting with `- type: ...`"));
                }
            }
        }
        Ok(Policy {
            file: file.to_string(),
            root,
            sources: Vec::new(),
        })
    }

    /// A top-level section (`providers.kubernetes:` written at the top
    /// level is found under `providers`, as Elastic Agent reads it).
    pub fn section(&self, name: &str) -> Option<&Node> {
        self.root.get(name)
    }

    /// The inputs, in policy order.
    pub fn inputs(&self) -> &[Node] {
        match self.section("inputs").map(|n| &n.kind) {
            Some(NodeKind::List(l)) => l,
            _ => &[],
        }
    }

    /// The provider configured by `agent.providers.default` (also accepted
    /// written with dots as one key), or `env`.
    pub fn default_provider(&self) -> String {
        let nested = self
            .section("agent")
            .and_then(|a| {
                a.get("providers")
                    .and_then(|p| p.get("default"))
                    .or_else(|| a.get("providers.default"))
            })
            .or_else(|| self.root.get("agent.providers.default"));
        match nested.and_then(Node::as_str) {
            Some(s) if !s.is_empty() => s.to_string(),
            _ => "env".to_string(),
        }
    }

    /// The `providers` section entries.
    pub fn providers(&self) -> &[(Key, Node)] {
        self.section("providers").map(Node::entries).unwrap_or(&[])
    }

    /// The static variables of the `local` provider (`providers.local.vars`).
    pub fn local_vars(&self) -> Option<Value> {
        self.section("providers")
            .and_then(|p| p.get("local"))
            .and_then(|l| l.get("vars"))
            .map(Node::to_value)
    }
}

#[cfg(test)]
mod folded_tests {
    use super::*;

    #[test]
    fn dotted_top_level_keys_are_read_under_their_section() {
        let p = Policy::parse(
            "providers.kubernetes:\n  node: n1\nagent.monitoring:\n  enabled: true\nproviders:\n  kubernetes_leaderelection: {leader_lease: l}\n",
            "p.yml",
        )
        .unwrap();
        let providers = p.section("providers").unwrap().to_value();
        assert_eq!(
            providers.lookup_path("kubernetes.node"),
            Some(&Value::Str("n1".into()))
        );
        assert!(providers.lookup_path("kubernetes_leaderelection").is_some());
        assert!(p.section("agent").unwrap().get("monitoring").is_some());
        let e = Policy::parse(
            "providers:\n  kubernetes: {}\nproviders.kubernetes: {node: x}\n",
            "p.yml",
        )
        .unwrap_err();
        assert!(e.to_string().contains("given twice"), "{e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Pos;

    #[test]
    fn json_policies_load() {
        let p = Policy::parse(
            r#"{"inputs": [{"type": "x", "enabled": true, "n": 1.5}]}"#,
            "p.json",
        )
        .unwrap();
        assert_eq!(p.inputs().len(), 1);
        assert_eq!(
            p.inputs()[0].get("enabled").unwrap().kind,
            NodeKind::Bool(true)
        );
    }

    #[test]
    fn policy_shape_errors() {
        let cases = [
            ("- a\n", "a policy must be a mapping", Pos::new(1, 1)),
            (
                "inputs: {a: 1}\n",
                "`inputs` must be a list",
                Pos::new(1, 9),
            ),
            (
                "inputs:\n  - 3\n",
                "each input must be a mapping",
                Pos::new(2, 5),
            ),
            (
                "providers: [a]\n",
                "`providers` must be a mapping",
                Pos::new(1, 12),
            ),
        ];
        for (src, msg, pos) in cases {
            let e = Policy::parse(src, "s.yaml").unwrap_err();
            assert!(e.message.contains(msg), "{src}: {e}");
            assert_eq!(e.pos, pos, "{src}: {e}");
            assert!(e.hint.is_some());
        }
    }

    #[test]
    fn default_provider_and_local_vars() {
        let p = Policy::parse(
            "agent:\n  providers:\n    default: host\nproviders:\n  local:\n    vars:\n      foo: bar\n",
            "p.yaml",
        )
        .unwrap();
        assert_eq!(p.default_provider(), "host");
        assert_eq!(
            p.local_vars().unwrap().lookup_path("foo"),
            Some(&Value::Str("bar".into()))
        );
        let p = Policy::parse("agent.providers.default: local\n", "p.yaml").unwrap();
        assert_eq!(p.default_provider(), "local");
        assert_eq!(
            Policy::parse("", "e.yaml").unwrap().default_provider(),
            "env"
        );
    }

    #[test]
    fn unknown_input_keys_are_kept() {
        let p = Policy::parse(
            "inputs:\n  - type: x\n    whatever: {deep: [1]}\n",
            "p.yaml",
        )
        .unwrap();
        assert!(p.inputs()[0].get("whatever").is_some());
    }
}
