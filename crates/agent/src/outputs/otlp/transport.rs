//! Export requests over OTLP/gRPC (`super::grpc`) or OTLP/HTTP (protobuf bodies),
//! judged by the outputs' one retry rule (`outputs::retry`), honouring
//! `Retry-After`.

use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use prost::Message;

pub use super::export_error::ExportError;
use super::grpc::GrpcClient;
use super::settings::{OtlpSettings, Protocol};
use crate::outputs::retry;

/// Largest answer read.
const MAX_ANSWER: usize = 4 * 1024 * 1024;

/// The gRPC methods of exports.
const LOGS_EXPORT: &str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";
const METRICS_EXPORT: &str = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";

/// How one output sends. Cheap to clone: clones share their connections,
/// so several exports can be in flight.
#[derive(Clone)]
pub enum Transport {
    /// OTLP/gRPC.
    Grpc(GrpcClient),
    /// OTLP/HTTP.
    Http(HttpExporter),
}

impl Transport {
    /// A transport for `settings`; connections are made on first use.
    /// Must be called within a tokio runtime.
    pub fn new(s: &OtlpSettings) -> Result<Transport, String> {
        let cas: Vec<_> = s.ca_file.iter().cloned().collect();
        let tls = crate::tls::client_config(&cas, s.verification)
            .map_err(|e| e.replace("ssl.certificate_authorities", "tls.ca_file"))?;
        match s.protocol {
            Protocol::Grpc => {
                // The connector offers h2 by ALPN; plain connections speak
                // HTTP/2 from the start.
                let https = crate::tls::https_connector(tls, true);
                s.endpoint
                    .parse::<hyper::Uri>()
                    .map_err(|e| format!("endpoint {}: {e}", s.endpoint))?;
                Ok(Transport::Grpc(GrpcClient::new(
                    https,
                    &s.endpoint,
                    &s.headers,
                    s.gzip,
                    s.timeout,
                )))
            }
            Protocol::HttpProtobuf => {
                let https = crate::tls::https_connector(tls, false);
                Ok(Transport::Http(HttpExporter {
                    client: HttpClient::builder(TokioExecutor::new()).build(https),
                    endpoint: s.endpoint.clone(),
                    headers: s.headers.clone(),
                    gzip: s.gzip,
                    timeout: s.timeout,
                }))
            }
        }
    }

    /// Exports an encoded `ExportLogsServiceRequest`; returns how many
    /// log records the receiver rejected (partial success).
    pub async fn logs(&self, req: Vec<u8>) -> Result<u64, ExportError> {
        let partial = match self {
            Transport::Grpc(g) => {
                g.unary::<ExportLogsServiceResponse>(LOGS_EXPORT, req)
                    .await?
                    .partial_success
            }
            Transport::Http(h) => {
                let url = format!("{}/v1/logs", h.endpoint);
                h.export_encoded::<ExportLogsServiceResponse>(&url, req)
                    .await?
                    .partial_success
            }
        };
        Ok(partial.map_or(0, |p| p.rejected_log_records.max(0) as u64))
    }

    /// Exports data points; returns how many the receiver rejected.
    pub async fn metrics(&self, req: ExportMetricsServiceRequest) -> Result<u64, ExportError> {
        let partial = match self {
            Transport::Grpc(g) => {
                g.unary::<ExportMetricsServiceResponse>(METRICS_EXPORT, req.encode_to_vec())
                    .await?
                    .partial_success
            }
            Transport::Http(h) => {
                let url = format!("{}/v1/metrics", h.endpoint);
                h.export::<ExportMetricsServiceResponse>(&url, &req)
                    .await?
                    .partial_success
            }
        };
        Ok(partial.map_or(0, |p| p.rejected_data_points.max(0) as u64))
    }
}

/// OTLP/HTTP: protobuf bodies posted to `ENDPOINT/v1/{logs,metrics}`.
#[derive(Clone)]
pub struct HttpExporter {
    client: crate::tls::HttpClient,
    endpoint: String,
    headers: Vec<(String, String)>,
    gzip: bool,
    timeout: Duration,
}

impl HttpExporter {
    /// Posts `req` to `url` and decodes the answer (an empty answer is a
    /// success with no partial-success detail).
    async fn export<A: Message + Default>(
        &self,
        url: &str,
        req: &impl Message,
    ) -> Result<A, ExportError> {
        self.export_encoded(url, req.encode_to_vec()).await
    }

    /// [`HttpExporter::export`] of a request already encoded.
    async fn export_encoded<A: Message + Default>(
        &self,
        url: &str,
        req: Vec<u8>,
    ) -> Result<A, ExportError> {
        let body = post(
            &self.client,
            url,
            req,
            &self.headers,
            self.gzip,
            self.timeout,
        )
        .await?;
        Ok(A::decode(body).unwrap_or_default())
    }
}

async fn post(
    client: &crate::tls::HttpClient,
    url: &str,
    body: Vec<u8>,
    headers: &[(String, String)],
    gzip: bool,
    timeout: Duration,
) -> Result<Bytes, ExportError> {
    let failed = |message: String| ExportError {
        retryable: true,
        retry_after: None,
        message,
    };
    let mut req = hyper::Request::post(url)
        .header(hyper::header::CONTENT_TYPE, "application/x-protobuf")
        .header(
            hyper::header::USER_AGENT,
            concat!("leasehold/", env!("CARGO_PKG_VERSION")),
        );
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let body = if gzip {
        req = req.header(hyper::header::CONTENT_ENCODING, "gzip");
        crate::outputs::wire::gzip_after(Vec::with_capacity(body.len() / 4), &body, 1)
            .map_err(|e| failed(format!("gzip: {e}")))?
    } else {
        body
    };
    let req = req
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| failed(format!("{url}: {e}")))?;
    let work = async {
        let resp = client
            .request(req)
            .await
            .map_err(|e| failed(format!("{url}: {}", crate::tls::error_chain(&e))))?;
        let status = resp.status();
        let retry_after = resp
            .headers()
            .get(hyper::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let answer = Limited::new(resp.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| failed(format!("{url}: reading the answer: {e}")))?
            .to_bytes();
        if status.is_success() {
            return Ok(answer);
        }
        // Only a malformed request (400) is dropped; a wrong path, an
        // expired token or a missing privilege keeps the data.
        let retryable = retry::http_status(status.as_u16()) == retry::Refusal::Retry;
        let text = String::from_utf8_lossy(&answer[..answer.len().min(200)])
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        Err(ExportError {
            retryable,
            retry_after,
            message: format!("{url}: HTTP {status}: {text}"),
        })
    };
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| failed(format!("{url}: no answer within {timeout:?}")))?
}
