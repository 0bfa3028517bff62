//! The `outputs:` section: every output's settings, read and checked
//! with each problem's key path, before anything runs.

use std::collections::BTreeMap;
use std::path::PathBuf;

use leasehold_policy::Value;

use super::disk;
use super::kind::OutputKind;
use super::types::{self, output_types};
pub use crate::settings::Problem;
use crate::settings::{describe, given, int_in};
use crate::units::parse_size;

/// Beats' default memory queue size.
pub const DEFAULT_QUEUE_EVENTS: usize = 3200;
/// The largest accepted `queue.mem.events`.
pub const MAX_QUEUE_EVENTS: usize = 1 << 20;

const QUEUE_EVENTS_KEY: &str = "queue.mem.events";
const QUEUE_BYTES_KEY: &str = "queue.mem.bytes";
const MAX_EVENT_BYTES_KEY: &str = "max_event_bytes";
/// Default `queue.mem.bytes`: with the batch being written and the request
/// built from it, an output holds about three times this at most, well
/// inside the shipped DaemonSet's 512 MiB limit.
pub const DEFAULT_QUEUE_BYTES: u64 = 32 * 1024 * 1024;
/// Default `max_event_bytes`: larger events are dropped (counted). Room
/// for a log line cut at the inputs' default `message_max_bytes` (10 MiB,
/// Beats' default) with its escaping and fields: the cut line is shipped,
/// not lost whole.
pub const DEFAULT_MAX_EVENT_BYTES: u64 = 16 * 1024 * 1024;
/// The accepted range of `queue.mem.bytes`.
pub const QUEUE_BYTES_RANGE: std::ops::RangeInclusive<u64> = (64 * 1024)..=(1 << 34);
const DISK_KEY: &str = "queue.disk";
const DISK_PATH_KEY: &str = "queue.disk.path";
const DISK_MAX_SIZE_KEY: &str = "queue.disk.max_size";
const COMMON_KEYS: [&str; 7] = [
    "type",
    QUEUE_EVENTS_KEY,
    QUEUE_BYTES_KEY,
    MAX_EVENT_BYTES_KEY,
    DISK_KEY,
    DISK_PATH_KEY,
    DISK_MAX_SIZE_KEY,
];
/// Keys whose map values are read as nested settings (`queue: {mem: ...}`).
const CONTAINER_KEYS: [&str; 7] = [
    "queue",
    "queue.mem",
    "queue.disk",
    "ssl",
    "backoff",
    "tls",
    "sending_queue",
];

/// One configured output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputSettings {
    /// Its name, the key under `outputs:`.
    pub name: String,
    /// Its type and type-specific settings.
    pub kind: OutputKind,
    /// Capacity of its queue, in events (`queue.mem.events`); with
    /// `queue.disk`, of the hand-over between the disk and the writer.
    pub queue_events: usize,
    /// `queue.disk`: keep the queue in files instead of memory.
    pub disk: Option<DiskSettings>,
    /// The byte bounds of what the output holds in memory.
    pub memory: MemoryLimits,
}

/// How many bytes of events an output holds in memory: its queue (or,
/// with `queue.disk`, the hand-over from the disk) and the batch being
/// written together stay under `queue_bytes`, whatever the event count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryLimits {
    /// `queue.mem.bytes`.
    pub queue_bytes: u64,
    /// `max_event_bytes`: a larger event can never be queued; it is
    /// dropped, counted and reported.
    pub max_event_bytes: u64,
}

impl Default for MemoryLimits {
    fn default() -> Self {
        MemoryLimits {
            queue_bytes: DEFAULT_QUEUE_BYTES,
            max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
        }
    }
}

/// `queue.disk` settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskSettings {
    /// `queue.disk.path`; when unset the runtime puts it under the data
    /// path (`PATH_DATA/queue/OUTPUT`).
    pub path: Option<PathBuf>,
    /// `queue.disk.max_size`: bytes of queued events at most; sends wait
    /// beyond it.
    pub max_size: u64,
}

/// Validates the `outputs:` section (the value under the key) and returns
/// the outputs in the order they are written.
///
/// Every problem is reported, each with its dotted key path. An unknown
/// `type` lists the known types; an unknown key lists the keys known for
/// that type. A missing `default` output is not an error here.
/// Settings of `section` (the `outputs:` map) that are accepted but not
/// acted on as written, as (path, why): warnings of `check`.
pub fn output_notes(section: &Value) -> Vec<(String, String)> {
    let Value::Map(outputs) = section else {
        return Vec::new();
    };
    let mut notes = Vec::new();
    for (name, value) in outputs.iter() {
        let Value::Map(map) = value else { continue };
        let base = format!("outputs.{name}");
        let mut keys = BTreeMap::new();
        flatten(&base, "", map, &mut keys, &mut Vec::new());
        if let Some(Value::Str(t)) = given(&keys, "type")
            && let Some(kind) = types::named(t)
        {
            notes.extend(
                (kind.notes)(&keys)
                    .into_iter()
                    .map(|(key, why)| (format!("{base}.{key}"), why)),
            );
        }
    }
    notes
}

pub fn parse_outputs(section: &Value) -> Result<Vec<OutputSettings>, Vec<Problem>> {
    let map = match section {
        Value::Null => return Ok(Vec::new()),
        Value::Map(m) => m,
        other => {
            return Err(vec![Problem::new(
                "outputs",
                format!(
                    "must be a map from output name to its settings, found {}",
                    other.type_name()
                ),
            )]);
        }
    };
    let mut errors = Vec::new();
    let mut outputs = Vec::new();
    for (name, value) in map.iter() {
        if let Some(out) = parse_output(name, value, &mut errors) {
            outputs.push(out);
        }
    }
    errors.extend(shared_disk_paths(&outputs));
    if errors.is_empty() {
        Ok(outputs)
    } else {
        Err(errors)
    }
}

/// One error per output whose `queue.disk.path` is the same directory as
/// an earlier output's: two queues in one directory would take each
/// other's segments and acknowledgements and lose events.
pub fn shared_disk_paths(outputs: &[OutputSettings]) -> Vec<Problem> {
    let mut seen: Vec<(PathBuf, &str)> = Vec::new();
    let mut errors = Vec::new();
    for o in outputs {
        let Some(path) = o.disk.as_ref().and_then(|d| d.path.as_ref()) else {
            continue;
        };
        let key = same_dir_key(path);
        match seen.iter().find(|(k, _)| *k == key) {
            Some((_, first)) => errors.push(Problem::new(
                format!("outputs.{}.{DISK_PATH_KEY}", o.name),
                format!(
                    "{} is also the disk queue of output `{first}`; give each output a directory of its own",
                    path.display()
                ),
            )),
            None => seen.push((key, &o.name)),
        }
    }
    errors
}

/// `path` as compared for sameness: resolved when it exists (symlinks),
/// else with `.` and trailing separators removed.
fn same_dir_key(path: &std::path::Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.components().collect())
}

/// One output's settings, or `None` after recording its problems.
fn parse_output(name: &str, value: &Value, errors: &mut Vec<Problem>) -> Option<OutputSettings> {
    let base = format!("outputs.{name}");
    let before = errors.len();
    if name.is_empty() {
        errors.push(Problem::new(&base, "an output name must not be empty"));
    }
    let map = match value {
        Value::Map(m) => m,
        other => {
            errors.push(Problem::new(
                &base,
                format!(
                    "must be a map of settings with at least `type` (one of: {}), found {}",
                    output_types().join(", "),
                    other.type_name()
                ),
            ));
            return None;
        }
    };
    let mut keys = BTreeMap::new();
    flatten(&base, "", map, &mut keys, errors);
    let get = |key: &str| given(&keys, key);

    let type_path = format!("{base}.type");
    let known_types = output_types().join(", ");
    let output_type = match get("type") {
        None => {
            errors.push(Problem::new(
                &type_path,
                format!("required; one of: {known_types}"),
            ));
            None
        }
        Some(Value::Str(t)) if types::named(t).is_some() => types::named(t),
        Some(Value::Str(t)) => {
            errors.push(Problem::new(
                &type_path,
                format!("unknown output type `{t}`; known types: {known_types}"),
            ));
            None
        }
        Some(other) => {
            errors.push(Problem::new(
                &type_path,
                format!(
                    "must be a string, one of: {known_types}; found {}",
                    other.type_name()
                ),
            ));
            None
        }
    };

    let queue_events = match get(QUEUE_EVENTS_KEY) {
        None => DEFAULT_QUEUE_EVENTS,
        Some(v) => int_in(
            &format!("{base}.{QUEUE_EVENTS_KEY}"),
            v,
            1,
            MAX_QUEUE_EVENTS as i64,
            errors,
        )
        .map_or(DEFAULT_QUEUE_EVENTS, |n| n as usize),
    };

    let disk = parse_disk(&base, &keys, errors);
    let memory = parse_memory(&base, &keys, disk.is_some(), errors);

    // The keys of an unknown type cannot be judged: only its `type` is named.
    let output_type = output_type?;
    let known: Vec<&str> = COMMON_KEYS
        .iter()
        .chain(output_type.keys)
        .copied()
        .collect();
    for key in keys.keys() {
        if !known.contains(&key.as_str()) {
            let mut sorted = known.clone();
            sorted.sort_unstable();
            errors.push(Problem::new(
                format!("{base}.{key}"),
                format!(
                    "unknown key for a {} output; known keys: {}",
                    output_type.name,
                    sorted.join(", ")
                ),
            ));
        }
    }
    let kind = (output_type.parse)(&base, &keys, errors);
    if errors.len() > before {
        return None;
    }
    let queue_events = kind.queue_events(queue_events);
    Some(OutputSettings {
        name: name.to_string(),
        kind,
        queue_events,
        disk,
        memory,
    })
}

/// `queue.mem.bytes` and `max_event_bytes`.
fn parse_memory(
    base: &str,
    keys: &BTreeMap<String, Value>,
    disk: bool,
    errors: &mut Vec<Problem>,
) -> MemoryLimits {
    let mut m = MemoryLimits::default();
    let size = |key: &str, lo: u64, hi: u64, errors: &mut Vec<Problem>| -> Option<u64> {
        let v = given(keys, key)?;
        match parse_size(v) {
            Some(n) if (lo..=hi).contains(&n) => Some(n),
            _ => {
                errors.push(Problem::new(
                    format!("{base}.{key}"),
                    format!(
                        "must be a size from {lo} to {hi} bytes, in bytes or with a unit (32MiB, 500KB), found {}",
                        describe(v)
                    ),
                ));
                None
            }
        }
    };
    if disk && given(keys, QUEUE_BYTES_KEY).is_some() {
        errors.push(Problem::new(
            format!("{base}.{QUEUE_BYTES_KEY}"),
            format!("given together with `{DISK_KEY}`; an output has one queue: bound the disk queue with `{DISK_MAX_SIZE_KEY}`"),
        ));
    }
    if let Some(n) = size(
        QUEUE_BYTES_KEY,
        *QUEUE_BYTES_RANGE.start(),
        *QUEUE_BYTES_RANGE.end(),
        errors,
    ) {
        m.queue_bytes = n;
    }
    if let Some(n) = size(MAX_EVENT_BYTES_KEY, 1024, u64::from(u32::MAX), errors) {
        m.max_event_bytes = n;
    }
    if m.max_event_bytes > m.queue_bytes {
        if given(keys, MAX_EVENT_BYTES_KEY).is_some() {
            errors.push(Problem::new(
                format!("{base}.{MAX_EVENT_BYTES_KEY}"),
                format!(
                    "{} is more than `{QUEUE_BYTES_KEY}` ({}): such an event could never be queued; lower it or raise the queue",
                    m.max_event_bytes, m.queue_bytes
                ),
            ));
        } else {
            m.max_event_bytes = m.queue_bytes;
        }
    }
    m
}

/// Collects the settings of one output by their dotted keys, descending
/// into `queue` and `queue.mem` maps so that `queue.mem.events: N` and
/// `queue: {mem: {events: N}}` mean the same.
fn flatten(
    base: &str,
    prefix: &str,
    map: &leasehold_policy::Map,
    keys: &mut BTreeMap<String, Value>,
    errors: &mut Vec<Problem>,
) {
    for (k, v) in map.iter() {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        if CONTAINER_KEYS.contains(&key.as_str()) {
            match v {
                Value::Map(inner) => {
                    if key == DISK_KEY {
                        keys.insert(key.clone(), Value::Bool(true));
                    }
                    flatten(base, &key, inner, keys, errors)
                }
                Value::Null => {}
                other => {
                    let holding = match key.as_str() {
                        "queue" | "queue.mem" => {
                            format!(" holding `{}`", &QUEUE_EVENTS_KEY[key.len() + 1..])
                        }
                        _ => String::new(),
                    };
                    errors.push(Problem::new(
                        format!("{base}.{key}"),
                        format!(
                            "must be a map of settings{holding}, found {}",
                            other.type_name()
                        ),
                    ))
                }
            }
            continue;
        }
        if keys.contains_key(&key) {
            errors.push(Problem::new(
                format!("{base}.{key}"),
                "given more than once (dotted and nested forms name the same key); keep one",
            ));
            continue;
        }
        keys.insert(key, v.clone());
    }
}

/// `queue.disk.*`, or `None` when the queue stays in memory.
fn parse_disk(
    base: &str,
    keys: &BTreeMap<String, Value>,
    errors: &mut Vec<Problem>,
) -> Option<DiskSettings> {
    let given_disk = [DISK_KEY, DISK_PATH_KEY, DISK_MAX_SIZE_KEY]
        .iter()
        .any(|k| given(keys, k).is_some());
    if !given_disk {
        return None;
    }
    if given(keys, QUEUE_EVENTS_KEY).is_some() {
        errors.push(Problem::new(
            format!("{base}.{DISK_KEY}"),
            format!("given together with `{QUEUE_EVENTS_KEY}`; an output has one queue: keep one"),
        ));
    }
    let mut d = DiskSettings {
        path: None,
        max_size: disk::DEFAULT_MAX_SIZE,
    };
    match given(keys, DISK_PATH_KEY) {
        None => {}
        Some(Value::Str(p)) if !p.is_empty() => d.path = Some(PathBuf::from(p)),
        Some(other) => errors.push(Problem::new(
            format!("{base}.{DISK_PATH_KEY}"),
            format!("must be a directory path, found {}", describe(other)),
        )),
    }
    match given(keys, DISK_MAX_SIZE_KEY) {
        None => {}
        Some(v) => match parse_size(v) {
            Some(n) if n >= 1024 * 1024 => d.max_size = n,
            _ => errors.push(Problem::new(
                format!("{base}.{DISK_MAX_SIZE_KEY}"),
                format!(
                    "must be a size of at least 1MiB, in bytes or with a unit (512MiB, 10GB), found {}",
                    describe(v)
                ),
            )),
        },
    }
    Some(d)
}

#[cfg(test)]
mod tests {
    use super::super::elasticsearch::ElasticsearchSettings;
    use super::super::file::FileSettings;
    use super::super::file::settings::DEFAULT_FILENAME;
    use super::super::otlp::{self, OtlpSettings};
    use super::*;

    fn section(yaml: &str) -> Value {
        let policy = leasehold_policy::Policy::parse(yaml, "test.yml").unwrap();
        policy
            .section("outputs")
            .map_or(Value::Null, |n| n.to_value())
    }

    fn parse(yaml: &str) -> Result<Vec<OutputSettings>, Vec<Problem>> {
        parse_outputs(&section(yaml))
    }

    /// The errors of `yaml`, as (path, message).
    fn errors(yaml: &str) -> Vec<(String, String)> {
        parse(yaml)
            .unwrap_err()
            .into_iter()
            .map(|e| (e.key(), e.message))
            .collect()
    }

    #[test]
    fn elasticsearch_settings_take_elastic_agents_keys_and_defaults() {
        let outs = parse(
            "outputs:\n  default:\n    type: elasticsearch\n    hosts: ['es-1:9200', 'https://es-2']\n    protocol: https\n    path: /prefix/\n    username: elastic\n    password: changeme\n    headers: {X-Tenant: blue}\n    ssl: {verification_mode: none}\n    compression_level: 0\n    bulk_max_size: 50\n    worker: 3\n    timeout: 5s\n    backoff: {init: 500ms, max: 20s}\n    queue.disk: {max_size: 64MiB, path: /var/q}\n",
        )
        .unwrap();
        let Some(es) = outs[0].kind.get::<ElasticsearchSettings>() else {
            panic!("not elasticsearch: {:?}", outs[0].kind)
        };
        assert_eq!(
            es.hosts,
            ["https://es-1:9200/prefix", "https://es-2:9200/prefix"]
        );
        assert_eq!(es.username.as_deref(), Some("elastic"));
        assert_eq!(es.headers, [("X-Tenant".to_string(), "blue".to_string())]);
        assert_eq!(es.verification, crate::tls::Verification::None);
        assert_eq!(
            (es.compression_level, es.bulk_max_size, es.worker),
            (0, 50, 3)
        );
        assert_eq!(es.timeout, std::time::Duration::from_secs(5));
        assert_eq!(es.backoff_init, std::time::Duration::from_millis(500));
        assert_eq!(
            outs[0].disk,
            Some(DiskSettings {
                path: Some(PathBuf::from("/var/q")),
                max_size: 64 * 1024 * 1024
            })
        );
        let defaults =
            parse("outputs:\n  default:\n    type: elasticsearch\n    hosts: [localhost]\n")
                .unwrap();
        let es = defaults[0].kind.get::<ElasticsearchSettings>().unwrap();
        assert_eq!(es.hosts, ["http://localhost:9200"]);
        assert_eq!(
            (es.bulk_max_size, es.compression_level, es.worker),
            (1600, 1, 1)
        );
        assert_eq!(defaults[0].disk, None);
    }

    #[test]
    fn elasticsearch_and_otlp_errors_name_the_key() {
        let got = errors(
            "outputs:\n  es:\n    type: elasticsearch\n    hosts: ['ftp://x']\n    api_key: a:b\n    username: u\n    backoff: {init: 2m, max: 1m}\n    queue: {disk: {max_size: 1KB}, mem: {events: 5}}\n  o:\n    type: otlp\n    protocol: udp\n    compression: zstd\n  o2:\n    type: otlp\n    endpoint: collector:4317\n",
        );
        let paths: Vec<&str> = got.iter().map(|(p, _)| p.as_str()).collect();
        for want in [
            "outputs.es.hosts.0",
            "outputs.es.api_key",
            "outputs.es.backoff.init",
            "outputs.es.queue.disk",
            "outputs.es.queue.disk.max_size",
            "outputs.o.protocol",
            "outputs.o.endpoint",
            "outputs.o.compression",
            "outputs.o2.endpoint",
        ] {
            assert!(paths.contains(&want), "no error at {want}: {got:?}");
        }
    }

    #[test]
    fn otlp_settings_read_the_collectors_keys() {
        let outs = parse(
            "outputs:\n  default:\n    type: otlp\n    endpoint: http://127.0.0.1:4318/\n    protocol: http/protobuf\n    headers: {Authorization: Bearer x}\n    compression: none\n    tls: {insecure_skip_verify: true}\n",
        )
        .unwrap();
        let o = outs[0].kind.get::<OtlpSettings>().unwrap();
        assert_eq!(o.endpoint, "http://127.0.0.1:4318");
        assert_eq!(o.protocol, otlp::settings::Protocol::HttpProtobuf);
        assert_eq!(
            o.headers,
            [("authorization".to_string(), "Bearer x".to_string())]
        );
        assert!(!o.gzip);
        assert_eq!(o.verification, crate::tls::Verification::None);
    }

    fn file_of(o: &OutputSettings) -> &FileSettings {
        o.kind
            .get::<FileSettings>()
            .unwrap_or_else(|| panic!("{} is a {} output", o.name, o.kind.type_name()))
    }

    #[test]
    fn defaults_and_both_types() {
        let outs = parse(
            "outputs:\n  default:\n    type: file\n    path: /var/lib/leasehold/out\n  other: { type: console }\n",
        )
        .unwrap();
        assert_eq!(outs.len(), 2);
        assert_eq!(outs[0].name, "default");
        assert_eq!(outs[0].queue_events, DEFAULT_QUEUE_EVENTS);
        assert_eq!(
            outs[0].kind,
            OutputKind::file(FileSettings::new("/var/lib/leasehold/out"))
        );
        let f = file_of(&outs[0]);
        assert_eq!(f.filename, "leasehold");
        assert_eq!(f.rotate_every_kb, 10240);
        assert_eq!(f.number_of_files, 7);
        assert_eq!(f.permissions, 0o600);
        assert_eq!(
            f.current_file(),
            PathBuf::from("/var/lib/leasehold/out/leasehold.ndjson")
        );
        assert_eq!(
            f.rotated_file(2),
            PathBuf::from("/var/lib/leasehold/out/leasehold.ndjson.2")
        );
        assert_eq!(outs[1].name, "other");
        assert_eq!(outs[1].kind, OutputKind::console());
        assert_eq!(outs[1].kind.type_name(), "console");
    }

    /// Elastic Agent's `preset` sets the batch, the requests in flight,
    /// gzip and the queue, and wins over the same keys set beside it;
    /// `custom` leaves them alone; `loadbalance` is accepted.
    #[test]
    fn an_elastic_preset_sizes_batches_requests_and_the_queue() {
        let es = |yaml: &str| -> (ElasticsearchSettings, usize) {
            let outs = parse(yaml).unwrap();
            let e = outs[0].kind.get::<ElasticsearchSettings>().unwrap();
            (e.clone(), outs[0].queue_events)
        };
        let base = "outputs:\n  default:\n    type: elasticsearch\n    hosts: [localhost]\n";
        let (e, queue) = es(&format!(
            "{base}    preset: throughput\n    loadbalance: true\n"
        ));
        assert_eq!(
            (e.bulk_max_size, e.worker, e.compression_level, queue),
            (1600, 4, 1, 12800)
        );
        let (e, queue) = es(&format!(
            "{base}    preset: latency\n    worker: 3\n    bulk_max_size: 999\n    queue.mem.events: 7\n"
        ));
        assert_eq!((e.bulk_max_size, e.worker, queue), (50, 1, 4100));
        let (e, queue) = es(&format!("{base}    preset: custom\n    worker: 3\n"));
        assert_eq!((e.worker, e.preset, queue), (3, None, DEFAULT_QUEUE_EVENTS));
        let errs = errors(&format!("{base}    preset: fast\n    loadbalance: 'yes'\n"));
        assert!(
            errs.iter().any(|(p, m)| p == "outputs.default.preset"
                && m.contains("balanced, throughput, scale, latency, custom")),
            "{errs:?}"
        );
        assert!(
            errs.iter().any(|(p, _)| p == "outputs.default.loadbalance"),
            "{errs:?}"
        );
    }

    #[test]
    fn every_file_setting_is_read() {
        let outs = parse(
            "outputs:\n  default:\n    type: file\n    path: out\n    filename: events\n    rotate_every_kb: 1\n    number_of_files: 1024\n    permissions: 0640\n    queue.mem.events: 7\n",
        )
        .unwrap();
        assert_eq!(outs[0].queue_events, 7);
        assert_eq!(
            *file_of(&outs[0]),
            FileSettings {
                path: "out".into(),
                filename: "events".into(),
                rotate_every_kb: 1,
                number_of_files: 1024,
                permissions: 0o640,
            }
        );
    }

    #[test]
    fn permissions_accept_octal_numbers_and_octal_strings() {
        for (text, mode) in [
            ("0600", 0o600),
            ("0o644", 0o644),
            ("\"0600\"", 0o600),
            ("\"640\"", 0o640),
            ("'0o755'", 0o755),
            ("0", 0),
            ("511", 0o777),
        ] {
            let yaml =
                format!("outputs:\n  o:\n    type: file\n    path: p\n    permissions: {text}\n");
            let outs = parse(&yaml).unwrap_or_else(|e| panic!("{text}: {e:?}"));
            assert_eq!(file_of(&outs[0]).permissions, mode, "{text}");
        }
        assert_eq!(
            parse_outputs(&Value::Map(
                [(
                    "o".to_string(),
                    Value::Map(
                        [
                            ("type".to_string(), Value::Str("file".into())),
                            ("path".to_string(), Value::Str("p".into())),
                            ("permissions".to_string(), Value::Int(384)),
                        ]
                        .into_iter()
                        .collect()
                    )
                )]
                .into_iter()
                .collect()
            ))
            .map(|o| file_of(&o[0]).permissions),
            Ok(0o600)
        );
        for bad in ["600", "\"0800\"", "\"\"", "\"rw\"", "-1", "true", "0o1000"] {
            let yaml =
                format!("outputs:\n  o:\n    type: file\n    path: p\n    permissions: {bad}\n");
            let errs = errors(&yaml);
            assert_eq!(errs.len(), 1, "{bad}: {errs:?}");
            assert_eq!(errs[0].0, "outputs.o.permissions", "{bad}");
            assert!(errs[0].1.contains("0 to 0777"), "{bad}: {}", errs[0].1);
        }
    }

    #[test]
    fn queue_size_accepts_the_dotted_and_the_nested_form() {
        let forms = [
            "queue.mem.events: 64",
            "queue: {mem: {events: 64}}",
            "queue: {mem.events: 64}",
            "queue.mem: {events: 64}",
        ];
        for form in forms {
            let yaml = format!("outputs:\n  o:\n    type: console\n    {form}\n");
            let outs = parse(&yaml).unwrap_or_else(|e| panic!("{form}: {e:?}"));
            assert_eq!(outs[0].queue_events, 64, "{form}");
        }
        assert_eq!(
            errors(
                "outputs:\n  o:\n    type: console\n    queue.mem.events: 1\n    queue: {mem: {events: 2}}\n"
            ),
            [(
                "outputs.o.queue.mem.events".to_string(),
                "given more than once (dotted and nested forms name the same key); keep one"
                    .to_string()
            )]
        );
    }

    #[test]
    fn memory_is_bounded_in_bytes_with_defaults() {
        let outs = parse("outputs:\n  o: {type: console}\n").unwrap();
        assert_eq!(outs[0].memory, MemoryLimits::default());
        let outs = parse(
            "outputs:\n  o:\n    type: console\n    queue: {mem: {bytes: 64MiB}}\n    max_event_bytes: 2MB\n",
        )
        .unwrap();
        assert_eq!(outs[0].memory.queue_bytes, 64 << 20);
        assert_eq!(outs[0].memory.max_event_bytes, 2_000_000);
        // A queue smaller than the default event limit lowers the limit.
        let outs = parse("outputs:\n  o: {type: console, queue.mem.bytes: 1MiB}\n").unwrap();
        assert_eq!(outs[0].memory.max_event_bytes, 1 << 20);
        let errs = errors(
            "outputs:\n  a: {type: console, queue.mem.bytes: 1MiB, max_event_bytes: 2MiB}\n  b: {type: console, queue.mem.bytes: 10}\n  c: {type: console, queue.mem.bytes: 1MiB, queue.disk: {}}\n",
        );
        let paths: Vec<&str> = errs.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "outputs.a.max_event_bytes",
                "outputs.b.queue.mem.bytes",
                "outputs.c.queue.mem.bytes"
            ],
            "{errs:?}"
        );
        assert!(errs[0].1.contains("could never be queued"), "{errs:?}");
    }

    #[test]
    fn every_error_is_reported_with_its_path() {
        let yaml = "outputs:
  f:
    type: file
    filename: a/b
    rotate_every_kb: 0
    number_of_files: 1
    permissions: \"9\"
    queue.mem.events: 0
    compression: gzip
  c:
    type: console
    path: /tmp
    queue: {mem: {events: 2000000, flush: 1}}
  q:
    type: console
    queue: 5
  x:
    type: kafka
    hosts: [a]
  n:
    path: /tmp
  t:
    type: 3
  s: console
  big:
    type: file
    path: \"\"
    rotate_every_kb: 2000000000
    number_of_files: 1025
    filename: ..
";
        let got = errors(yaml);
        let paths: Vec<&str> = got.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "outputs.f.queue.mem.events",
                "outputs.f.compression",
                "outputs.f.path",
                "outputs.f.filename",
                "outputs.f.rotate_every_kb",
                "outputs.f.number_of_files",
                "outputs.f.permissions",
                "outputs.c.queue.mem.events",
                "outputs.c.path",
                "outputs.c.queue.mem.flush",
                "outputs.q.queue",
                "outputs.x.type",
                "outputs.n.type",
                "outputs.t.type",
                "outputs.s",
                "outputs.big.path",
                "outputs.big.filename",
                "outputs.big.rotate_every_kb",
                "outputs.big.number_of_files",
            ]
        );
        let msg = |p: &str| &got.iter().find(|(q, _)| q == p).unwrap().1;
        assert!(msg("outputs.f.compression").contains(
            "known keys: filename, max_event_bytes, number_of_files, path, permissions, queue.disk, queue.disk.max_size, queue.disk.path, queue.mem.bytes, queue.mem.events, rotate_every_kb, type"
        ));
        assert!(msg("outputs.c.path").contains(
            "known keys: max_event_bytes, queue.disk, queue.disk.max_size, queue.disk.path, queue.mem.bytes, queue.mem.events, type"
        ));
        assert!(msg("outputs.x.type").contains("`kafka`"));
        assert!(msg("outputs.x.type").contains("known types: console, elasticsearch, file"));
        assert!(msg("outputs.n.type").contains("required; one of: console, elasticsearch, file"));
        assert!(msg("outputs.t.type").contains("must be a string"));
        assert!(msg("outputs.s").contains("must be a map"));
        assert!(msg("outputs.q.queue").contains("mem.events"));
        assert!(msg("outputs.f.path").contains("required"));
        assert!(msg("outputs.f.filename").contains("without `/`"));
        assert!(msg("outputs.f.rotate_every_kb").contains("from 1 to 1073741824"));
        assert!(msg("outputs.f.number_of_files").contains("from 2 to 1024"));
        assert!(msg("outputs.f.queue.mem.events").contains("from 1 to 1048576"));
        assert!(msg("outputs.big.path").contains("non-empty string"));
        for e in parse(yaml).unwrap_err() {
            assert_eq!(e.to_string(), format!("`{}`: {}", e.key(), e.message));
        }
    }

    #[test]
    fn empty_and_odd_sections() {
        assert_eq!(parse("inputs: []\n"), Ok(vec![]));
        assert_eq!(parse("outputs:\n"), Ok(vec![]));
        assert_eq!(parse("outputs: {}\n"), Ok(vec![]));
        let errs = parse_outputs(&Value::List(vec![])).unwrap_err();
        assert_eq!(errs[0].key(), "outputs");
        assert!(errs[0].message.contains("must be a map"));
        // No `default` output is fine here; the runtime decides.
        assert_eq!(
            parse("outputs:\n  mine: {type: console}\n").unwrap()[0].name,
            "mine"
        );
        // A null setting counts as not given.
        let outs = parse("outputs:\n  o:\n    type: file\n    path: p\n    filename:\n").unwrap();
        assert_eq!(file_of(&outs[0]).filename, DEFAULT_FILENAME);
    }

    #[test]
    fn two_outputs_cannot_share_a_disk_queue_directory() {
        let errs = errors(
            "outputs:\n  a: {type: console, queue.disk.path: /q/one}\n  b: {type: console, queue.disk.path: /q/one/}\n  c: {type: console, queue.disk.path: /q/./one}\n  d: {type: console, queue.disk.path: /q/two}\n",
        );
        assert_eq!(errs.len(), 2, "{errs:?}");
        for (path, msg) in &errs {
            assert!(
                path == "outputs.b.queue.disk.path" || path == "outputs.c.queue.disk.path",
                "{path}"
            );
            assert!(msg.contains("output `a`"), "{msg}");
        }
        // Resolved through symlinks when the directories exist.
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
        let yaml = format!(
            "outputs:\n  a: {{type: console, queue.disk.path: {}}}\n  b: {{type: console, queue.disk.path: {}}}\n",
            real.display(),
            dir.path().join("link").display()
        );
        assert_eq!(errors(&yaml).len(), 1);
    }
}
