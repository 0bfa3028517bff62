//! Real destinations for the agent's outputs: OpenSearch, Elasticsearch 7
//! and an OpenTelemetry Collector, each a process on loopback started and
//! stopped through `sinks/up` and `sinks/down`, the scripts a user runs by
//! hand (they fetch and cache the servers on first use).
//!
//! A [`TestSink`] stops its server when dropped; a watchdog also stops it
//! if the test process dies without dropping it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use serde_json::Value;

/// Bound of one request to a sink.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Which server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkKind {
    /// OpenSearch 2.19.6: data streams.
    OpenSearch,
    /// Elasticsearch 7.17.29 (OSS): no data streams.
    Elasticsearch7,
    /// OpenTelemetry Collector v0.165.0: OTLP gRPC and HTTP in, JSON lines
    /// out.
    OtelCollector,
}

impl SinkKind {
    /// The name `sinks/up` knows it by.
    pub fn name(self) -> &'static str {
        match self {
            SinkKind::OpenSearch => "opensearch",
            SinkKind::Elasticsearch7 => "es7",
            SinkKind::OtelCollector => "otelcol",
        }
    }
}

/// What `sinks/up` records in `DIR/NAME.json`.
#[derive(Debug, Clone, Deserialize)]
struct Info {
    pid: Option<u32>,
    #[serde(default)]
    http_port: u16,
    #[serde(default)]
    url: String,
    #[serde(default)]
    grpc_endpoint: String,
    #[serde(default)]
    http_endpoint: String,
    #[serde(default)]
    output: PathBuf,
}

/// A running sink. See the module documentation.
pub struct TestSink {
    kind: SinkKind,
    dir: PathBuf,
    info: Info,
    running: bool,
    watchdog: Option<(Child, ChildStdin)>,
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../sinks")
        .join(name)
}

impl TestSink {
    /// Starts `kind` with its state under `dir` and returns once it is
    /// ready. Blocks for seconds (a JVM starts), longer on a machine that
    /// has not fetched the server yet.
    pub fn start(kind: SinkKind, dir: &Path) -> Result<TestSink> {
        let mut s = TestSink {
            kind,
            dir: dir.to_path_buf(),
            info: Info {
                pid: None,
                http_port: 0,
                url: String::new(),
                grpc_endpoint: String::new(),
                http_endpoint: String::new(),
                output: PathBuf::new(),
            },
            running: false,
            watchdog: None,
        };
        s.up()?;
        s.watchdog = Some(spawn_watchdog(kind, dir)?);
        Ok(s)
    }

    fn up(&mut self) -> Result<()> {
        let out = Command::new(script("up"))
            .arg(self.kind.name())
            .arg("--dir")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .output()
            .context("running sinks/up")?;
        if !out.status.success() {
            bail!(
                "sinks/up {} failed ({}):\n{}",
                self.kind.name(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let text = std::fs::read_to_string(self.dir.join(format!("{}.json", self.kind.name())))?;
        self.info = serde_json::from_str(&text)?;
        self.running = true;
        Ok(())
    }

    /// Stops the server (SIGTERM); its data and ports are kept for
    /// [`TestSink::start_again`].
    pub fn stop(&mut self) -> Result<()> {
        let out = Command::new(script("down"))
            .arg(self.kind.name())
            .arg("--dir")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .output()
            .context("running sinks/down")?;
        if !out.status.success() {
            bail!(
                "sinks/down failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        self.running = false;
        Ok(())
    }

    /// Starts the server again on the same address with the same data.
    pub fn start_again(&mut self) -> Result<()> {
        if self.running {
            bail!("{} is running", self.kind.name());
        }
        self.up()
    }

    /// The process id of the server now.
    pub fn pid(&self) -> Option<u32> {
        self.info.pid
    }

    /// OpenSearch/Elasticsearch: `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.info.url
    }

    /// Collector: `127.0.0.1:PORT` of the OTLP/gRPC receiver.
    pub fn grpc_endpoint(&self) -> &str {
        &self.info.grpc_endpoint
    }

    /// Collector: `http://127.0.0.1:PORT` of the OTLP/HTTP receiver.
    pub fn http_endpoint(&self) -> &str {
        &self.info.http_endpoint
    }

    /// Collector: the file exporter's JSON lines.
    pub fn output_path(&self) -> &Path {
        &self.info.output
    }

    /// Collector: every line the file exporter wrote, parsed (a line being
    /// written is left for the next read).
    pub fn read_output(&self) -> Result<Vec<Value>> {
        let text = match std::fs::read_to_string(&self.info.output) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        Ok(text
            .split_inclusive('\n')
            .filter(|l| l.ends_with('\n') && !l.trim().is_empty())
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect())
    }

    /// GET `path`; the answer's JSON, whatever its status.
    pub fn get_json(&self, path: &str) -> Result<Value> {
        self.request("GET", path, None).map(|(_, v)| v)
    }

    /// POST `body` to `path`; fails on a status other than 2xx.
    pub fn post_json(&self, path: &str, body: &Value) -> Result<Value> {
        self.ok("POST", path, Some(body.to_string().as_bytes()))
    }

    /// PUT `body` to `path`; fails on a status other than 2xx.
    pub fn put_json(&self, path: &str, body: &Value) -> Result<Value> {
        self.ok("PUT", path, Some(body.to_string().as_bytes()))
    }

    /// POST an NDJSON `_bulk` body; the answer, whatever its status.
    pub fn bulk(&self, ndjson: &str) -> Result<(u16, Value)> {
        self.request("POST", "/_bulk", Some(ndjson.as_bytes()))
    }

    /// Makes what was indexed in `index` (a name or pattern) searchable.
    pub fn refresh(&self, index: &str) -> Result<()> {
        self.ok(
            "POST",
            &format!("/{index}/_refresh?ignore_unavailable=true&allow_no_indices=true"),
            None,
        )?;
        Ok(())
    }

    /// Documents in `index` after a refresh (0 if it does not exist).
    pub fn count(&self, index: &str) -> Result<u64> {
        self.refresh(index)?;
        let v = self.ok(
            "GET",
            &format!("/{index}/_count?ignore_unavailable=true&allow_no_indices=true"),
            None,
        )?;
        v["count"]
            .as_u64()
            .with_context(|| format!("unexpected _count answer: {v}"))
    }

    fn ok(&self, method: &str, path: &str, body: Option<&[u8]>) -> Result<Value> {
        let (status, v) = self.request(method, path, body)?;
        if !(200..300).contains(&status) {
            bail!("{method} {path}: HTTP {status}: {v}");
        }
        Ok(v)
    }

    /// One HTTP/1.0 request (no chunked answers, the connection closes).
    fn request(&self, method: &str, path: &str, body: Option<&[u8]>) -> Result<(u16, Value)> {
        let addr = format!("127.0.0.1:{}", self.info.http_port);
        let mut s = TcpStream::connect(&addr).with_context(|| format!("connecting to {addr}"))?;
        s.set_read_timeout(Some(REQUEST_TIMEOUT))?;
        s.set_write_timeout(Some(REQUEST_TIMEOUT))?;
        let body = body.unwrap_or_default();
        let ctype = if path.contains("_bulk") {
            "application/x-ndjson"
        } else {
            "application/json"
        };
        write!(
            s,
            "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )?;
        s.write_all(body)?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw)?;
        let text = String::from_utf8_lossy(&raw);
        let (head, rest) = text
            .split_once("\r\n\r\n")
            .with_context(|| format!("{method} {path}: no HTTP answer"))?;
        let status: u16 = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .with_context(|| format!("{method} {path}: bad status line"))?;
        let v = serde_json::from_str(rest).unwrap_or(Value::String(rest.to_string()));
        Ok((status, v))
    }
}

impl Drop for TestSink {
    fn drop(&mut self) {
        if self.running {
            let _ = self.stop();
        }
        if let Some((mut child, stdin)) = self.watchdog.take() {
            drop(stdin);
            let _ = child.wait();
        }
    }
}

/// A shell that runs `sinks/down` once this process closes its stdin: at
/// drop, or when the test process dies.
fn spawn_watchdog(kind: SinkKind, dir: &Path) -> Result<(Child, ChildStdin)> {
    use std::os::unix::process::CommandExt;
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("read _ignored; \"$0\" \"$1\" --dir \"$2\" >/dev/null 2>&1")
        .arg(script("down"))
        .arg(kind.name())
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .context("starting the sink watchdog")?;
    let stdin = child.stdin.take().context("watchdog stdin")?;
    Ok((child, stdin))
}
