//! Elastic's `logfile` input (Filebeat's `log` input, as Elastic Agent's
//! system integration writes it for `system.auth` and `system.syslog`),
//! run by the `filestream` machinery: its settings are rewritten to
//! filestream's and read there, so both share one reader, registry and
//! set of tests.
//!
//! | `logfile` | `filestream` |
//! |---|---|
//! | `multiline.{pattern,negate,match,max_lines,timeout}` | `parsers: [{multiline: {type: pattern, …}}]` (after any `parsers` given) |
//! | `symlinks` | `prospector.scanner.symlinks` |
//! | `scan_frequency` | `prospector.scanner.check_interval` |
//! | `close_inactive`, `close_removed`, `close_renamed` | `close.on_state_change.{inactive,removed,renamed}` |
//! | `max_bytes` | `message_max_bytes` |
//! | `paths`, `exclude_files`, `include_files`, `ignore_older`, `encoding`, `fields`, `fields_under_root`, `tags` | the same |
//!
//! Anything else is reported as filestream reports a setting it does not
//! use: a warning, ignored.

use leasehold_policy::{Map, Value};

/// Keys renamed on the way (log input → filestream).
const RENAMED: [(&str, &str); 6] = [
    ("symlinks", "prospector.scanner.symlinks"),
    ("scan_frequency", "prospector.scanner.check_interval"),
    ("close_inactive", "close.on_state_change.inactive"),
    ("close_removed", "close.on_state_change.removed"),
    ("close_renamed", "close.on_state_change.renamed"),
    ("max_bytes", "message_max_bytes"),
];

/// The `filestream` settings that read what the `logfile` input `map`
/// describes (each of its `streams`, or the input itself).
pub fn to_filestream(map: &Map) -> Map {
    let Some(Value::List(items)) = map.get("streams") else {
        return stream(map);
    };
    let mut out = Map::new();
    for (k, v) in map.iter() {
        if k == "streams" {
            let streams = items
                .iter()
                .map(|s| match s {
                    Value::Map(m) => Value::Map(stream(m)),
                    other => other.clone(),
                })
                .collect();
            out.insert("streams", Value::List(streams));
        } else {
            out.insert(k.clone(), v.clone());
        }
    }
    out
}

/// One stream's settings, rewritten.
fn stream(m: &Map) -> Map {
    let mut out = Map::new();
    let mut multiline = Map::new();
    for (k, v) in m.iter() {
        if k == "multiline"
            && let Value::Map(inner) = v
        {
            for (ik, iv) in inner.iter() {
                multiline.insert(ik.clone(), iv.clone());
            }
            continue;
        }
        if let Some(rest) = k.strip_prefix("multiline.") {
            multiline.insert(rest, v.clone());
            continue;
        }
        let key = RENAMED
            .iter()
            .find(|(from, _)| from == k)
            .map_or(k.as_str(), |(_, to)| to);
        out.insert(key, v.clone());
    }
    if !multiline.is_empty() {
        if !multiline.contains_key("type") {
            multiline.insert_first("type", Value::Str("pattern".into()));
        }
        let parser = Value::Map(Map::from_entries(vec![(
            "multiline".into(),
            Value::Map(multiline),
        )]));
        let mut parsers = match out.remove("parsers") {
            Some(Value::List(l)) => l,
            Some(other) => vec![other],
            None => Vec::new(),
        };
        parsers.push(parser);
        out.insert("parsers", Value::List(parsers));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(yaml: &str) -> Map {
        match leasehold_policy::Value::from_json(&serde_json::from_str(yaml).unwrap()) {
            Value::Map(m) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_log_inputs_keys_become_filestreams() {
        let input = map(r#"{"id": "system-logs", "type": "logfile", "streams": [
                {"data_stream": {"dataset": "system.auth"}, "paths": ["/var/log/auth.log*"],
                 "exclude_files": [".gz$"], "multiline": {"pattern": "^\\s", "match": "after"},
                 "ignore_older": "72h", "symlinks": true, "scan_frequency": "1s", "max_bytes": 1024}
            ]}"#);
        let out = to_filestream(&input);
        assert_eq!(out.get("id"), input.get("id"));
        let Some(Value::List(streams)) = out.get("streams") else {
            panic!("{out:?}")
        };
        let Value::Map(s) = &streams[0] else { panic!() };
        assert!(s.get("multiline").is_none());
        assert_eq!(
            s.get("prospector.scanner.symlinks"),
            Some(&Value::Bool(true))
        );
        assert_eq!(
            s.get("prospector.scanner.check_interval"),
            Some(&Value::Str("1s".into()))
        );
        assert_eq!(s.get("message_max_bytes"), Some(&Value::Int(1024)));
        assert_eq!(s.get("ignore_older"), Some(&Value::Str("72h".into())));
        let Some(Value::List(parsers)) = s.get("parsers") else {
            panic!("{s:?}")
        };
        let Value::Map(p) = &parsers[0] else { panic!() };
        let Some(Value::Map(ml)) = p.get("multiline") else {
            panic!()
        };
        assert_eq!(ml.get("type"), Some(&Value::Str("pattern".into())));
        assert_eq!(ml.get("pattern"), Some(&Value::Str("^\\s".into())));
        assert_eq!(ml.get("match"), Some(&Value::Str("after".into())));
    }

    #[test]
    fn an_input_without_streams_and_dotted_multiline_keys() {
        let out = to_filestream(&map(
            r#"{"paths": ["/x.log"], "multiline.pattern": "^x", "multiline.negate": true,
                "multiline.match": "before", "parsers": [{"ndjson": {}}]}"#,
        ));
        let Some(Value::List(parsers)) = out.get("parsers") else {
            panic!("{out:?}")
        };
        assert_eq!(parsers.len(), 2, "after the parsers given");
        let Value::Map(p) = &parsers[1] else { panic!() };
        let Some(Value::Map(ml)) = p.get("multiline") else {
            panic!()
        };
        assert_eq!(ml.get("negate"), Some(&Value::Bool(true)));
    }
}
