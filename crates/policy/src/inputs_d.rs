//! Inputs kept in files of their own beside the policy (Elastic Agent's
//! `inputs.d/*.yml`): each file's `inputs` are appended to the policy's,
//! and every message about them still names that file, line and column.
//!
//! The nodes of the k-th added file keep their own line numbers plus
//! k × [`LINE_STRIDE`], so one [`crate::Pos`] tells file and line apart;
//! [`Policy::locate`] turns it back into the file's name and line.

use crate::error::{PolicyError, Pos};
use crate::lint::Diagnostic;
use crate::model::{Key, Node, NodeKind, Policy, parse_tree};

/// How far apart the line numbers of two files are. A file longer than
/// this is refused.
pub const LINE_STRIDE: usize = 1 << 24;

impl Policy {
    /// Appends the `inputs` of the file `name` (its `text`) to the policy.
    /// The file holds `inputs:` (a list of inputs) and nothing else; other
    /// keys are ignored, as Elastic Agent ignores them, and returned as
    /// warnings. An error names the file, line and column.
    pub fn add_inputs_file(&mut self, name: &str, text: &str) -> Result<Vec<String>, PolicyError> {
        let lines = text.lines().count();
        if lines >= LINE_STRIDE {
            return Err(PolicyError::new(
                name,
                Pos::new(1, 1),
                format!("{lines} lines is more than an inputs file may have ({LINE_STRIDE})"),
            ));
        }
        let root = parse_tree(text, name)?;
        let mut warnings = Vec::new();
        let mut inputs = match root.kind {
            NodeKind::Null => Vec::new(),
            NodeKind::Map(entries) => {
                let mut inputs = Vec::new();
                for (key, node) in entries {
                    if key.name != "inputs" {
                        warnings.push(format!(
                            "{name}:{}:{}: `{}` is ignored: a file of inputs adds `inputs:` only (the rest belongs in the policy, {})",
                            key.pos.line, key.pos.column, key.name, self.file
                        ));
                        continue;
                    }
                    match node.kind {
                        NodeKind::Null => {}
                        NodeKind::List(items) => {
                            for item in items {
                                if !matches!(item.kind, NodeKind::Map(_)) {
                                    return Err(PolicyError::new(
                                        name,
                                        item.pos,
                                        format!("each input must be a mapping, found {}", item.type_name()),
                                    )
                                    .with_hint("write each input as `- type: ...` with its settings indented below"));
                                }
                                inputs.push(item);
                            }
                        }
                        _ => {
                            return Err(PolicyError::new(
                                name,
                                node.pos,
                                format!("`inputs` must be a list, found {}", node.type_name()),
                            )
                            .with_hint(
                                "write each input as a list item starting with `- type: ...`",
                            ));
                        }
                    }
                }
                inputs
            }
            _ => {
                return Err(PolicyError::new(
                    name,
                    root.pos,
                    format!(
                        "a file of inputs must be a mapping, found {}",
                        root.type_name()
                    ),
                )
                .with_hint("start the file with `inputs:`"));
            }
        };
        let shift = (self.sources.len() + 1) * LINE_STRIDE;
        for input in &mut inputs {
            shift_lines(input, shift);
        }
        self.sources.push(name.to_string());
        append_inputs(&mut self.root, inputs);
        Ok(warnings)
    }

    /// The file a position is in and the position within it.
    pub fn locate(&self, pos: Pos) -> (&str, Pos) {
        let k = pos.line / LINE_STRIDE;
        match k.checked_sub(1).and_then(|i| self.sources.get(i)) {
            Some(name) => (name, Pos::new(pos.line - k * LINE_STRIDE, pos.column)),
            None => (&self.file, pos),
        }
    }

    /// `e` naming the file its position is in.
    pub fn relocate(&self, mut e: PolicyError) -> PolicyError {
        if e.file == self.file {
            let (file, pos) = self.locate(e.pos);
            e.file = file.to_string();
            e.pos = pos;
        }
        e
    }

    /// `d` naming the file its position is in.
    pub fn relocate_diagnostic(&self, mut d: Diagnostic) -> Diagnostic {
        if d.file == self.file {
            let (file, pos) = self.locate(d.pos);
            d.file = file.to_string();
            d.pos = pos;
        }
        d
    }
}

fn shift_lines(node: &mut Node, by: usize) {
    node.pos.line += by;
    match &mut node.kind {
        NodeKind::List(items) => items.iter_mut().for_each(|n| shift_lines(n, by)),
        NodeKind::Map(entries) => {
            for (key, value) in entries {
                key.pos.line += by;
                shift_lines(value, by);
            }
        }
        _ => {}
    }
}

fn append_inputs(root: &mut Node, mut added: Vec<Node>) {
    if added.is_empty() {
        return;
    }
    if matches!(root.kind, NodeKind::Null) {
        root.kind = NodeKind::Map(Vec::new());
    }
    let NodeKind::Map(entries) = &mut root.kind else {
        return;
    };
    match entries.iter_mut().find(|(k, _)| k.name == "inputs") {
        Some((_, node)) => match &mut node.kind {
            NodeKind::List(items) => items.append(&mut added),
            _ => node.kind = NodeKind::List(added),
        },
        None => entries.push((
            Key {
                name: "inputs".to_string(),
                pos: Pos::default(),
            },
            Node {
                kind: NodeKind::List(added),
                pos: Pos::default(),
            },
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lint::Severity;

    const MAIN: &str = "outputs:\n  default: {type: console}\ninputs:\n  - id: main\n    type: exec\n    command: [date]\n";

    #[test]
    fn inputs_of_added_files_follow_the_policys_and_messages_name_their_file() {
        let mut p = Policy::parse(MAIN, "agent.yml").unwrap();
        let w = p
            .add_inputs_file(
                "inputs.d/a.yml",
                "inputs:\n  - id: a\n    type: exec\n    command: [date]\n    period: soon\n",
            )
            .unwrap();
        assert!(w.is_empty());
        let w = p
            .add_inputs_file(
                "inputs.d/b.yml",
                "outputs: {x: 1}\ninputs:\n  - id: b\n    type: nope\n",
            )
            .unwrap();
        assert_eq!(w.len(), 1);
        assert!(
            w[0].starts_with("inputs.d/b.yml:1:1: `outputs` is ignored"),
            "{w:?}"
        );
        let ids: Vec<String> = p
            .inputs()
            .iter()
            .map(|i| i.get("id").and_then(Node::as_str).unwrap_or("").to_string())
            .collect();
        assert_eq!(ids, ["main", "a", "b"]);
        // A position inside b.yml reads as b.yml's own line.
        let b_type = p.inputs()[2].get("type").unwrap().pos;
        assert_eq!(p.locate(b_type), ("inputs.d/b.yml", Pos::new(4, 11)));
        let main_type = p.inputs()[0].get("type").unwrap().pos;
        assert_eq!(p.locate(main_type), ("agent.yml", Pos::new(5, 11)));
        let e = p.relocate(PolicyError::new("agent.yml", b_type, "unknown"));
        assert_eq!(e.to_string(), "inputs.d/b.yml:4:11: unknown");
        let d = p.relocate_diagnostic(Diagnostic {
            severity: Severity::Error,
            file: "agent.yml".into(),
            pos: p.inputs()[1].get("period").unwrap().pos,
            message: "bad".into(),
            hint: None,
        });
        assert_eq!(
            (d.file.as_str(), d.pos),
            ("inputs.d/a.yml", Pos::new(5, 13))
        );
    }

    #[test]
    fn a_malformed_file_of_inputs_is_an_error_naming_it() {
        let mut p = Policy::parse(MAIN, "agent.yml").unwrap();
        let e = p
            .add_inputs_file("inputs.d/x.yml", "inputs: {id: x}\n")
            .unwrap_err();
        assert_eq!((e.file.as_str(), e.pos.line), ("inputs.d/x.yml", 1));
        let e = p
            .add_inputs_file("inputs.d/y.yml", "inputs:\n  - just text\n")
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("inputs.d/y.yml:2:5: each input must be a mapping"),
            "{e}"
        );
        let e = p
            .add_inputs_file("inputs.d/z.yml", "inputs: [\n")
            .unwrap_err();
        assert_eq!(e.file, "inputs.d/z.yml");
        assert_eq!(p.inputs().len(), 1, "nothing of a refused file is added");
        // An empty file, and a policy with no inputs of its own.
        let mut bare =
            Policy::parse("outputs:\n  default: {type: console}\n", "agent.yml").unwrap();
        bare.add_inputs_file("inputs.d/empty.yml", "").unwrap();
        bare.add_inputs_file("inputs.d/one.yml", "inputs:\n  - {id: one, type: exec}\n")
            .unwrap();
        assert_eq!(bare.inputs().len(), 1);
    }
}
