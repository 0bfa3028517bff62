//! `filestream` on real files, judged from the documents the agent wrote:
//! every line of every file arrives, in order per file, across rotation,
//! truncation, deletion and new files, two SIGKILLs and a graceful
//! restart. Only lines at or after the offset the registry recorded
//! before a SIGKILL may repeat; nothing repeats across a graceful stop.

mod agents;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use agents::*;
use anyhow::{Context, Result, bail};
use serde_json::Value;

/// One line the agent shipped.
#[derive(Debug, Clone)]
struct Shipped {
    source: String,
    seq: u64,
    inode: String,
    offset: u64,
}

/// The file output's documents of input `logs`, in write order; lines
/// torn by a SIGKILL are skipped (their lines were never acknowledged and
/// are shipped again).
fn shipped(out: &Path) -> Result<Vec<Shipped>> {
    let Ok(text) = fs::read_to_string(out.join("logs.ndjson")) else {
        return Ok(Vec::new());
    };
    let mut v = Vec::new();
    for line in complete_lines(&text) {
        let Ok(d) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let msg = d["message"].as_str().unwrap_or_default();
        let mut words = msg.split(' ');
        let (Some(source), Some(seq)) = (words.next(), words.next()) else {
            bail!("unexpected message {msg:?}");
        };
        v.push(Shipped {
            source: source.to_string(),
            seq: seq.parse().with_context(|| format!("in {msg:?}"))?,
            inode: d["log"]["file"]["inode"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            offset: d["log"]["offset"].as_u64().context("log.offset")?,
        });
    }
    Ok(v)
}

/// A source of numbered lines, written to one file at a time.
struct Source {
    name: &'static str,
    path: PathBuf,
    file: Option<File>,
    next: u64,
    paused: bool,
}

impl Source {
    fn open(path: &Path) -> Result<File> {
        Ok(OpenOptions::new().create(true).append(true).open(path)?)
    }
}

/// Appends one CRI line to every active source every 10 ms (bounded),
/// while the test rotates, truncates and deletes under the same lock.
struct Writer {
    sources: Arc<Mutex<Vec<Source>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<()>>>,
}

impl Writer {
    fn start(dir: &Path, names: &[&'static str]) -> Result<Writer> {
        let mut sources = Vec::new();
        for n in names {
            let path = dir.join(format!("{n}.log"));
            sources.push(Source {
                name: n,
                file: Some(Source::open(&path)?),
                path,
                next: 0,
                paused: false,
            });
        }
        let sources = Arc::new(Mutex::new(sources));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (sources.clone(), stop.clone());
        let thread = std::thread::spawn(move || -> Result<()> {
            // At most 10 minutes of writing.
            for _ in 0..60_000 {
                if st.load(Ordering::Acquire) {
                    return Ok(());
                }
                for src in s.lock().unwrap().iter_mut() {
                    if src.paused {
                        continue;
                    }
                    if let Some(f) = &mut src.file {
                        // A partial CRI record every 7th line: joined again.
                        let n = src.next;
                        let t = "2026-12-03T10:00:00.000000000Z";
                        let line = if n % 7 == 3 {
                            format!(
                                "{t} stdout P {} {n:08} part-one/\n{t} stdout F part-two\n",
                                src.name
                            )
                        } else {
                            format!("{t} stdout F {} {n:08} {}\n", src.name, "x".repeat(60))
                        };
                        f.write_all(line.as_bytes())?;
                        src.next += 1;
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(())
        });
        Ok(Writer {
            sources,
            stop,
            thread: Some(thread),
        })
    }

    fn with<T>(&self, name: &str, f: impl FnOnce(&mut Source) -> Result<T>) -> Result<T> {
        let mut all = self.sources.lock().unwrap();
        let s = all
            .iter_mut()
            .find(|s| s.name == name)
            .context("no source")?;
        f(s)
    }

    fn add(&self, dir: &Path, name: &'static str) -> Result<()> {
        let path = dir.join(format!("{name}.log"));
        self.sources.lock().unwrap().push(Source {
            name,
            file: Some(Source::open(&path)?),
            path,
            next: 0,
            paused: false,
        });
        Ok(())
    }

    /// rename + create, as logrotate's `create` does.
    fn rotate(&self, name: &str, to: &str) -> Result<()> {
        self.with(name, |s| {
            let rotated = s.path.with_file_name(to);
            fs::rename(&s.path, &rotated)?;
            s.file = Some(Source::open(&s.path)?);
            Ok(())
        })
    }

    fn pause(&self, name: &str, paused: bool) -> Result<u64> {
        self.with(name, |s| {
            s.paused = paused;
            Ok(s.next)
        })
    }

    /// Every line written so far, per source.
    fn written(&self) -> BTreeMap<String, u64> {
        self.sources
            .lock()
            .unwrap()
            .iter()
            .map(|s| (s.name.to_string(), s.next))
            .collect()
    }

    fn finish(&mut self) -> Result<BTreeMap<String, u64>> {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.join().map_err(|_| anyhow::anyhow!("writer panicked"))??;
        }
        Ok(self.written())
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// Waits until `out` holds lines 0..count of `source`.
fn wait_shipped(out: &Path, source: &str, count: u64, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let got: HashSet<u64> = shipped(out)?
            .iter()
            .filter(|s| s.source == source && s.seq < count)
            .map(|s| s.seq)
            .collect();
        let have = got.len() as u64;
        if have >= count {
            return Ok(());
        }
        if Instant::now() > deadline {
            let missing: Vec<u64> = (0..count).filter(|i| !got.contains(i)).take(20).collect();
            bail!(
                "{source}: {have} of {count} lines shipped within {within:?}; missing (first 20): {missing:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The registry's delivered offset per inode.
fn registry(data: &Path) -> Result<HashMap<String, u64>> {
    let file = data.join("registry/filestream/logs.json");
    let Ok(bytes) = fs::read(&file) else {
        return Ok(HashMap::new());
    };
    let v: Value = serde_json::from_slice(&bytes).with_context(|| file.display().to_string())?;
    let mut out = HashMap::new();
    for f in v["files"].as_array().context("files")? {
        out.insert(
            f["inode"].as_u64().context("inode")?.to_string(),
            f["offset"].as_u64().context("offset")?,
        );
    }
    Ok(out)
}

fn write_policy(dir: &Path) -> Result<PathBuf> {
    let p = dir.join("policy.yml");
    fs::write(
        &p,
        format!(
            r#"agent:
  shutdown_timeout: 10s
outputs:
  default:
    type: file
    path: {out}
    filename: logs
    rotate_every_kb: 1048576
inputs:
  - id: logs
    type: filestream
    paths: [{logs}/*.log]
    prospector.scanner.check_interval: 200ms
    backoff.init: 100ms
    backoff.max: 300ms
    close.on_state_change.inactive: 3s
    parsers:
      - container: {{stream: all}}
"#,
            out = dir.join("out").display(),
            logs = dir.join("logs").display(),
        ),
    )?;
    Ok(p)
}

fn start(dir: &Path, policy: &Path) -> Result<AgentProc> {
    let mut a = AgentProc::spawn_with_env(
        policy,
        Path::new("/nonexistent"),
        1,
        "default",
        &dir.join("out"),
        &[(
            "LEASEHOLD_PATH_DATA",
            dir.join("data").display().to_string(),
        )],
    )?;
    a.wait_ready()?;
    Ok(a)
}

/// Kills the agent after noting the registry's offsets (the delivered
/// offsets at the kill are at least these).
fn kill(a: &mut AgentProc, data: &Path) -> Result<HashMap<String, u64>> {
    let snapshot = registry(data)?;
    a.signal(libc::SIGKILL);
    a.wait_exit(Duration::from_secs(10))?;
    Ok(snapshot)
}

#[test]
fn every_line_arrives_in_order_per_file_across_rotation_truncation_deletion_and_kills() -> Result<()>
{
    let dir = tempfile::tempdir()?;
    let logs = dir.path().join("logs");
    let data = dir.path().join("data");
    let out = dir.path().join("out");
    fs::create_dir_all(&logs)?;
    let policy = write_policy(dir.path())?;
    let mut w = Writer::start(&logs, &["rot", "trunc", "del", "steady"])?;
    let mut a = start(dir.path(), &policy)?;
    let within = Duration::from_secs(30);

    // Rotated by rename while the agent runs.
    wait_shipped(&out, "rot", 50, within)?;
    w.rotate("rot", "rot.log.1")?;

    // Killed; the files grow and one rotates while it is down.
    wait_shipped(&out, "rot", w.written()["rot"], within)?;
    let mut kills = vec![kill(&mut a, &data)?];
    wait_until_written(&w, "steady", 100)?;
    w.rotate("rot", "rot.log.2")?;
    let mut a = start(dir.path(), &policy)?;

    // copytruncate: the lines written before are shipped, then the file
    // is emptied and written on.
    let before = w.pause("trunc", true)?;
    wait_shipped(&out, "trunc", before, within)?;
    w.with("trunc", |s| {
        s.file.as_ref().context("open")?.set_len(0)?;
        Ok(())
    })?;
    w.pause("trunc", false)?;

    // Deleted once shipped; a new file appears.
    let last = w.pause("del", true)?;
    wait_shipped(&out, "del", last, within)?;
    w.with("del", |s| {
        s.file = None;
        fs::remove_file(&s.path)?;
        Ok(())
    })?;
    w.add(&logs, "new")?;
    wait_shipped(&out, "new", 20, within)?;
    wait_shipped(&out, "trunc", before + 20, within)?;

    // Killed a second time.
    kills.push(kill(&mut a, &data)?);
    wait_until_written(&w, "new", 60)?;
    let mut a = start(dir.path(), &policy)?;
    wait_shipped(&out, "new", 80, within)?;

    // A graceful restart: nothing shipped before it is shipped again.
    a.signal(libc::SIGTERM);
    assert_eq!(a.wait_exit(Duration::from_secs(15))?, Some(0));
    let before_graceful = shipped(&out)?;
    let mut a = start(dir.path(), &policy)?;

    let written = w.finish()?;
    for (source, n) in &written {
        if source != "del" {
            wait_shipped(&out, source, *n, within)?;
        }
    }
    a.signal(libc::SIGTERM);
    assert_eq!(a.wait_exit(Duration::from_secs(15))?, Some(0));
    let all = shipped(&out)?;

    // Every line, once or more.
    let mut seen: BTreeMap<(String, u64), Vec<&Shipped>> = BTreeMap::new();
    for s in &all {
        seen.entry((s.source.clone(), s.seq)).or_default().push(s);
    }
    for (source, n) in &written {
        let missing: Vec<u64> = (0..*n)
            .filter(|i| !seen.contains_key(&(source.clone(), *i)))
            .collect();
        assert!(
            missing.is_empty(),
            "{source}: lines {missing:?} never arrived"
        );
    }

    // In order per file: first arrivals by offset within each inode follow
    // the line numbers (`trunc` restarts its offsets after the truncation).
    let mut firsts: HashMap<(String, String), Vec<(u64, u64)>> = HashMap::new();
    for ((source, seq), copies) in &seen {
        let s = copies[0];
        firsts
            .entry((source.clone(), s.inode.clone()))
            .or_default()
            .push((*seq, s.offset));
    }
    let position: HashMap<(String, u64), usize> = {
        let mut p = HashMap::new();
        for (i, s) in all.iter().enumerate() {
            p.entry((s.source.clone(), s.seq)).or_insert(i);
        }
        p
    };
    for ((source, inode), mut lines) in firsts {
        lines.sort();
        let order: Vec<usize> = lines
            .iter()
            .map(|(seq, _)| position[&(source.clone(), *seq)])
            .collect();
        assert!(
            order.windows(2).all(|w| w[0] < w[1]),
            "{source} (inode {inode}): lines arrived out of order"
        );
    }

    // Repeats: only after a SIGKILL, only at or after the offset the
    // registry held before it.
    let mut repeats = 0;
    for copies in seen.values().filter(|c| c.len() > 1) {
        let s = copies[0];
        repeats += copies.len() - 1;
        assert!(
            copies.len() <= kills.len() + 1,
            "{} {} arrived {} times",
            s.source,
            s.seq,
            copies.len()
        );
        let explained = kills
            .iter()
            .any(|snap| snap.get(&s.inode).is_none_or(|acked| s.offset >= *acked));
        assert!(
            explained,
            "{} {} (inode {}, offset {}) repeated although every kill's registry had it delivered",
            s.source, s.seq, s.inode, s.offset
        );
    }
    let earlier: HashSet<(&str, u64)> = before_graceful
        .iter()
        .map(|b| (b.source.as_str(), b.seq))
        .collect();
    let graceful_repeats = all[before_graceful.len()..]
        .iter()
        .filter(|s| earlier.contains(&(s.source.as_str(), s.seq)))
        .count();
    assert_eq!(
        graceful_repeats, 0,
        "lines repeated across a graceful restart"
    );
    let total: u64 = written.values().sum();
    println!(
        "filestream: {total} lines written, {} documents, {repeats} repeated after {} SIGKILLs, 0 after the graceful restart",
        all.len(),
        kills.len()
    );
    Ok(())
}

/// Waits until `source` has `n` more lines written than now.
fn wait_until_written(w: &Writer, source: &str, n: u64) -> Result<()> {
    let target = w.written()[source] + n;
    let deadline = Instant::now() + Duration::from_secs(30);
    while w.written()[source] < target {
        if Instant::now() > deadline {
            bail!("the writer stalled");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// A policy in `dir` of one `filestream` input `id` with the `streams`
/// given (YAML list items indented for it), into the file output `logs`
/// under `dir/out`.
fn streams_policy(dir: &Path, id: &str, streams: &str) -> Result<PathBuf> {
    let policy = dir.join("policy.yml");
    fs::write(
        &policy,
        format!(
            "outputs:\n  default:\n    type: file\n    path: {out}\n    filename: logs\ninputs:\n  - id: {id}\n    type: filestream\n    streams:\n{streams}",
            out = dir.join("out").display(),
        ),
    )?;
    Ok(policy)
}

/// The documents of `out` (file output `logs`) once there are `n`.
fn wait_docs(out: &Path, n: usize) -> Result<Vec<Value>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = fs::read_to_string(out.join("logs.ndjson")).unwrap_or_default();
        let docs: Vec<Value> = complete_lines(&text)
            .map(serde_json::from_str)
            .collect::<Result<_, _>>()?;
        if docs.len() >= n {
            return Ok(docs);
        }
        if Instant::now() > deadline {
            let messages: Vec<String> = docs
                .iter()
                .map(|d| {
                    d["message"]
                        .as_str()
                        .unwrap_or("")
                        .chars()
                        .take(60)
                        .collect()
                })
                .collect();
            bail!("{} of {n} documents: {messages:?}", docs.len());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn container_logs_are_joined_parsed_and_named_from_their_path() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let uid = "5f1c2a3b-0000-4000-8000-00000000abcd";
    let cid = "a".repeat(64);
    // containerd's layout: the pod's file, and the symlink named for it.
    let pod_dir = d.join(format!(
        "pods/kube-system_coredns-7db6d8ff4d-x2x9v_{uid}/coredns"
    ));
    fs::create_dir_all(&pod_dir)?;
    fs::create_dir_all(d.join("containers"))?;
    let t = "2026-12-03T10:00:00.123456789Z";
    let cri = [
        format!("{t} stdout P hello "),
        format!("{t} stderr F an error"),
        format!("{t} stdout P big "),
        format!("{t} stdout F world"),
        format!("{t} stdout F Exception in thread \"main\" java.lang.IllegalStateException: boom"),
        format!("{t} stdout F \tat com.example.App.run(App.java:42)"),
        format!("{t} stdout F \tat com.example.App.main(App.java:7)"),
        format!("{t} stdout F Caused by: java.io.IOException: disk"),
        format!("{t} stdout F \t... 2 more"),
        format!("{t} stdout F done"),
    ];
    fs::write(pod_dir.join("0.log"), cri.join("\n") + "\n")?;
    std::os::unix::fs::symlink(
        pod_dir.join("0.log"),
        d.join(format!(
            "containers/coredns-7db6d8ff4d-x2x9v_kube-system_coredns-{cid}.log"
        )),
    )?;
    // Docker's json-file, a line split at 16 KiB.
    fs::create_dir_all(d.join("docker"))?;
    let long = "y".repeat(20_000);
    let docker = [
        serde_json::json!({"log": &long[..16384], "stream": "stdout", "time": "2026-12-03T10:00:01Z"}),
        serde_json::json!({"log": format!("{}\n", &long[16384..]), "stream": "stdout", "time": "2026-12-03T10:00:01.5Z"}),
        serde_json::json!({"log": "plain\n", "stream": "stderr", "time": "2026-12-03T10:00:02Z"}),
    ];
    let docker: Vec<String> = docker.iter().map(Value::to_string).collect();
    let b = "b".repeat(64);
    fs::write(
        d.join(format!("docker/web-1_shop_web-{b}.log")),
        docker.join("\n") + "\n",
    )?;

    let policy = streams_policy(
        d,
        "containers",
        &format!(
            r#"      - id: cri
        paths: [{d}/containers/*.log]
        prospector.scanner.symlinks: true
        prospector.scanner.check_interval: 200ms
        parsers:
          - container: {{}}
          - multiline:
              pattern: '^\s+at |^Caused by:|^\s+\.\.\. \d+ more'
              match: after
              timeout: 1s
      - id: docker
        paths: [{d}/docker/*.log]
        prospector.scanner.check_interval: 200ms
        parsers:
          - container: {{format: docker}}
"#,
            d = d.display(),
        ),
    )?;
    let mut a = start(d, &policy)?;
    let docs = wait_docs(&d.join("out"), 6)?;
    // Visible in /metrics: one file open per stream, every byte read.
    let (_, metrics) = a.get("/metrics")?;
    let value = |name: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
    };
    assert_eq!(
        value("leasehold_filestream_files_open{stream=\"cri\"}"),
        Some(1.0),
        "{metrics}"
    );
    let cri_bytes = fs::metadata(pod_dir.join("0.log"))?.len() as f64;
    assert_eq!(
        value("leasehold_filestream_bytes_read_total{stream=\"cri\"}"),
        Some(cri_bytes)
    );
    assert_eq!(
        value("leasehold_filestream_files_open{stream=\"docker\"}"),
        Some(1.0)
    );
    a.signal(libc::SIGTERM);
    assert_eq!(a.wait_exit(Duration::from_secs(15))?, Some(0));
    let docs = wait_docs(&d.join("out"), docs.len())?;
    let find = |m: &str| {
        docs.iter()
            .find(|x| x["message"] == m)
            .with_context(|| format!("no document {:?}", &m[..m.len().min(60)]))
    };
    let hello = find("hello big world")?;
    assert_eq!(hello["stream"], "stdout");
    assert_eq!(hello["@timestamp"], "2026-12-03T10:00:00.123456Z");
    assert_eq!(hello["kubernetes"]["namespace"], "kube-system");
    assert_eq!(
        hello["kubernetes"]["pod"]["name"],
        "coredns-7db6d8ff4d-x2x9v"
    );
    assert_eq!(
        hello["kubernetes"]["pod"]["uid"], uid,
        "from the symlink's target"
    );
    assert_eq!(hello["kubernetes"]["container"]["name"], "coredns");
    assert_eq!(hello["container"]["id"], cid);
    assert_eq!(hello["data_stream"]["dataset"], "kubernetes.container_logs");
    assert_eq!(hello["input"]["type"], "filestream");
    assert_eq!(find("an error")?["stream"], "stderr");
    let trace = docs
        .iter()
        .find(|x| {
            x["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("Exception"))
        })
        .context("no stack trace")?;
    assert_eq!(
        trace["message"],
        "Exception in thread \"main\" java.lang.IllegalStateException: boom\n\tat com.example.App.run(App.java:42)\n\tat com.example.App.main(App.java:7)\nCaused by: java.io.IOException: disk\n\t... 2 more"
    );
    assert_eq!(trace["log"]["flags"], serde_json::json!(["multiline"]));
    find("done")?;
    let joined = find(&long)?;
    assert_eq!(
        joined["@timestamp"], "2026-12-03T10:00:01.000000Z",
        "the first part's time"
    );
    assert_eq!(joined["kubernetes"]["namespace"], "shop");
    assert_eq!(find("plain")?["stream"], "stderr");
    assert_eq!(docs.len(), 6, "nothing split, nothing extra");
    Ok(())
}

/// As Filebeat's `ndjson` parser: a decoded line's keys are the document
/// (its own `message` included) and the raw line is not kept beside them;
/// `message_key` names the text; a line that is no JSON object keeps its
/// text and is marked.
#[test]
fn ndjson_lines_become_their_keys_without_the_raw_line_beside_them() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    fs::create_dir_all(d.join("logs"))?;
    fs::write(
        d.join("logs/root.log"),
        "{\"message\":\"m1\",\"level\":\"info\",\"n\":1}\n{\"level\":\"debug\"}\nnot json\n",
    )?;
    fs::write(
        d.join("logs/keyed.log"),
        "{\"msg\":\"k1\",\"level\":\"warn\"}\n",
    )?;
    let policy = streams_policy(
        d,
        "json",
        &format!(
            r#"      - id: root
        paths: [{d}/logs/root.log]
        parsers:
          - ndjson: {{target: "", add_error_key: true}}
      - id: keyed
        paths: [{d}/logs/keyed.log]
        parsers:
          - ndjson: {{target: "", message_key: msg}}
"#,
            d = d.display(),
        ),
    )?;
    let mut a = start(d, &policy)?;
    wait_docs(&d.join("out"), 4)?;
    a.signal(libc::SIGTERM);
    assert_eq!(a.wait_exit(Duration::from_secs(15))?, Some(0));
    // Read once the agent has stopped, so that an extra document shows.
    let docs = wait_docs(&d.join("out"), 4)?;
    let by_level = |level: &str| {
        docs.iter()
            .find(|x| x["level"] == level)
            .with_context(|| format!("no document of level {level}: {docs:?}"))
    };
    let m1 = by_level("info")?;
    assert_eq!(m1["message"], "m1", "the decoded message, not the line");
    assert_eq!(m1["n"], 1);
    assert!(
        !m1.to_string().contains("\\\"message\\\""),
        "the raw line is nowhere in the document: {m1}"
    );
    let bare = by_level("debug")?;
    assert!(
        bare.get("message").is_none(),
        "a line without a message has none: {bare}"
    );
    let keyed = by_level("warn")?;
    assert_eq!(keyed["message"], "k1");
    assert_eq!(keyed["msg"], "k1");
    let raw = docs
        .iter()
        .find(|x| x["message"] == "not json")
        .context("the line that is no JSON")?;
    assert!(
        raw["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("not a JSON object")),
        "{raw}"
    );
    assert_eq!(docs.len(), 4, "{docs:?}");
    Ok(())
}

#[test]
fn a_file_truncated_and_written_past_its_old_end_while_idle_is_read_from_its_start() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    fs::create_dir_all(d.join("logs"))?;
    let log = d.join("logs/app.log");
    let lines = |tag: &str, n: usize| -> String {
        (0..n)
            .map(|i| format!("{tag} {i:08} {}\n", "z".repeat(40)))
            .collect()
    };
    fs::write(&log, lines("old", 10))?;
    let policy = d.join("policy.yml");
    fs::write(
        &policy,
        format!(
            "outputs:\n  default: {{type: file, path: {out}, filename: logs}}\ninputs:\n  - id: logs\n    type: filestream\n    paths: [{logs}/*.log]\n    prospector.scanner.check_interval: 200ms\n    backoff.init: 1s\n    backoff.max: 2s\n",
            out = d.join("out").display(),
            logs = d.join("logs").display(),
        ),
    )?;
    let mut a = start(d, &policy)?;
    wait_shipped(&d.join("out"), "old", 10, Duration::from_secs(30))?;
    // The reader is idle at the end; the file is emptied and written again,
    // longer than before, before it looks next.
    fs::write(&log, lines("new", 30))?;
    wait_shipped(&d.join("out"), "new", 30, Duration::from_secs(30))?;
    a.signal(libc::SIGTERM);
    assert_eq!(a.wait_exit(Duration::from_secs(15))?, Some(0));
    let all = shipped(&d.join("out"))?;
    let new: Vec<u64> = all
        .iter()
        .filter(|s| s.source == "new")
        .map(|s| s.seq)
        .collect();
    assert_eq!(
        new,
        (0..30).collect::<Vec<_>>(),
        "every new line once, in order, none cut"
    );
    Ok(())
}

/// `leasehold_filestream_files_open{stream}` from `/metrics`.
fn files_open(a: &AgentProc, stream: &str) -> Result<Option<f64>> {
    let (_, metrics) = a.get("/metrics")?;
    let name = format!("leasehold_filestream_files_open{{stream=\"{stream}\"}} ");
    Ok(metrics
        .lines()
        .find_map(|l| l.strip_prefix(&name))
        .and_then(|v| v.trim().parse().ok()))
}

/// Waits until stream `stream` has no file open.
fn wait_all_closed(a: &AgentProc, stream: &str, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    while files_open(a, stream)? != Some(0.0) {
        if Instant::now() > deadline {
            bail!("{stream}: files still open after {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Numbered lines `from..to` of `source`, appended to `path`.
fn append_lines(path: &Path, source: &str, from: u64, to: u64) -> Result<()> {
    let mut f = Source::open(path)?;
    for i in from..to {
        writeln!(f, "{source} {i:08} {}", "w".repeat(40))?;
    }
    Ok(())
}

#[test]
fn lines_appended_to_a_closed_file_renamed_before_the_next_scan_arrive_once() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let out = d.join("out");
    // `outside`: renamed to a name its glob does not match; `inside`:
    // renamed to a name its glob still matches.
    for sub in ["outside", "inside"] {
        fs::create_dir_all(d.join(sub))?;
    }
    let a_log = d.join("outside/a.log");
    let b_log = d.join("inside/b.log");
    append_lines(&a_log, "a", 0, 10)?;
    append_lines(&b_log, "b", 0, 10)?;
    // Readers close 0.5 s after their last line; the next scan comes 6 s
    // after the first, long after the append and rename below.
    let stream = |id: &str, paths: String| {
        format!(
            "  - id: {id}\n    type: filestream\n    paths: [{paths}]\n    prospector.scanner.check_interval: 6s\n    close.on_state_change.inactive: 500ms\n    backoff.init: 100ms\n    backoff.max: 200ms\n"
        )
    };
    let policy = d.join("policy.yml");
    fs::write(
        &policy,
        format!(
            "agent:\n  shutdown_timeout: 10s\noutputs:\n  default: {{type: file, path: {out}, filename: logs}}\ninputs:\n{}{}",
            stream("outside", format!("{}/*.log", d.join("outside").display())),
            stream("inside", format!("{}/b.log*", d.join("inside").display())),
            out = out.display(),
        ),
    )?;
    let mut a = start(d, &policy)?;
    let within = Duration::from_secs(30);
    wait_shipped(&out, "a", 10, within)?;
    wait_shipped(&out, "b", 10, within)?;
    // Both files were read to their end: their readers close as inactive.
    wait_all_closed(&a, "outside", within)?;
    wait_all_closed(&a, "inside", within)?;

    // Before the next scan: appended to, renamed, and a new file created
    // under the old name (logrotate's `create`).
    append_lines(&a_log, "a", 10, 20)?;
    fs::rename(&a_log, d.join("outside/a.log.1"))?;
    append_lines(&a_log, "c", 0, 5)?;
    append_lines(&b_log, "b", 10, 20)?;
    fs::rename(&b_log, d.join("inside/b.log.1"))?;
    append_lines(&b_log, "e", 0, 5)?;

    for (source, n) in [("a", 20), ("c", 5), ("b", 20), ("e", 5)] {
        wait_shipped(&out, source, n, within)?;
    }
    a.signal(libc::SIGTERM);
    assert_eq!(a.wait_exit(Duration::from_secs(15))?, Some(0));

    let mut count: BTreeMap<(String, u64), usize> = BTreeMap::new();
    for s in shipped(&out)? {
        *count.entry((s.source, s.seq)).or_default() += 1;
    }
    let repeated: Vec<_> = count.iter().filter(|(_, n)| **n > 1).collect();
    assert!(repeated.is_empty(), "lines repeated: {repeated:?}");
    assert_eq!(count.len(), 50, "every line once: {count:?}");
    Ok(())
}

/// Elastic's `logfile` input as its system integration writes it (two
/// streams, `system.auth` and `system.syslog`, `exclude_files`, an indented
/// continuation joined by `multiline`, `ignore_older`): read by the
/// filestream machinery into each stream's data stream; the excluded
/// rotated file is not read.
#[test]
fn elastics_logfile_input_reads_auth_and_syslog_with_their_keys() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let logs = d.join("var-log");
    fs::create_dir_all(&logs)?;
    fs::write(
        logs.join("auth.log"),
        "Dec  4 10:00:00 host sshd[1]: Accepted publickey for ops\nDec  4 10:00:01 host sudo: ops : TTY=pts/0\n    COMMAND=/bin/true\n",
    )?;
    fs::write(
        logs.join("auth.log.2.gz"),
        "not gzip, and excluded anyway\n",
    )?;
    fs::write(
        logs.join("syslog"),
        "Dec  4 10:00:02 host kernel: one\nDec  4 10:00:03 host kernel: two\n",
    )?;
    let policy = d.join("policy.yml");
    fs::write(
        &policy,
        format!(
            r#"outputs:
  default: {{type: file, path: '{out}', filename: logs}}
inputs:
  - id: system-logs
    type: logfile
    meta: {{package: {{name: system, version: 1.0.0}}}}
    data_stream: {{namespace: default}}
    streams:
      - data_stream: {{dataset: system.auth, type: logs}}
        paths: ['{l}/auth.log*']
        exclude_files: ['.gz$']
        multiline: {{pattern: '^\s', match: after, timeout: 1s}}
        ignore_older: 72h
        scan_frequency: 200ms
      - data_stream: {{dataset: system.syslog, type: logs}}
        paths: ['{l}/syslog*']
        exclude_files: ['.gz$']
        ignore_older: 72h
        scan_frequency: 200ms
"#,
            out = d.join("out").display(),
            l = logs.display(),
        ),
    )?;
    let o = std::process::Command::new(binary())
        .args(["check", "-c"])
        .arg(&policy)
        .output()?;
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        o.stderr.is_empty(),
        "no warning: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let mut a = start(d, &policy)?;
    let docs = wait_docs(&d.join("out"), 4)?;
    let of = |dataset: &str| -> Vec<String> {
        docs.iter()
            .filter(|x| x["data_stream"]["dataset"] == dataset)
            .filter_map(|x| x["message"].as_str().map(str::to_string))
            .collect()
    };
    assert_eq!(
        of("system.auth"),
        [
            "Dec  4 10:00:00 host sshd[1]: Accepted publickey for ops",
            "Dec  4 10:00:01 host sudo: ops : TTY=pts/0\n    COMMAND=/bin/true",
        ]
    );
    assert_eq!(
        of("system.syslog"),
        [
            "Dec  4 10:00:02 host kernel: one",
            "Dec  4 10:00:03 host kernel: two"
        ]
    );
    assert!(
        !docs
            .iter()
            .any(|x| x["message"].as_str().is_some_and(|m| m.contains("gzip"))),
        "the .gz file is excluded"
    );
    a.signal(libc::SIGTERM);
    assert_eq!(a.wait_exit(Duration::from_secs(15))?, Some(0));
    Ok(())
}
