//! `filestream`'s settings, with Filebeat's keys and defaults. Keys may be
//! written dotted (`prospector.scanner.check_interval: 1s`, as Elastic's
//! policies do) or nested; settings Filebeat has and this version does not
//! use are warnings, so an Elastic policy still runs.

use std::time::Duration;

use leasehold_policy::{Map, Value};
use regex::Regex;

use super::parsers::{Match, Stream};
use super::pipeline::{Format, NdjsonSettings, ParserSpec, StreamFilter};
use crate::inputs::scrape::duration;
use crate::inputs::settings::{COMMON_KEYS, DataStream, Problem, optional_strings, unresolved};
use crate::settings::describe;

/// Every key a stream reads (dotted, as in Filebeat's reference).
const KEYS: [&str; 20] = [
    "paths",
    "exclude_files",
    "include_files",
    "prospector.scanner.check_interval",
    "prospector.scanner.exclude_files",
    "prospector.scanner.include_files",
    "prospector.scanner.symlinks",
    "parsers",
    "close.on_state_change.inactive",
    "close.on_state_change.removed",
    "close.on_state_change.renamed",
    "ignore_older",
    "clean_removed",
    "fields",
    "fields_under_root",
    "tags",
    "backoff.init",
    "backoff.max",
    "message_max_bytes",
    "encoding",
];

/// Filebeat's defaults.
const CHECK_INTERVAL: Duration = Duration::from_secs(10);
const INACTIVE: Duration = Duration::from_secs(300);
const BACKOFF_INIT: Duration = Duration::from_secs(2);
const BACKOFF_MAX: Duration = Duration::from_secs(10);
/// Default `message_max_bytes`.
pub const MESSAGE_MAX_BYTES: usize = 10 * 1024 * 1024;
const MULTILINE_MAX_LINES: usize = 500;
const MULTILINE_TIMEOUT: Duration = Duration::from_secs(5);

/// One stream of files read alike.
#[derive(Debug, Clone)]
pub struct StreamSettings {
    /// Names its registry: the stream's `id`, else the input's (with the
    /// stream's index when the input has several).
    pub id: String,
    pub paths: Vec<String>,
    pub exclude: Vec<Regex>,
    pub include: Vec<Regex>,
    pub check_interval: Duration,
    /// Follow symlinks (`/var/log/containers/*.log` are symlinks).
    pub symlinks: bool,
    pub parsers: Vec<ParserSpec>,
    /// Close a file after this long without new lines.
    pub inactive: Duration,
    /// Close a removed file once it is read to its end.
    pub close_removed: bool,
    /// Close a renamed file once it is read to its end.
    pub close_renamed: bool,
    /// Skip files not modified for this long (none: read every file).
    pub ignore_older: Option<Duration>,
    /// Forget files that are gone.
    pub clean_removed: bool,
    /// `fields` (under `fields`, or at the root with `fields_under_root`).
    pub fields: serde_json::Map<String, serde_json::Value>,
    pub fields_under_root: bool,
    pub tags: Vec<String>,
    pub backoff_init: Duration,
    pub backoff_max: Duration,
    /// Longest message; the rest of a longer line is skipped.
    pub max_bytes: usize,
    pub data_stream: DataStream,
}

impl StreamSettings {
    /// Whether `path` is read: it matches no `exclude_files` pattern, and
    /// some `include_files` pattern when there are any.
    pub fn wants(&self, path: &str) -> bool {
        !self.exclude.iter().any(|r| r.is_match(path))
            && (self.include.is_empty() || self.include.iter().any(|r| r.is_match(path)))
    }

    /// Whether a parser reads container log records.
    pub fn reads_containers(&self) -> bool {
        self.parsers
            .iter()
            .any(|p| matches!(p, ParserSpec::Container { .. }))
    }
}

/// The value at dotted `key`, written dotted, nested or half and half.
pub fn lookup<'a>(map: &'a Map, key: &str) -> Option<&'a Value> {
    if let Some(v) = map.get(key) {
        return Some(v);
    }
    let mut at = 0;
    while let Some(dot) = key[at..].find('.') {
        let split = at + dot;
        if let Some(Value::Map(inner)) = map.get(&key[..split])
            && let Some(v) = lookup(inner, &key[split + 1..])
        {
            return Some(v);
        }
        at = split + 1;
    }
    None
}

/// Warns about every key of `map` (under `prefix`) that is neither in
/// [`KEYS`] nor common to inputs.
fn unknown(map: &Map, prefix: &str, out: &mut Vec<Problem>) {
    for (k, v) in map.iter() {
        let full = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        if KEYS.contains(&full.as_str())
            || (prefix.is_empty() && (COMMON_KEYS.contains(&k.as_str()) || k == "streams"))
        {
            continue;
        }
        let is_branch = KEYS
            .iter()
            .any(|known| known.starts_with(&format!("{full}.")));
        match v {
            Value::Map(inner) if is_branch => unknown(inner, &full, out),
            _ if is_branch => out.push(Problem::new(
                &full,
                format!("must be a mapping, found {}", v.type_name()),
            )),
            _ => out.push(
                Problem::warning(
                    &full,
                    "setting of `filestream` not used by this version of leasehold; it is ignored",
                )
                .hint(format!("known settings: {}", KEYS.join(", "))),
            ),
        }
    }
}

fn flag(map: &Map, key: &str, default: bool, out: &mut Vec<Problem>) -> bool {
    match lookup(map, key) {
        None | Some(Value::Null) => default,
        Some(v) if unresolved(v) => default,
        Some(v) => crate::settings::flag(key, v, out).unwrap_or(default),
    }
}

fn dur(map: &Map, key: &str, default: Duration, out: &mut Vec<Problem>) -> Duration {
    match lookup(map, key) {
        Some(v) => {
            let mut one = Map::new();
            one.insert(key, v.clone());
            duration(&one, key, default, out)
        }
        None => default,
    }
}

fn strings(map: &Map, key: &str, out: &mut Vec<Problem>) -> Vec<String> {
    optional_strings(lookup(map, key), key, ["a string", "strings"], out)
}

fn patterns(map: &Map, keys: &[&str], out: &mut Vec<Problem>) -> Vec<Regex> {
    let mut all = Vec::new();
    for key in keys {
        for (i, p) in strings(map, key, out).into_iter().enumerate() {
            if p.contains("${") {
                continue;
            }
            match Regex::new(&p) {
                Ok(r) => all.push(r),
                Err(e) => out.push(
                    Problem::new(
                        format!("{key}.{i}"),
                        format!("is not a valid regular expression: {e}"),
                    )
                    .hint("Filebeat's patterns are regular expressions, e.g. `\\.gz$`"),
                ),
            }
        }
    }
    all
}

/// Reads one stream; `id` names it when it has no `id` of its own.
pub fn read_stream(
    map: &Map,
    id: String,
    base: &DataStream,
    out: &mut Vec<Problem>,
) -> StreamSettings {
    unknown(map, "", out);
    let id = match map.get("id") {
        Some(Value::Str(s)) if !s.is_empty() => s.clone(),
        _ => id,
    };
    let paths = strings(map, "paths", out);
    if paths.is_empty() && !matches!(lookup(map, "paths"), Some(v) if unresolved(v)) {
        out.push(
            Problem::new("paths", "is required: the files to read")
                .hint("e.g. `paths: [/var/log/containers/*.log]`"),
        );
    }
    for (i, p) in paths.iter().enumerate() {
        if !p.starts_with('/') && !p.contains("${") {
            out.push(
                Problem::new(
                    format!("paths.{i}"),
                    format!("`{p}` is not an absolute path"),
                )
                .hint("write the full path; the agent's working directory is not the node's"),
            );
        } else if let Err(e) = glob::Pattern::new(p) {
            out.push(Problem::new(
                format!("paths.{i}"),
                format!("is not a valid glob: {e}"),
            ));
        }
    }
    let parsers = read_parsers(map, out);
    let ignore_older = match lookup(map, "ignore_older") {
        None | Some(Value::Null) | Some(Value::Int(0)) => None,
        Some(Value::Str(s)) if s.trim() == "0" || s.trim() == "0s" => None,
        Some(v) if unresolved(v) => None,
        Some(v) => match crate::units::parse_duration(v) {
            Ok(d) => Some(d),
            Err(e) => {
                out.push(
                    Problem::new("ignore_older", e).hint("e.g. `48h`; 0 reads files of any age"),
                );
                None
            }
        },
    };
    let (fields, fields_under_root) = match lookup(map, "fields") {
        None | Some(Value::Null) => (serde_json::Map::new(), false),
        Some(v @ Value::Map(_)) => match serde_json::to_value(v) {
            Ok(serde_json::Value::Object(m)) => (m, flag(map, "fields_under_root", false, out)),
            _ => (serde_json::Map::new(), false),
        },
        Some(v) => {
            out.push(Problem::new(
                "fields",
                format!("must be a mapping, found {}", v.type_name()),
            ));
            (serde_json::Map::new(), false)
        }
    };
    if let Some(e) = lookup(map, "encoding")
        && !matches!(e, Value::Str(s) if matches!(s.to_ascii_lowercase().as_str(), "plain" | "utf-8" | "utf8" | "ascii"))
    {
        out.push(Problem::warning(
            "encoding",
            "only UTF-8 is read by this version; other bytes are replaced by U+FFFD",
        ));
    }
    let backoff_init = dur(map, "backoff.init", BACKOFF_INIT, out);
    let backoff_max = dur(map, "backoff.max", BACKOFF_MAX, out).max(backoff_init);
    let max_bytes = match lookup(map, "message_max_bytes") {
        None | Some(Value::Null) => MESSAGE_MAX_BYTES,
        Some(Value::Int(n)) if *n >= 1024 && *n <= 1 << 30 => *n as usize,
        Some(v) => {
            out.push(Problem::new(
                "message_max_bytes",
                format!(
                    "must be a number of bytes from 1024 to 1073741824, found {}",
                    describe(v)
                ),
            ));
            MESSAGE_MAX_BYTES
        }
    };
    let default_ds = if parsers
        .iter()
        .any(|p| matches!(p, ParserSpec::Container { .. }))
    {
        DataStream {
            dataset: "kubernetes.container_logs".into(),
            ..base.clone()
        }
    } else {
        base.clone()
    };
    let data_stream = if explicit_dataset(map) {
        DataStream::read_map(map, base, out)
    } else {
        DataStream::read_map(map, &default_ds, out)
    };
    StreamSettings {
        id,
        paths,
        exclude: patterns(
            map,
            &["exclude_files", "prospector.scanner.exclude_files"],
            out,
        ),
        include: patterns(
            map,
            &["include_files", "prospector.scanner.include_files"],
            out,
        ),
        check_interval: dur(
            map,
            "prospector.scanner.check_interval",
            CHECK_INTERVAL,
            out,
        ),
        symlinks: flag(map, "prospector.scanner.symlinks", false, out),
        parsers,
        inactive: dur(map, "close.on_state_change.inactive", INACTIVE, out),
        close_removed: flag(map, "close.on_state_change.removed", true, out),
        close_renamed: flag(map, "close.on_state_change.renamed", false, out),
        ignore_older,
        clean_removed: flag(map, "clean_removed", true, out),
        fields,
        fields_under_root,
        tags: strings(map, "tags", out),
        backoff_init,
        backoff_max,
        max_bytes,
        data_stream,
    }
}

/// Whether `data_stream.dataset` is written, dotted or nested.
fn explicit_dataset(m: &Map) -> bool {
    lookup(m, "data_stream.dataset").is_some()
}

fn read_parsers(map: &Map, out: &mut Vec<Problem>) -> Vec<ParserSpec> {
    let items = match lookup(map, "parsers") {
        None | Some(Value::Null) => return Vec::new(),
        Some(Value::List(items)) => items,
        Some(v) => {
            out.push(
                Problem::new(
                    "parsers",
                    format!("must be a list, found {}", v.type_name()),
                )
                .hint("e.g. `parsers: [{container: {stream: all}}]`"),
            );
            return Vec::new();
        }
    };
    let mut specs = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("parsers.{i}");
        let Value::Map(m) = item else {
            out.push(Problem::new(
                &at,
                "must be a mapping with one parser, e.g. `container: {}`",
            ));
            continue;
        };
        if m.len() != 1 {
            out.push(Problem::new(&at, "must name exactly one parser"));
            continue;
        }
        let Some((name, value)) = m.iter().next() else {
            continue;
        };
        let empty = Map::new();
        let settings = match value {
            Value::Map(s) => s,
            Value::Null => &empty,
            other => {
                out.push(Problem::new(
                    format!("{at}.{name}"),
                    format!("must be a mapping, found {}", other.type_name()),
                ));
                continue;
            }
        };
        let mut p = Vec::new();
        let spec = match name.as_str() {
            "container" => Some(container(settings, i, &mut p)),
            "multiline" => multiline(settings, &mut p),
            "ndjson" => Some(ndjson(settings, &mut p)),
            other => {
                p.push(
                    Problem::new(
                        "",
                        format!("parser `{other}` is not available in this version"),
                    )
                    .hint("available parsers: container, multiline, ndjson"),
                );
                None
            }
        };
        for mut problem in p {
            let mut path: Vec<String> = vec!["parsers".into(), i.to_string(), name.clone()];
            path.extend(problem.path.into_iter().filter(|s| !s.is_empty()));
            problem.path = path;
            out.push(problem);
        }
        specs.extend(spec);
    }
    specs
}

fn container(m: &Map, index: usize, out: &mut Vec<Problem>) -> ParserSpec {
    if index != 0 {
        out.push(Problem::new(
            "",
            "must be the first parser: it reads the file's raw lines",
        ));
    }
    let stream = match m.get("stream") {
        None | Some(Value::Null) => StreamFilter::All,
        Some(Value::Str(s)) => match s.as_str() {
            "all" => StreamFilter::All,
            "stdout" => StreamFilter::Only(Stream::Stdout),
            "stderr" => StreamFilter::Only(Stream::Stderr),
            _ => {
                out.push(Problem::new(
                    "stream",
                    format!("`{s}` is not all, stdout or stderr"),
                ));
                StreamFilter::All
            }
        },
        Some(v) => {
            out.push(Problem::new(
                "stream",
                format!("must be all, stdout or stderr, found {}", v.type_name()),
            ));
            StreamFilter::All
        }
    };
    let format = match m.get("format") {
        None | Some(Value::Null) => Format::Auto,
        Some(Value::Str(s)) => match s.as_str() {
            "auto" => Format::Auto,
            "cri" => Format::Cri,
            "docker" => Format::Docker,
            _ => {
                out.push(Problem::new(
                    "format",
                    format!("`{s}` is not auto, cri or docker"),
                ));
                Format::Auto
            }
        },
        Some(v) => {
            out.push(Problem::new(
                "format",
                format!("must be auto, cri or docker, found {}", v.type_name()),
            ));
            Format::Auto
        }
    };
    for (k, _) in m.iter() {
        if !["stream", "format"].contains(&k.as_str()) {
            out.push(Problem::warning(
                k,
                "setting of the container parser not used by this version; it is ignored",
            ));
        }
    }
    ParserSpec::Container { stream, format }
}

fn multiline(m: &Map, out: &mut Vec<Problem>) -> Option<ParserSpec> {
    match m.get("type") {
        None | Some(Value::Null) => {}
        Some(Value::Str(t)) if t == "pattern" => {}
        Some(v) => {
            out.push(
                Problem::new(
                    "type",
                    format!(
                        "multiline type {} is not available in this version",
                        describe(v)
                    ),
                )
                .hint("use `type: pattern`"),
            );
            return None;
        }
    }
    let pattern = match m.get("pattern") {
        Some(Value::Str(p)) => match Regex::new(p) {
            Ok(r) => r,
            Err(e) => {
                out.push(Problem::new(
                    "pattern",
                    format!("is not a valid regular expression: {e}"),
                ));
                return None;
            }
        },
        Some(v) if unresolved(v) => return None,
        _ => {
            out.push(
                Problem::new("pattern", "is required")
                    .hint(r"e.g. `pattern: '^\s'` with `match: after` joins indented lines"),
            );
            return None;
        }
    };
    let negate = flag(m, "negate", false, out);
    let how = match m.get("match") {
        Some(Value::Str(s)) if s == "after" => Match::After,
        Some(Value::Str(s)) if s == "before" => Match::Before,
        _ => {
            out.push(Problem::new("match", "is required: after or before"));
            return None;
        }
    };
    let max_lines = match m.get("max_lines") {
        None | Some(Value::Null) => MULTILINE_MAX_LINES,
        Some(Value::Int(n)) if *n >= 1 => *n as usize,
        Some(v) => {
            out.push(Problem::new(
                "max_lines",
                format!("must be a positive number, found {}", describe(v)),
            ));
            MULTILINE_MAX_LINES
        }
    };
    let timeout = dur(m, "timeout", MULTILINE_TIMEOUT, out);
    for (k, _) in m.iter() {
        if !["type", "pattern", "negate", "match", "max_lines", "timeout"].contains(&k.as_str()) {
            out.push(Problem::warning(
                k,
                "setting of the multiline parser not used by this version; it is ignored",
            ));
        }
    }
    Some(ParserSpec::Multiline {
        pattern,
        negate,
        how,
        max_lines,
        timeout,
    })
}

fn ndjson(m: &Map, out: &mut Vec<Problem>) -> ParserSpec {
    let text = |k: &str, out: &mut Vec<Problem>| match m.get(k) {
        None | Some(Value::Null) => None,
        Some(Value::Str(s)) => Some(s.clone()),
        Some(v) => {
            out.push(Problem::new(
                k,
                format!("must be a string, found {}", v.type_name()),
            ));
            None
        }
    };
    let settings = NdjsonSettings {
        target: text("target", out).unwrap_or_default(),
        message_key: text("message_key", out),
        overwrite_keys: flag(m, "overwrite_keys", false, out),
        add_error_key: flag(m, "add_error_key", false, out),
    };
    for (k, _) in m.iter() {
        if !["target", "message_key", "overwrite_keys", "add_error_key"].contains(&k.as_str()) {
            out.push(Problem::warning(
                k,
                "setting of the ndjson parser not used by this version; it is ignored",
            ));
        }
    }
    ParserSpec::Ndjson(settings)
}

#[cfg(test)]
mod tests {
    use leasehold_policy::Value;

    use super::*;

    fn read(yaml: &str) -> (StreamSettings, Vec<Problem>) {
        let json: serde_json::Value =
            serde_json::to_value(serde_json::from_str::<serde_json::Value>(yaml).unwrap()).unwrap();
        let Value::Map(m) = Value::from_json(&json) else {
            panic!()
        };
        let mut out = Vec::new();
        let s = read_stream(&m, "in".into(), &DataStream::default(), &mut out);
        (s, out)
    }

    #[test]
    fn elastic_keys_are_read_dotted_or_nested_with_filebeats_defaults() {
        let (s, out) = read(
            r#"{"paths": ["/var/log/containers/*.log"],
                "prospector.scanner.check_interval": "1s",
                "prospector": {"scanner": {"symlinks": true}},
                "close.on_state_change": {"inactive": "30s"},
                "parsers": [{"container": {"stream": "stderr"}},
                            {"multiline": {"pattern": "^\\s", "match": "after"}}],
                "fields": {"team": "a"}, "ignore_older": "48h",
                "exclude_files": ["\\.gz$"]}"#,
        );
        assert!(out.is_empty(), "{out:?}");
        assert_eq!(s.check_interval, Duration::from_secs(1));
        assert!(s.symlinks);
        assert_eq!(s.inactive, Duration::from_secs(30));
        assert_eq!(s.backoff_init, BACKOFF_INIT);
        assert!(s.close_removed && !s.close_renamed && s.clean_removed);
        assert_eq!(s.ignore_older, Some(Duration::from_secs(48 * 3600)));
        assert_eq!(s.parsers.len(), 2);
        assert!(s.reads_containers());
        assert_eq!(s.data_stream.dataset, "kubernetes.container_logs");
        assert_eq!(s.fields["team"], "a");
        assert!(!s.wants("/var/log/containers/a.log.gz"));
        assert!(s.wants("/var/log/containers/a.log"));
        assert_eq!(s.id, "in");
    }

    #[test]
    fn every_mistake_names_its_key() {
        let (_, out) = read(
            r#"{"paths": ["relative/*.log", "/ok/[.log"],
                "parsers": [{"multiline": {"pattern": "("}}, {"container": {}}, {"gzip": {}}],
                "exclude_files": ["("], "close": {"on_state_change": {"inactive": "soon"}},
                "clean_removed": "yes", "harvester_limit": 10}"#,
        );
        let paths: Vec<String> = out.iter().map(|p| p.path.join(".")).collect();
        for want in [
            "paths.0",
            "paths.1",
            "parsers.0.multiline.pattern",
            "parsers.1.container",
            "parsers.2.gzip",
            "exclude_files.0",
            "close.on_state_change.inactive",
            "clean_removed",
            "harvester_limit",
        ] {
            assert!(
                paths.iter().any(|p| p == want),
                "no problem at {want}: {paths:?}"
            );
        }
        let unknown = out.iter().find(|p| p.path == ["harvester_limit"]).unwrap();
        assert!(unknown.warning, "Filebeat's other settings only warn");
        assert!(
            out.iter()
                .filter(|p| p.path != ["harvester_limit"])
                .all(|p| !p.warning)
        );
    }

    #[test]
    fn paths_are_required_and_a_written_dataset_wins() {
        let (_, out) = read(r#"{"parsers": []}"#);
        assert_eq!(out[0].path, ["paths"]);
        let (s, _) = read(
            r#"{"paths": ["/a"], "data_stream.dataset": "mine", "parsers": [{"container": null}]}"#,
        );
        assert_eq!(s.data_stream.dataset, "mine");
        let (s, _) = read(r#"{"paths": ["/a"]}"#);
        assert_eq!(s.data_stream.dataset, "generic");
    }
}
