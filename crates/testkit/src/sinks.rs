//! Real destinations for the agent's outputs: OpenSearch, Elasticsearch 7
//! and an OpenTelemetry Collector, each a process on loopback started and
//! stopped through `sinks/up` and `sinks/down`, the scripts a user runs by
//! hand (they fetch and cache the servers on first use).
//!
//! ```no_run
//! # fn demo() -> anyhow::Result<()> {
//! use leasehold_testkit::sinks::{SinkKind, TestSink};
//! let dir = tempfile::tempdir()?;
//! let mut sink = TestSink::start(SinkKind::OpenSearch, dir.path())?;
//! // ... point an output at sink.url() ...
//! sink.stop()?;
//! sink.start_again()?; // same address, same data
//! assert_eq!(sink.count("logs-*")?, 0);
//! # Ok(()) }
//! ```
//!
//! A [`TestSink`] stops its server when dropped; a watchdog also stops it
//! if the test process dies without dropping it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde::Deserialize;
use serde_json::{Value, json};

/// Bound of one request to a sink, from connecting to the last byte.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound of connecting to a sink.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Documents per page of [`TestSink::search_ids`].
const PAGE: usize = 1000;
/// Bound of the wait for an index's primary shards to start (a read
/// refused as unavailable waits this long before it is made again).
const SHARDS_WITHIN: Duration = Duration::from_secs(20);

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
#[derive(Debug, Clone, Default, Deserialize)]
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
    /// Node settings (`KEY=VALUE`) given at every start.
    settings: Vec<String>,
    info: Info,
    running: bool,
    watchdog: Option<(Child, ChildStdin)>,
}

fn sinks_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sinks")
}

fn script(name: &str) -> PathBuf {
    sinks_dir().join(name)
}

impl TestSink {
    /// Starts `kind` with its state under `dir` (`dir/NAME` and
    /// `dir/NAME.json`) and returns once it is ready. Blocks for seconds (a
    /// JVM starts), minutes on a machine that has not fetched the server
    /// yet.
    pub fn start(kind: SinkKind, dir: &Path) -> Result<TestSink> {
        Self::start_with(kind, dir, &[])
    }

    /// [`TestSink::start`] with node settings of OpenSearch or
    /// Elasticsearch (`("http.max_content_length", "16kb")`), kept for
    /// [`TestSink::start_again`].
    pub fn start_with(kind: SinkKind, dir: &Path, settings: &[(&str, &str)]) -> Result<TestSink> {
        let mut s = TestSink {
            kind,
            dir: dir.to_path_buf(),
            settings: settings.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            info: Info::default(),
            running: false,
            watchdog: Some(spawn_watchdog(kind, dir)?),
        };
        s.up()?;
        Ok(s)
    }

    fn up(&mut self) -> Result<()> {
        let out = Command::new(script("up"))
            .arg(self.kind.name())
            .arg("--dir")
            .arg(&self.dir)
            .args(self.settings.iter().flat_map(|s| ["--setting", s.as_str()]))
            .stdin(Stdio::null())
            .output()
            .context("running sinks/up")?;
        let said = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            bail!(
                "sinks/up {} --dir {} failed ({}):\n{said}",
                self.kind.name(),
                self.dir.display(),
                out.status
            );
        }
        eprint!("{said}");
        let path = self.dir.join(format!("{}.json", self.kind.name()));
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        self.info =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        self.running = true;
        Ok(())
    }

    /// Stops the server (SIGTERM, SIGKILL after 20 s); its data and ports
    /// are kept for [`TestSink::start_again`].
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
                "sinks/down {} failed ({}):\n{}",
                self.kind.name(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        self.running = false;
        self.info.pid = None;
        Ok(())
    }

    /// Starts the stopped server again on the same address with the same
    /// data.
    pub fn start_again(&mut self) -> Result<()> {
        if self.running {
            bail!("{} is running", self.kind.name());
        }
        self.up()
    }

    /// Which server this is.
    pub fn kind(&self) -> SinkKind {
        self.kind
    }

    /// The directory given to [`TestSink::start`].
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether it was started and not stopped since.
    pub fn is_running(&self) -> bool {
        self.running
    }

    /// The process id of the server, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.info.pid
    }

    /// OpenSearch/Elasticsearch: `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.info.url
    }

    /// The HTTP port: of the REST API, or of the Collector's OTLP/HTTP
    /// receiver.
    pub fn http_port(&self) -> u16 {
        self.info.http_port
    }

    /// Collector: `127.0.0.1:PORT` of the OTLP/gRPC receiver.
    pub fn grpc_endpoint(&self) -> &str {
        &self.info.grpc_endpoint
    }

    /// Collector: `http://127.0.0.1:PORT` of the OTLP/HTTP receiver.
    pub fn http_endpoint(&self) -> &str {
        &self.info.http_endpoint
    }

    /// Collector: the file exporter's JSON lines (written as batches
    /// arrive, appended to after a restart).
    pub fn output_path(&self) -> &Path {
        &self.info.output
    }

    /// Collector: every line the file exporter wrote, parsed (one OTLP
    /// JSON export request each; a line being written is left for the next
    /// read). Empty before the first line.
    pub fn read_output(&self) -> Result<Vec<Value>> {
        let text = match std::fs::read_to_string(&self.info.output) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(e).with_context(|| format!("reading {}", self.info.output.display()));
            }
        };
        text.split_inclusive('\n')
            .filter(|l| l.ends_with('\n') && !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).with_context(|| format!("a line of the output: {l}")))
            .collect()
    }

    /// GET `path`; fails on a status other than 2xx.
    pub fn get_json(&self, path: &str) -> Result<Value> {
        self.ok("GET", path, None)
    }

    /// POST `body` to `path`; fails on a status other than 2xx.
    pub fn post_json(&self, path: &str, body: &Value) -> Result<Value> {
        self.ok("POST", path, Some(body.to_string().as_bytes()))
    }

    /// PUT `body` to `path`; fails on a status other than 2xx.
    pub fn put_json(&self, path: &str, body: &Value) -> Result<Value> {
        self.ok("PUT", path, Some(body.to_string().as_bytes()))
    }

    /// POST an NDJSON `_bulk` body (a final newline is added if missing);
    /// the status and answer, whatever the status (per-item results, 409
    /// among them, are in `items`).
    pub fn bulk(&self, ndjson: &str) -> Result<(u16, Value)> {
        let mut body = ndjson.to_owned();
        if !body.ends_with('\n') {
            body.push('\n');
        }
        self.request("POST", "/_bulk", Some(body.as_bytes()))
    }

    /// Makes what was indexed in `index` (a name, pattern or list) visible
    /// to searches. Nothing to refresh is not an error.
    pub fn refresh(&self, index: &str) -> Result<()> {
        self.ok(
            "POST",
            &format!("/{index}/_refresh?ignore_unavailable=true&allow_no_indices=true"),
            None,
        )?;
        Ok(())
    }

    /// Documents in `index` after a refresh (0 if nothing matches).
    pub fn count(&self, index: &str) -> Result<u64> {
        self.refresh(index)?;
        let v = self.read(
            "GET",
            &format!("/{index}/_count?ignore_unavailable=true&allow_no_indices=true"),
            None,
            index,
        )?;
        v["count"]
            .as_u64()
            .with_context(|| format!("unexpected _count answer: {v}"))
    }

    /// The `_id` of every document in `index` after a refresh, in no
    /// particular order (a scroll, so any number of them).
    pub fn search_ids(&self, index: &str) -> Result<Vec<String>> {
        self.refresh(index)?;
        let query =
            json!({"size": PAGE, "_source": false, "sort": ["_doc"], "query": {"match_all": {}}});
        let mut page = self.read(
            "POST",
            &format!("/{index}/_search?scroll=1m&ignore_unavailable=true&allow_no_indices=true"),
            Some(query.to_string().as_bytes()),
            index,
        )?;
        let mut ids = Vec::new();
        let mut scroll_id: Option<String>;
        loop {
            scroll_id = page["_scroll_id"].as_str().map(str::to_owned);
            let hits = page["hits"]["hits"]
                .as_array()
                .with_context(|| format!("unexpected _search answer: {page}"))?;
            if hits.is_empty() {
                break;
            }
            for h in hits {
                let id = h["_id"]
                    .as_str()
                    .with_context(|| format!("a hit without _id: {h}"))?;
                ids.push(id.to_owned());
            }
            let Some(sid) = &scroll_id else { break };
            page = self.post_json(
                "/_search/scroll",
                &json!({"scroll": "1m", "scroll_id": sid}),
            )?;
        }
        if let Some(sid) = scroll_id {
            let body = json!({"scroll_id": [sid]}).to_string();
            let _ = self.request("DELETE", "/_search/scroll", Some(body.as_bytes()));
        }
        Ok(ids)
    }

    /// The server's distribution (`opensearch` or `elasticsearch`) and
    /// version number, from `GET /`.
    pub fn version(&self) -> Result<(String, String)> {
        let v = self.get_json("/")?;
        let number = v["version"]["number"]
            .as_str()
            .with_context(|| format!("unexpected answer to GET /: {v}"))?;
        let distribution = v["version"]["distribution"]
            .as_str()
            .unwrap_or("elasticsearch");
        Ok((distribution.to_owned(), number.to_owned()))
    }

    /// `_search` of `index` (a name, pattern or list) with `query`; an
    /// index that does not exist is no error (no hits). Without a refresh:
    /// call [`TestSink::refresh`] first to see the latest writes.
    pub fn search(&self, index: &str, query: &Value) -> Result<Value> {
        self.read(
            "POST",
            &format!("/{index}/_search?ignore_unavailable=true&allow_no_indices=true"),
            Some(query.to_string().as_bytes()),
            index,
        )
    }

    /// A read of `index` that waits out shards not yet started. An index
    /// just created by a write, or recovering after a restart, refuses
    /// searches with 503 ("all shards failed") until its primary shards
    /// start; such a read waits for the index's health to reach yellow and
    /// is made once more.
    ///
    /// Yellow can come a moment before a shard that just recovered answers
    /// searches, so the read is made again after each wait, until it is
    /// answered or [`SHARDS_WITHIN`] has passed (at most 50 tries).
    fn read(&self, method: &str, path: &str, body: Option<&[u8]>, index: &str) -> Result<Value> {
        let deadline = std::time::Instant::now() + SHARDS_WITHIN;
        let mut tries = 0;
        loop {
            let (status, v) = self.request(method, path, body)?;
            if status != 503 {
                return Self::checked(method, path, status, v);
            }
            tries += 1;
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() || tries >= 50 {
                bail!("{method} {path}: HTTP 503 for {SHARDS_WITHIN:?} ({tries} tries): {v}");
            }
            let health = format!(
                "/_cluster/health/{index}?wait_for_status=yellow&timeout={}ms",
                left.as_millis().max(1)
            );
            let (health_status, h) = self.request("GET", &health, None)?;
            if health_status != 200 {
                bail!(
                    "{method} {path}: HTTP 503: {v}; and {index} did not reach yellow within {SHARDS_WITHIN:?}: HTTP {health_status}: {h}"
                );
            }
            // Yellow, yet refused: the shard is finishing its recovery.
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    fn checked(method: &str, path: &str, status: u16, v: Value) -> Result<Value> {
        if !(200..300).contains(&status) {
            bail!("{method} {path}: HTTP {status}: {v}");
        }
        Ok(v)
    }

    fn ok(&self, method: &str, path: &str, body: Option<&[u8]>) -> Result<Value> {
        let (status, v) = self.request(method, path, body)?;
        Self::checked(method, path, status, v)
    }

    /// One request to the REST API (OpenSearch/Elasticsearch) or the
    /// Collector's HTTP port: the status and the answer as JSON (a string
    /// if it is not JSON, null if empty), whatever the status.
    pub fn request(&self, method: &str, path: &str, body: Option<&[u8]>) -> Result<(u16, Value)> {
        if self.info.http_port == 0 {
            bail!("{} has no HTTP port", self.kind.name());
        }
        let addr = SocketAddr::from(([127, 0, 0, 1], self.info.http_port));
        let ctype = if path.contains("_bulk") {
            "application/x-ndjson"
        } else {
            "application/json"
        };
        let (status, raw) = http(addr, method, path, ctype, body.unwrap_or_default())?;
        let v = if raw.iter().all(u8::is_ascii_whitespace) {
            Value::Null
        } else {
            serde_json::from_slice(&raw)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&raw).into_owned()))
        };
        Ok((status, v))
    }
}

impl Drop for TestSink {
    fn drop(&mut self) {
        let stopped = !self.running || self.stop().is_ok();
        if let Some((mut child, stdin)) = self.watchdog.take() {
            if stopped {
                // Nothing left for it to do.
                let _ = child.kill();
            }
            // Otherwise it runs sinks/down once its stdin closes.
            drop(stdin);
            let _ = child.wait();
        }
    }
}

/// One blocking HTTP/1.1 request with `Connection: close`; the status and
/// the body (chunked transfer decoded). Bounded by [`REQUEST_TIMEOUT`].
fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    ctype: &str,
    body: &[u8],
) -> Result<(u16, Vec<u8>)> {
    let what = format!("{method} http://{addr}{path}");
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    let mut conn = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
        .with_context(|| format!("{what}: connecting"))?;
    conn.set_write_timeout(Some(REQUEST_TIMEOUT))?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAccept: application/json\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes())
        .and_then(|()| conn.write_all(body))
        .with_context(|| format!("{what}: sending"))?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            bail!("{what}: no complete answer within {REQUEST_TIMEOUT:?}");
        }
        conn.set_read_timeout(Some(left))?;
        match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => reply.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).with_context(|| format!("{what}: reading the answer")),
        }
    }
    let split = reply
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow!("{what}: no HTTP answer ({} bytes)", reply.len()))?;
    let head = String::from_utf8_lossy(&reply[..split]).into_owned();
    let rest = &reply[split + 4..];
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow!("{what}: bad status line in {head:?}"))?;
    let mut chunked = false;
    let mut length = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        } else if name.eq_ignore_ascii_case("content-length") {
            length = value.parse::<usize>().ok();
        }
    }
    let body = if chunked {
        dechunk(rest).with_context(|| format!("{what}: bad chunked answer"))?
    } else if let Some(n) = length {
        if rest.len() < n {
            bail!(
                "{what}: {} of {n} bytes before the connection closed",
                rest.len()
            );
        }
        rest[..n].to_vec()
    } else {
        rest.to_vec()
    };
    Ok((status, body))
}

/// Decodes a chunked transfer coding (trailers ignored).
fn dechunk(mut data: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| anyhow!("no chunk size line"))?;
        let line = std::str::from_utf8(&data[..eol])?;
        let size = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
            .with_context(|| format!("chunk size {line:?}"))?;
        data = &data[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if data.len() < size + 2 {
            bail!("a chunk of {size} bytes is cut short");
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

/// A shell that runs `sinks/down` once this process closes its stdin: at
/// drop, or when the test process dies. Its own process group keeps a
/// terminal's Ctrl-C from killing it before it has stopped the sink.
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

#[cfg(test)]
mod tests {
    use super::dechunk;

    #[test]
    fn dechunks_a_chunked_body() {
        let raw = b"4\r\n{\"a\"\r\n3;x=y\r\n:1}\r\n0\r\n\r\n";
        assert_eq!(dechunk(raw).unwrap(), b"{\"a\":1}");
        assert!(dechunk(b"5\r\nab").is_err());
    }
}
