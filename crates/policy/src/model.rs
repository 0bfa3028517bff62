//! Loading policies (YAML or JSON) into a tree that remembers where every
//! value was written, so later errors can name file, line and column.
//!
//! Plain scalars are typed the way Elastic Agent's loader (go-ucfg on top of
//! `gopkg.in/yaml.v2`, a YAML 1.1 resolver) types them: `yes/no/on/off/y/n`
//! are booleans, `0x1f`, `0o17`, `017` and `1_000` are integers, `~` is null.
//! Quoted and block scalars are always strings. Unknown keys are kept as they
//! are for the input that owns them to validate.

use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};

use crate::error::{PolicyError, Pos};
use crate::value::{Map, Value};

/// Nesting deeper than this is refused (it is never needed and would risk
/// exhausting the stack in recursive passes).
pub const MAX_DEPTH: usize = 128;
/// Upper bound on nodes, counting those produced by alias expansion.
pub const MAX_NODES: usize = 1_000_000;

/// A mapping key and where it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    /// The key text.
    pub name: String,
    /// Where the key starts.
    pub pos: Pos,
}

/// A value in a policy with its position.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// The value.
    pub kind: NodeKind,
    /// Where the value starts.
    pub pos: Pos,
}

/// The shape of a [`Node`].
#[derive(Debug, Clone, PartialEq)]
pub enum NodeKind {
    /// Null (`~`, `null`, or nothing).
    Null,
    /// Boolean.
    Bool(bool),
    /// Integer.
    Int(i64),
    /// Float.
    Float(f64),
    /// String. `quoted` is true for quoted and block scalars.
    Str {
        /// The text.
        value: String,
        /// Whether it was quoted (or a block scalar) in the source.
        quoted: bool,
    },
    /// Sequence.
    List(Vec<Node>),
    /// Mapping, in source order.
    Map(Vec<(Key, Node)>),
}

impl Node {
    /// Plain data without positions.
    pub fn to_value(&self) -> Value {
        match &self.kind {
            NodeKind::Null => Value::Null,
            NodeKind::Bool(b) => Value::Bool(*b),
            NodeKind::Int(i) => Value::Int(*i),
            NodeKind::Float(f) => Value::Float(*f),
            NodeKind::Str { value, .. } => Value::Str(value.clone()),
            NodeKind::List(l) => Value::List(l.iter().map(Node::to_value).collect()),
            NodeKind::Map(m) => Value::Map(
                m.iter()
                    .map(|(k, v)| (k.name.clone(), v.to_value()))
                    .collect::<Map>(),
            ),
        }
    }

    /// Looks up a key of a mapping node.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.kind {
            NodeKind::Map(m) => m.iter().find(|(k, _)| k.name == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The entries of a mapping node (empty for anything else).
    pub fn entries(&self) -> &[(Key, Node)] {
        match &self.kind {
            NodeKind::Map(m) => m,
            _ => &[],
        }
    }

    /// The string value, if this is a string.
    pub fn as_str(&self) -> Option<&str> {
        match &self.kind {
            NodeKind::Str { value, .. } => Some(value),
            _ => None,
        }
    }

    /// Type name for messages.
    pub fn type_name(&self) -> &'static str {
        match &self.kind {
            NodeKind::Null => "null",
            NodeKind::Bool(_) => "bool",
            NodeKind::Int(_) => "int",
            NodeKind::Float(_) => "float",
            NodeKind::Str { .. } => "string",
            NodeKind::List(_) => "list",
            NodeKind::Map(_) => "map",
        }
    }
}

/// Types a plain (unquoted) scalar the way a YAML 1.1 resolver does.
pub fn resolve_plain(s: &str) -> NodeKind {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => return NodeKind::Null,
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "true" | "True" | "TRUE" => {
            return NodeKind::Bool(true);
        }
        "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" | "false" | "False" | "FALSE" => {
            return NodeKind::Bool(false);
        }
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return NodeKind::Float(f64::INFINITY);
        }
        "-.inf" | "-.Inf" | "-.INF" => return NodeKind::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return NodeKind::Float(f64::NAN),
        _ => {}
    }
    let first = s.as_bytes()[0];
    if !(first.is_ascii_digit() || matches!(first, b'+' | b'-' | b'.')) {
        return str_kind(s);
    }
    if let Some(i) = parse_yaml11_int(s) {
        return NodeKind::Int(i);
    }
    if is_yaml_float(s)
        && let Ok(f) = s.replace('_', "").parse::<f64>()
    {
        return NodeKind::Float(f);
    }
    str_kind(s)
}

fn str_kind(s: &str) -> NodeKind {
    NodeKind::Str {
        value: s.to_string(),
        quoted: false,
    }
}

/// Integers in YAML 1.1 style: optional sign, `0x`/`0o`/`0b` prefixes, a
/// leading `0` for octal, `_` separators.
fn parse_yaml11_int(s: &str) -> Option<i64> {
    let plain: String = s.chars().filter(|&c| c != '_').collect();
    let (neg, body) = match plain.as_bytes().first()? {
        b'-' => (true, &plain[1..]),
        b'+' => (false, &plain[1..]),
        _ => (false, &plain[..]),
    };
    if body.is_empty() {
        return None;
    }
    let (radix, digits) = if let Some(d) = body.strip_prefix("0x").or(body.strip_prefix("0X")) {
        (16, d)
    } else if let Some(d) = body.strip_prefix("0o").or(body.strip_prefix("0O")) {
        (8, d)
    } else if let Some(d) = body.strip_prefix("0b").or(body.strip_prefix("0B")) {
        (2, d)
    } else if body.len() > 1 && body.starts_with('0') {
        (8, &body[1..])
    } else {
        (10, body)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let mag = u64::from_str_radix(digits, radix).ok()?;
    if neg {
        if mag <= i64::MAX as u64 + 1 {
            Some((mag as i128).wrapping_neg() as i64)
        } else {
            None
        }
    } else {
        i64::try_from(mag).ok()
    }
}

fn is_yaml_float(s: &str) -> bool {
    // [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
    let b = s.as_bytes();
    let mut i = 0;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    if i < b.len() && b[i] == b'.' {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if i < b.len() && b[i] == b'.' {
            i += 1;
            digits(&mut i);
        }
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

fn pos_of(span: &Span) -> Pos {
    Pos::new(span.start.line(), span.start.col() + 1)
}

enum Frame {
    Seq {
        items: Vec<Node>,
        pos: Pos,
        anchor: usize,
    },
    Map {
        entries: Vec<(Key, Node)>,
        key: Option<Key>,
        pos: Pos,
        anchor: usize,
    },
}

/// Parses YAML or JSON text into a positioned tree. `file` is only used in
/// error messages. Only the first document of a multi-document stream is
/// read, as Elastic Agent does.
pub fn parse_tree(text: &str, file: &str) -> Result<Node, PolicyError> {
    let mut stack: Vec<Frame> = Vec::new();
    let mut anchors: HashMap<usize, Node> = HashMap::new();
    let mut nodes = 0usize;
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
        // (node, key text if it can serve as a mapping key, anchor id)
        let done: Option<(Node, Option<String>, usize)> = match event {
            Event::StreamStart | Event::DocumentStart(_) | Event::Nothing => None,
            Event::DocumentEnd | Event::StreamEnd => break,
            Event::Alias(id) => {
                let Some(n) = anchors.get(&id) else {
                    return Err(err(pos, "alias refers to an unknown anchor".into()));
                };
                nodes = nodes.saturating_add(count_nodes(n));
                if nodes > MAX_NODES {
                    return Err(err(pos, "aliases expand to too many values".into())
                        .with_hint("avoid nesting aliases of aliases"));
                }
                let key = n.as_str().map(str::to_string);
                Some((n.clone(), key, 0))
            }
            Event::Scalar(text, style, anchor, tag) => {
                nodes += 1;
                let raw = text.to_string();
                let mut kind = if style == ScalarStyle::Plain {
                    resolve_plain(&raw)
                } else {
                    NodeKind::Str {
                        value: raw.clone(),
                        quoted: true,
                    }
                };
                if let Some(tag) = tag
                    && (tag.handle == "!!" || tag.handle == "tag:yaml.org,2002:")
                {
                    kind = match tag.suffix.as_str() {
                        "str" => NodeKind::Str {
                            value: raw.clone(),
                            quoted: true,
                        },
                        "int" | "float" | "bool" | "null" => {
                            let k = resolve_plain(&raw);
                            let ok = matches!(
                                (tag.suffix.as_str(), &k),
                                ("int", NodeKind::Int(_))
                                    | ("float", NodeKind::Float(_) | NodeKind::Int(_))
                                    | ("bool", NodeKind::Bool(_))
                                    | ("null", NodeKind::Null)
                            );
                            if !ok {
                                return Err(err(
                                    pos,
                                    format!("value {raw:?} is not a valid !!{}", tag.suffix),
                                ));
                            }
                            match (tag.suffix.as_str(), k) {
                                ("float", NodeKind::Int(i)) => NodeKind::Float(i as f64),
                                (_, k) => k,
                            }
                        }
                        _ => kind,
                    };
                }
                Some((Node { kind, pos }, Some(raw), anchor))
            }
            Event::SequenceStart(anchor, _) => {
                nodes += 1;
                if stack.len() >= MAX_DEPTH {
                    return Err(err(pos, format!("nesting deeper than {MAX_DEPTH} levels")));
                }
                stack.push(Frame::Seq {
                    items: Vec::new(),
                    pos,
                    anchor,
                });
                None
            }
            Event::MappingStart(anchor, _) => {
                nodes += 1;
                if stack.len() >= MAX_DEPTH {
                    return Err(err(pos, format!("nesting deeper than {MAX_DEPTH} levels")));
                }
                stack.push(Frame::Map {
                    entries: Vec::new(),
                    key: None,
                    pos,
                    anchor,
                });
                None
            }
            Event::SequenceEnd => match stack.pop() {
                Some(Frame::Seq { items, pos, anchor }) => Some((
                    Node {
                        kind: NodeKind::List(items),
                        pos,
                    },
                    None,
                    anchor,
                )),
                _ => return Err(err(pos, "unbalanced sequence".into())),
            },
            Event::MappingEnd => match stack.pop() {
                Some(Frame::Map {
                    entries,
                    pos,
                    anchor,
                    ..
                }) => Some((
                    Node {
                        kind: NodeKind::Map(apply_merge_keys(entries)),
                        pos,
                    },
                    None,
                    anchor,
                )),
                _ => return Err(err(pos, "unbalanced mapping".into())),
            },
        };
        let Some((node, key_text, anchor)) = done else {
            continue;
        };
        if nodes > MAX_NODES {
            return Err(err(node.pos, "document has too many values".into()));
        }
        if anchor != 0 {
            anchors.insert(anchor, node.clone());
        }
        match stack.last_mut() {
            None => {
                root = Some(node);
            }
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map { entries, key, .. }) => match key.take() {
                None => {
                    let Some(name) = key_text else {
                        return Err(err(
                            node.pos,
                            "mapping keys must be plain text, not lists or maps".into(),
                        ));
                    };
                    if let Some((first, _)) = entries.iter().find(|(k, _)| k.name == name) {
                        return Err(err(
                            node.pos,
                            format!(
                                "key {name:?} is already defined at line {} column {}",
                                first.pos.line, first.pos.column
                            ),
                        )
                        .with_hint("remove or rename one of the two keys"));
                    }
                    *key = Some(Key {
                        name,
                        pos: node.pos,
                    });
                }
                Some(k) => entries.push((k, node)),
            },
        }
    }
    if !stack.is_empty() {
        return Err(err(last_pos, "unexpected end of document".into()));
    }
    Ok(root.unwrap_or(Node {
        kind: NodeKind::Null,
        pos: Pos::new(1, 1),
    }))
}

fn count_nodes(n: &Node) -> usize {
    match &n.kind {
        NodeKind::List(l) => {
            1usize.saturating_add(l.iter().map(count_nodes).fold(0, usize::saturating_add))
        }
        NodeKind::Map(m) => 1usize.saturating_add(
            m.iter()
                .map(|(_, v)| count_nodes(v))
                .fold(0, usize::saturating_add),
        ),
        _ => 1,
    }
}

/// Applies YAML merge keys (`<<: *base`): keys of the merged mappings are
/// added unless the mapping defines them itself.
fn apply_merge_keys(entries: Vec<(Key, Node)>) -> Vec<(Key, Node)> {
    if !entries.iter().any(|(k, _)| k.name == "<<") {
        return entries;
    }
    let mut own = Vec::new();
    let mut merged: Vec<(Key, Node)> = Vec::new();
    for (k, v) in entries {
        if k.name == "<<" {
            let sources: Vec<Node> = match v.kind {
                NodeKind::Map(_) => vec![v],
                NodeKind::List(l) => l,
                other => {
                    own.push((
                        k,
                        Node {
                            kind: other,
                            pos: v.pos,
                        },
                    ));
                    continue;
                }
            };
            for src in sources {
                if let NodeKind::Map(m) = src.kind {
                    for (mk, mv) in m {
                        if !merged.iter().any(|(x, _)| x.name == mk.name) {
                            merged.push((mk, mv));
                        }
                    }
                }
            }
        } else {
            own.push((k, v));
        }
    }
    for (mk, mv) in merged {
        if !own.iter().any(|(x, _)| x.name == mk.name) {
            own.push((mk, mv));
        }
    }
    own
}

/// A loaded policy: `agent`, `providers`, `inputs`, `outputs` and any other
/// top-level keys, kept with their positions.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// The file name given to [`Policy::parse`], used in messages.
    pub file: String,
    /// The whole document.
    pub root: Node,
}

impl Policy {
    /// Parses and checks the shape of a policy. Both YAML and JSON are
    /// accepted (JSON is read as YAML).
    pub fn parse(text: &str, file: &str) -> Result<Policy, PolicyError> {
        let root = parse_tree(text, file)?;
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
        })
    }

    /// A top-level section.
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
mod tests {
    use super::*;

    fn kind(s: &str) -> NodeKind {
        parse_tree(&format!("v: {s}\n"), "t.yaml")
            .unwrap()
            .get("v")
            .unwrap()
            .kind
            .clone()
    }

    fn plain(s: &str) -> NodeKind {
        NodeKind::Str {
            value: s.into(),
            quoted: false,
        }
    }

    #[test]
    fn yaml11_scalar_table() {
        let cases: Vec<(&str, NodeKind)> = vec![
            ("yes", NodeKind::Bool(true)),
            ("On", NodeKind::Bool(true)),
            ("y", NodeKind::Bool(true)),
            ("TRUE", NodeKind::Bool(true)),
            ("no", NodeKind::Bool(false)),
            ("OFF", NodeKind::Bool(false)),
            ("False", NodeKind::Bool(false)),
            ("tRUE", plain("tRUE")),
            ("~", NodeKind::Null),
            ("null", NodeKind::Null),
            ("", NodeKind::Null),
            ("42", NodeKind::Int(42)),
            ("-42", NodeKind::Int(-42)),
            ("+7", NodeKind::Int(7)),
            ("0x1F", NodeKind::Int(31)),
            ("0o17", NodeKind::Int(15)),
            ("017", NodeKind::Int(15)),
            ("0b101", NodeKind::Int(5)),
            ("1_000", NodeKind::Int(1000)),
            ("-9223372036854775808", NodeKind::Int(i64::MIN)),
            ("1.5", NodeKind::Float(1.5)),
            ("1e3", NodeKind::Float(1000.0)),
            (".5", NodeKind::Float(0.5)),
            ("-.inf", NodeKind::Float(f64::NEG_INFINITY)),
            ("1.2.3", plain("1.2.3")),
            // YAML 1.1 reads an invalid octal as a float.
            ("09", NodeKind::Float(9.0)),
            ("10s", plain("10s")),
            (
                "'yes'",
                NodeKind::Str {
                    value: "yes".into(),
                    quoted: true,
                },
            ),
            (
                "\"42\"",
                NodeKind::Str {
                    value: "42".into(),
                    quoted: true,
                },
            ),
            (
                "!!str 42",
                NodeKind::Str {
                    value: "42".into(),
                    quoted: true,
                },
            ),
            ("!!float 1", NodeKind::Float(1.0)),
        ];
        for (src, want) in cases {
            assert_eq!(kind(src), want, "scalar {src:?}");
        }
    }

    #[test]
    fn positions_are_one_based() {
        let t = parse_tree("a:\n  b: [1, 2]\n", "p.yaml").unwrap();
        let b = t.get("a").unwrap().get("b").unwrap();
        assert_eq!(b.pos, Pos::new(2, 6));
        let (k, _) = &t.get("a").unwrap().entries()[0];
        assert_eq!(k.pos, Pos::new(2, 3));
    }

    #[test]
    fn syntax_errors_name_file_line_column() {
        let e = parse_tree("a: [1, 2\nb: 3\n", "bad.yaml").unwrap_err();
        assert_eq!(e.file, "bad.yaml");
        assert!(e.pos.line >= 1, "{e}");
        assert!(e.to_string().starts_with("bad.yaml:"), "{e}");
        assert!(e.hint.is_some());
    }

    #[test]
    fn duplicate_keys_are_an_error() {
        let e = parse_tree("a: 1\nb: 2\na: 3\n", "d.yaml").unwrap_err();
        assert_eq!(e.pos, Pos::new(3, 1));
        assert!(e.message.contains("line 1 column 1"), "{e}");
    }

    #[test]
    fn anchors_aliases_and_merge_keys() {
        let t = parse_tree(
            "base: &b {x: 1, y: 2}\nthing:\n  <<: *b\n  y: 3\ncopy: *b\n",
            "m.yaml",
        )
        .unwrap();
        let thing = t.get("thing").unwrap().to_value();
        assert_eq!(thing.lookup_path("x"), Some(&Value::Int(1)));
        assert_eq!(thing.lookup_path("y"), Some(&Value::Int(3)));
        assert_eq!(
            t.get("copy").unwrap().to_value().lookup_path("y"),
            Some(&Value::Int(2))
        );
    }

    #[test]
    fn alias_bombs_are_refused() {
        let mut s = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9 {
            let p = i - 1;
            s.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        let e = parse_tree(&s, "bomb.yaml").unwrap_err();
        assert!(e.message.contains("too many"), "{e}");
    }

    #[test]
    fn deep_nesting_is_refused() {
        let s = "[".repeat(MAX_DEPTH + 5);
        assert!(parse_tree(&s, "deep.yaml").is_err());
    }

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
