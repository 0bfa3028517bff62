//! The dissect tokenizer (Logstash's and Beats' `%{key}` patterns).
//!
//! A tokenizer is literal delimiters with keys between them. The string must
//! start with the first delimiter; each key then takes the text up to the
//! next delimiter's first occurrence, and the last key takes the rest.
//!
//! | key          | meaning                                                   |
//! |--------------|-----------------------------------------------------------|
//! | `%{name}`    | the value of `name`                                       |
//! | `%{}`        | skipped                                                   |
//! | `%{?name}`   | skipped, but usable as the name of an `&` key             |
//! | `%{*name}`   | same as `?` (a reference)                                 |
//! | `%{&name}`   | stored under the key named by the value of `?name`/`*name` |
//! | `%{+name}`   | appended to `name`, joined by the delimiter before it     |
//! | `%{+name/2}` | appended in the order of the number                       |
//! | `%{name->}`  | repeated delimiters after the value are skipped (padding) |
//! | `%{name#3}`  | exactly 3 bytes                                           |
//! | `%{name\|integer}` | converted: integer, long, float, double, boolean, ip, string |

use std::collections::BTreeMap;

use regex::Regex;
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Normal,
    Skip,
    Reference,
    Indirect,
    Append,
}

/// A conversion of an extracted value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DataType {
    Integer,
    Long,
    Float,
    Double,
    Boolean,
    Ip,
    Str,
}

const DATA_TYPES: &[(&str, DataType)] = &[
    ("integer", DataType::Integer),
    ("long", DataType::Long),
    ("float", DataType::Float),
    ("double", DataType::Double),
    ("boolean", DataType::Boolean),
    ("ip", DataType::Ip),
    ("string", DataType::Str),
];

#[derive(Debug, Clone)]
struct Field {
    kind: Kind,
    key: String,
    ordinal: u32,
    /// Fixed length in bytes (`#n`), 0 when not fixed.
    length: usize,
    greedy: bool,
    data_type: Option<DataType>,
}

/// Which side of values to trim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trim {
    None,
    Left,
    Right,
    All,
}

/// A compiled tokenizer.
#[derive(Debug, Clone)]
pub(crate) struct Dissector {
    /// `delimiters[i]` comes before `fields[i]`; one more may end the pattern.
    delimiters: Vec<String>,
    /// In pattern order.
    fields: Vec<Field>,
    /// Indexes of `fields` in the order values are applied (by ordinal).
    order: Vec<usize>,
    trim: Trim,
    trim_chars: Vec<char>,
}

impl Dissector {
    /// Compiles `tokenizer`, refusing what Beats refuses.
    pub fn new(tokenizer: &str, trim: Trim, trim_chars: &str) -> Result<Dissector, String> {
        // Same split as Beats: lazily up to each `%{…}`.
        let re = Regex::new(r"(?s)(.*?)%\{([^}]*?)\}").map_err(|e| e.to_string())?;
        let mut delimiters = Vec::new();
        let mut fields = Vec::new();
        let mut pos = 0;
        for caps in re.captures_iter(tokenizer) {
            let (Some(all), Some(delim), Some(key)) = (caps.get(0), caps.get(1), caps.get(2))
            else {
                continue;
            };
            delimiters.push(delim.as_str().to_owned());
            fields.push(parse_key(key.as_str())?);
            pos = all.end();
        }
        if fields.is_empty() {
            return Err(format!(
                "tokenizer `{tokenizer}` has no key; write keys as `%{{name}}`, e.g. `%{{ts}} %{{level}} %{{message}}`"
            ));
        }
        if pos < tokenizer.len() {
            delimiters.push(tokenizer[pos..].to_owned());
        }
        for f in fields.iter().filter(|f| f.kind == Kind::Indirect) {
            let referenced = fields
                .iter()
                .any(|r| r.kind == Kind::Reference && r.key == f.key);
            if !referenced {
                return Err(format!(
                    "`%{{&{k}}}` needs a reference key `%{{?{k}}}` or `%{{*{k}}}` in the tokenizer",
                    k = f.key
                ));
            }
        }
        let mut order: Vec<usize> = (0..fields.len()).collect();
        order.sort_by_key(|&i| fields[i].ordinal);
        Ok(Dissector {
            delimiters,
            fields,
            order,
            trim,
            trim_chars: trim_chars.chars().collect(),
        })
    }

    /// Splits `s` into key → value, or says why it does not match.
    pub fn dissect(&self, s: &str) -> Result<BTreeMap<String, Value>, String> {
        if s.is_empty() {
            return Err("empty string provided".to_owned());
        }
        let positions = self.extract(s)?;
        let mut values: BTreeMap<String, String> = BTreeMap::new();
        let mut conversions: Vec<(String, DataType)> = Vec::new();
        for &i in &self.order {
            let f = &self.fields[i];
            let (start, end) = positions[i];
            let (start, end) = self.trimmed(s, start, end);
            let v = &s[start..end];
            match f.kind {
                Kind::Normal => {
                    values.insert(f.key.clone(), v.to_owned());
                    if let Some(t) = f.data_type {
                        conversions.push((f.key.clone(), t));
                    }
                }
                Kind::Skip => {}
                Kind::Reference => {
                    values.insert(f.key.clone(), v.to_owned());
                }
                Kind::Indirect => {
                    if let Some(name) = values.get(&f.key).cloned() {
                        values.insert(name.clone(), v.to_owned());
                        if let Some(t) = f.data_type {
                            conversions.push((name, t));
                        }
                    }
                }
                Kind::Append => {
                    let join = match self.delimiters[i].as_str() {
                        "" => " ",
                        d => d,
                    };
                    values
                        .entry(f.key.clone())
                        .and_modify(|old| {
                            old.push_str(join);
                            old.push_str(v);
                        })
                        .or_insert_with(|| v.to_owned());
                }
            }
        }
        for f in self.fields.iter().filter(|f| f.kind == Kind::Reference) {
            values.remove(&f.key);
        }
        let mut out: BTreeMap<String, Value> = values
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        for (key, t) in conversions {
            if let Some(Value::String(raw)) = out.get(&key)
                && let Some(converted) = convert(t, raw)
            {
                out.insert(key, converted);
            }
        }
        Ok(out)
    }

    /// Byte ranges of each field's value, in pattern order.
    fn extract(&self, s: &str) -> Result<Vec<(usize, usize)>, String> {
        let mut positions = vec![(0, 0); self.fields.len()];
        let first = &self.delimiters[0];
        if !s.starts_with(first.as_str()) {
            return Err(format!(
                "could not find beginning delimiter `{first}` in `{s}`"
            ));
        }
        let mut offset = first.len();
        let mut i = 0;
        while i + 1 < self.delimiters.len() {
            let field = &self.fields[i];
            let next = &self.delimiters[i + 1];
            let start = offset;
            let end = if field.length > 0 {
                let end = offset + field.length;
                if end > s.len() || !s.is_char_boundary(end) {
                    return Err(format!(
                        "`{}` is {} bytes but `{}` remains",
                        field.key,
                        field.length,
                        tail(s, offset)
                    ));
                }
                // The delimiter must follow the fixed-length value.
                if !s[end..].starts_with(next.as_str()) {
                    return Err(format!(
                        "could not find delimiter `{next}` after `{}` in `{}`",
                        field.key,
                        tail(s, offset)
                    ));
                }
                end
            } else {
                find(s, next, offset).ok_or_else(|| {
                    format!("could not find delimiter `{next}` in `{}`", tail(s, offset))
                })?
            };
            offset = end;
            if field.greedy && !next.is_empty() {
                while find(s, next, offset + 1) == Some(offset + 1) {
                    offset += 1;
                }
            }
            positions[i] = (start, end);
            offset += next.len();
            i += 1;
        }
        if let Some(last) = self.fields.get(i) {
            if last.length > 0 && offset + last.length != s.len() {
                return Err(format!(
                    "last fixed length key `{}` (length {}) does not fit `{}`",
                    last.key,
                    last.length,
                    tail(s, offset)
                ));
            }
            if offset < s.len() {
                positions[i] = (offset, s.len());
            }
        }
        Ok(positions)
    }

    fn trimmed(&self, s: &str, start: usize, end: usize) -> (usize, usize) {
        let v = &s[start..end];
        let chars = &self.trim_chars;
        let in_set = |c: char| chars.contains(&c);
        let (mut a, mut b) = (start, end);
        if matches!(self.trim, Trim::Left | Trim::All) {
            a = start + (v.len() - v.trim_start_matches(in_set).len());
        }
        if matches!(self.trim, Trim::Right | Trim::All) {
            b = a + s[a..end].trim_end_matches(in_set).len();
        }
        (a, b)
    }
}

/// What remains of `s` from byte `offset`, for messages.
fn tail(s: &str, offset: usize) -> &str {
    s.get(offset..).unwrap_or("")
}

/// The first `needle` in `s` at or after byte `from`.
fn find(s: &str, needle: &str, from: usize) -> Option<usize> {
    if needle.is_empty() {
        return Some(from);
    }
    s.get(from..)?.find(needle).map(|i| i + from)
}

fn parse_key(raw: &str) -> Result<Field, String> {
    let mut field = Field {
        kind: Kind::Normal,
        key: String::new(),
        ordinal: 0,
        length: 0,
        greedy: false,
        data_type: None,
    };
    if raw.is_empty() {
        field.kind = Kind::Skip;
        return Ok(field);
    }
    let mut rest = raw;
    if rest.ends_with('|') {
        return Err(format!(
            "`%{{{raw}}}` ends with `|` but names no data type; use one of {}",
            type_names()
        ));
    }
    if let Some((head, t)) = rest.rsplit_once('|')
        && !t.is_empty()
        && t.chars().all(|c| c.is_alphanumeric() || c == '_')
    {
        let Some((_, dt)) = DATA_TYPES.iter().find(|(n, _)| *n == t) else {
            return Err(format!(
                "`%{{{raw}}}`: unknown data type `{t}`; use one of {}",
                type_names()
            ));
        };
        field.data_type = Some(*dt);
        rest = head;
    }
    if let Some(head) = rest.strip_suffix("->") {
        field.greedy = true;
        rest = head;
    }
    if let Some((head, n)) = split_number(rest, '#') {
        field.length = n as usize;
        rest = head;
    }
    if let Some((head, n)) = split_number(rest, '/') {
        field.ordinal = n;
        rest = head;
    }
    if rest.starts_with("+&") || rest.starts_with("&+") {
        return Err(format!(
            "`%{{{raw}}}` mixes the prefixes `&` and `+`; use one of them"
        ));
    }
    let (kind, key) = if let Some(k) = rest.strip_prefix('?') {
        (Kind::Reference, k)
    } else if let Some(k) = rest.strip_prefix('*') {
        (Kind::Reference, k)
    } else if let Some(k) = rest.strip_prefix('+') {
        (Kind::Append, k)
    } else if let Some(k) = rest.strip_prefix('&') {
        (Kind::Indirect, k)
    } else {
        (Kind::Normal, rest)
    };
    if key.is_empty() && kind != Kind::Reference {
        return Err(format!("`%{{{raw}}}` has an empty key name"));
    }
    field.kind = kind;
    field.key = key.to_owned();
    if matches!(kind, Kind::Reference | Kind::Append) {
        field.data_type = None;
    }
    Ok(field)
}

/// `name/12` → (`name`, 12): one or two digits after `sep`.
fn split_number(s: &str, sep: char) -> Option<(&str, u32)> {
    let (head, n) = s.rsplit_once(sep)?;
    if head.is_empty() || n.is_empty() || n.len() > 2 || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok().map(|n| (head, n))
}

fn type_names() -> String {
    DATA_TYPES
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Converts like Beats: trailing spaces ignored; a value that does not
/// convert stays the string it was.
fn convert(t: DataType, raw: &str) -> Option<Value> {
    let v = raw.trim_end_matches(' ');
    match t {
        DataType::Str => Some(Value::String(v.to_owned())),
        DataType::Integer => parse_int(v)
            .and_then(|i| i32::try_from(i).ok())
            .map(Value::from),
        DataType::Long => parse_int(v).map(Value::from),
        DataType::Float => {
            let f: f32 = v.parse().ok()?;
            // Keep the float32's shortest text: 1.1, not 1.100000023841858.
            let f: f64 = f.to_string().parse().ok()?;
            serde_json::Number::from_f64(f).map(Value::Number)
        }
        DataType::Double => serde_json::Number::from_f64(v.parse().ok()?).map(Value::Number),
        DataType::Boolean => match v {
            "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(Value::Bool(true)),
            "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(Value::Bool(false)),
            _ => None,
        },
        DataType::Ip => crate::network::parse_ip(v).map(|_| Value::String(v.to_owned())),
    }
}

/// Decimal, or hexadecimal with a `0x` prefix.
fn parse_int(v: &str) -> Option<i64> {
    if let Some(hex) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        return i64::from_str_radix(&hex.replace('_', ""), 16).ok();
    }
    v.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(tok: &str, msg: &str) -> Result<Value, String> {
        let d = Dissector::new(tok, Trim::None, " ")?;
        d.dissect(msg)
            .map(|m| Value::Object(m.into_iter().collect()))
    }

    // The cases of Beats' testdata/dissect_tests.json.
    #[test]
    fn beats_dissect_cases() {
        let ok: &[(&str, &str, Value)] = &[
            (
                "level=%{level} ts=%{timestamp} caller=%{caller} msg=\"%{message}\"",
                "level=info ts=2018-06-27T17:19:13.036579993Z caller=main.go:222 msg=\"Starting OK\" version=\"(version=2.3.1, branch=HEAD)\"}",
                json!({"caller": "main.go:222", "level": "info", "message": "Starting OK", "timestamp": "2018-06-27T17:19:13.036579993Z"}),
            ),
            (
                "%{day}-%{month}-%{year} %{hour} %{severity} [%{thread_id}] %{origin} %{message}",
                "18-Apr-2018 06:53:20.411 INFO [http-nio-8080-exec-1] org.apache.coyote.http11.Http11Processor.service Error parsing HTTP request header\n Note: further occurrences",
                json!({"day": "18", "month": "Apr", "year": "2018", "hour": "06:53:20.411", "severity": "INFO",
                       "thread_id": "http-nio-8080-exec-1", "origin": "org.apache.coyote.http11.Http11Processor.service",
                       "message": "Error parsing HTTP request header\n Note: further occurrences"}),
            ),
            ("%{key}", "foobar", json!({"key": "foobar"})),
            (
                "%{key1} %{key2}",
                "foo bar",
                json!({"key1": "foo", "key2": "bar"}),
            ),
            (
                "/var/%{key}/log",
                "/var/foobar/log",
                json!({"key": "foobar"}),
            ),
            (
                "/var/%{key}",
                "/var/foobar/log",
                json!({"key": "foobar/log"}),
            ),
            (
                "/var/%{key}/log/%{key1}",
                "/var/foobar/log/apache",
                json!({"key": "foobar", "key1": "apache"}),
            ),
            (
                "/var/%{key}/log/%{key1}.log",
                "/var/foobar/log/apache.log",
                json!({"key": "foobar", "key1": "apache"}),
            ),
            (
                "%{+key/3} %{+key/1} %{+key/2}",
                "1 2 3",
                json!({"key": "2 3 1"}),
            ),
            ("%{key}-%{+key}-%{+key}", "1-2-3", json!({"key": "1-2-3"})),
            ("%{} %{key}", "hello world", json!({"key": "world"})),
            ("%{?key} %{&key}", "hello world", json!({"hello": "world"})),
            ("%{*key} %{&key}", "hello world", json!({"hello": "world"})),
            (
                "%{name},%{addr1},%{addr2},%{addr3},%{city},%{zip}",
                "Jane Doe,4321 Fifth Avenue,,,New York,87432",
                json!({"name": "Jane Doe", "addr1": "4321 Fifth Avenue", "addr2": "", "addr3": "", "city": "New York", "zip": "87432"}),
            ),
            (
                "%{id} %{function->} %{server}",
                "00000043 ViewReceive     machine-321",
                json!({"id": "00000043", "function": "ViewReceive", "server": "machine-321"}),
            ),
            (
                "%{id} %{function} %{server->} ",
                "00000043 ViewReceive machine-321    ",
                json!({"id": "00000043", "function": "ViewReceive", "server": "machine-321"}),
            ),
            (
                "%{id->} %{function} %{server}",
                "00000043    ViewReceive machine-321",
                json!({"id": "00000043", "function": "ViewReceive", "server": "machine-321"}),
            ),
            (
                "{%{a}}{%{b}} %{rest}",
                "{c}{d} anything",
                json!({"a": "c", "b": "d", "rest": "anything"}),
            ),
        ];
        for (tok, msg, want) in ok {
            assert_eq!(&run(tok, msg).unwrap(), want, "{tok}");
        }
        assert!(run("/var/log/%{key}.log", "foobar").is_err());
        assert!(run("/var/log/%{key}.log", "/var/log/foobar").is_err());
    }

    #[test]
    fn fixed_length_and_conversions() {
        assert_eq!(
            run("%{a#2}%{b#3}%{c}", "12345rest").unwrap(),
            json!({"a": "12", "b": "345", "c": "rest"})
        );
        assert!(run("%{a#2}%{b#30}", "12345").is_err());
        assert_eq!(
            run(
                "%{i|integer} %{l|long} %{f|float} %{d|double} %{b|boolean} %{ip|ip} %{s|string} %{x|integer}",
                "42 0x10 1.1 2.5 true 10.0.0.1 str notanumber"
            )
            .unwrap(),
            json!({"i": 42, "l": 16, "f": 1.1, "d": 2.5, "b": true, "ip": "10.0.0.1", "s": "str", "x": "notanumber"})
        );
        assert_eq!(
            run("%{i|integer}", "99999999999").unwrap(),
            json!({"i": "99999999999"})
        );
    }

    #[test]
    fn trimming() {
        let d = Dissector::new("%{a},%{b}", Trim::All, " \t").unwrap();
        let m = d.dissect("  x \t,\t y  ").unwrap();
        assert_eq!(m["a"], json!("x"));
        assert_eq!(m["b"], json!("y"));
        let d = Dissector::new("%{a},%{b}", Trim::Right, " ").unwrap();
        assert_eq!(d.dissect(" x , y ").unwrap()["a"], json!(" x"));
    }

    #[test]
    fn bad_tokenizers_are_refused() {
        for tok in [
            "no keys",
            "%{a|}",
            "%{a|date}",
            "%{&missing} %{b}",
            "%{+&a}",
            "%{&+a}",
        ] {
            assert!(Dissector::new(tok, Trim::None, " ").is_err(), "{tok}");
        }
    }

    proptest::proptest! {
        #[test]
        fn dissect_never_panics(
            pieces in proptest::collection::vec(proptest::sample::select(vec![
                "%{a}", "%{+a}", "%{+a/2}", "%{?r}", "%{&r}", "%{b#1}", "%{c#2}", "%{d->}",
                "%{n|integer}", "%{f|float}", "%{}", " ", "é", "--", ",", "x",
            ]), 1..8),
            input in "[ é,x\\-a1.]{0,24}",
            trim in proptest::sample::select(vec![Trim::None, Trim::Left, Trim::Right, Trim::All]),
        ) {
            let tok: String = pieces.concat();
            if let Ok(d) = Dissector::new(&tok, trim, " é") {
                let _ = d.dissect(&input);
            }
        }
    }

    #[test]
    fn unicode_input_does_not_split_characters() {
        assert_eq!(
            run("%{a} %{b}", "é ü").unwrap(),
            json!({"a": "é", "b": "ü"})
        );
        assert!(run("%{a#1}%{b}", "éx").is_err());
        assert!(run("%{a#1}é%{b}", "xxé").is_err());
        assert!(run("%{a} %{b}", "").is_err());
    }
}
