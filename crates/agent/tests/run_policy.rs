//! `leasehold run` and its policy, without a control plane (no election):
//! a bad policy at start, a bad reload, a good reload that restarts only
//! the changed input, and a panicking or failing input that is restarted
//! with backoff while the others keep running. Judged from the file output.

mod agents;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use agents::*;
use anyhow::{Result, bail};

fn node_local(out: &Path, changed: &str) -> String {
    format!(
        r#"outputs:
  default: {{type: file, path: '{}', filename: events}}
inputs:
  - id: steady
    type: exec
    command: [sh, -c, 'i=0; while :; do i=$((i+1)); echo $i; sleep 0.05; done']
  - id: changing
    type: exec
    command: [sh, -c, 'while :; do echo {changed}; sleep 0.05; done']
"#,
        out.display()
    )
}

fn start(policy: &Path, out: &Path) -> Result<AgentProc> {
    // No election in these policies: the kubeconfig is never read.
    AgentProc::start(policy, Path::new("/nonexistent"), 1, "default", out)
}

/// Waits until the output holds an event of `input` with `message`
/// written after `after`.
fn wait_message(
    out: &Path,
    input: &str,
    message: &str,
    after: i64,
    within: Duration,
) -> Result<i64> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(e) = read_events(out)?
            .into_iter()
            .find(|e| e.input == input && e.message == message && e.at > after)
        {
            return Ok(e.at);
        }
        if Instant::now() > deadline {
            bail!("no {input} event {message:?} within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until the output holds an event of `input` written after `after`.
fn wait_input(out: &Path, input: &str, after: i64, within: Duration) -> Result<i64> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(e) = read_events(out)?
            .into_iter()
            .find(|e| e.input == input && e.at > after)
        {
            return Ok(e.at);
        }
        if Instant::now() > deadline {
            bail!("no {input} event within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A fleet name that cannot be a label value is refused at start, named.
#[test]
fn an_invalid_fleet_exits_2_naming_the_flag() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let policy = dir.path().join("p.yml");
    std::fs::write(
        &policy,
        "outputs:\n  default: {type: console}\ninputs:\n  - id: a\n    type: exec\n    command: [echo, hi]\n",
    )?;
    let out = Command::new(binary())
        .args(["run", "-c"])
        .arg(&policy)
        .env("LEASEHOLD_FLEET", "my fleet")
        .output()?;
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("invalid --fleet (LEASEHOLD_FLEET) \"my fleet\"")
            && err.contains("label value"),
        "{err}"
    );
    Ok(())
}

#[test]
fn a_bad_policy_at_start_exits_2_listing_every_problem() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let policy = dir.path().join("bad.yml");
    std::fs::write(
        &policy,
        "outputs:\n  default: {type: file, path: /tmp/x, rotate_every_kb: -1}\ninputs:\n  - id: a\n    type: exec\n    command: echo hi\n  - id: b\n    type: nosuch\n  - id: c\n    type: exec\n    command: [x]\n    use_output: elsewhere\n",
    )?;
    let out = Command::new(binary())
        .args(["run", "-c"])
        .arg(&policy)
        .output()?;
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let file = policy.display().to_string();
    for needle in [
        format!("{file}:2:"),
        "rotate_every_kb".to_string(),
        format!("{file}:6:"),
        "must be a list of strings".to_string(),
        format!("{file}:8:"),
        "unknown input type `nosuch`".to_string(),
        format!("{file}:12:"),
        "output `elsewhere`".to_string(),
    ] {
        assert!(err.contains(&needle), "missing {needle:?} in:\n{err}");
    }
    // `check` says the same.
    let check = Command::new(binary())
        .args(["check", "-c"])
        .arg(&policy)
        .output()?;
    assert_eq!(check.status.code(), Some(2));
    let check_err = String::from_utf8_lossy(&check.stderr);
    assert!(
        check_err.contains("unknown input type `nosuch`"),
        "{check_err}"
    );
    Ok(())
}

#[test]
fn a_bad_reload_is_rejected_and_a_good_one_restarts_only_the_changed_input() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let out = dir.path().join("out");
    let policy = dir.path().join("p.yml");
    std::fs::write(&policy, node_local(&out, "v1"))?;
    let agent = start(&policy, &out)?;
    let t0 = now_us();
    wait_message(&out, "changing", "v1", t0, Duration::from_secs(10))?;

    // A bad policy: rejected, shown in /status, nothing stops.
    std::fs::write(
        &policy,
        "inputs:\n  - id: x\n    type: exec\n    command: 3\n",
    )?;
    agent.signal(libc::SIGHUP);
    // The file change itself (polled every second) may be seen first.
    agent.wait_log("policy reload (", Duration::from_secs(10))?;
    let rejected = now_us();
    let status = agent.status()?;
    let err = status["policy"]["last_error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(err.contains("must be a list of strings"), "{status:#}");
    assert!(
        status["policy"]["reload_failures"].as_u64() >= Some(1),
        "{status:#}"
    );
    wait_message(
        &out,
        "changing",
        "v1",
        rejected + 300_000,
        Duration::from_secs(5),
    )?;
    wait_input(&out, "steady", rejected + 300_000, Duration::from_secs(5))?;

    // A good policy, by editing the file (no signal): only `changing` restarts.
    let before = now_us();
    std::fs::write(&policy, node_local(&out, "v2"))?;
    let first_v2 = wait_message(&out, "changing", "v2", before, Duration::from_secs(10))?;
    wait_input(&out, "steady", first_v2 + 200_000, Duration::from_secs(5))?;
    let evs = read_events(&out)?;
    // The unchanged input was not restarted (its counter never went back
    // to 1) and lost nothing (no number is missing) across both reloads.
    let counts: Vec<u64> = evs
        .iter()
        .filter(|e| e.input == "steady")
        .map(|e| e.message.parse().unwrap_or(0))
        .collect();
    let expected: Vec<u64> = (1..=counts.len() as u64).collect();
    assert_eq!(
        counts, expected,
        "the unchanged input restarted or lost events"
    );
    assert!(
        !evs.iter()
            .any(|e| e.input == "changing" && e.message == "v1" && e.at > first_v2),
        "the old instance kept running"
    );
    let status = agent.status()?;
    assert!(status["policy"]["last_error"].is_null(), "{status:#}");
    assert_eq!(status["policy"]["reloads"], 1, "{status:#}");
    let (_, metrics) = agent.get("/metrics")?;
    assert!(
        metrics.contains("leasehold_policy_reloads_total{result=\"ok\"} 1"),
        "{metrics}"
    );
    assert!(
        !metrics.contains("leasehold_policy_reloads_total{result=\"error\"} 0"),
        "{metrics}"
    );
    Ok(())
}

#[test]
fn a_rejected_reload_does_not_show_the_secrets_of_the_file() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let out = dir.path().join("out");
    let policy = dir.path().join("p.yml");
    std::fs::write(&policy, node_local(&out, "v1"))?;
    let agent = start(&policy, &out)?;
    wait_message(&out, "changing", "v1", now_us(), Duration::from_secs(10))?;

    // A password written as a number (YAML reads an int), an API key as a
    // float and a URL with credentials and a bad scheme: each is an error
    // about a secret-bearing setting.
    let secrets = ["98765432", "24680.5", "pw-in-url-77"];
    std::fs::write(
        &policy,
        node_local(&out, "v1").replace(
            "outputs:\n",
            "outputs:\n  es:\n    type: elasticsearch\n    hosts: ['ftp://elastic:pw-in-url-77@es:9200']\n    username: elastic\n    password: 98765432\n  es2:\n    type: elasticsearch\n    hosts: [es]\n    api_key: 24680.5\n",
        ),
    )?;
    agent.signal(libc::SIGHUP);
    // One ERROR line per problem, logged after /status was updated.
    for key in [
        "outputs.es.password",
        "outputs.es2.api_key",
        "outputs.es.hosts.0",
    ] {
        agent.wait_log(&format!("`{key}`"), Duration::from_secs(10))?;
    }
    let status = agent.status()?;
    let err = status["policy"]["last_error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    for key in [
        "outputs.es.password",
        "outputs.es2.api_key",
        "outputs.es.hosts.0",
    ] {
        assert!(err.contains(key), "no error about {key}: {status:#}");
    }
    let log = agent.log();
    for secret in secrets {
        assert!(!err.contains(secret), "{secret} in /status: {err}");
        assert!(!log.contains(secret), "{secret} in the log:\n{log}");
    }
    Ok(())
}

#[test]
fn a_failing_input_is_restarted_with_backoff_and_reported() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let out = dir.path().join("out");
    let policy = dir.path().join("p.yml");
    std::fs::write(
        &policy,
        format!(
            "outputs:\n  default: {{type: file, path: '{}', filename: events}}\ninputs:\n  - id: flaky\n    type: exec\n    command: [sh, -c, 'echo once; exit 3']\n  - id: missing\n    type: exec\n    command: [/nonexistent/worker]\n  - id: steady\n    type: exec\n    command: [sh, -c, 'i=0; while :; do i=$((i+1)); echo $i; sleep 0.05; done']\n",
            out.display()
        ),
    )?;
    let agent = start(&policy, &out)?;
    // First run, then restarts after 1 s and 2 s more.
    let deadline = Instant::now() + Duration::from_secs(10);
    let runs = loop {
        let runs: Vec<i64> = read_events(&out)?
            .into_iter()
            .filter(|e| e.input == "flaky")
            .map(|e| e.at)
            .collect();
        if runs.len() >= 3 || Instant::now() > deadline {
            break runs;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(runs.len() >= 3, "flaky ran {} times", runs.len());
    let (d1, d2) = (runs[1] - runs[0], runs[2] - runs[1]);
    assert!(
        d1 >= 900_000 && d2 >= 1_900_000 && d2 > d1,
        "backoff not doubling: {d1} µs then {d2} µs"
    );
    let status = agent.status()?;
    let running = status["inputs"]["running"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let flaky = running
        .iter()
        .find(|i| i["id"] == "flaky")
        .cloned()
        .unwrap_or_default();
    assert!(flaky["restarts"].as_u64().unwrap_or(0) >= 2, "{status:#}");
    assert!(
        flaky["last_error"]
            .as_str()
            .unwrap_or_default()
            .contains("exit status: 3"),
        "{status:#}"
    );
    let missing = running
        .iter()
        .find(|i| i["id"] == "missing")
        .cloned()
        .unwrap_or_default();
    assert!(
        missing["last_error"]
            .as_str()
            .unwrap_or_default()
            .contains("cannot start \"/nonexistent/worker\""),
        "{status:#}"
    );
    let (_, metrics) = agent.get("/metrics")?;
    assert!(
        metrics.contains("leasehold_input_restarts_total{input=\"flaky\"}"),
        "{metrics}"
    );
    let evs = read_events(&out)?;
    // The other input ran on untouched: one process, nothing lost.
    let counts: Vec<u64> = evs
        .iter()
        .filter(|e| e.input == "steady")
        .map(|e| e.message.parse().unwrap_or(0))
        .collect();
    assert!(counts.len() > 10, "steady wrote {} events", counts.len());
    assert_eq!(counts, (1..=counts.len() as u64).collect::<Vec<_>>());
    Ok(())
}

/// An `exec` child gets none of the agent's environment but what the
/// policy names: `ES_PASSWORD`, which the agent has for its output, is
/// not there unless passed. What the child prints on stderr is logged
/// with the policy's secrets redacted, also the one the policy passed it.
#[test]
fn an_exec_child_gets_no_secret_it_was_not_given_and_its_stderr_is_redacted() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let out = dir.path().join("out");
    let policy = dir.path().join("p.yml");
    let secret = "pw-of-the-output-4417";
    std::fs::write(
        &policy,
        format!(
            r#"outputs:
  default: {{type: file, path: '{}', filename: events}}
  es:
    type: elasticsearch
    hosts: ['http://127.0.0.1:9']
    username: elastic
    password: ${{env.ES_PASSWORD}}
inputs:
  - id: inherits
    type: exec
    command: [sh, -c, 'echo "inherited:$${{ES_PASSWORD:-nothing}}"; sleep 300']
  - id: given
    type: exec
    env: {{PW: '${{env.ES_PASSWORD}}'}}
    command: [sh, -c, 'echo "on stderr: $PW" >&2; echo printed; sleep 300']
"#,
            out.display()
        ),
    )?;
    let mut agent = AgentProc::spawn_with_env(
        &policy,
        Path::new("/nonexistent"),
        1,
        "default",
        &out,
        &[("ES_PASSWORD", secret.to_string())],
    )?;
    agent.wait_ready()?;
    wait_message(
        &out,
        "inherits",
        "inherited:nothing",
        0,
        Duration::from_secs(10),
    )?;
    wait_message(&out, "given", "printed", 0, Duration::from_secs(10))?;
    let line = agent.wait_log("on stderr:", Duration::from_secs(10))?;
    assert!(line.contains("[redacted]"), "{line}");
    agent.stop_cleanly()?;
    let log = agent.log();
    assert!(!log.contains(secret), "the secret in the log:\n{log}");
    let events = std::fs::read_to_string(out.join("events.ndjson")).unwrap_or_default();
    assert!(!events.contains(secret), "{events}");
    Ok(())
}

/// The command line of Elastic's DaemonSet (`args: ["-c", FILE, "-e"]`)
/// runs the policy, keeping state under `STATE_PATH`; an Elastic Agent
/// command leasehold has not is refused naming what to use.
#[test]
fn elastic_agents_command_line_runs_the_policy_and_its_other_commands_say_what_to_use() -> Result<()>
{
    let dir = tempfile::tempdir()?;
    let out = dir.path().join("out");
    let state = dir.path().join("state");
    let policy = dir.path().join("agent.yml");
    // Read before the agent writes its first event.
    std::fs::create_dir_all(&out)?;
    let log = dir.path().join("app.log");
    std::fs::write(&log, "hello\n")?;
    std::fs::write(
        &policy,
        format!(
            "outputs:\n  default: {{type: file, path: '{}', filename: events}}\ninputs:\n  - id: hello\n    type: filestream\n    streams:\n      - id: app\n        paths: ['{}']\n",
            out.display(),
            log.display()
        ),
    )?;
    // External inputs, where Elastic's manifest mounts them.
    let inputs_d = state.join("inputs.d");
    std::fs::create_dir_all(&inputs_d)?;
    let other = dir.path().join("other.log");
    std::fs::write(&other, "from inputs.d\n")?;
    let external = |id: &str, path: &std::path::Path| {
        format!(
            "inputs:\n  - id: {id}\n    type: filestream\n    streams:\n      - id: {id}\n        paths: ['{}']\n",
            path.display()
        )
    };
    std::fs::write(inputs_d.join("other.yml"), external("other", &other))?;
    let mut child = Command::new(binary())
        .arg("-c")
        .arg(&policy)
        .arg("-e")
        .env("STATE_PATH", &state)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let shipped = wait_message(&out, "hello", "hello", 0, Duration::from_secs(15))
        .and_then(|_| wait_message(&out, "other", "from inputs.d", 0, Duration::from_secs(15)))
        .and_then(|_| {
            // A file added to inputs.d is loaded without a restart.
            let third = dir.path().join("third.log");
            std::fs::write(&third, "added later\n")?;
            std::fs::write(inputs_d.join("third.yml"), external("third", &third))?;
            wait_message(&out, "third", "added later", 0, Duration::from_secs(15))
        });
    // SAFETY: signalling the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait()?;
    shipped?;
    assert_eq!(status.code(), Some(0));
    // The file's registry (how far it was read) is state.
    let kept = std::fs::read_dir(state.join("data"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert!(kept > 0, "state is kept under STATE_PATH/data");
    let refused = Command::new(binary())
        .args(["enroll", "--url", "https://fleet:8220"])
        .output()?;
    assert_eq!(refused.status.code(), Some(2));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("`enroll`") && err.contains("leasehold run -c"),
        "{err}"
    );
    Ok(())
}
