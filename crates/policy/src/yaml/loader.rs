//! Events of the YAML parser to a [`Node`] tree, with explicit stacks (no
//! recursion) and budgets that hold after alias expansion.
//!
//! Every finished node carries its height (nested collections below and
//! including it), its value count and its text bytes. An anchor keeps these
//! with its node, so an alias is charged in O(1) before it is copied: the
//! limits of [`super`] can never be crossed by aliases of aliases,
//! however few bytes the document has.

use std::collections::{HashMap, HashSet};

use saphyr_parser::{Event, Parser, ScalarStyle, Span};

use super::node::{Key, Node, NodeKind};
use super::scalar::resolve_plain;
use super::{MAX_DEPTH, MAX_NODES, MAX_TEXT_BYTES};
use crate::error::{PolicyError, Pos};

/// A mapping with more entries than this gets a hash index for its
/// duplicate-key check; smaller ones are scanned.
const INDEX_AT: usize = 16;

/// What a finished node costs.
#[derive(Debug, Clone, Copy, Default)]
struct Size {
    /// Nested collections from this node down (0 for a scalar).
    height: usize,
    /// Values, the node itself included.
    nodes: usize,
    /// Bytes of scalar text, keys included.
    bytes: usize,
}

impl Size {
    fn add_child(&mut self, child: Size) {
        self.height = self.height.max(child.height + 1);
        self.nodes = self.nodes.saturating_add(child.nodes);
        self.bytes = self.bytes.saturating_add(child.bytes);
    }
}

/// A node with what it costs and, for a scalar, its text as a mapping key.
struct Built {
    node: Node,
    key: Option<String>,
    size: Size,
}

enum Body {
    Seq(Vec<Node>),
    Map {
        entries: Vec<(Key, Node)>,
        key: Option<Key>,
        index: Option<HashMap<String, Pos>>,
    },
}

struct Frame {
    body: Body,
    pos: Pos,
    anchor: usize,
    size: Size,
}

/// Running totals for the whole document, aliases expanded.
struct Budget<'a> {
    file: &'a str,
    nodes: usize,
    bytes: usize,
}

impl Budget<'_> {
    /// Charges `size` for a node about to be added, `alias` naming the alias
    /// that copies it, if any.
    fn charge(
        &mut self,
        size: Size,
        pos: Pos,
        alias: Option<&dyn Fn() -> String>,
    ) -> Result<(), PolicyError> {
        self.nodes = self.nodes.saturating_add(size.nodes);
        self.bytes = self.bytes.saturating_add(size.bytes);
        if self.nodes <= MAX_NODES && self.bytes <= MAX_TEXT_BYTES {
            return Ok(());
        }
        let what = match alias {
            Some(name) => format!("alias `{}` expands the document to", name()),
            None => "the document (aliases expanded) has".to_string(),
        };
        let hint = "a policy never needs this much; look for aliases of aliases, which multiply (an alias bomb)";
        if self.nodes > MAX_NODES {
            return Err(PolicyError::new(
                self.file,
                pos,
                format!("{what} too many values: more than {MAX_NODES}, the limit of the loader"),
            )
            .with_hint(hint));
        }
        if self.bytes > MAX_TEXT_BYTES {
            return Err(PolicyError::new(
                self.file,
                pos,
                format!(
                    "{what} too much text: more than {} MiB, the limit of the loader",
                    MAX_TEXT_BYTES >> 20
                ),
            )
            .with_hint(hint));
        }
        Ok(())
    }
}

fn pos_of(span: &Span) -> Pos {
    Pos::new(span.start.line(), span.start.col() + 1)
}

/// The source text of a span (for messages: O(length of the text)).
fn source_of(text: &str, span: &Span) -> String {
    let (start, end) = (span.start.index(), span.end.index());
    text.chars()
        .skip(start)
        .take(end.saturating_sub(start))
        .collect()
}

fn too_deep(file: &str, pos: Pos, alias: Option<&str>) -> PolicyError {
    let msg = match alias {
        Some(a) => format!(
            "alias `{a}` expands to nesting deeper than {MAX_DEPTH} levels, the limit of the loader"
        ),
        None => format!("nesting deeper than {MAX_DEPTH} levels, the limit of the loader"),
    };
    PolicyError::new(file, pos, msg)
        .with_hint("flatten the structure; no policy setting nests this deep")
}

/// Types a scalar from its text, style and tag.
fn scalar_kind(
    raw: &str,
    style: ScalarStyle,
    core_tag: Option<&str>,
    file: &str,
    pos: Pos,
) -> Result<NodeKind, PolicyError> {
    let quoted = || NodeKind::Str {
        value: raw.to_string(),
        quoted: true,
    };
    let kind = if style == ScalarStyle::Plain {
        resolve_plain(raw)
    } else {
        quoted()
    };
    Ok(match core_tag {
        Some("str") => quoted(),
        Some(t @ ("int" | "float" | "bool" | "null")) => match (t, resolve_plain(raw)) {
            ("int", k @ NodeKind::Int(_))
            | ("float", k @ NodeKind::Float(_))
            | ("bool", k @ NodeKind::Bool(_))
            | ("null", k @ NodeKind::Null) => k,
            ("float", NodeKind::Int(i)) => NodeKind::Float(i as f64),
            _ => {
                return Err(PolicyError::new(
                    file,
                    pos,
                    format!("value {raw:?} is not a valid !!{t}"),
                ));
            }
        },
        _ => kind,
    })
}

/// Parses YAML or JSON text into a positioned tree. `file` is only used in
/// error messages. Only the first document of a multi-document stream is
/// read, as Elastic Agent does.
///
/// The tree is bounded by [`MAX_DEPTH`], [`MAX_NODES`] and
/// [`MAX_TEXT_BYTES`] with every alias expanded, so code that walks it
/// recursively cannot run out of stack and its size is bounded.
pub fn parse_tree(text: &str, file: &str) -> Result<Node, PolicyError> {
    Ok(parse(text, file, false)?.pop().unwrap_or(Node {
        kind: NodeKind::Null,
        pos: Pos::new(1, 1),
    }))
}

/// As [`parse_tree`], every document of a multi-document stream, in order
/// (an empty document is a null node); the limits hold for the whole
/// stream. Anchors are per document, as YAML defines them.
pub fn parse_documents(text: &str, file: &str) -> Result<Vec<Node>, PolicyError> {
    parse(text, file, true)
}

fn parse(text: &str, file: &str, every: bool) -> Result<Vec<Node>, PolicyError> {
    let mut docs = Vec::new();
    let mut stack: Vec<Frame> = Vec::new();
    let mut anchors: HashMap<usize, Built> = HashMap::new();
    let mut budget = Budget {
        file,
        nodes: 0,
        bytes: 0,
    };
    let mut root: Option<Node> = None;
    let mut last_pos = Pos::new(1, 1);
    let err = |pos: Pos, msg: String| PolicyError::new(file, pos, msg);

    for item in Parser::new_from_str(text) {
        let (event, span) = match item {
            Ok(x) => x,
            Err(e) => {
                let m = e.marker();
                return Err(err(
                    Pos::new(m.line(), m.col() + 1),
                    format!("invalid YAML: {}", e.info()),
                )
                .with_hint(
                    "check indentation, quoting and that every `key:` is followed by a space",
                ));
            }
        };
        let pos = pos_of(&span);
        last_pos = pos;
        let (built, anchor) = match event {
            Event::StreamEnd => break,
            Event::DocumentEnd => {
                if !stack.is_empty() {
                    return Err(err(pos, "unexpected end of document".into()));
                }
                docs.push(root.take().unwrap_or(Node {
                    kind: NodeKind::Null,
                    pos,
                }));
                if !every {
                    break;
                }
                anchors.clear();
                continue;
            }
            Event::Alias(id) => {
                let name = || source_of(text, &span);
                let Some(a) = anchors.get(&id) else {
                    return Err(err(
                        pos,
                        format!("alias `{}` refers to an unknown anchor", name()),
                    ));
                };
                if stack.len() + a.size.height > MAX_DEPTH {
                    return Err(too_deep(file, pos, Some(&name())));
                }
                budget.charge(a.size, pos, Some(&name))?;
                let built = Built {
                    node: a.node.clone(),
                    key: a.key.clone(),
                    size: a.size,
                };
                (built, 0)
            }
            Event::Scalar(raw, style, anchor, tag) => {
                let size = Size {
                    height: 0,
                    nodes: 1,
                    bytes: raw.len(),
                };
                budget.charge(size, pos, None)?;
                let core = tag
                    .as_deref()
                    .filter(|t| t.handle == "!!" || t.handle == "tag:yaml.org,2002:")
                    .map(|t| t.suffix.as_str());
                let is_key = matches!(
                    stack.last(),
                    Some(Frame {
                        body: Body::Map { key: None, .. },
                        ..
                    })
                );
                // A key needs only its text, a value only its typed node;
                // an anchored scalar may be used as either later.
                let kind = if is_key && anchor == 0 && core.is_none() {
                    NodeKind::Null
                } else {
                    scalar_kind(&raw, style, core, file, pos)?
                };
                let key = (is_key || anchor != 0).then(|| raw.into_owned());
                let built = Built {
                    node: Node { kind, pos },
                    key,
                    size,
                };
                (built, anchor)
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(too_deep(file, pos, None));
                }
                let size = Size {
                    height: 1,
                    nodes: 1,
                    bytes: 0,
                };
                budget.charge(size, pos, None)?;
                let body = if matches!(event, Event::SequenceStart(..)) {
                    Body::Seq(Vec::new())
                } else {
                    Body::Map {
                        entries: Vec::new(),
                        key: None,
                        index: None,
                    }
                };
                stack.push(Frame {
                    body,
                    pos,
                    anchor,
                    size,
                });
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let Some(frame) = stack.pop() else {
                    return Err(err(pos, "unbalanced collection".into()));
                };
                let kind = match frame.body {
                    Body::Seq(items) => NodeKind::List(items),
                    Body::Map { entries, .. } => NodeKind::Map(apply_merge_keys(entries)),
                };
                let built = Built {
                    node: Node {
                        kind,
                        pos: frame.pos,
                    },
                    key: None,
                    size: frame.size,
                };
                (built, frame.anchor)
            }
            Event::StreamStart | Event::DocumentStart(_) | Event::Nothing => continue,
        };
        if anchor != 0 {
            anchors.insert(
                anchor,
                Built {
                    node: built.node.clone(),
                    key: built.key.clone(),
                    size: built.size,
                },
            );
        }
        let Some(parent) = stack.last_mut() else {
            root = Some(built.node);
            continue;
        };
        parent.size.add_child(built.size);
        match &mut parent.body {
            Body::Seq(items) => items.push(built.node),
            Body::Map {
                entries,
                key: slot @ None,
                index,
            } => {
                let node = built.node;
                let Some(name) = built.key else {
                    return Err(err(
                        node.pos,
                        "mapping keys must be plain text, not lists or maps".into(),
                    ));
                };
                let first = match index {
                    Some(ix) => ix.get(&name).copied(),
                    None => entries
                        .iter()
                        .find(|(k, _)| k.name == name)
                        .map(|(k, _)| k.pos),
                };
                if let Some(first) = first {
                    return Err(err(
                        node.pos,
                        format!(
                            "key {name:?} is already defined at line {} column {}",
                            first.line, first.column
                        ),
                    )
                    .with_hint("remove or rename one of the two keys"));
                }
                *slot = Some(Key {
                    name,
                    pos: node.pos,
                });
            }
            Body::Map {
                entries,
                key: slot,
                index,
            } => {
                let Some(k) = slot.take() else { continue };
                if let Some(ix) = index {
                    ix.insert(k.name.clone(), k.pos);
                } else if entries.len() >= INDEX_AT {
                    let mut ix: HashMap<String, Pos> = entries
                        .iter()
                        .map(|(k, _)| (k.name.clone(), k.pos))
                        .collect();
                    ix.insert(k.name.clone(), k.pos);
                    *index = Some(ix);
                }
                entries.push((k, built.node));
            }
        }
    }
    if !stack.is_empty() {
        return Err(err(last_pos, "unexpected end of document".into()));
    }
    docs.extend(root);
    Ok(docs)
}

/// Applies YAML merge keys (`<<: *base`): keys of the merged mappings are
/// added unless the mapping defines them itself; with a list of mappings,
/// the first one that defines a key wins.
fn apply_merge_keys(entries: Vec<(Key, Node)>) -> Vec<(Key, Node)> {
    if !entries.iter().any(|(k, _)| k.name == "<<") {
        return entries;
    }
    let mut own = Vec::new();
    let mut sources = Vec::new();
    for (k, v) in entries {
        match v.kind {
            NodeKind::Map(_) if k.name == "<<" => sources.push(v),
            NodeKind::List(l) if k.name == "<<" => sources.extend(l),
            kind => own.push((k, Node { kind, pos: v.pos })),
        }
    }
    let mut taken: HashSet<String> = own.iter().map(|(k, _)| k.name.clone()).collect();
    for src in sources {
        if let NodeKind::Map(m) = src.kind {
            for (mk, mv) in m {
                if taken.insert(mk.name.clone()) {
                    own.push((mk, mv));
                }
            }
        }
    }
    own
}
