//! Failures that used to be silent are reported: in `/status`, in `/readyz`
//! where they affect readiness, and by `leasehold status --agent` exiting
//! with 1. The cases: a reload that moves an input to an output added by
//! the reload (the input waits for a restart), a `filestream` registry
//! that cannot be written, and a scrape target that answers more than a
//! scrape reads.

mod agents;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use agents::*;
use anyhow::{Context, Result, bail};
use serde_json::Value;

fn start(policy: &Path, out: &Path) -> Result<AgentProc> {
    // No election in these policies: the kubeconfig is never read.
    AgentProc::start(policy, Path::new("/nonexistent"), 1, "default", out)
}

/// `leasehold status --agent` of `a`: exit code and output.
fn status_agent(a: &AgentProc) -> Result<(i32, String)> {
    let out = Command::new(binary())
        .args(["status", "--agent", &format!("http://{}", a.http)])
        .output()?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    ))
}

/// Polls `/status` until `ok` holds for it (bounded).
fn wait_status(
    a: &AgentProc,
    within: Duration,
    what: &str,
    ok: impl Fn(&Value) -> bool,
) -> Result<Value> {
    let deadline = Instant::now() + within;
    loop {
        let s = a.status()?;
        if ok(&s) {
            return Ok(s);
        }
        if Instant::now() > deadline {
            bail!("{what} not shown within {within:?}: {s}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn problem<'a>(s: &'a Value, component: &str) -> Option<&'a Value> {
    s["problems"]
        .as_array()?
        .iter()
        .find(|p| p["component"] == component)
}

/// A reload that adds an output and moves an input to it: the input waits
/// for a restart (outputs start at the next start). Before, the reload
/// counted as a success, `/status` listed no problem and `status --agent`
/// exited 0.
#[test]
fn a_reload_whose_output_waits_for_a_restart_is_reported() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let out = dir.path().join("out");
    let policy = dir.path().join("policy.yml");
    let write = |extra_output: &str, use_output: &str| -> Result<()> {
        std::fs::write(
            &policy,
            format!(
                "outputs:\n  default: {{type: file, path: '{}', filename: events}}\n{extra_output}inputs:\n  - id: moving\n    type: exec\n    use_output: {use_output}\n    command: [sh, -c, 'while :; do echo x; sleep 0.1; done']\n",
                out.display()
            ),
        )?;
        Ok(())
    };
    write("", "default")?;
    let a = start(&policy, &out)?;
    assert_eq!(status_agent(&a)?.0, 0, "healthy at first");
    write(
        &format!(
            "  second: {{type: file, path: '{}', filename: second}}\n",
            dir.path().join("second").display()
        ),
        "second",
    )?;
    let s = wait_status(&a, Duration::from_secs(10), "the pending restart", |s| {
        problem(s, "policy").is_some()
    })?;
    let p = problem(&s, "policy").context("policy problem")?;
    assert!(
        p["error"]
            .as_str()
            .is_some_and(|e| e.contains("added `second`") && e.contains("restart")),
        "{s}"
    );
    assert_eq!(p["affects_readiness"], false, "{s}");
    let dropped = &s["inputs"]["dropped"][0];
    assert_eq!(dropped["id"], "moving", "{s}");
    assert!(
        dropped["reason"]
            .as_str()
            .is_some_and(|r| r.contains("restarts")),
        "{s}"
    );
    let (code, text) = status_agent(&a)?;
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("`outputs:` changed"), "{text}");
    assert_eq!(
        a.get("/readyz")?.0,
        200,
        "a pending restart leaves it ready"
    );
    // Back to the running outputs: the problem is gone.
    write("", "default")?;
    wait_status(&a, Duration::from_secs(10), "the problem cleared", |s| {
        problem(s, "policy").is_none()
    })?;
    assert_eq!(status_agent(&a)?.0, 0);
    Ok(())
}

/// A `filestream` registry that cannot be written makes the agent not
/// ready and is named in `/status` and by `status --agent`; once it can be
/// written again, the agent is ready. Before, it logged an ERROR every
/// second while `/readyz` and `status --agent` said healthy.
#[test]
fn a_registry_that_cannot_be_written_is_reported_and_fails_readiness() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let out = dir.path().join("out");
    let logs = dir.path().join("logs");
    std::fs::create_dir(&logs)?;
    let data = dir.path().join("data");
    let policy = dir.path().join("policy.yml");
    std::fs::write(
        &policy,
        format!(
            "outputs:\n  default: {{type: file, path: '{}', filename: events}}\ninputs:\n  - id: files\n    type: filestream\n    paths: ['{}/*.log']\n    prospector.scanner.check_interval: 200ms\n",
            out.display(),
            logs.display()
        ),
    )?;
    let mut a = AgentProc::spawn_with_env(
        &policy,
        Path::new("/nonexistent"),
        1,
        "default",
        &out,
        &[("LEASEHOLD_PATH_DATA", data.display().to_string())],
    )?;
    a.wait_ready()?;
    std::fs::write(logs.join("a.log"), "one\n")?;
    let registry = data.join("registry").join("filestream");
    // The file appears after the first scan; the next one (200 ms) finds
    // it. The default interval (10 s) would make this a race.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !registry.join("files.json").exists() {
        if Instant::now() > deadline {
            bail!("no registry written under {}", registry.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(a.get("/readyz")?.0, 200);
    // The registry's directory becomes a file: nothing can be written
    // there (root included).
    let aside = data.join("registry").join("filestream.aside");
    std::fs::rename(&registry, &aside)?;
    std::fs::write(&registry, "")?;
    std::fs::write(logs.join("a.log"), "one\ntwo\n")?;
    let s = wait_status(&a, Duration::from_secs(10), "the registry problem", |s| {
        problem(s, "filestream registry").is_some()
    })?;
    let p = problem(&s, "filestream registry").context("problem")?;
    assert_eq!(p["affects_readiness"], true, "{s}");
    let (code, body) = a.get("/readyz")?;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("filestream registry"), "{body}");
    let (code, text) = status_agent(&a)?;
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("filestream registry"), "{text}");
    // Writable again: ready again.
    std::fs::remove_file(&registry)?;
    std::fs::rename(&aside, &registry)?;
    wait_status(&a, Duration::from_secs(10), "the problem cleared", |s| {
        problem(s, "filestream registry").is_none()
    })?;
    assert_eq!(a.get("/readyz")?.0, 200);
    Ok(())
}

/// A scrape whose answer is larger than a scrape reads (64 MiB) shows the
/// input failing in `/status`, with the fix, and `status --agent` exits 1.
/// Before, it failed every period with only a WARN while `/status` showed
/// the input healthy.
#[test]
fn a_scrape_over_the_size_limit_shows_the_input_failing() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let www = dir.path().join("www");
    std::fs::create_dir(&www)?;
    // 65 MiB of valid exposition text.
    {
        use std::io::Write;
        let mut f = std::io::BufWriter::new(std::fs::File::create(www.join("metrics"))?);
        let line = format!("big_metric{{k=\"{}\"}} 1\n", "v".repeat(100));
        let mut written = 0usize;
        let mut n = 0u64;
        while written < 65 << 20 {
            let l = line.replace("big_metric", &format!("big_metric_{n}"));
            f.write_all(l.as_bytes())?;
            written += l.len();
            n += 1;
        }
    }
    let server = agents::static_http::StaticHttp::start(&www)?;
    let out = dir.path().join("out");
    let policy = dir.path().join("policy.yml");
    std::fs::write(
        &policy,
        format!(
            "outputs:\n  default: {{type: file, path: '{}', filename: events}}\ninputs:\n  - id: big\n    type: prometheus/metrics\n    streams:\n      - metricsets: [collector]\n        hosts: ['http://127.0.0.1:{}']\n        metrics_path: /metrics\n        period: 1s\n",
            out.display(),
            server.port
        ),
    )?;
    let a = start(&policy, &out)?;
    let s = wait_status(&a, Duration::from_secs(20), "the failing scrape", |s| {
        s["inputs"]["running"][0]["state"] == "failing"
    })?;
    let err = s["inputs"]["running"][0]["last_error"]
        .as_str()
        .unwrap_or("");
    assert!(err.contains("larger than 64 MiB"), "{s}");
    let (code, text) = status_agent(&a)?;
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("larger than 64 MiB"), "{text}");
    Ok(())
}

/// `max_response_size` moves the limit both ways: a stream limited below
/// its target's answer fails naming the limit and the setting, while a
/// stream of the same agent allowed more ships the same answer.
#[test]
fn max_response_size_sets_the_most_a_scrape_reads() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let www = dir.path().join("www");
    std::fs::create_dir(&www)?;
    // About 5 KiB of exposition text.
    let text: String = (0..50)
        .map(|i| format!("sized_metric{{k=\"{i}{}\"}} {i}\n", "v".repeat(60)))
        .collect();
    assert!((4096..8192).contains(&text.len()), "{}", text.len());
    std::fs::write(www.join("metrics"), &text)?;
    let server = agents::static_http::StaticHttp::start(&www)?;
    let out = dir.path().join("out");
    let policy = dir.path().join("policy.yml");
    let stream = |id: &str, limit: &str| {
        format!(
            "  - id: {id}\n    type: prometheus/metrics\n    streams:\n      - metricsets: [collector]\n        hosts: ['http://127.0.0.1:{}']\n        period: 1s\n        max_response_size: {limit}\n",
            server.port
        )
    };
    std::fs::write(
        &policy,
        format!(
            "outputs:\n  default: {{type: file, path: '{}', filename: events}}\ninputs:\n{}{}",
            out.display(),
            stream("small", "2KiB"),
            stream("large", "8KiB")
        ),
    )?;
    let a = start(&policy, &out)?;
    let input = |s: &Value, id: &str| -> Value {
        s["inputs"]["running"]
            .as_array()
            .and_then(|l| l.iter().find(|i| i["id"] == id))
            .cloned()
            .unwrap_or(Value::Null)
    };
    let s = wait_status(&a, Duration::from_secs(20), "the small one failing", |s| {
        input(s, "small")["state"] == "failing"
    })?;
    let err = input(&s, "small")["last_error"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        err.contains("larger than 2 KiB") && err.contains("max_response_size"),
        "{err}"
    );
    assert_ne!(input(&s, "large")["state"], "failing", "{s}");
    // The large one ships every series of the answer (one label set each).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let evs = read_events(&out)?;
        let shipped = evs.iter().filter(|e| e.input == "large").count();
        assert!(
            evs.iter().all(|e| e.input != "small"),
            "the failing scrape shipped a part"
        );
        if shipped >= 50 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the large stream shipped {shipped} documents"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}
