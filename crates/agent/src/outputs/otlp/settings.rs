//! The `otlp` output's settings, named as the OpenTelemetry Collector's
//! OTLP exporters name them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use leasehold_policy::Value;

use super::super::common;
use crate::redact::{self, Redactor};
use crate::settings::{Problem, describe, flag, given, int_in};
use crate::tls::Verification;

/// Keys an `otlp` output accepts (after `tls`/`backoff` maps are
/// flattened to dotted keys).
pub const KEYS: [&str; 11] = [
    "endpoint",
    "protocol",
    "headers",
    "compression",
    "timeout",
    "tls.ca_file",
    "tls.insecure_skip_verify",
    "bulk_max_size",
    "sending_queue.num_consumers",
    "backoff.init",
    "backoff.max",
];

/// Default per-request `timeout` (the Collector's).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default events per export request.
pub const DEFAULT_BULK_MAX_SIZE: usize = 1600;
/// Default export requests in flight. The Collector's exporters have 10
/// consumers; with the default queue of 3,200 events and 1,600 per
/// request, more than 2 are seldom filled.
pub const DEFAULT_NUM_CONSUMERS: usize = 2;
/// Default first wait after a failed export (the Collector's
/// `retry_on_failure.initial_interval`).
pub const DEFAULT_BACKOFF_INIT: Duration = Duration::from_secs(5);
/// Default longest wait (the Collector's `retry_on_failure.max_interval`).
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// How requests travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// OTLP/gRPC (`protocol: grpc`, the default; port 4317).
    #[default]
    Grpc,
    /// OTLP/HTTP with protobuf bodies (`protocol: http/protobuf`; port
    /// 4318), posted to `ENDPOINT/v1/logs` and `ENDPOINT/v1/metrics`.
    HttpProtobuf,
}

/// Settings of an `otlp` output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpSettings {
    /// `http://host:port` or `https://host:port` (plus a path prefix for
    /// OTLP/HTTP).
    pub endpoint: String,
    /// gRPC or HTTP.
    pub protocol: Protocol,
    /// Extra request headers (gRPC metadata).
    pub headers: Vec<(String, String)>,
    /// gzip request bodies (`compression: gzip`, the default; or `none`).
    pub gzip: bool,
    /// Bound of one export request.
    pub timeout: Duration,
    /// `tls.ca_file`: a PEM file trusted besides the system's roots.
    pub ca_file: Option<PathBuf>,
    /// `tls.insecure_skip_verify: true` turns verification off.
    pub verification: Verification,
    /// Most events in one export request.
    pub bulk_max_size: usize,
    /// Export requests in flight at once (`sending_queue.num_consumers`).
    pub num_consumers: usize,
    /// First wait after a failed export.
    pub backoff_init: Duration,
    /// Longest wait between retries.
    pub backoff_max: Duration,
}

impl OtlpSettings {
    /// The secrets of these settings (values of secret headers, the
    /// endpoint's credentials among them), to keep them out of messages.
    pub fn redactor(&self) -> Redactor {
        let mut r = Redactor::new();
        for (name, value) in &self.headers {
            if redact::is_secret_key(name) {
                r.add(value);
            }
        }
        r
    }
}

/// Reads the settings of the output at `base` (e.g. `outputs.otel`).
pub fn parse(
    base: &str,
    keys: &BTreeMap<String, Value>,
    errors: &mut Vec<Problem>,
) -> OtlpSettings {
    let get = |key: &str| given(keys, key);
    let path_of = |key: &str| format!("{base}.{key}");
    let mut s = OtlpSettings {
        endpoint: String::new(),
        protocol: Protocol::Grpc,
        headers: Vec::new(),
        gzip: true,
        timeout: DEFAULT_TIMEOUT,
        ca_file: None,
        verification: Verification::Full,
        bulk_max_size: DEFAULT_BULK_MAX_SIZE,
        num_consumers: DEFAULT_NUM_CONSUMERS,
        backoff_init: DEFAULT_BACKOFF_INIT,
        backoff_max: DEFAULT_BACKOFF_MAX,
    };
    match get("protocol") {
        None => {}
        Some(Value::Str(p)) if p == "grpc" => s.protocol = Protocol::Grpc,
        Some(Value::Str(p)) if p == "http/protobuf" || p == "http" => {
            s.protocol = Protocol::HttpProtobuf
        }
        Some(other) => errors.push(Problem::new(
            path_of("protocol"),
            format!("must be grpc or http/protobuf, found {}", describe(other)),
        )),
    }
    let mut url_credentials = None;
    match get("endpoint") {
        None => errors.push(Problem::new(
            path_of("endpoint"),
            "required: the receiver's URL, e.g. http://otel-collector:4317 for gRPC or http://otel-collector:4318 for protocol: http/protobuf",
        )),
        Some(Value::Str(e)) => match redact::split_userinfo(e.trim()) {
            Err(why) => errors.push(Problem::new(path_of("endpoint"), why)),
            Ok((e, credentials)) => {
                let e = e.trim_end_matches('/');
                let scheme_ok = e.starts_with("http://") || e.starts_with("https://");
                match e.parse::<hyper::Uri>() {
                    Ok(uri) if scheme_ok && uri.host().is_some() => s.endpoint = e.to_string(),
                    _ => errors.push(Problem::new(
                        path_of("endpoint"),
                        format!(
                            "{e:?} is not an http:// or https:// URL with a host, e.g. http://otel-collector:4317"
                        ),
                    )),
                }
                url_credentials = credentials;
            }
        },
        Some(other) => errors.push(Problem::new(
            path_of("endpoint"),
            format!("must be a URL string, found {}", describe(other)),
        )),
    }
    // gRPC metadata keys are lowercase.
    s.headers = common::headers(base, keys, errors)
        .into_iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
        .collect();
    // Credentials in the endpoint URL are sent as basic authentication
    // (as Go's HTTP client does), over gRPC as `authorization` metadata.
    if let Some((user, pass)) = url_credentials {
        if s.headers.iter().any(|(k, _)| k == "authorization") {
            errors.push(Problem::new(
                path_of("endpoint"),
                format!(
                    "carries credentials (user:password@) and `{base}.headers` sets Authorization too; give them one way: remove them from the URL, or remove the header"
                ),
            ));
        } else {
            let token = crate::outputs::elasticsearch::settings::basic_token(&user, &pass);
            s.headers
                .push(("authorization".to_string(), format!("Basic {token}")));
        }
    }
    match get("compression") {
        None => {}
        Some(Value::Str(c)) if c == "gzip" => s.gzip = true,
        Some(Value::Str(c)) if c == "none" || c.is_empty() => s.gzip = false,
        Some(other) => errors.push(Problem::new(
            path_of("compression"),
            format!("must be gzip or none, found {}", describe(other)),
        )),
    }
    match get("tls.ca_file") {
        None => {}
        Some(Value::Str(p)) => s.ca_file = Some(PathBuf::from(p)),
        Some(other) => errors.push(Problem::new(
            path_of("tls.ca_file"),
            format!("must be a PEM file path, found {}", describe(other)),
        )),
    }
    if let Some(v) = get("tls.insecure_skip_verify")
        && flag(&path_of("tls.insecure_skip_verify"), v, errors) == Some(true)
    {
        s.verification = Verification::None;
    }
    if let Some(v) = get("bulk_max_size")
        && let Some(n) = int_in(&path_of("bulk_max_size"), v, 1, 100_000, errors)
    {
        s.bulk_max_size = n as usize;
    }
    if let Some(v) = get("sending_queue.num_consumers")
        && let Some(n) = int_in(&path_of("sending_queue.num_consumers"), v, 1, 64, errors)
    {
        s.num_consumers = n as usize;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(url: &str, headers: Option<(&str, &str)>) -> (OtlpSettings, Vec<Problem>) {
        let mut keys: BTreeMap<String, Value> =
            [("endpoint".to_string(), Value::Str(url.into()))].into();
        if let Some((k, v)) = headers {
            keys.insert(
                "headers".into(),
                Value::Map(
                    [(k.to_string(), Value::Str(v.into()))]
                        .into_iter()
                        .collect(),
                ),
            );
        }
        let mut errors = Vec::new();
        (parse("outputs.o", &keys, &mut errors), errors)
    }

    #[test]
    fn credentials_in_the_endpoint_become_basic_authentication() {
        let (s, errors) = endpoint("https://otel:s3cr%2Ft@collector:4318/", None);
        assert_eq!(errors, []);
        assert_eq!(s.endpoint, "https://collector:4318");
        use base64::Engine as _;
        let token = base64::engine::general_purpose::STANDARD.encode("otel:s3cr/t");
        assert_eq!(
            s.headers,
            [("authorization".to_string(), format!("Basic {token}"))]
        );
        assert_eq!(
            s.redactor().redact(&format!("{token} s3cr/t")),
            "[redacted] [redacted]"
        );

        let (_, errors) = endpoint(
            "http://otel:s3cret@collector:4317",
            Some(("Authorization", "Bearer t0ken-value")),
        );
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].key(), "outputs.o.endpoint");
        assert!(errors[0].message.contains("headers"), "{}", errors[0]);
        assert!(!errors[0].to_string().contains("s3cret"));

        let (_, errors) = endpoint("collector:4317 user:s3cret@", None);
        assert!(
            errors.iter().all(|e| !e.to_string().contains("s3cret")),
            "{errors:?}"
        );
    }

    #[test]
    fn requests_in_flight_are_the_collectors_num_consumers() {
        let parse_with = |n: Value| {
            let keys: BTreeMap<String, Value> = [
                ("endpoint".to_string(), Value::Str("http://c:4317".into())),
                ("sending_queue.num_consumers".to_string(), n),
            ]
            .into();
            let mut errors = Vec::new();
            (parse("outputs.o", &keys, &mut errors), errors)
        };
        let (s, errors) = parse_with(Value::Int(6));
        assert_eq!(errors, []);
        assert_eq!(s.num_consumers, 6);
        let (s, errors) = parse_with(Value::Int(0));
        assert_eq!(s.num_consumers, DEFAULT_NUM_CONSUMERS);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].key(), "outputs.o.sending_queue.num_consumers");
    }
}
