//! HTTP to an Elasticsearch or OpenSearch cluster: authentication, gzip,
//! failover across `hosts`, and what the server is (which decides between
//! data streams and plain indices).

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, StatusCode};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use super::settings::{ElasticsearchSettings, basic_token};

/// `_bulk`, its answer filtered to what is judged of it.
const BULK_PATH: &str = "/_bulk?filter_path=errors,items.*.status,items.*.error";
/// What is kept of an answer other than `_bulk`'s (the server's root, a
/// template), its strings cut ([`super::answer`]).
const MAX_ANSWER: usize = 1024 * 1024;

/// The data stream types templates are installed for on OpenSearch.
const STREAM_TYPES: [&str; 4] = ["logs", "metrics", "traces", "synthetics"];

/// How documents are stored on the server found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// `OpenSearch 2.19.6` or `Elasticsearch 7.17.29`.
    pub product: String,
    /// True when `{type}-{dataset}-{namespace}` are data streams; false
    /// when the server has none (Elasticsearch 7 without x-pack) and the
    /// same names are plain indices.
    pub data_streams: bool,
}

/// A request that got no HTTP answer, or an answer that is an error for
/// the whole request.
#[derive(Debug)]
pub enum RequestError {
    /// No host answered: connection refused, TLS failure, timeout.
    Unreachable(String),
    /// The server answered with a status that fails the whole request.
    Status {
        /// The HTTP status.
        status: StatusCode,
        /// What it said, shortened.
        text: String,
    },
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::Unreachable(why) => f.write_str(why),
            RequestError::Status { status, text } => write!(f, "HTTP {status}: {text}"),
        }
    }
}

/// The client of one output.
pub struct Client {
    http: crate::tls::HttpClient,
    settings: ElasticsearchSettings,
    /// The host tried first: the last one that answered.
    current: AtomicUsize,
    server: Mutex<Option<Server>>,
}

impl Client {
    /// A client for `settings`; errors name the CA file that cannot be used.
    pub fn new(settings: ElasticsearchSettings) -> Result<Client, String> {
        let tls = crate::tls::client_config_pinned(
            &settings.certificate_authorities,
            settings.verification,
            settings.ca_trusted_fingerprint,
        )?;
        let https = crate::tls::https_connector(tls, false);
        let http = HttpClient::builder(TokioExecutor::new())
            .pool_max_idle_per_host(settings.worker.max(1))
            .build(https);
        Ok(Client {
            http,
            settings,
            current: AtomicUsize::new(0),
            server: Mutex::new(None),
        })
    }

    /// The configured hosts, for messages.
    pub fn hosts(&self) -> String {
        self.settings.hosts.join(", ")
    }

    /// What the server is, asked once and again after it was unreachable.
    pub async fn server(&self) -> Result<Server, RequestError> {
        if let Some(s) = self.lock_server().clone() {
            return Ok(s);
        }
        let (status, body) = self.send(Method::GET, "/", None).await?;
        if !status.is_success() {
            return Err(status_error(status, &body, "/"));
        }
        let root: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let number = root["version"]["number"].as_str().unwrap_or("").to_string();
        let opensearch = root["version"]["distribution"].as_str() == Some("opensearch");
        let major: u32 = number
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(0);
        let server = if opensearch {
            self.install_templates().await;
            Server {
                product: format!("OpenSearch {number}"),
                data_streams: true,
            }
        } else {
            // Elasticsearch 8+ always has data streams (and built-in
            // templates for logs-*-* and metrics-*-*); 7.x only with
            // x-pack, which the API answers for.
            let data_streams = major >= 8 || {
                let (s, _) = self.send(Method::GET, "/_data_stream", None).await?;
                s.is_success()
            };
            Server {
                product: format!("Elasticsearch {number}"),
                data_streams,
            }
        };
        tracing::info!(
            hosts = %self.hosts(),
            server = %server.product,
            storage = if server.data_streams { "data streams" } else { "plain indices (the server has no data streams)" },
            "elasticsearch output connected",
        );
        *self.lock_server() = Some(server.clone());
        Ok(server)
    }

    /// Makes `{type}-*-*` data streams on OpenSearch, which ships no
    /// templates for them: one low-priority composable template per type,
    /// created only if absent so an operator's own template stays.
    async fn install_templates(&self) {
        for kind in STREAM_TYPES {
            let path = format!("/_index_template/leasehold-{kind}");
            if let Ok((s, _)) = self.send(Method::GET, &path, None).await
                && s.is_success()
            {
                continue;
            }
            let body = json!({
                "index_patterns": [format!("{kind}-*-*")],
                "data_stream": {},
                "priority": 1,
                "_meta": {"managed_by": "leasehold"},
            });
            let put = format!("{path}?create=true");
            match self
                .send(Method::PUT, &put, Some(body.to_string().into_bytes()))
                .await
            {
                Ok((s, _)) if s.is_success() => {
                    tracing::info!(template = %format!("leasehold-{kind}"), "created the index template for {kind}-*-* data streams");
                }
                Ok((s, body)) => tracing::warn!(
                    template = %format!("leasehold-{kind}"),
                    status = %s,
                    answer = %shorten(&body),
                    "could not create the index template for {kind}-*-* data streams; without one such names become plain indices",
                ),
                Err(e) => tracing::warn!(error = %e, "could not create an index template"),
            }
        }
    }

    /// Forgets what the server was (it is asked again on next use).
    pub fn forget_server(&self) {
        *self.lock_server() = None;
    }

    /// POSTs a `_bulk` body; returns the status and the answer. The
    /// answer is filtered by the server to what [`super::bulk::judge`]
    /// reads (`errors` and each item's `status` and `error`): for a
    /// request of 1,600 documents the unfiltered answer is about 300 KB
    /// the server must write and the agent parse, the filtered one 40 KB.
    /// At most [`super::answer::bulk_limit`] bytes of the answer to a
    /// request of `items` documents are kept.
    pub async fn bulk(
        &self,
        body: Vec<u8>,
        items: usize,
    ) -> Result<(StatusCode, Bytes), RequestError> {
        let limit = super::answer::bulk_limit(items);
        self.send_limited(Method::POST, BULK_PATH, Some(body), limit)
            .await
    }

    /// Sends one request, starting with the host that answered last and
    /// moving on to the next when a host cannot be reached.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Bytes), RequestError> {
        self.send_limited(method, path, body, MAX_ANSWER).await
    }

    /// [`Self::send`], keeping at most `limit` bytes of the answer.
    async fn send_limited(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        limit: usize,
    ) -> Result<(StatusCode, Bytes), RequestError> {
        let hosts = &self.settings.hosts;
        if hosts.is_empty() {
            return Err(RequestError::Unreachable("no hosts configured".into()));
        }
        let body = match body {
            Some(b) => Some(self.encode(b)?),
            None => None,
        };
        let first = self.current.load(Ordering::Relaxed) % hosts.len();
        let mut failures = Vec::new();
        for k in 0..hosts.len() {
            let i = (first + k) % hosts.len();
            let url = format!("{}{path}", hosts[i]);
            match self.send_to(&method, &url, body.clone(), limit).await {
                Ok(answer) => {
                    self.current.store(i, Ordering::Relaxed);
                    return Ok(answer);
                }
                Err(why) => failures.push(why),
            }
        }
        self.current
            .store((first + 1) % hosts.len(), Ordering::Relaxed);
        Err(RequestError::Unreachable(failures.join("; ")))
    }

    fn encode(&self, body: Vec<u8>) -> Result<(Bytes, bool), RequestError> {
        let level = self.settings.compression_level;
        if level == 0 {
            return Ok((Bytes::from(body), false));
        }
        crate::outputs::wire::gzip_after(Vec::with_capacity(body.len() / 4), &body, level)
            .map(|v| (Bytes::from(v), true))
            .map_err(|e| RequestError::Unreachable(format!("gzip: {e}")))
    }

    async fn send_to(
        &self,
        method: &Method,
        url: &str,
        body: Option<(Bytes, bool)>,
        limit: usize,
    ) -> Result<(StatusCode, Bytes), String> {
        let mut req = self.request(method, url)?;
        let payload = match body {
            Some((bytes, gzip)) => {
                let ndjson = url.ends_with(BULK_PATH);
                req = req.header(
                    hyper::header::CONTENT_TYPE,
                    if ndjson {
                        "application/x-ndjson"
                    } else {
                        "application/json"
                    },
                );
                if gzip {
                    req = req.header(hyper::header::CONTENT_ENCODING, "gzip");
                }
                bytes
            }
            None => Bytes::new(),
        };
        let req = req
            .body(Full::new(payload))
            .map_err(|e| format!("{url}: {e}"))?;
        let work = async {
            let resp = self
                .http
                .request(req)
                .await
                .map_err(|e| format!("{url}: {}", crate::tls::error_chain(&e)))?;
            let status = resp.status();
            // Read as it comes, never more than `limit` bytes held; the
            // rest of a longer answer is not read (the connection goes).
            let mut answer = super::answer::Shrink::new(limit);
            let mut body = resp.into_body();
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| format!("{url}: reading the answer: {e}"))?;
                if let Ok(data) = frame.into_data()
                    && !answer.feed(&data)
                {
                    break;
                }
            }
            let (kept, cut) = answer.finish();
            if cut {
                tracing::debug!(url, limit, "answer longer than what is kept of it: cut");
            }
            Ok((status, Bytes::from(kept)))
        };
        tokio::time::timeout(self.settings.timeout, work)
            .await
            .map_err(|_| format!("{url}: no answer within {:?}", self.settings.timeout))?
    }

    /// A request to `url` with the output's authentication and headers.
    fn request(&self, method: &Method, url: &str) -> Result<hyper::http::request::Builder, String> {
        let uri: hyper::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
        let mut req = hyper::Request::builder()
            .method(method.clone())
            .uri(uri)
            .header(hyper::header::ACCEPT, "application/json")
            .header(
                hyper::header::USER_AGENT,
                concat!("leasehold/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(user) = &self.settings.username {
            let pass = self.settings.password.as_deref().unwrap_or("");
            req = req.header(
                hyper::header::AUTHORIZATION,
                format!("Basic {}", basic_token(user, pass)),
            );
        } else if let Some(key) = &self.settings.api_key {
            req = req.header(hyper::header::AUTHORIZATION, format!("ApiKey {key}"));
        }
        for (k, v) in &self.settings.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        Ok(req)
    }

    fn lock_server(&self) -> std::sync::MutexGuard<'_, Option<Server>> {
        self.server.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// An error status of a whole request, with advice for the usual causes.
pub fn status_error(status: StatusCode, body: &[u8], path: &str) -> RequestError {
    let mut text = format!("{path}: {}", shorten(body));
    match status.as_u16() {
        401 => text.push_str(
            " (check username/password or api_key of the output)",
        ),
        403 => text.push_str(
            " (the user lacks a privilege: it needs create_doc and auto_configure, or create_index, on the target indices)",
        ),
        404 => text.push_str(" (check the hosts' `path` prefix)"),
        _ => {}
    }
    RequestError::Status { status, text }
}

/// The first 300 characters of an answer, on one line.
pub fn shorten(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(300)]);
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn credentials_from_a_host_url_are_sent_as_basic_authentication() {
        let mut errors = Vec::new();
        let keys = [(
            "hosts".to_string(),
            leasehold_policy::Value::Str("http://elastic:p%40ss%3Aw%C3%B6rd@127.0.0.1:9200".into()),
        )]
        .into_iter()
        .collect();
        let settings = super::super::settings::parse("outputs.es", &keys, &mut errors);
        assert_eq!(errors, []);
        let client = Client::new(settings).unwrap();
        let url = format!("{}/_bulk", client.settings.hosts[0]);
        assert_eq!(url, "http://127.0.0.1:9200/_bulk");
        let req = client
            .request(&Method::POST, &url)
            .unwrap()
            .body(())
            .unwrap();
        use base64::Engine as _;
        let want = base64::engine::general_purpose::STANDARD.encode("elastic:p@ss:w\u{f6}rd");
        assert_eq!(
            req.headers()[hyper::header::AUTHORIZATION],
            format!("Basic {want}").as_str()
        );
        assert_eq!(req.uri().authority().unwrap().as_str(), "127.0.0.1:9200");
        assert_eq!(client.hosts(), "http://127.0.0.1:9200");
    }
    /// A sink answering a one-document `_bulk` with 60 MiB (an error
    /// whose reason quotes megabytes): the answer is read as it comes and
    /// what is kept is bounded by what one item needs, yet still judged.
    #[tokio::test]
    async fn a_huge_bulk_answer_is_kept_only_to_what_its_items_need() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        const HUGE: usize = 60 * 1024 * 1024;
        let server = tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut req = vec![0u8; 64 * 1024];
            let _ = conn.read(&mut req).await;
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {HUGE}\r\n\r\n"
            );
            conn.write_all(head.as_bytes()).await.unwrap();
            let start: &[u8] = br#"{"errors":true,"items":[{"create":{"status":400,"error":{"type":"mapper_parsing_exception","reason":""#;
            let end: &[u8] = br#""}}}]}"#;
            conn.write_all(start).await.unwrap();
            let mut left = HUGE - start.len() - end.len();
            let chunk = vec![b'x'; 1024 * 1024];
            while left > 0 {
                let n = left.min(chunk.len());
                conn.write_all(&chunk[..n]).await.unwrap();
                left -= n;
            }
            conn.write_all(end).await.unwrap();
        });
        let mut errors = Vec::new();
        let keys = [(
            "hosts".to_string(),
            leasehold_policy::Value::Str(format!("http://127.0.0.1:{port}")),
        )]
        .into_iter()
        .collect();
        let settings = super::super::settings::parse("outputs.es", &keys, &mut errors);
        assert_eq!(errors, []);
        let client = Client::new(settings).unwrap();
        let (status, answer) = client.bulk(b"{}\n{}\n".to_vec(), 1).await.unwrap();
        assert_eq!(status, StatusCode::OK);
        assert!(
            answer.len() <= super::super::answer::bulk_limit(1),
            "{} bytes kept",
            answer.len()
        );
        let items = super::super::bulk::judge(&answer, 1).expect("judged");
        assert!(
            matches!(&items[0], super::super::bulk::ItemAnswer::Dropped { status: 400, reason } if reason.contains("mapper_parsing_exception")),
            "{items:?}"
        );
        server.await.unwrap();
    }
}
