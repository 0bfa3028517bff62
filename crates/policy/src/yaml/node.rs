//! The positioned tree the loader builds: every key and value remembers
//! where it was written, so later errors can name file, line and column.

use crate::error::Pos;
use crate::value::{Map, Value};

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
