//! The `elasticsearch` output's settings, with Elastic Agent's keys and
//! defaults.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use leasehold_policy::Value;

use super::super::{SettingError, common, describe, given, int_in};
use crate::tls::Verification;

/// Keys an `elasticsearch` output accepts (after `ssl`/`backoff` maps are
/// flattened to dotted keys).
pub const KEYS: [&str; 17] = [
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
            compression_level: DEFAULT_COMPRESSION_LEVEL,
            bulk_max_size: DEFAULT_BULK_MAX_SIZE,
            worker: 1,
            timeout: DEFAULT_TIMEOUT,
            backoff_init: DEFAULT_BACKOFF_INIT,
            backoff_max: DEFAULT_BACKOFF_MAX,
        }
    }
}

/// Reads the settings of the output at `base` (e.g. `outputs.default`).
pub fn parse(
    base: &str,
    keys: &BTreeMap<String, Value>,
    errors: &mut Vec<SettingError>,
) -> ElasticsearchSettings {
    let get = |key: &str| given(keys, key);
    let path_of = |key: &str| format!("{base}.{key}");
    let mut s = ElasticsearchSettings::default();

    let protocol = match get("protocol") {
        None => None,
        Some(Value::Str(p)) if p == "http" || p == "https" => Some(p.clone()),
        Some(other) => {
            errors.push(SettingError::new(
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
            errors.push(SettingError::new(
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
            errors.push(SettingError::new(
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
                    other => errors.push(SettingError::new(
                        format!("{base}.hosts.{i}"),
                        format!("must be a URL string, found {}", describe(other)),
                    )),
                }
            }
            if items.is_empty() {
                errors.push(SettingError::new(
                    path_of("hosts"),
                    "must name at least one host",
                ));
            }
            out
        }
        Some(other) => {
            errors.push(SettingError::new(
                path_of("hosts"),
                format!("must be a list of URLs, found {}", describe(other)),
            ));
            Vec::new()
        }
    };
    for (path, host) in hosts {
        match host_url(&host, protocol.as_deref(), &prefix) {
            Ok(url) => s.hosts.push(url),
            Err(why) => errors.push(SettingError::new(path, why)),
        }
    }

    s.username = string(keys, base, "username", errors);
    s.password = string(keys, base, "password", errors);
    if s.password.is_some() && s.username.is_none() {
        errors.push(SettingError::new(
            path_of("password"),
            "given without `username`; set both for basic authentication",
        ));
    }
    if let Some(key) = string(keys, base, "api_key", errors) {
        if s.username.is_some() {
            errors.push(SettingError::new(
                path_of("api_key"),
                "given together with `username`; use one way to authenticate",
            ));
        }
        s.api_key = Some(encode_api_key(&key));
    }
    s.headers = common::headers(base, keys, errors);

    if let Some(v) = get("ssl.enabled")
        && !matches!(v, Value::Bool(_))
    {
        errors.push(SettingError::new(
            path_of("ssl.enabled"),
            format!("must be true or false, found {}", describe(v)),
        ));
    }
    match get("ssl.certificate_authorities") {
        None => {}
        Some(Value::Str(p)) => s.certificate_authorities.push(PathBuf::from(p)),
        Some(Value::List(items)) => {
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::Str(p) => s.certificate_authorities.push(PathBuf::from(p)),
                    other => errors.push(SettingError::new(
                        format!("{base}.ssl.certificate_authorities.{i}"),
                        format!("must be a PEM file path, found {}", describe(other)),
                    )),
                }
            }
        }
        Some(other) => errors.push(SettingError::new(
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
        Some(other) => errors.push(SettingError::new(
            path_of("ssl.verification_mode"),
            format!(
                "must be full, strict, certificate or none, found {}",
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
    s.timeout = common::duration(base, keys, "timeout", DEFAULT_TIMEOUT, errors);
    (s.backoff_init, s.backoff_max) = common::backoff(
        base,
        keys,
        (DEFAULT_BACKOFF_INIT, DEFAULT_BACKOFF_MAX),
        errors,
    );
    s
}

/// The base URL of one `hosts` entry: `protocol` applies to entries
/// without a scheme, the port defaults to 9200, `path` is appended.
fn host_url(host: &str, protocol: Option<&str>, prefix: &str) -> Result<String, String> {
    let host = host.trim();
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
    Ok(url)
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
    errors: &mut Vec<SettingError>,
) -> Option<String> {
    match given(keys, key) {
        None => None,
        Some(Value::Str(t)) if !t.is_empty() => Some(t.clone()),
        Some(Value::Str(_)) => None,
        Some(other) => {
            errors.push(SettingError::new(
                format!("{base}.{key}"),
                format!("must be a string, found {}", describe(other)),
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
        assert_eq!(
            host_url("es:9200", None, "").unwrap(),
            "http://es:9200".to_string()
        );
        assert_eq!(
            host_url("es", Some("https"), "/prefix").unwrap(),
            "https://es:9200/prefix"
        );
        assert_eq!(
            host_url("http://10.0.0.1:9201/", Some("https"), "").unwrap(),
            "http://10.0.0.1:9201"
        );
        assert_eq!(
            host_url("https://[::1]", None, "").unwrap(),
            "https://[::1]:9200"
        );
        assert!(host_url("ftp://es", None, "").is_err());
        assert!(host_url("http://", None, "").is_err());
    }

    #[test]
    fn api_keys_in_id_colon_key_form_are_encoded() {
        assert_eq!(encode_api_key("id:secret"), "aWQ6c2VjcmV0");
        assert_eq!(encode_api_key("aWQ6c2VjcmV0"), "aWQ6c2VjcmV0");
    }
}
