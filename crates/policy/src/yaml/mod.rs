//! The YAML (and JSON) loader: text to a [`Node`] tree that remembers where
//! every key and value was written.
//!
//! Built on the event parser `saphyr-parser`, with a layer of our own on top
//! because policies need what a serde deserializer does not hand out (see
//! the crate README for the measurements behind this choice):
//!
//! - plain scalars are typed as `gopkg.in/yaml.v2` (YAML 1.1, under Elastic
//!   Agent's go-ucfg) types them, see [`resolve_plain`]; quoted and block
//!   scalars are always strings, and whether a string was quoted is kept;
//! - a line and column on every key and value;
//! - anchors, aliases, merge keys (`<<`) and `!!str`/`!!int`/... tags;
//!   duplicate keys are an error, as in yaml.v2;
//! - limits that hold after alias expansion: [`MAX_DEPTH`] nested
//!   collections, [`MAX_NODES`] values and [`MAX_TEXT_BYTES`] of text. A
//!   short document of aliases of aliases (a "billion laughs") is refused
//!   with an error naming the limit before anything is copied, and every
//!   later recursive pass over the tree has a bounded depth.

mod loader;
mod node;
mod scalar;

pub use loader::{parse_documents, parse_tree};
pub use node::{Key, Node, NodeKind};
pub use scalar::resolve_plain;

/// Nesting deeper than this many collections is refused, counting what
/// aliases expand to. No policy needs it, and it bounds the stack used by
/// every recursive pass over the tree (cloning, dropping, rendering,
/// `check`) on a thread with a small stack such as a tokio worker's 2 MiB.
pub const MAX_DEPTH: usize = 128;

/// Upper bound on the number of values (scalars, lists, maps) of a document
/// with every alias expanded.
pub const MAX_NODES: usize = 250_000;

/// Upper bound on the bytes of scalar text (keys and values) of a document
/// with every alias expanded.
pub const MAX_TEXT_BYTES: usize = 16 << 20;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Pos;
    use crate::value::Value;

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
    fn every_document_of_a_stream_in_order_with_anchors_per_document() {
        let text = "a: &x 1\nb: *x\n---\n---\nc: 3\n";
        let docs = parse_documents(text, "t.yaml").unwrap();
        let values: Vec<Value> = docs.iter().map(Node::to_value).collect();
        assert_eq!(values.len(), 3);
        assert_eq!(docs[0].get("b").map(Node::to_value), Some(Value::Int(1)));
        assert_eq!(values[1], Value::Null);
        assert_eq!(docs[2].get("c").map(Node::to_value), Some(Value::Int(3)));
        // The first document only, as before, for policies.
        assert_eq!(parse_tree(text, "t.yaml").unwrap().to_value(), values[0]);
        // An alias cannot reach into an earlier document.
        let e = parse_documents("a: &x 1\n---\nb: *x\n", "t.yaml").unwrap_err();
        assert!(e.to_string().contains("unknown anchor"), "{e}");
        assert!(parse_documents("", "t.yaml").unwrap().is_empty());
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
    fn anchored_keys_and_aliased_scalars_as_keys() {
        let t = parse_tree("&k name: 1\nother: *k\nn: &n 5\n*n : five\n", "k.yaml").unwrap();
        assert_eq!(t.get("name").unwrap().kind, NodeKind::Int(1));
        assert_eq!(t.get("other").unwrap().as_str(), Some("name"));
        assert_eq!(t.get("5").unwrap().as_str(), Some("five"));
        let e = parse_tree("!!int x: 1\n", "k.yaml").unwrap_err();
        assert!(e.message.contains("not a valid !!int"), "{e}");
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
}
