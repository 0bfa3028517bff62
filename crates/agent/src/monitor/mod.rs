//! The agent's monitoring HTTP server.
//!
//! | path       | answer |
//! |------------|--------|
//! | `/livez`   | 200 `ok`, or 503 with one `name: reason` line per failing check; the runtime heartbeat is the check `runtime` |
//! | `/readyz`  | 200 `ok` when the [`StatusBoard`] says ready, else 503 with its reason |
//! | `/metrics` | the shared registry in the OpenMetrics text format |
//! | `/status`  | the board's [`StatusDoc`] as JSON |
//!
//! Only `GET` is served (405 otherwise); other paths are 404. `/status`
//! shows only what the runtime put on the board, which must never include
//! settings values or secrets.

pub mod liveness;
pub mod metrics;
pub mod status;

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::registry::Registry;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

pub use liveness::Heartbeat;
pub use metrics::AgentMetrics;
pub use status::{
    DroppedInput, ElectionEntry, ElectionState, ElectionStatus, InputState, InputStatus,
    InputsStatus, OutputSource, OutputStatus, PolicyStatus, StatusBoard, StatusDoc,
};

/// A liveness check: `Err` with a reason when the agent should be
/// restarted.
pub type LivenessCheck = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// The metrics registry the server encodes; metrics may be registered
/// before or after the server starts.
pub type SharedRegistry = Arc<Mutex<Registry>>;

/// The content type of `/metrics`.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The name the heartbeat's failure is reported under on `/livez`.
pub const HEARTBEAT_CHECK: &str = "runtime";

const TEXT: &str = "text/plain; charset=utf-8";
const JSON: &str = "application/json";
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Where the server listens and when the heartbeat counts as stale.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MonitorConfig {
    /// The listening address.
    pub addr: SocketAddr,
    /// `/livez` fails when the heartbeat's last tick is older than this.
    pub stale_after: Duration,
}

impl MonitorConfig {
    /// The default staleness threshold of the heartbeat.
    pub const DEFAULT_STALE_AFTER: Duration = Duration::from_secs(5);
}

impl Default for MonitorConfig {
    fn default() -> Self {
        MonitorConfig {
            addr: SocketAddr::from(([0, 0, 0, 0], 9090)),
            stale_after: Self::DEFAULT_STALE_AFTER,
        }
    }
}

/// The monitoring server: the status board, the metrics registry, the
/// liveness checks and the runtime heartbeat.
pub struct Monitor {
    board: StatusBoard,
    registry: SharedRegistry,
    checks: Mutex<Vec<(String, LivenessCheck)>>,
    heartbeat: Arc<Heartbeat>,
    stale_after: Duration,
    tick_every: Duration,
}

impl std::fmt::Debug for Monitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let checks: Vec<String> = self.checks().into_iter().map(|(n, _)| n).collect();
        f.debug_struct("Monitor")
            .field("checks", &checks)
            .field("stale_after", &self.stale_after)
            .field("tick_every", &self.tick_every)
            .finish_non_exhaustive()
    }
}

impl Monitor {
    /// A server for `board` and `registry`, with the default staleness
    /// threshold and no liveness checks.
    pub fn new(board: StatusBoard, registry: SharedRegistry) -> Monitor {
        Monitor {
            board,
            registry,
            checks: Mutex::new(Vec::new()),
            heartbeat: Arc::new(Heartbeat::new()),
            stale_after: MonitorConfig::DEFAULT_STALE_AFTER,
            tick_every: liveness::TICK_EVERY,
        }
    }

    /// Sets the heartbeat's staleness threshold.
    pub fn with_stale_after(mut self, stale_after: Duration) -> Monitor {
        self.stale_after = stale_after;
        self
    }

    /// Sets how often the heartbeat ticks.
    #[cfg(test)]
    fn with_tick_every(mut self, every: Duration) -> Monitor {
        self.tick_every = every;
        self
    }

    /// The status board.
    pub fn board(&self) -> &StatusBoard {
        &self.board
    }

    /// The runtime heartbeat.
    pub fn heartbeat(&self) -> &Arc<Heartbeat> {
        &self.heartbeat
    }

    fn checks(&self) -> Vec<(String, LivenessCheck)> {
        self.checks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds the liveness check `name`, replacing one of the same name.
    pub fn add_liveness_check(&self, name: impl Into<String>, check: LivenessCheck) {
        let name = name.into();
        let mut checks = self.checks.lock().unwrap_or_else(|p| p.into_inner());
        match checks.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = check,
            None => checks.push((name, check)),
        }
    }

    /// Removes the liveness check `name`, if present.
    pub fn remove_liveness_check(&self, name: &str) {
        self.checks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(n, _)| n != name);
    }

    /// Every failing liveness check as `(name, reason)`, the heartbeat
    /// first. A check that panics fails.
    pub fn liveness_failures(&self) -> Vec<(String, String)> {
        let mut failures = Vec::new();
        if let Err(reason) = self.heartbeat.check(self.stale_after) {
            failures.push((HEARTBEAT_CHECK.to_string(), reason));
        }
        for (name, check) in self.checks() {
            match catch_unwind(AssertUnwindSafe(|| check())) {
                Ok(Ok(())) => {}
                Ok(Err(reason)) => failures.push((name, reason)),
                Err(_) => failures.push((name, "the check panicked".into())),
            }
        }
        failures
    }

    /// Binds `addr` (port 0 picks a free port), then spawns the server and
    /// the heartbeat. Returns the bound address and the server's task,
    /// which ends once `shutdown` is cancelled and open connections have
    /// finished (or after a short grace period).
    pub async fn serve(
        self: Arc<Self>,
        addr: SocketAddr,
        shutdown: CancellationToken,
    ) -> io::Result<(SocketAddr, JoinHandle<()>)> {
        let listener = TcpListener::bind(addr).await.map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("monitoring server cannot listen on {addr}: {e}"),
            )
        })?;
        let local = listener.local_addr()?;
        self.heartbeat.tick();
        let heartbeat = self
            .heartbeat
            .clone()
            .spawn(self.tick_every, shutdown.clone());
        let task = tokio::spawn(self.accept_loop(listener, shutdown, heartbeat));
        Ok((local, task))
    }

    async fn accept_loop(
        self: Arc<Self>,
        listener: TcpListener,
        shutdown: CancellationToken,
        heartbeat: JoinHandle<()>,
    ) {
        let mut builder = http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT);
        let mut conns = JoinSet::new();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                Some(done) = conns.join_next(), if !conns.is_empty() => log_connection_end(done),
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        conns.spawn(self.clone().serve_connection(
                            builder.clone(),
                            stream,
                            shutdown.clone(),
                        ));
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "monitoring server: accept failed");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                    }
                },
            }
        }
        drop(listener);
        let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
            while let Some(done) = conns.join_next().await {
                log_connection_end(done);
            }
        })
        .await;
        if drained.is_err() {
            conns.abort_all();
        }
        let _ = heartbeat.await;
    }

    async fn serve_connection(
        self: Arc<Self>,
        builder: http1::Builder,
        stream: TcpStream,
        shutdown: CancellationToken,
    ) {
        let service = service_fn(move |req: Request<Incoming>| {
            let response = self.respond(&req);
            async move { Ok::<_, Infallible>(response) }
        });
        let mut conn = pin!(builder.serve_connection(TokioIo::new(stream), service));
        let result = tokio::select! {
            r = conn.as_mut() => r,
            () = shutdown.cancelled() => {
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        };
        if let Err(e) = result {
            tracing::debug!(error = %e, "monitoring server: connection ended with an error");
        }
    }

    fn respond<B>(&self, req: &Request<B>) -> Response<Full<Bytes>> {
        type Handler = fn(&Monitor) -> Response<Full<Bytes>>;
        let handler: Handler = match req.uri().path() {
            "/livez" => Monitor::livez,
            "/readyz" => Monitor::readyz,
            "/metrics" => Monitor::metrics,
            "/status" => Monitor::status,
            _ => return reply(StatusCode::NOT_FOUND, TEXT, "not found\n"),
        };
        if req.method() != Method::GET {
            let mut r = reply(StatusCode::METHOD_NOT_ALLOWED, TEXT, "method not allowed\n");
            r.headers_mut()
                .insert(ALLOW, HeaderValue::from_static("GET"));
            return r;
        }
        handler(self)
    }

    fn livez(&self) -> Response<Full<Bytes>> {
        let failures = self.liveness_failures();
        if failures.is_empty() {
            return reply(StatusCode::OK, TEXT, "ok\n");
        }
        let body: String = failures
            .iter()
            .map(|(name, reason)| format!("{name}: {}\n", one_line(reason)))
            .collect();
        reply(StatusCode::SERVICE_UNAVAILABLE, TEXT, body)
    }

    fn readyz(&self) -> Response<Full<Bytes>> {
        match self.board.readiness() {
            Ok(()) => reply(StatusCode::OK, TEXT, "ok\n"),
            Err(reason) => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                TEXT,
                format!("{}\n", one_line(&reason)),
            ),
        }
    }

    fn metrics(&self) -> Response<Full<Bytes>> {
        let mut text = String::new();
        let encoded = prometheus_client::encoding::text::encode(&mut text, &self.registry());
        match encoded {
            Ok(()) => reply(StatusCode::OK, OPENMETRICS_CONTENT_TYPE, text),
            Err(_) => reply(
                StatusCode::INTERNAL_SERVER_ERROR,
                TEXT,
                "metrics could not be encoded\n",
            ),
        }
    }

    fn status(&self) -> Response<Full<Bytes>> {
        match serde_json::to_vec(&self.board.snapshot()) {
            Ok(mut body) => {
                body.push(b'\n');
                reply(StatusCode::OK, JSON, body)
            }
            Err(e) => reply(
                StatusCode::INTERNAL_SERVER_ERROR,
                TEXT,
                format!("status could not be encoded: {e}\n"),
            ),
        }
    }
}

fn log_connection_end(done: Result<(), tokio::task::JoinError>) {
    if let Err(e) = done {
        tracing::warn!(error = %e, "monitoring server: connection task failed");
    }
}

/// `s` with line breaks replaced, so one reason stays on one line.
fn one_line(s: &str) -> String {
    s.replace(['\r', '\n'], " ")
}

fn reply(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_election::{Metrics as _, SimpleMetrics};
    use serde_json::{Value, json};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    struct Reply {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    }

    impl Reply {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        }
    }

    async fn request(addr: SocketAddr, method: &str, path: &str) -> Reply {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(req.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.unwrap();
        let raw = String::from_utf8(raw).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").expect("no end of headers");
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap();
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
            .collect();
        Reply {
            status,
            headers,
            body: body.to_string(),
        }
    }

    async fn get(addr: SocketAddr, path: &str) -> Reply {
        request(addr, "GET", path).await
    }

    struct Running {
        monitor: Arc<Monitor>,
        addr: SocketAddr,
        shutdown: CancellationToken,
        task: JoinHandle<()>,
    }

    impl Running {
        async fn stop(self) {
            self.shutdown.cancel();
            tokio::time::timeout(Duration::from_secs(10), self.task)
                .await
                .expect("server did not stop")
                .unwrap();
        }
    }

    async fn start(monitor: Monitor) -> Running {
        let monitor = Arc::new(monitor);
        let shutdown = CancellationToken::new();
        let (addr, task) = monitor
            .clone()
            .serve(SocketAddr::from(([127, 0, 0, 1], 0)), shutdown.clone())
            .await
            .unwrap();
        Running {
            monitor,
            addr,
            shutdown,
            task,
        }
    }

    fn new_monitor() -> Monitor {
        Monitor::new(StatusBoard::new(), SharedRegistry::default())
    }

    #[tokio::test]
    async fn livez_fails_with_one_line_per_failing_check_and_recovers() {
        let s = start(new_monitor()).await;
        let r = get(s.addr, "/livez").await;
        assert_eq!((r.status, r.body.as_str()), (200, "ok\n"));
        assert_eq!(r.header("content-type"), Some(TEXT));

        let failing = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let flag = failing.clone();
        s.monitor.add_liveness_check("ok", Arc::new(|| Ok(())));
        s.monitor.add_liveness_check(
            "default",
            Arc::new(move || {
                if flag.load(std::sync::atomic::Ordering::SeqCst) {
                    Err("leading but last renewed 21s ago\n(limit 20s)".into())
                } else {
                    Ok(())
                }
            }),
        );
        s.monitor
            .add_liveness_check("panics", Arc::new(|| panic!("broken check")));
        let r = get(s.addr, "/livez").await;
        assert_eq!(r.status, 503);
        assert_eq!(
            r.body,
            "default: leading but last renewed 21s ago (limit 20s)\npanics: the check panicked\n"
        );

        s.monitor.remove_liveness_check("panics");
        failing.store(false, std::sync::atomic::Ordering::SeqCst);
        let r = get(s.addr, "/livez").await;
        assert_eq!((r.status, r.body.as_str()), (200, "ok\n"));
        s.stop().await;
    }

    #[tokio::test]
    async fn livez_reports_a_stale_heartbeat() {
        let monitor = new_monitor()
            .with_stale_after(Duration::from_secs(5))
            .with_tick_every(Duration::from_secs(3600));
        let s = start(monitor).await;
        assert_eq!(get(s.addr, "/livez").await.status, 200);

        let hb = s.monitor.heartbeat();
        hb.set_last_tick(std::time::Instant::now() - Duration::from_secs(10));
        let r = get(s.addr, "/livez").await;
        assert_eq!(r.status, 503);
        assert!(
            r.body.starts_with("runtime: no heartbeat for "),
            "{}",
            r.body
        );
        assert!(r.body.contains("(limit 5s)"), "{}", r.body);
        assert_eq!(r.body.lines().count(), 1);

        hb.tick();
        assert_eq!(get(s.addr, "/livez").await.status, 200);
        s.stop().await;
    }

    #[test]
    fn heartbeat_goes_stale_while_the_runtime_is_blocked() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let monitor = Arc::new(new_monitor().with_stale_after(Duration::from_millis(150)));
        let blocked_for = Duration::from_millis(400);
        rt.block_on(async {
            let shutdown = CancellationToken::new();
            let (_, task) = monitor
                .clone()
                .serve(SocketAddr::from(([127, 0, 0, 1], 0)), shutdown.clone())
                .await
                .unwrap();
            std::thread::sleep(blocked_for);
            let failures = monitor.liveness_failures();
            assert_eq!(failures.len(), 1, "{failures:?}");
            assert_eq!(failures[0].0, HEARTBEAT_CHECK);

            let mut ticks = monitor.heartbeat().subscribe();
            ticks.mark_unchanged();
            tokio::time::timeout(Duration::from_secs(10), ticks.changed())
                .await
                .expect("no tick once the runtime was free")
                .unwrap();
            assert!(monitor.liveness_failures().is_empty());
            shutdown.cancel();
            task.await.unwrap();
        });
    }

    #[tokio::test]
    async fn readyz_follows_the_board() {
        let s = start(new_monitor()).await;
        let r = get(s.addr, "/readyz").await;
        assert_eq!((r.status, r.body.as_str()), (503, "starting\n"));
        s.monitor
            .board()
            .set_ready(false, "policy loaded, outputs not started");
        let r = get(s.addr, "/readyz").await;
        assert_eq!(r.status, 503);
        assert_eq!(r.body, "policy loaded, outputs not started\n");
        s.monitor.board().set_ready(true, "");
        let r = get(s.addr, "/readyz").await;
        assert_eq!((r.status, r.body.as_str()), (200, "ok\n"));
        s.stop().await;
    }

    fn timestamp(v: &Value) -> jiff::Timestamp {
        v.as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("not an RFC 3339 timestamp: {v}"))
    }

    #[tokio::test]
    async fn status_serves_the_documented_shape() {
        let board = StatusBoard::new();
        board.set_identity("agent-a");
        board.set_election(
            "default",
            ElectionStatus {
                lease: "leasehold".into(),
                namespace: "ns".into(),
                state: ElectionState::Leading,
                holder: Some("agent-a".into()),
                term: Some(3),
            },
        );
        board.set_election(
            "other",
            ElectionStatus {
                lease: "other".into(),
                namespace: "ns".into(),
                state: ElectionState::Unknown,
                holder: None,
                term: None,
            },
        );
        board.input_started("x", "exec");
        board.input_started("z", "exec");
        board.input_failed("z", "exit status 2");
        board.input_dropped("y", "needs a provider that is not configured");
        board.set_outputs(Arc::new(|| {
            vec![OutputStatus {
                name: "default".into(),
                kind: "file".into(),
                queue_depth: 4,
                queue_bytes: 0,
                health: Default::default(),
            }]
        }));
        board.policy_loaded("/etc/leasehold/policy.yaml");
        board.policy_rejected("line 3: unknown key");
        let s = start(Monitor::new(board, SharedRegistry::default())).await;

        let r = get(s.addr, "/status").await;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-type"), Some(JSON));
        let mut doc: Value = serde_json::from_str(&r.body).unwrap();
        let mut since = Vec::new();
        for input in doc["inputs"]["running"].as_array_mut().unwrap() {
            since.push(timestamp(&input["since"]));
            input["since"] = json!("T");
        }
        assert_eq!(since.len(), 2);
        timestamp(&doc["policy"]["loaded_at"]);
        doc["policy"]["loaded_at"] = json!("T");
        assert_eq!(
            doc,
            json!({
                "identity": "agent-a",
                "elections": [
                    {"name": "default", "lease": "leasehold", "namespace": "ns",
                     "state": "leading", "holder": "agent-a", "term": 3},
                    {"name": "other", "lease": "other", "namespace": "ns",
                     "state": "unknown", "holder": null, "term": null}
                ],
                "inputs": {
                    "running": [
                        {"id": "x", "type": "exec", "since": "T", "restarts": 0,
                         "last_error": null, "state": "running"},
                        {"id": "z", "type": "exec", "since": "T", "restarts": 0,
                         "last_error": "exit status 2", "state": "backoff"}
                    ],
                    "dropped": [
                        {"id": "y", "reason": "needs a provider that is not configured"}
                    ]
                },
                "outputs": [{
                    "name": "default", "type": "file", "queue_depth": 4, "queue_bytes": 0,
                    "state": "idle", "consecutive_failures": 0, "last_error": null,
                    "last_error_at": null, "last_success_at": null,
                    "events_dropped": 0, "last_drop_reason": null, "last_drop_at": null
                }],
                "policy": {
                    "path": "/etc/leasehold/policy.yaml", "loaded_at": "T",
                    "last_error": "line 3: unknown key", "reloads": 0, "reload_failures": 1
                },
                "problems": []
            })
        );
        s.stop().await;
    }

    #[tokio::test]
    async fn metrics_expose_agent_and_election_metrics() {
        let registry = SharedRegistry::default();
        let (agent, election) = {
            let mut r = registry.lock().unwrap();
            (
                AgentMetrics::register(&mut r),
                SimpleMetrics::register(&mut r),
            )
        };
        let s = start(Monitor::new(StatusBoard::new(), registry)).await;
        agent.set_identity("agent-a");
        agent.input_started();
        agent.input_restarted("x");
        agent.input_failed("x");
        agent.events_produced("x", 5);
        agent.events_refused("x", 1);
        agent.policy_reload(false);
        election.leader_status("leasehold", true);

        let r = get(s.addr, "/metrics").await;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-type"), Some(OPENMETRICS_CONTENT_TYPE));
        for line in [
            "leasehold_inputs_running 1\n",
            "leasehold_input_restarts_total{input=\"x\"} 1\n",
            "leasehold_input_failures_total{input=\"x\"} 1\n",
            "leasehold_events_produced_total{input=\"x\"} 5\n",
            "leasehold_events_refused_total{input=\"x\"} 1\n",
            "leasehold_policy_reloads_total{result=\"error\"} 1\n",
            "identity=\"agent-a\"} 1\n",
            "leader_election_master_status{name=\"leasehold\"} 1\n",
        ] {
            assert!(r.body.contains(line), "missing {line:?} in\n{}", r.body);
        }
        assert!(r.body.ends_with("# EOF\n"), "{}", r.body);
        s.stop().await;
    }

    #[tokio::test]
    async fn unknown_paths_are_404_and_other_methods_405() {
        let s = start(new_monitor()).await;
        assert_eq!(get(s.addr, "/").await.status, 404);
        assert_eq!(get(s.addr, "/livez/extra").await.status, 404);
        assert_eq!(request(s.addr, "POST", "/nope").await.status, 404);
        for path in ["/livez", "/readyz", "/metrics", "/status"] {
            for method in ["POST", "PUT", "DELETE", "HEAD"] {
                let r = request(s.addr, method, path).await;
                assert_eq!(r.status, 405, "{method} {path}");
                assert_eq!(r.header("allow"), Some("GET"), "{method} {path}");
            }
        }
        assert_eq!(get(s.addr, "/livez?verbose").await.status, 200);
        s.stop().await;
    }

    #[tokio::test]
    async fn binding_a_used_address_names_it_and_the_cause() {
        let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = taken.local_addr().unwrap();
        let err = Arc::new(new_monitor())
            .serve(addr, CancellationToken::new())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        let msg = err.to_string();
        assert!(msg.contains(&addr.to_string()), "{msg}");
        assert!(
            msg.to_lowercase().contains("address already in use"),
            "{msg}"
        );
    }

    #[tokio::test]
    async fn shutdown_stops_the_server_and_closes_the_port() {
        let s = start(new_monitor()).await;
        let addr = s.addr;
        let mut idle = TcpStream::connect(addr).await.unwrap();
        idle.write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 12];
        idle.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"HTTP/1.1 200");
        s.stop().await;
        assert!(TcpStream::connect(addr).await.is_err());
    }
}
