//! `exec`: runs a command and turns each line of its stdout into an event.
//!
//! The child gets its own process group, so a stop reaches everything it
//! started: SIGTERM to the group, SIGKILL after the grace period. The
//! kernel kills it when the agent dies (parent-death signal). Lines it
//! wrote before a graceful stop are still read and shipped; a line longer
//! than [`MAX_LINE`] is cut there and marked with `error.message`.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use leasehold_policy::{Map, Value};
use serde_json::Value as Json;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::settings::{self, Problem, unknown_keys, unresolved};
use crate::inputs::contract::{Input, InputContext};
use crate::pipeline::publisher::{EventSink, Refused};

/// Longest stdout line turned into one event, in bytes.
pub const MAX_LINE: usize = 1024 * 1024;

/// The agent's own variables a child gets: where programs are, a home,
/// the locale, the time zone, and the pod's identity as the Kubernetes
/// downward API gives it (no secret: `kubectl get pods` shows it).
pub const INHERITED_ENV: [&str; 10] = [
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "HOSTNAME",
    "POD_NAME",
    "POD_NAMESPACE",
    "NODE_NAME",
];

/// `PATH` when the agent has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How each stdout line becomes an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventsMode {
    /// `message` holds the line.
    Lines,
    /// The line is a JSON object merged into the event.
    Json,
    /// Output is discarded.
    None,
}

/// The settings of an `exec` input.
#[derive(Debug, Clone, PartialEq)]
pub struct Exec {
    /// The argv.
    pub command: Vec<String>,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// Where it runs.
    pub working_directory: Option<String>,
    /// How lines become events.
    pub events: EventsMode,
}

const KEYS: [&str; 4] = ["command", "env", "working_directory", "events"];

impl Exec {
    /// Reads the settings; `None` when they are bad (problems pushed) or
    /// not known before rendering.
    pub fn from_settings(map: &Map, out: &mut Vec<Problem>) -> Option<Exec> {
        let before = out.len();
        unknown_keys(map, &KEYS, "exec", out);
        let command = settings::string_list(map, "command", out);
        let mut env = Vec::new();
        match map.get("env") {
            None | Some(Value::Null) => {}
            Some(Value::Map(m)) => {
                for (k, v) in m.iter() {
                    match v {
                        Value::Str(_) | Value::Int(_) | Value::Float(_) | Value::Bool(_) => {
                            env.push((k.clone(), v.to_subst_text()));
                        }
                        other => out.push(Problem::new(
                            format!("env.{k}"),
                            format!("must be a string, found {}", other.type_name()),
                        )),
                    }
                }
            }
            Some(v) if unresolved(v) => {}
            Some(other) => out.push(
                Problem::new(
                    "env",
                    format!(
                        "must be a mapping of name to value, found {}",
                        other.type_name()
                    ),
                )
                .hint("e.g. `env: {LANG: C}`"),
            ),
        }
        let working_directory = settings::opt_string(map, "working_directory", out);
        let events = match map.get("events") {
            None | Some(Value::Null) => EventsMode::Lines,
            Some(Value::Str(s)) => match s.as_str() {
                "lines" => EventsMode::Lines,
                "json" => EventsMode::Json,
                "none" => EventsMode::None,
                _ if unresolved(&Value::Str(s.clone())) => EventsMode::Lines,
                other => {
                    out.push(
                        Problem::new("events", format!("unknown mode {other:?}"))
                            .hint("use lines, json or none"),
                    );
                    EventsMode::Lines
                }
            },
            Some(other) => {
                out.push(
                    Problem::new(
                        "events",
                        format!("must be a string, found {}", other.type_name()),
                    )
                    .hint("use lines, json or none"),
                );
                EventsMode::Lines
            }
        };
        if out.len() > before {
            return None;
        }
        Some(Exec {
            command: command?,
            env,
            working_directory,
            events,
        })
    }

    /// The child's whole environment: the few variables of the agent's
    /// own that any program expects and its pod's identity
    /// ([`INHERITED_ENV`], a default `PATH` when the agent has none), then
    /// the policy's `env`. Nothing else of
    /// the agent's: its environment holds the output credentials
    /// (`ES_PASSWORD`), which a child gets only when the policy names them.
    fn child_env(&self, agent: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = INHERITED_ENV
            .iter()
            .filter_map(|k| Some((k.to_string(), agent(k)?)))
            .collect();
        if !env.iter().any(|(k, _)| k == "PATH") {
            env.push(("PATH".into(), DEFAULT_PATH.into()));
        }
        for (k, v) in &self.env {
            env.retain(|(e, _)| e != k);
            env.push((k.clone(), v.clone()));
        }
        env
    }

    fn spawn(&self) -> Result<Child, String> {
        let mut cmd = Command::new(&self.command[0]);
        cmd.args(&self.command[1..])
            .env_clear()
            .envs(self.child_env(|k| std::env::var(k).ok()))
            .stdin(Stdio::null())
            .stdout(if self.events == EventsMode::None {
                Stdio::null()
            } else {
                Stdio::piped()
            })
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        if let Some(dir) = &self.working_directory {
            cmd.current_dir(dir);
        }
        // SAFETY: prctl is async-signal-safe; nothing else runs between
        // fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd.spawn().map_err(|e| {
            let dir = self
                .working_directory
                .as_deref()
                .map(|d| format!(" in {d}"))
                .unwrap_or_default();
            format!("cannot start {:?}{dir}: {e}", self.command[0])
        })
    }

    async fn run_child(self: Arc<Self>, ctx: InputContext) -> Result<(), String> {
        let mut child = self.spawn()?;
        let pgid = child.id().map(|p| p as i32);
        if let Some(stderr) = child.stderr.take() {
            let id = ctx.sink.input_id().to_string();
            tokio::spawn(log_stderr(id, stderr, ctx.redactor.clone()));
        }
        let stdout = child.stdout.take();
        let mut lines = stdout.map(BufReader::new);
        let mut buf = Vec::with_capacity(256);
        let mut stopping = false;
        let mut kill_at = None;
        loop {
            let reading = lines.is_some();
            let step = {
                let read = async {
                    match lines.as_mut() {
                        Some(r) => read_line_capped(r, &mut buf, MAX_LINE).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    biased;
                    () = ctx.cancel.cancelled(), if !stopping => Step::Stop,
                    () = sleep_until(kill_at) => Step::Kill,
                    r = read => Step::Line(r),
                    s = child.wait(), if !reading => Step::Exited(s),
                }
            };
            match step {
                Step::Stop => {
                    stopping = true;
                    signal_group(pgid, libc::SIGTERM);
                    kill_at = Some(tokio::time::Instant::now() + ctx.stop_grace);
                }
                Step::Kill => {
                    signal_group(pgid, libc::SIGKILL);
                    // What is still buffered in the pipe is dropped; the
                    // group is gone.
                    let _ = child.wait().await;
                    return Ok(());
                }
                // Stdout closed: wait for the command to end (or for a stop).
                Step::Line(Ok(None)) => lines = None,
                Step::Line(Ok(Some(truncated))) => {
                    if let Err(refused) = self.emit(&ctx.sink, &buf, truncated).await {
                        if refused == Refused::TermEnded && !stopping {
                            // Stepped down: stop at once, no more reading.
                            stopping = true;
                            signal_group(pgid, libc::SIGTERM);
                            kill_at = Some(tokio::time::Instant::now() + ctx.stop_grace);
                        }
                        lines = None;
                    }
                }
                Step::Line(Err(e)) => return Err(format!("reading stdout: {e}")),
                Step::Exited(status) => return finish(status, stopping, pgid),
            }
        }
    }

    async fn emit(&self, sink: &EventSink, line: &[u8], truncated: bool) -> Result<(), Refused> {
        let text = String::from_utf8_lossy(trim_newline(line));
        let cut = truncated.then(|| format!("line longer than {MAX_LINE} bytes was cut"));
        match self.events {
            EventsMode::None => Ok(()),
            EventsMode::Lines => sink.emit_message(&text, cut.as_deref()).await,
            EventsMode::Json => match serde_json::from_str::<Json>(&text) {
                Ok(Json::Object(m)) if !truncated => sink.emit(m).await,
                Ok(_) if !truncated => {
                    sink.emit_message(&text, Some("line is JSON but not an object"))
                        .await
                }
                Ok(_) => sink.emit_message(&text, cut.as_deref()).await,
                Err(e) => {
                    let why = cut.unwrap_or_else(|| format!("line is not valid JSON: {e}"));
                    sink.emit_message(&text, Some(&why)).await
                }
            },
        }
    }
}

impl Input for Exec {
    fn run(self: Arc<Self>, ctx: InputContext) -> BoxFuture<'static, Result<(), String>> {
        Box::pin(self.run_child(ctx))
    }
}

/// What woke the exec loop.
enum Step {
    Stop,
    Kill,
    Line(std::io::Result<Option<bool>>),
    Exited(std::io::Result<std::process::ExitStatus>),
}

/// The command's end: `Ok` when it was asked to stop, else why it ended.
fn finish(
    status: std::io::Result<std::process::ExitStatus>,
    stopping: bool,
    pgid: Option<i32>,
) -> Result<(), String> {
    // Whatever the command left behind in its group goes with it.
    signal_group(pgid, libc::SIGKILL);
    if stopping {
        return Ok(());
    }
    match status {
        Ok(s) => Err(format!("command exited ({s})")),
        Err(e) => Err(format!("waiting for the command: {e}")),
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn signal_group(pgid: Option<i32>, sig: libc::c_int) {
    if let Some(pgid) = pgid.filter(|p| *p > 1) {
        // SAFETY: kill(2) with a negative pid signals the group we created.
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
}

fn trim_newline(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Reads one line into `buf` (cleared first), keeping at most `max` bytes
/// and skipping the rest of a longer line. `Ok(None)` at end of input,
/// `Ok(Some(truncated))` otherwise. Cancel-safe only between lines.
async fn read_line_capped<R: AsyncBufRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Option<bool>> {
    buf.clear();
    let mut truncated = false;
    let mut any = false;
    loop {
        let chunk = r.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(any.then_some(truncated));
        }
        any = true;
        let (take, done) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        let room = max.saturating_sub(buf.len());
        if take > room {
            truncated = true;
        }
        buf.extend_from_slice(&chunk[..take.min(room)]);
        r.consume(take);
        if done {
            return Ok(Some(truncated));
        }
    }
}

/// Logs each line the child writes to stderr, with the policy's secrets
/// and URL credentials redacted (a child may print what it was given).
async fn log_stderr(
    input: String,
    stderr: tokio::process::ChildStderr,
    redactor: crate::redact::Redactor,
) {
    let mut r = BufReader::new(stderr);
    let mut buf = Vec::new();
    while let Ok(Some(_)) = read_line_capped(&mut r, &mut buf, 16 * 1024).await {
        let line = redactor.redact(&String::from_utf8_lossy(trim_newline(&buf)));
        tracing::warn!(input = %input, "stderr: {line}");
    }
}

/// Kept for the runtime: how long the child may take to stop when no
/// election bounds it.
pub const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(yaml: &str) -> (Option<Exec>, Vec<Problem>) {
        let mut out = Vec::new();
        (
            Exec::from_settings(&crate::inputs::settings::input_map(yaml), &mut out),
            out,
        )
    }

    #[test]
    fn settings_are_read_and_checked() {
        let (e, p) =
            settings("{type: exec, command: [sh, -c, 'echo 1'], env: {A: 1}, events: json}");
        assert!(p.is_empty(), "{p:?}");
        let e = e.unwrap();
        assert_eq!(e.command, ["sh", "-c", "echo 1"]);
        assert_eq!(e.env, [("A".to_string(), "1".to_string())]);
        assert_eq!(e.events, EventsMode::Json);

        let (_, p) = settings("{type: exec, command: 'echo 1'}");
        assert!(
            p[0].to_string()
                .contains("`command`: must be a list of strings"),
            "{p:?}"
        );
        let (_, p) = settings("{type: exec}");
        assert_eq!(p[0].to_string(), "`command`: is required");
        let (_, p) = settings("{type: exec, command: [x], events: yaml, colour: red}");
        let text: Vec<String> = p.iter().map(ToString::to_string).collect();
        assert!(
            text.iter()
                .any(|t| t.contains("`colour`: unknown setting of input type `exec`")),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|t| t.contains("`events`: unknown mode \"yaml\"")),
            "{text:?}"
        );
        // Not known before rendering: no complaint.
        let (_, p) = settings("{type: exec, command: '${env.CMD}'}");
        assert!(p.is_empty(), "{p:?}");
    }

    #[tokio::test]
    async fn long_lines_are_cut_and_the_rest_skipped() {
        let data = b"abcdef\nxy\nlast-without-newline".to_vec();
        let mut r = BufReader::with_capacity(2, &data[..]);
        let mut buf = Vec::new();
        assert_eq!(
            read_line_capped(&mut r, &mut buf, 4).await.unwrap(),
            Some(true)
        );
        assert_eq!(buf, b"abcd");
        assert_eq!(
            read_line_capped(&mut r, &mut buf, 4).await.unwrap(),
            Some(false)
        );
        assert_eq!(buf, b"xy\n");
        assert_eq!(
            read_line_capped(&mut r, &mut buf, 100).await.unwrap(),
            Some(false)
        );
        assert_eq!(buf, b"last-without-newline");
        assert_eq!(read_line_capped(&mut r, &mut buf, 100).await.unwrap(), None);
    }

    /// A sink writing to a file output in `dir`, with an optional term.
    fn sink(
        dir: &std::path::Path,
        term: Option<tokio_util::sync::CancellationToken>,
    ) -> (crate::outputs::Outputs, EventSink) {
        use crate::outputs::{FileSettings, OutputKind, OutputMetrics, OutputSettings, Outputs};
        let outputs = Outputs::start(
            vec![OutputSettings {
                name: "default".into(),
                kind: OutputKind::file(FileSettings::new(dir)),
                queue_events: 16,
                memory: Default::default(),
                disk: None,
            }],
            OutputMetrics::new(),
        )
        .unwrap();
        let sink = EventSink::new(
            "x",
            "exec",
            &crate::pipeline::publisher::AgentFields {
                id: "i".into(),
                name: "n".into(),
                version: "v".into(),
                node: "node".into(),
            },
            &crate::pipeline::routing::DataStream::default(),
            term.map(|token| crate::pipeline::publisher::TermStamp {
                lease: "l".into(),
                term: 7,
                token,
                tracker: tokio_util::task::TaskTracker::new(),
            }),
            tokio_util::sync::CancellationToken::new(),
            std::sync::Arc::new(outputs.sender("default").unwrap().for_input("x")),
            crate::pipeline::publisher::InputCounters::default(),
        );
        (outputs, sink)
    }

    /// What the runtime gives an input, with a sink, a stop token and a
    /// grace; registries under `dir`.
    fn context(
        sink: EventSink,
        cancel: tokio_util::sync::CancellationToken,
        stop_grace: Duration,
        dir: &std::path::Path,
    ) -> InputContext {
        InputContext {
            sink,
            cancel,
            finish: Default::default(),
            redactor: Default::default(),
            stop_grace,
            cluster: Default::default(),
            registries: crate::inputs::filestream::registry::Registries::new(dir),
            health: Default::default(),
        }
    }

    async fn wait_for_file(path: &std::path::Path) -> String {
        for _ in 0..500 {
            if let Ok(s) = std::fs::read_to_string(path)
                && s.ends_with('\n')
            {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{} never written", path.display());
    }

    fn alive(pid: i32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => !stat
                .split(") ")
                .nth(1)
                .is_some_and(|rest| rest.starts_with('Z')),
            Err(_) => false,
        }
    }

    fn exec(script: &str) -> Arc<Exec> {
        Arc::new(Exec {
            command: vec!["sh".into(), "-c".into(), script.into()],
            env: Vec::new(),
            working_directory: None,
            events: EventsMode::Lines,
        })
    }

    #[tokio::test]
    async fn stop_kills_the_whole_group_even_after_stdout_closed() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        // The grandchild keeps running; the shell closes its stdout first.
        let e = exec(&format!(
            "exec >&-; sleep 300 & echo $! > {}; wait",
            pidfile.display()
        ));
        let (_outputs, sink) = sink(dir.path(), None);
        let cancel = tokio_util::sync::CancellationToken::new();
        let ctx = context(sink, cancel.clone(), Duration::from_secs(5), dir.path());
        let run = tokio::spawn(e.run(ctx));
        let pid: i32 = wait_for_file(&pidfile).await.trim().parse().unwrap();
        assert!(alive(pid));
        cancel.cancel();
        let r = tokio::time::timeout(Duration::from_secs(10), run)
            .await
            .expect("stopped within the grace")
            .unwrap();
        assert_eq!(r, Ok(()));
        for _ in 0..200 {
            if !alive(pid) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("grandchild {pid} survived the stop");
    }

    #[tokio::test]
    async fn a_command_ignoring_sigterm_is_killed_after_the_grace() {
        let dir = tempfile::tempdir().unwrap();
        let ready = dir.path().join("ready");
        let e = exec(&format!(
            "trap '' TERM; echo > {}; while :; do sleep 0.05; done",
            ready.display()
        ));
        let (_outputs, sink) = sink(dir.path(), None);
        let cancel = tokio_util::sync::CancellationToken::new();
        let grace = Duration::from_millis(200);
        let ctx = context(sink, cancel.clone(), grace, dir.path());
        let run = tokio::spawn(e.run(ctx));
        wait_for_file(&ready).await;
        let at = tokio::time::Instant::now();
        cancel.cancel();
        let r = tokio::time::timeout(Duration::from_secs(10), run)
            .await
            .expect("killed")
            .unwrap();
        assert_eq!(r, Ok(()));
        assert!(at.elapsed() >= grace, "killed before the grace");
    }

    #[tokio::test]
    async fn the_end_of_the_term_refuses_events_and_stops_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let term = tokio_util::sync::CancellationToken::new();
        let e = exec("while :; do echo tick; sleep 0.01; done");
        let (outputs, sink) = sink(dir.path(), Some(term.clone()));
        // The input's own token is a child of the term's, as the runtime makes it.
        let ctx = context(
            sink.clone(),
            term.child_token(),
            Duration::from_secs(1),
            dir.path(),
        );
        let run = tokio::spawn(e.run(ctx));
        let file = dir.path().join("leasehold.ndjson");
        wait_for_file(&file).await;
        term.cancel();
        let ended = crate::pipeline::event::timestamp_now();
        let r = tokio::time::timeout(Duration::from_secs(10), run)
            .await
            .expect("stopped")
            .unwrap();
        assert_eq!(r, Ok(()));
        assert_eq!(
            sink.emit(serde_json::Map::new()).await,
            Err(Refused::TermEnded)
        );
        outputs
            .shutdown(tokio::time::Instant::now() + Duration::from_secs(5))
            .await;
        let text = std::fs::read_to_string(&file).unwrap();
        for line in text.lines() {
            let v: Json = serde_json::from_str(line).unwrap();
            assert_eq!(v["leader"]["term"], 7);
            // Timestamps compare as text: same format, same width.
            assert!(
                v["@timestamp"].as_str().unwrap() <= ended.as_str(),
                "event after the term ended: {line}"
            );
        }
    }
    #[test]
    fn a_child_gets_the_locale_path_and_home_and_the_policys_env_only() {
        let e = Exec {
            command: vec!["env".into()],
            env: vec![
                ("LANG".into(), "C".into()),
                ("TOKEN".into(), "given".into()),
            ],
            working_directory: None,
            events: EventsMode::Lines,
        };
        let agent = |k: &str| match k {
            "HOME" => Some("/root".to_string()),
            "LANG" => Some("en_US.UTF-8".to_string()),
            "ES_PASSWORD" => Some("s3cret".to_string()),
            _ => None,
        };
        let mut got = e.child_env(agent);
        got.sort();
        let want: Vec<(String, String)> = [
            ("HOME", "/root"),
            ("LANG", "C"),
            ("PATH", DEFAULT_PATH),
            ("TOKEN", "given"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(
            got, want,
            "the policy's env wins; ES_PASSWORD is not passed"
        );
    }

    /// The real child's environment: this test process has many
    /// variables (CARGO_*, the runner's), none of which it sees.
    #[tokio::test]
    async fn a_real_child_sees_no_variable_of_the_agents_but_the_few_it_needs() {
        let dir = tempfile::tempdir().unwrap();
        let e = Arc::new(Exec {
            command: vec!["env".into()],
            env: vec![("FROM_POLICY".into(), "yes".into())],
            working_directory: None,
            events: EventsMode::Lines,
        });
        let (outputs, sink) = sink(dir.path(), None);
        let ctx = context(sink, Default::default(), Duration::from_secs(1), dir.path());
        let r = tokio::time::timeout(Duration::from_secs(10), e.run(ctx))
            .await
            .expect("env ends");
        assert!(r.is_err_and(|e| e.contains("exited")));
        outputs
            .shutdown(tokio::time::Instant::now() + Duration::from_secs(5))
            .await;
        let text = std::fs::read_to_string(dir.path().join("leasehold.ndjson")).unwrap();
        let mut names: Vec<String> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<Json>(l).unwrap()["message"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .map(|m| m.split('=').next().unwrap().to_string())
            .collect();
        names.sort();
        assert!(names.contains(&"FROM_POLICY".to_string()), "{names:?}");
        assert!(names.contains(&"PATH".to_string()), "{names:?}");
        assert!(
            std::env::vars().any(|(k, _)| k.starts_with("CARGO")),
            "the test runs under cargo, whose variables the agent has"
        );
        for n in &names {
            assert!(
                n == "FROM_POLICY" || INHERITED_ENV.contains(&n.as_str()),
                "the child saw the agent's {n}: {names:?}"
            );
        }
    }
}
