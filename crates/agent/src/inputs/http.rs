//! HTTP(S) GET for scraping inputs, with Elastic's settings: a bearer token
//! file (read at every request, so rotated service-account tokens work),
//! `ssl.certificate_authorities` and `ssl.verification_mode`
//! (`full`, `certificate`: chain but not the name, `none`).

use std::path::PathBuf;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use leasehold_policy::{Map, Value};

use super::settings::{Problem, unresolved};
use crate::units::size_text;

/// The largest body accepted from a scrape target unless the stream sets
/// `max_response_size`: the whole answer is held while it is parsed.
pub const MAX_BODY: usize = 64 * 1024 * 1024;

/// The most `max_response_size` may be set to.
pub const MAX_BODY_LIMIT: usize = 1024 * 1024 * 1024;

pub use crate::tls::Verification;

/// TLS and authentication settings of a scraping stream.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HttpSettings {
    /// `bearer_token_file`.
    pub bearer_token_file: Option<PathBuf>,
    /// `ssl.certificate_authorities`: PEM files trusted besides the system's.
    pub certificate_authorities: Vec<PathBuf>,
    /// `ssl.verification_mode`.
    pub verification: Verification,
    /// `max_response_size`: the largest answer read (default [`MAX_BODY`]).
    pub max_body: Option<usize>,
}

impl HttpSettings {
    /// Reads `bearer_token_file` and `ssl.*` from a stream's settings.
    pub fn read(map: &Map, out: &mut Vec<Problem>) -> HttpSettings {
        let mut s = HttpSettings::default();
        match map.get("bearer_token_file") {
            None | Some(Value::Null) => {}
            Some(Value::Str(p)) => s.bearer_token_file = Some(PathBuf::from(p)),
            Some(other) => out.push(Problem::new(
                "bearer_token_file",
                format!("must be a file path, found {}", other.type_name()),
            )),
        }
        match map.get("max_response_size") {
            None | Some(Value::Null) => {}
            Some(v) if unresolved(v) => {}
            Some(v) => match crate::units::parse_size(v).and_then(|n| usize::try_from(n).ok()) {
                Some(n) if (1024..=MAX_BODY_LIMIT).contains(&n) => s.max_body = Some(n),
                _ => out.push(
                    Problem::new(
                        "max_response_size",
                        format!(
                            "must be a size from 1 KiB to {}, found {}",
                            size_text(MAX_BODY_LIMIT as u64),
                            v.to_subst_text()
                        ),
                    )
                    .hint("e.g. `max_response_size: 256MiB`"),
                ),
            },
        }
        let ssl = match map.get("ssl") {
            None | Some(Value::Null) => return s,
            Some(Value::Map(m)) => m,
            Some(v) if unresolved(v) => return s,
            Some(other) => {
                out.push(Problem::new(
                    "ssl",
                    format!("must be a mapping, found {}", other.type_name()),
                ));
                return s;
            }
        };
        for (k, v) in ssl.iter() {
            match k.as_str() {
                "certificate_authorities" => match v {
                    Value::List(items) => {
                        for (i, item) in items.iter().enumerate() {
                            match item {
                                Value::Str(p) => s.certificate_authorities.push(PathBuf::from(p)),
                                other => out.push(Problem::new(
                                    format!("ssl.certificate_authorities.{i}"),
                                    format!("must be a file path, found {}", other.type_name()),
                                )),
                            }
                        }
                    }
                    Value::Str(p) => s.certificate_authorities.push(PathBuf::from(p)),
                    other => out.push(Problem::new(
                        "ssl.certificate_authorities",
                        format!(
                            "must be a list of PEM file paths, found {}",
                            other.type_name()
                        ),
                    )),
                },
                "verification_mode" => match v {
                    Value::Str(m) if Verification::from_name(m).is_some() => {
                        s.verification = Verification::from_name(m).unwrap_or_default()
                    }
                    v if unresolved(v) => {}
                    other => out.push(
                        Problem::new(
                            "ssl.verification_mode",
                            format!("unknown mode {}", other.to_subst_text()),
                        )
                        .hint("use full, certificate or none"),
                    ),
                },
                "enabled" => {}
                other => out.push(
                    Problem::new(format!("ssl.{other}"), "unknown setting").hint(
                        "known settings: certificate_authorities, verification_mode, enabled",
                    ),
                ),
            }
        }
        s
    }
}

/// A reusable client for one stream.
#[derive(Clone)]
pub struct Fetcher {
    client: crate::tls::HttpClient,
    bearer_token_file: Option<PathBuf>,
    timeout: Duration,
    max_body: usize,
}

/// What a GET returned.
#[derive(Debug)]
pub struct Fetched {
    /// The `Content-Type` header.
    pub content_type: Option<String>,
    /// The body as text (invalid UTF-8 replaced).
    pub body: String,
}

impl Fetcher {
    /// A client with `settings`; errors name the CA file that cannot be used.
    pub fn new(settings: &HttpSettings, timeout: Duration) -> Result<Fetcher, String> {
        let config =
            crate::tls::client_config(&settings.certificate_authorities, settings.verification)?;
        let https = crate::tls::https_connector(config, false);
        Ok(Fetcher {
            client: Client::builder(TokioExecutor::new()).build(https),
            bearer_token_file: settings.bearer_token_file.clone(),
            timeout,
            max_body: settings.max_body.unwrap_or(MAX_BODY),
        })
    }

    /// GETs `url` with `accept`, within the timeout.
    pub async fn get(&self, url: &str, accept: &str) -> Result<Fetched, String> {
        let uri: hyper::Uri = url.parse().map_err(|e| format!("{url}: not a URL: {e}"))?;
        let mut req = hyper::Request::get(uri).header(hyper::header::ACCEPT, accept);
        if let Some(path) = &self.bearer_token_file {
            let token = std::fs::read_to_string(path)
                .map_err(|e| format!("bearer_token_file {}: {e}", path.display()))?;
            req = req.header(
                hyper::header::AUTHORIZATION,
                format!("Bearer {}", token.trim()),
            );
        }
        let req = req
            .body(Full::default())
            .map_err(|e| format!("{url}: {e}"))?;
        let work = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| format!("{url}: {}", crate::tls::error_chain(&e)))?;
            let status = resp.status();
            let content_type = resp
                .headers()
                .get(hyper::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let body = Limited::new(resp.into_body(), self.max_body)
                .collect()
                .await
                .map_err(|e| {
                    if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() {
                        format!(
                            "{url}: the answer is larger than {}, the most a scrape reads (max_response_size); nothing of it is shipped: narrow it (kube-state-metrics --resources or --metric-allowlist), shard the target, or raise max_response_size",
                            size_text(self.max_body as u64)
                        )
                    } else {
                        format!("{url}: reading the body: {e}")
                    }
                })?
                .to_bytes();
            if !status.is_success() {
                let text = String::from_utf8_lossy(&body[..body.len().min(200)])
                    .trim()
                    .to_string();
                return Err(format!("{url}: HTTP {status}: {text}"));
            }
            // One copy of a large body at a time: the buffer becomes the
            // text when it is valid UTF-8 (the usual case).
            let body = match String::from_utf8(Vec::from(body)) {
                Ok(text) => text,
                Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
            };
            Ok(Fetched { content_type, body })
        };
        tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| format!("{url}: no answer within {:?}", self.timeout))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(yaml: &str) -> (HttpSettings, Vec<Problem>) {
        let mut out = Vec::new();
        (
            HttpSettings::read(&crate::inputs::settings::input_map(yaml), &mut out),
            out,
        )
    }

    #[test]
    fn max_response_size_takes_a_size_within_bounds_and_names_a_bad_one() {
        let (s, p) = read("{type: t}");
        assert!(p.is_empty() && s.max_body.is_none(), "{p:?}");
        let (s, p) = read("{type: t, max_response_size: 256MiB}");
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(s.max_body, Some(256 << 20));
        let (s, _) = read("{type: t, max_response_size: 4096}");
        assert_eq!(s.max_body, Some(4096));
        for bad in ["100", "2GiB", "lots", "[1]"] {
            let (s, p) = read(&format!("{{type: t, max_response_size: {bad}}}"));
            assert!(s.max_body.is_none(), "{bad}");
            assert_eq!(p.len(), 1, "{bad}: {p:?}");
            assert_eq!(p[0].path, ["max_response_size"], "{bad}");
            assert!(p[0].message.contains("from 1 KiB to 1 GiB"), "{p:?}");
        }
    }
}
