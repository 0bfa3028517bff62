//! The `elasticsearch` output's settings, with Elastic Agent's keys and
//! defaults.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use leasehold_policy::Value;

use super::super::common;
use crate::redact::{self, Redactor};
use crate::settings::{Problem, describe, describe_at, flag, given, int_in};
use crate::tls::Verification;

/// Keys an `elasticsearch` output accepts (after `ssl`/`backoff` maps are
/// flattened to dotted keys).
pub const KEYS: [&str; 20] = [
    "hosts",
    "protocol",
    "path",
    "username",
    "password",
    "api_key",
    "headers",
    "ssl.enabled",
    "ssl.certificate_authorities",
    "ssl.verification_mode",
    "ssl.ca_trusted_fingerprint",
    "preset",
    "loadbalance",
    "compression_level",
    "bulk_max_size",
    "worker",
    "timeout",
    "backoff.init",
    "backoff.max",
    "workers",
];

/// Elastic Agent's default `bulk_max_size`.
pub const DEFAULT_BULK_MAX_SIZE: usize = 1600;
/// Elastic Agent's default `compression_level` (gzip; 0 turns it off).
pub const DEFAULT_COMPRESSION_LEVEL: u32 = 1;
/// Elastic Agent's default per-request `timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(90);
/// Elastic Agent's default `backoff.init`.
pub const DEFAULT_BACKOFF_INIT: Duration = Duration::from_secs(1);
/// Elastic Agent's default `backoff.max`.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(60);
/// The port of a host given without one.
pub const DEFAULT_PORT: u16 = 9200;

/// Elastic Agent's performance presets (`preset`): the values each sets
/// of `bulk_max_size`, `worker`, `compression_level` and
/// `queue.mem.events`. Their `queue.mem.flush.*` and
/// `idle_connection_timeout` have no counterpart here: leasehold sends a
/// batch as soon as events are queued. As in Elastic Agent, a preset's
/// values win over the same keys set beside it (`custom` sets nothing).
pub const PRESETS: [(&str, Preset); 4] = [
    (
        "balanced",
        Preset {
            bulk_max_size: 1600,
            worker: 1,
            compression_level: 1,
            queue_events: 3200,
        },
    ),
    (
        "throughput",
        Preset {
            bulk_max_size: 1600,
            worker: 4,
            compression_level: 1,
            queue_events: 12800,
        },
    ),
    (
        "scale",
        Preset {
            bulk_max_size: 1600,
            worker: 1,
            compression_level: 1,
            queue_events: 3200,
        },
    ),
    (
        "latency",
        Preset {
            bulk_max_size: 50,
            worker: 1,
            compression_level: 1,
            queue_events: 4100,
        },
    ),
];

/// What one of [`PRESETS`] sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preset {
    pub bulk_max_size: usize,
    pub worker: usize,
    pub compression_level: u32,
    pub queue_events: usize,
}

/// Settings of an `elasticsearch` output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElasticsearchSettings {
    /// Base URLs (scheme, host, port and `path`), tried in order; a host
    /// that fails hands the request to the next.
    pub hosts: Vec<String>,
    /// Basic authentication.
    pub username: Option<String>,
    /// Basic authentication.
    pub password: Option<String>,
    /// The `Authorization: ApiKey …` value, already base64 (from `id:key`).
    pub api_key: Option<String>,
    /// Extra request headers.
    pub headers: Vec<(String, String)>,
    /// PEM files trusted besides the system's roots.
    pub certificate_authorities: Vec<PathBuf>,
    /// `ssl.verification_mode`.
    pub verification: Verification,
    /// `ssl.ca_trusted_fingerprint`: a CA trusted when a server presents it.
    pub ca_trusted_fingerprint: Option<crate::tls::Fingerprint>,
    /// The `preset` applied, if any (its queue size is the output's).
    pub preset: Option<Preset>,
    /// gzip level of request bodies, 0 (off) to 9.
    pub compression_level: u32,
    /// Most documents in one `_bulk` request.
    pub bulk_max_size: usize,
    /// Bulk requests in flight at once.
    pub worker: usize,
    /// Bound of one request.
    pub timeout: Duration,
    /// First wait after a failed request.
    pub backoff_init: Duration,
    /// Longest wait between retries.
    pub backoff_max: Duration,
}

impl Default for ElasticsearchSettings {
    fn default() -> Self {
        ElasticsearchSettings {
            hosts: Vec::new(),
            username: None,
            password: None,
            api_key: None,
            headers: Vec::new(),
            certificate_authorities: Vec::new(),
            verification: Verification::Full,
            ca_trusted_fingerprint: None,
            preset: None,
            compression_level: DEFAULT_COMPRESSION_LEVEL,
            bulk_max_size: DEFAULT_BULK_MAX_SIZE,
            worker: 1,
            timeout: DEFAULT_TIMEOUT,
            backoff_init: DEFAULT_BACKOFF_INIT,
            backoff_max: DEFAULT_BACKOFF_MAX,
        }
    }
}

impl ElasticsearchSettings {
    /// The secrets of these settings, to keep them out of messages: the
    /// password, the API key and the values of secret headers, also as
    /// they are sent.
    pub fn redactor(&self) -> Redactor {
        let mut r = Redactor::new();
        if let Some(p) = &self.password {
            r.add(p);
        }
        if let Some(user) = &self.username {
            r.add(&basic_token(user, self.password.as_deref().unwrap_or("")));
        }
        if let Some(key) = &self.api_key {
            r.add(key);
            use base64::Engine as _;
            if let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(key)
                && let Ok(raw) = String::from_utf8(raw)
            {
                r.add(&raw);
            }
        }
        for (name, value) in &self.headers {
            if redact::is_secret_key(name) {
                r.add(value);
            }
        }
        r
    }
}

/// The base64 credential of `Authorization: Basic`.
pub fn basic_token(user: &str, password: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
}

/// Reads the settings of the output at `base` (e.g. `outputs.default`).
pub fn parse(
    base: &str,
    keys: &BTreeMap<String, Value>,
    errors: &mut Vec<Problem>,
) -> ElasticsearchSettings {
    let get = |key: &str| given(keys, key);
    let path_of = |key: &str| format!("{base}.{key}");
    let mut s = ElasticsearchSettings::default();

    let protocol = match get("protocol") {
        None => None,
        Some(Value::Str(p)) if p == "http" || p == "https" => Some(p.clone()),
        Some(other) => {
            errors.push(Problem::new(
                path_of("protocol"),
                format!("must be http or https, found {}", describe(other)),
            ));
            None
        }
    };
    let prefix = match get("path") {
        None => String::new(),
        Some(Value::Str(p)) => {
            let p = p.trim_matches('/');
            if p.is_empty() {
                String::new()
            } else {
                format!("/{p}")
            }
        }
        Some(other) => {
            errors.push(Problem::new(
                path_of("path"),
                format!(
                    "must be a URL path prefix such as /es, found {}",
                    describe(other)
                ),
            ));
            String::new()
        }
    };
    let hosts: Vec<(String, String)> = match get("hosts") {
        None => {
            errors.push(Problem::new(
                path_of("hosts"),
                "required: the Elasticsearch or OpenSearch URLs, e.g. ['https://es.example:9200']",
            ));
            Vec::new()
        }
        Some(Value::Str(h)) => vec![(path_of("hosts"), h.clone())],
        Some(Value::List(items)) => {
            let mut out = Vec::new();
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::Str(h) => out.push((format!("{base}.hosts.{i}"), h.clone())),
                    other => errors.push(Problem::new(
                        format!("{base}.hosts.{i}"),
                        format!("must be a URL string, found {}", describe(other)),
                    )),
                }
            }
            if items.is_empty() {
                errors.push(Problem::new(
                    path_of("hosts"),
                    "must name at least one host",
                ));
            }
            out
        }
        Some(other) => {
            errors.push(Problem::new(
                path_of("hosts"),
                format!("must be a list of URLs, found {}", describe(other)),
            ));
            Vec::new()
        }
    };
    // Credentials in a URL (`http://user:pass@es:9200`) are sent as basic
    // authentication to every host; the URLs keep none of them.
    let mut url_credentials: Option<(String, (String, String))> = None;
    for (path, host) in hosts {
        match host_url(&host, protocol.as_deref(), &prefix) {
            Ok((url, credentials)) => {
                s.hosts.push(url);
                match (credentials, &url_credentials) {
                    (None, _) => {}
                    (Some(c), None) => url_credentials = Some((path, c)),
                    (Some(c), Some((first, known))) if c != *known => {
                        errors.push(Problem::new(
                            path,
                            format!(
                                "carries other credentials (user:password@) than `{first}`; an output authenticates one way to all its hosts: remove them from the URLs and set `username` and `password`"
                            ),
                        ));
                    }
                    (Some(_), Some(_)) => {}
                }
            }
            Err(why) => errors.push(Problem::new(path, why)),
        }
    }

    s.username = string(keys, base, "username", errors);
    s.password = string(keys, base, "password", errors);
    if let Some((path, (user, pass))) = url_credentials {
        let explicit = ["username", "password", "api_key"]
            .into_iter()
            .find(|k| given(keys, k).is_some());
        match explicit {
            Some(key) => errors.push(Problem::new(
                path,
                format!(
                    "carries credentials (user:password@) and `{base}.{key}` is set too; give them one way: remove them from the URL, or remove `{key}`"
                ),
            )),
            None => {
                s.username = Some(user);
                s.password = Some(pass).filter(|p| !p.is_empty());
            }
        }
    }
    if s.password.is_some() && s.username.is_none() {
        errors.push(Problem::new(
            path_of("password"),
            "given without `username`; set both for basic authentication",
        ));
    }
    if let Some(key) = string(keys, base, "api_key", errors) {
        if s.username.is_some() {
            errors.push(Problem::new(
                path_of("api_key"),
                "given together with `username`; use one way to authenticate",
            ));
        }
        s.api_key = Some(encode_api_key(&key));
    }
    s.headers = common::headers(base, keys, errors);

    if let Some(v) = get("ssl.enabled") {
        flag(&path_of("ssl.enabled"), v, errors);
    }
    match get("ssl.certificate_authorities") {
        None => {}
        Some(Value::Str(p)) => s.certificate_authorities.push(PathBuf::from(p)),
        Some(Value::List(items)) => {
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::Str(p) => s.certificate_authorities.push(PathBuf::from(p)),
                    other => errors.push(Problem::new(
                        format!("{base}.ssl.certificate_authorities.{i}"),
                        format!("must be a PEM file path, found {}", describe(other)),
                    )),
                }
            }
        }
        Some(other) => errors.push(Problem::new(
            path_of("ssl.certificate_authorities"),
            format!(
                "must be a list of PEM file paths, found {}",
                describe(other)
            ),
        )),
    }
    match get("ssl.verification_mode") {
        None => {}
        Some(Value::Str(m)) if Verification::from_name(m).is_some() => {
            s.verification = Verification::from_name(m).unwrap_or_default();
        }
        Some(other) => errors.push(Problem::new(
            path_of("ssl.verification_mode"),
            format!(
                "must be full, strict, certificate or none, found {}",
                describe(other)
            ),
        )),
    }

    match get("ssl.ca_trusted_fingerprint") {
        None => {}
        // Elastic's manifest reads it from an environment variable that
        // may be empty: no pin.
        Some(Value::Str(f)) if f.trim().is_empty() => {}
        // Checked once rendered (`check` sees the policy as written).
        Some(Value::Str(f)) if f.contains("${") => {}
        Some(Value::Str(f)) => match crate::tls::parse_fingerprint(f.trim()) {
            Ok(pin) => s.ca_trusted_fingerprint = Some(pin),
            Err(e) => errors.push(Problem::new(path_of("ssl.ca_trusted_fingerprint"), e)),
        },
        Some(other) => errors.push(Problem::new(
            path_of("ssl.ca_trusted_fingerprint"),
            format!(
                "must be a string of 64 hexadecimal digits, found {}",
                describe(other)
            ),
        )),
    }

    if let Some(v) = get("compression_level")
        && let Some(n) = int_in(&path_of("compression_level"), v, 0, 9, errors)
    {
        s.compression_level = n as u32;
    }
    if let Some(v) = get("bulk_max_size")
        && let Some(n) = int_in(&path_of("bulk_max_size"), v, 1, 100_000, errors)
    {
        s.bulk_max_size = n as usize;
    }
    let worker_key = if get("worker").is_some() {
        "worker"
    } else {
        "workers"
    };
    if let Some(v) = get(worker_key)
        && let Some(n) = int_in(&path_of(worker_key), v, 1, 64, errors)
    {
        s.worker = n as usize;
    }
    if let Some(v) = get("loadbalance") {
        flag(&path_of("loadbalance"), v, errors);
    }
    match get("preset") {
        None => {}
        Some(Value::Str(p)) if p == "custom" || p.is_empty() => {}
        Some(Value::Str(p)) if PRESETS.iter().any(|(n, _)| n == p) => {
            let preset = PRESETS.iter().find(|(n, _)| n == p).map(|(_, v)| *v);
            if let Some(preset) = preset {
                s.bulk_max_size = preset.bulk_max_size;
                s.worker = preset.worker;
                s.compression_level = preset.compression_level;
                s.preset = Some(preset);
            }
        }
        Some(other) => errors.push(Problem::new(
            path_of("preset"),
            format!(
                "must be one of balanced, throughput, scale, latency, custom; found {}",
                describe(other)
            ),
        )),
    }
    s.timeout = common::duration(base, keys, "timeout", DEFAULT_TIMEOUT, errors);
    (s.backoff_init, s.backoff_max) = common::backoff(
        base,
        keys,
        (DEFAULT_BACKOFF_INIT, DEFAULT_BACKOFF_MAX),
        errors,
    );
    s
}

/// The keys a preset sets, as they may be written beside it.
const PRESET_KEYS: [&str; 5] = [
    "bulk_max_size",
    "worker",
    "workers",
    "compression_level",
    "queue.mem.events",
];

/// Settings of one output (flattened `keys`) accepted but not acted on as
/// written, as (key, why), for `check`.
pub fn notes(keys: &BTreeMap<String, Value>) -> Vec<(&'static str, String)> {
    let get = |key: &str| given(keys, key);
    let mut notes = Vec::new();
    if let Some(Value::Bool(true)) = get("loadbalance") {
        notes.push((
            "loadbalance",
            "accepted, not acted on: requests go to one host at a time (`worker` of them in flight) and fail over to the next host".to_string(),
        ));
    }
    if let Some(Value::Str(p)) = get("preset")
        && PRESETS.iter().any(|(n, _)| n == p)
    {
        let replaced: Vec<&str> = PRESET_KEYS
            .into_iter()
            .filter(|k| get(k).is_some())
            .collect();
        if !replaced.is_empty() {
            notes.push((
                "preset",
                format!(
                    "preset `{p}` replaces {} set beside it, as in Elastic Agent; use `preset: custom` to set them yourself",
                    replaced.join(", ")
                ),
            ));
        }
    }
    notes
}

/// User and password taken from a URL.
type Credentials = (String, String);

/// The base URL of one `hosts` entry and the credentials it carried:
/// `protocol` applies to entries without a scheme, the port defaults to
/// 9200, `path` is appended, userinfo is removed (and percent-decoded).
/// Messages quote the entry without its userinfo.
fn host_url(
    host: &str,
    protocol: Option<&str>,
    prefix: &str,
) -> Result<(String, Option<Credentials>), String> {
    let (host, credentials) = redact::split_userinfo(host.trim())?;
    let host = host.as_str();
    let (scheme, rest) = match host.split_once("://") {
        Some((scheme, rest)) => {
            if scheme != "http" && scheme != "https" {
                return Err(format!(
                    "{host:?}: unsupported scheme {scheme:?}; use http or https"
                ));
            }
            (scheme.to_string(), rest)
        }
        None => (protocol.unwrap_or("http").to_string(), host),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    if authority.is_empty() {
        return Err(format!("{host:?}: no host name"));
    }
    let has_port = match authority.rfind(':') {
        Some(i) => !authority[i..].contains(']'),
        None => false,
    };
    let authority = if has_port {
        authority.to_string()
    } else {
        format!("{authority}:{DEFAULT_PORT}")
    };
    let url = format!("{scheme}://{authority}{path}{prefix}");
    url.parse::<hyper::Uri>()
        .map_err(|e| format!("{host:?} is not a valid URL: {e}"))?;
    Ok((url, credentials))
}

/// `id:key` as Elastic prints it becomes base64; a value without `:` is
/// taken as already encoded.
fn encode_api_key(key: &str) -> String {
    use base64::Engine as _;
    if key.contains(':') {
        base64::engine::general_purpose::STANDARD.encode(key)
    } else {
        key.to_string()
    }
}

fn string(
    keys: &BTreeMap<String, Value>,
    base: &str,
    key: &str,
    errors: &mut Vec<Problem>,
) -> Option<String> {
    match given(keys, key) {
        None => None,
        Some(Value::Str(t)) if !t.is_empty() => Some(t.clone()),
        Some(Value::Str(_)) => None,
        Some(other) => {
            errors.push(Problem::new(
                format!("{base}.{key}"),
                format!(
                    "must be a string (quote it in YAML), found {}",
                    describe_at(key, other)
                ),
            ));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_take_the_protocol_port_and_path() {
        let url = |h: &str, p: Option<&str>, prefix: &str| host_url(h, p, prefix).unwrap().0;
        assert_eq!(url("es:9200", None, ""), "http://es:9200".to_string());
        assert_eq!(
            url("es", Some("https"), "/prefix"),
            "https://es:9200/prefix"
        );
        assert_eq!(
            url("http://10.0.0.1:9201/", Some("https"), ""),
            "http://10.0.0.1:9201"
        );
        assert_eq!(url("https://[::1]", None, ""), "https://[::1]:9200");
        assert!(host_url("ftp://es", None, "").is_err());
        assert!(host_url("http://", None, "").is_err());
    }

    fn keys(pairs: &[(&str, Value)]) -> BTreeMap<String, Value> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    fn hosts(list: &[&str]) -> Value {
        Value::List(list.iter().map(|h| Value::Str(h.to_string())).collect())
    }

    #[test]
    fn credentials_in_host_urls_become_basic_authentication() {
        let mut errors = Vec::new();
        let s = parse(
            "outputs.es",
            &keys(&[(
                "hosts",
                hosts(&[
                    "http://elastic:p%40ss%2Fw0rd@es-1:9201",
                    "elastic:p%40ss%2Fw0rd@es-2",
                    "https://es-3",
                ]),
            )]),
            &mut errors,
        );
        assert_eq!(errors, []);
        assert_eq!(
            s.hosts,
            ["http://es-1:9201", "http://es-2:9200", "https://es-3:9200"]
        );
        assert_eq!(s.username.as_deref(), Some("elastic"));
        assert_eq!(s.password.as_deref(), Some("p@ss/w0rd"));
        let r = s.redactor();
        assert_eq!(
            r.redact("p@ss/w0rd, p%40ss%2Fw0rd"),
            "[redacted], [redacted]"
        );

        let s = parse(
            "outputs.es",
            &keys(&[("hosts", hosts(&["https://reader@es"]))]),
            &mut errors,
        );
        assert_eq!(errors, []);
        assert_eq!(
            (s.hosts[0].as_str(), s.username.as_deref(), s.password),
            ("https://es:9200", Some("reader"), None)
        );
    }

    #[test]
    fn credentials_given_twice_are_refused_without_quoting_them() {
        for other in ["username", "password", "api_key"] {
            let mut errors = Vec::new();
            parse(
                "outputs.es",
                &keys(&[
                    ("hosts", hosts(&["es-0", "http://u:url-secret@es"])),
                    (other, Value::Str("x:other-secret".into())),
                ]),
                &mut errors,
            );
            let e = errors
                .iter()
                .find(|e| e.key() == "outputs.es.hosts.1")
                .unwrap_or_else(|| panic!("{other}: {errors:?}"));
            assert!(
                e.message
                    .contains(&format!("`outputs.es.{other}` is set too")),
                "{e}"
            );
            for e in &errors {
                assert!(!e.to_string().contains("secret"), "{e}");
            }
        }
        let mut errors = Vec::new();
        parse(
            "outputs.es",
            &keys(&[(
                "hosts",
                hosts(&["http://u:a-secret@es-1", "http://u:b-secret@es-2"]),
            )]),
            &mut errors,
        );
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].key(), "outputs.es.hosts.1");
        assert!(errors[0].message.contains("`outputs.es.hosts.0`"));
        assert!(!errors[0].to_string().contains("secret"));
    }

    #[test]
    fn errors_about_a_host_or_a_password_do_not_quote_secrets() {
        let mut errors = Vec::new();
        parse(
            "outputs.es",
            &keys(&[
                (
                    "hosts",
                    hosts(&["ftp://u:url-secret@es", "http://u:%ff@es"]),
                ),
                ("username", Value::Str("u".into())),
                ("password", Value::Int(12345)),
                ("api_key", Value::Float(1.5)),
            ]),
            &mut errors,
        );
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert!(
            text.iter()
                .any(|e| e.starts_with("`outputs.es.hosts.0`: \"ftp://es\"")),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|e| e.starts_with("`outputs.es.hosts.1`: the password in the URL")),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|e| e
                    == "`outputs.es.password`: must be a string (quote it in YAML), found an int"),
            "{text:?}"
        );
        for e in &text {
            assert!(
                !e.contains("secret") && !e.contains("12345") && !e.contains("1.5"),
                "{e}"
            );
        }
    }

    #[test]
    fn api_keys_in_id_colon_key_form_are_encoded() {
        assert_eq!(encode_api_key("id:secret"), "aWQ6c2VjcmV0");
        assert_eq!(encode_api_key("aWQ6c2VjcmV0"), "aWQ6c2VjcmV0");
    }
}
