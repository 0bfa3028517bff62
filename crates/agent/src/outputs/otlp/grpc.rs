//! OTLP/gRPC export calls: gRPC unary requests over hyper's HTTP/2 client.
//!
//! A unary call is one HTTP/2 POST to `/<service>/<method>` whose body is
//! one length-prefixed message (a compressed flag, a 4-byte big-endian
//! length, the protobuf bytes) and whose answer is another, followed by the
//! `grpc-status` trailer (or, in a trailers-only answer, header). The call
//! is this thin so the message is compressed here, at the level the
//! outputs use (gzip level 1, as the `elasticsearch` output's default):
//! tonic compresses at level 6, which cost this output a fifth of its CPU.

use std::io::Read as _;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::header::{CONTENT_TYPE, HeaderName, HeaderValue, USER_AGENT};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use prost::Message;

use super::export_error::ExportError;
use crate::outputs::retry;

/// Largest answer read.
const MAX_ANSWER: usize = 4 * 1024 * 1024;

/// gRPC's status codes by number, for messages.
const CODE_NAMES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// One output's gRPC client; clones share its HTTP/2 connection.
#[derive(Clone)]
pub struct GrpcClient {
    client: crate::tls::HttpClient,
    /// `scheme://host:port`.
    endpoint: String,
    /// Request metadata (lower-case names), checked once.
    metadata: Vec<(HeaderName, HeaderValue)>,
    gzip: bool,
    timeout: Duration,
}

impl GrpcClient {
    /// A client of `endpoint` over `connector` (which offers h2 by ALPN);
    /// metadata that is no valid header is left out, as before.
    pub fn new(
        connector: hyper_rustls::HttpsConnector<HttpConnector>,
        endpoint: &str,
        headers: &[(String, String)],
        gzip: bool,
        timeout: Duration,
    ) -> GrpcClient {
        let metadata = headers
            .iter()
            .filter_map(|(k, v)| {
                Some((
                    HeaderName::from_bytes(k.as_bytes()).ok()?,
                    HeaderValue::from_str(v).ok()?,
                ))
            })
            .collect();
        GrpcClient {
            client: HttpClient::builder(hyper_util::rt::TokioExecutor::new())
                .http2_only(true)
                .build(connector),
            endpoint: endpoint.trim_end_matches('/').to_string(),
            metadata,
            gzip,
            timeout,
        }
    }

    /// Calls `path` (`/package.Service/Method`) with the encoded message
    /// `req`; decodes the answer as `A`.
    pub async fn unary<A: Message + Default>(
        &self,
        path: &str,
        req: Vec<u8>,
    ) -> Result<A, ExportError> {
        let url = format!("{}{path}", self.endpoint);
        let failed = |message: String| ExportError {
            retryable: true,
            retry_after: None,
            message,
        };
        let body = frame(&req, self.gzip).map_err(|e| failed(format!("gzip: {e}")))?;
        let mut http = hyper::Request::post(&url)
            .header(CONTENT_TYPE, "application/grpc")
            .header("te", "trailers")
            .header("grpc-accept-encoding", "gzip")
            .header("grpc-timeout", timeout_value(self.timeout))
            .header(USER_AGENT, concat!("leasehold/", env!("CARGO_PKG_VERSION")));
        if self.gzip {
            http = http.header("grpc-encoding", "gzip");
        }
        for (k, v) in &self.metadata {
            http = http.header(k, v);
        }
        let http = http
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| failed(format!("{url}: {e}")))?;
        let work = async {
            let resp = self
                .client
                .request(http)
                .await
                .map_err(|e| failed(format!("{url}: {}", crate::tls::error_chain(&e))))?;
            let status = resp.status();
            let headers = resp.headers().clone();
            let collected = Limited::new(resp.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| failed(format!("{url}: reading the answer: {e}")))?;
            let trailers = collected.trailers().cloned();
            let data = collected.to_bytes();
            if !status.is_success() {
                // Not a gRPC answer (a proxy's, a wrong port's): gRPC
                // maps every such status to a code worth retrying.
                return Err(failed(format!("{url}: HTTP {status}, not a gRPC answer")));
            }
            let field = |name: &str| {
                trailers
                    .as_ref()
                    .and_then(|t| t.get(name))
                    .or_else(|| headers.get(name))
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string)
            };
            let code = field("grpc-status").and_then(|c| c.trim().parse::<u32>().ok());
            match code {
                Some(0) => {
                    let gzip = headers
                        .get("grpc-encoding")
                        .is_some_and(|e| e.as_bytes() == b"gzip");
                    unframe(&data, gzip).map_err(|e| failed(format!("{url}: the answer: {e}")))
                }
                Some(code) => {
                    let message = field("grpc-message")
                        .map(|m| percent_decode(&m))
                        .unwrap_or_default();
                    Err(ExportError {
                        retryable: retry::grpc_status(code) == retry::Refusal::Retry,
                        retry_after: None,
                        message: format!("gRPC {}: {message}", code_name(code)),
                    })
                }
                None => Err(failed(format!("{url}: an answer without grpc-status"))),
            }
        };
        tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| failed(format!("{url}: no answer within {:?}", self.timeout)))?
    }
}

/// The name of a gRPC status code.
pub fn code_name(code: u32) -> String {
    CODE_NAMES
        .get(code as usize)
        .map_or_else(|| format!("code {code}"), |n| (*n).to_string())
}

/// One length-prefixed message: gzip-compressed (level 1) when `gzip`.
fn frame(msg: &[u8], gzip: bool) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(5 + if gzip { msg.len() / 4 } else { msg.len() });
    out.push(u8::from(gzip));
    out.extend_from_slice(&[0; 4]);
    if gzip {
        out = crate::outputs::wire::gzip_after(out, msg, 1)?;
    } else {
        out.extend_from_slice(msg);
    }
    let len =
        u32::try_from(out.len() - 5).map_err(|_| std::io::Error::other("a message over 4 GiB"))?;
    out[1..5].copy_from_slice(&len.to_be_bytes());
    Ok(out)
}

/// The message of an answer's body (none: the default message).
fn unframe<A: Message + Default>(data: &[u8], gzip: bool) -> Result<A, String> {
    if data.is_empty() {
        return Ok(A::default());
    }
    let [flag, a, b, c, d, rest @ ..] = data else {
        return Err(format!("{} bytes, no message", data.len()));
    };
    let len = u32::from_be_bytes([*a, *b, *c, *d]) as usize;
    let msg = rest.get(..len).ok_or("a message cut short")?;
    let decoded = match (flag, gzip) {
        (0, _) => A::decode(msg),
        (1, true) => {
            let mut plain = Vec::new();
            flate2::read::GzDecoder::new(msg)
                .take(MAX_ANSWER as u64)
                .read_to_end(&mut plain)
                .map_err(|e| format!("gunzip: {e}"))?;
            A::decode(plain.as_slice())
        }
        _ => return Err("a compressed message without grpc-encoding: gzip".into()),
    };
    decoded.map_err(|e| format!("undecodable: {e}"))
}

/// `grpc-timeout`: at most 8 digits and a unit.
fn timeout_value(t: Duration) -> String {
    let ms = t.as_millis().clamp(1, 99_999_999);
    format!("{ms}m")
}

/// `grpc-message` is percent-encoded.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::collector::logs::v1::{
        ExportLogsPartialSuccess, ExportLogsServiceResponse,
    };

    use super::*;

    #[test]
    fn a_message_is_framed_and_unframed_with_or_without_gzip() {
        let answer = ExportLogsServiceResponse {
            partial_success: Some(ExportLogsPartialSuccess {
                rejected_log_records: 3,
                error_message: "too old".into(),
            }),
        };
        let bytes = answer.encode_to_vec();
        for gzip in [false, true] {
            let framed = frame(&bytes, gzip).unwrap();
            assert_eq!(framed[0], u8::from(gzip));
            let len = u32::from_be_bytes(framed[1..5].try_into().unwrap()) as usize;
            assert_eq!(len, framed.len() - 5);
            let back: ExportLogsServiceResponse = unframe(&framed, gzip).unwrap();
            assert_eq!(back, answer);
        }
        let empty: ExportLogsServiceResponse = unframe(&[], false).unwrap();
        assert_eq!(empty, ExportLogsServiceResponse::default());
        assert!(unframe::<ExportLogsServiceResponse>(&[0, 0, 0, 0, 9, 1], false).is_err());
        let gz = frame(&bytes, true).unwrap();
        assert!(unframe::<ExportLogsServiceResponse>(&gz, false).is_err());
    }

    #[test]
    fn statuses_timeouts_and_messages_read_as_grpc_writes_them() {
        assert_eq!(code_name(3), "INVALID_ARGUMENT");
        assert_eq!(code_name(16), "UNAUTHENTICATED");
        assert_eq!(code_name(99), "code 99");
        assert_eq!(timeout_value(Duration::from_secs(10)), "10000m");
        assert_eq!(timeout_value(Duration::from_secs(1_000_000)), "99999999m");
        assert_eq!(percent_decode("bad%20token%3A %zz%"), "bad token: %zz%");
    }
}
