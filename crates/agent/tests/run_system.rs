//! `system/metrics` on this machine's real `/proc`, checked against the
//! same files read by the test; and with `system.hostfs` pointing at a
//! recorded host root, checked value by value.

mod agents;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use agents::*;
use anyhow::{Context, Result, bail};
use leasehold::inputs::system::METRICSETS;
use serde_json::Value;

/// Documents of `metricset` in `out` (the file output `system.ndjson`).
fn docs_of(out: &Path, metricset: &str) -> Result<Vec<Value>> {
    let Ok(text) = std::fs::read_to_string(out.join("system.ndjson")) else {
        return Ok(Vec::new());
    };
    let mut v = Vec::new();
    for line in complete_lines(&text) {
        let d: Value = serde_json::from_str(line)?;
        if d["metricset"]["name"] == metricset {
            v.push(d);
        }
    }
    Ok(v)
}

fn wait_docs(
    out: &Path,
    metricsets: &[&str],
    within: Duration,
) -> Result<BTreeMap<String, Vec<Value>>> {
    let deadline = Instant::now() + within;
    loop {
        let mut all = BTreeMap::new();
        for m in metricsets {
            all.insert(m.to_string(), docs_of(out, m)?);
        }
        if all.values().all(|v| !v.is_empty()) {
            return Ok(all);
        }
        if Instant::now() > deadline {
            let missing: Vec<&String> = all
                .iter()
                .filter(|(_, v)| v.is_empty())
                .map(|(k, _)| k)
                .collect();
            bail!("no documents of {missing:?} within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn policy(dir: &Path, hostfs: Option<&Path>, metricsets: &[&str]) -> Result<std::path::PathBuf> {
    let hostfs = hostfs.map_or(String::new(), |h| {
        format!("    system.hostfs: {}\n", h.display())
    });
    let p = dir.join("policy.yml");
    std::fs::write(
        &p,
        format!(
            "outputs:\n  default:\n    type: file\n    path: {}\n    filename: system\ninputs:\n  - id: host\n    type: system/metrics\n    period: 1s\n{hostfs}    metricsets: [{}]\n",
            dir.join("out").display(),
            metricsets.join(", ")
        ),
    )?;
    Ok(p)
}

fn meminfo_kib(key: &str, text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
}

#[test]
fn values_match_proc_read_by_the_test() -> Result<()> {
    let reads_before = disk_reads()?;
    // A listening socket of our own, for socket_summary.
    let _listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let dir = tempfile::tempdir()?;
    let p = policy(dir.path(), None, &METRICSETS)?;
    let _agent = AgentProc::start(
        &p,
        Path::new("/nonexistent"),
        1,
        "default",
        &dir.path().join("out"),
    )?;
    // cpu needs two readings: the first period after start has one.
    let docs = wait_docs(
        &dir.path().join("out"),
        &[
            "cpu",
            "load",
            "memory",
            "network",
            "process_summary",
            "uptime",
            "filesystem",
            "diskio",
            "fsstat",
            "process",
            "socket_summary",
        ],
        Duration::from_secs(10),
    )?;

    let meminfo = std::fs::read_to_string("/proc/meminfo")?;
    let mem = &docs["memory"][0]["system"]["memory"];
    assert_eq!(
        mem["total"].as_u64(),
        meminfo_kib("MemTotal", &meminfo).map(|k| k * 1024),
        "{mem}"
    );
    assert_eq!(
        mem["swap"]["total"].as_u64(),
        meminfo_kib("SwapTotal", &meminfo).map(|k| k * 1024)
    );
    let used_pct = mem["actual"]["used"]["pct"]
        .as_f64()
        .context("actual.used.pct")?;
    assert!((0.0..=1.0).contains(&used_pct), "{mem}");

    let stat = std::fs::read_to_string("/proc/stat")?;
    let cores = stat
        .lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .count();
    for d in &docs["cpu"] {
        let cpu = &d["system"]["cpu"];
        assert_eq!(cpu["cores"].as_u64(), Some(cores as u64));
        let sum: f64 = [
            "user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal",
        ]
        .iter()
        .map(|s| cpu[s]["pct"].as_f64().unwrap_or(f64::NAN))
        .sum();
        assert!(
            (sum - cores as f64).abs() < 0.01,
            "state shares sum to {sum}, cores {cores}: {cpu}"
        );
        let total = cpu["total"]["norm"]["pct"].as_f64().unwrap_or(f64::NAN);
        assert!((0.0..=1.0).contains(&total), "{cpu}");
    }

    // Load and uptime: the document's time and the test's reading agree.
    let load_now: Vec<f64> = std::fs::read_to_string("/proc/loadavg")?
        .split_whitespace()
        .take(3)
        .map(|x| x.parse().unwrap_or(f64::NAN))
        .collect();
    let load = &docs["load"].last().context("load")?["system"]["load"];
    assert!(
        (load["15"].as_f64().unwrap_or(f64::NAN) - load_now[2]).abs() < 0.5,
        "{load} vs {load_now:?}"
    );
    assert_eq!(load["cores"].as_u64(), Some(cores as u64));
    let up = docs["uptime"].last().context("uptime")?;
    let at = parse_ts(up["@timestamp"].as_str().unwrap_or(""))?;
    let up_now: f64 = std::fs::read_to_string("/proc/uptime")?
        .split_whitespace()
        .next()
        .and_then(|x| x.parse().ok())
        .context("/proc/uptime")?;
    let expected_ms = up_now * 1000.0 - ((now_us() - at) / 1000) as f64;
    let got_ms = up["system"]["uptime"]["duration"]["ms"]
        .as_f64()
        .unwrap_or(f64::NAN);
    assert!(
        (got_ms - expected_ms).abs() < 2000.0,
        "uptime {got_ms} ms, expected about {expected_ms}"
    );

    let names: Vec<&str> = docs["network"]
        .iter()
        .filter_map(|d| d["system"]["network"]["name"].as_str())
        .collect();
    assert!(names.contains(&"lo"), "{names:?}");
    let summary = &docs["process_summary"][0]["system"]["process"]["summary"];
    let total = summary["total"].as_u64().unwrap_or(0);
    let parts: u64 = [
        "running", "sleeping", "stopped", "zombie", "idle", "dead", "unknown",
    ]
    .iter()
    .map(|k| summary[k].as_u64().unwrap_or(0))
    .sum();
    assert!(total > 0 && parts == total, "{summary}");
    // Disks: each count lies between the test's readings before the agent
    // started and now (the counters only grow).
    let reads_after = disk_reads()?;
    for d in &docs["diskio"] {
        let io = &d["system"]["diskio"];
        let name = io["name"].as_str().context("diskio.name")?;
        let got = io["read"]["count"].as_u64().context("read.count")?;
        let (lo, hi) = (reads_before.get(name), reads_after.get(name));
        assert!(
            lo.zip(hi)
                .is_some_and(|(lo, hi)| (*lo..=*hi).contains(&got)),
            "{name}: {got} reads, /proc/diskstats had {lo:?} before and {hi:?} after"
        );
    }
    // File systems: the size is the kernel's (statvfs now); free space
    // moves only by what was written meanwhile.
    let root = docs["filesystem"]
        .iter()
        .map(|d| &d["system"]["filesystem"])
        .find(|f| f["mount_point"] == "/")
        .context("no filesystem document for /")?;
    let (total, free) = statvfs_bytes("/")?;
    assert_eq!(root["total"].as_u64(), Some(total), "{root}");
    let got_free = root["free"].as_u64().context("free")?;
    assert!(
        got_free.abs_diff(free) < 256 << 20,
        "free {got_free} vs {free} now: {root}"
    );
    let used = root["used"]["bytes"].as_u64().context("used.bytes")?;
    assert_eq!(used, total - got_free, "{root}");
    // fsstat sums the filesystem documents of the same period.
    let fs = &docs["fsstat"][0];
    let at = &fs["@timestamp"];
    let same: Vec<&Value> = docs["filesystem"]
        .iter()
        .filter(|d| &d["@timestamp"] == at)
        .collect();
    if !same.is_empty() {
        let total: u64 = same
            .iter()
            .filter_map(|d| d["system"]["filesystem"]["total"].as_u64())
            .sum();
        assert_eq!(
            fs["system"]["fsstat"]["count"].as_u64(),
            Some(same.len() as u64),
            "{fs}"
        );
        assert_eq!(
            fs["system"]["fsstat"]["total_size"]["total"].as_u64(),
            Some(total),
            "{fs}"
        );
    }
    // socket_summary counts our listener among the listening sockets.
    let sockets = &docs["socket_summary"][0]["system"]["socket"]["summary"];
    assert!(
        sockets["tcp"]["all"]["listening"].as_u64() >= Some(1),
        "{sockets}"
    );
    assert!(
        sockets["all"]["count"].as_u64() >= sockets["tcp"]["all"]["count"].as_u64(),
        "{sockets}"
    );
    // process: at most 5 by CPU and 5 by memory per period, each a real
    // process with Metricbeat's fields; CPU shares from the second reading.
    let by_period = |at: &Value| {
        docs_of(&dir.path().join("out"), "process")
            .unwrap_or_default()
            .into_iter()
            .filter(|d| &d["@timestamp"] == at)
            .count()
    };
    let p0 = &docs["process"][0];
    assert!((1..=10).contains(&by_period(&p0["@timestamp"])), "{p0}");
    assert!(p0["process"]["pid"].as_u64().is_some(), "{p0}");
    assert!(
        p0["system"]["process"]["memory"]["rss"]["bytes"]
            .as_u64()
            .is_some(),
        "{p0}"
    );
    assert!(
        p0["system"]["process"]["cpu"]["start_time"].is_string(),
        "{p0}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !docs_of(&dir.path().join("out"), "process")?
        .iter()
        .any(|d| d["system"]["process"]["cpu"]["total"]["norm"]["pct"].is_number())
    {
        anyhow::ensure!(
            Instant::now() < deadline,
            "no CPU share in a second reading"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Documents go to one data stream per metricset, with stable ids.
    let d = &docs["memory"][0];
    assert_eq!(d["data_stream"]["dataset"], "system.memory");
    assert_eq!(d["data_stream"]["type"], "metrics");
    assert_eq!(d["@metadata"]["_id"].as_str().map(str::len), Some(32));
    Ok(())
}

/// Reads completed per block device, from `/proc/diskstats`.
fn disk_reads() -> Result<BTreeMap<String, u64>> {
    let text = std::fs::read_to_string("/proc/diskstats")?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((f.get(2)?.to_string(), f.get(3)?.parse().ok()?))
        })
        .collect())
}

/// Total and free bytes of the file system holding `path`.
fn statvfs_bytes(path: &str) -> Result<(u64, u64)> {
    let c = std::ffi::CString::new(path)?;
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid C string and `s` a writable statvfs.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        bail!("statvfs {path}: {}", std::io::Error::last_os_error());
    }
    let frsize = s.f_frsize as u64;
    Ok((s.f_blocks as u64 * frsize, s.f_bfree as u64 * frsize))
}

/// Writes a host root with recorded `/proc` files.
fn recorded_host(root: &Path) -> Result<()> {
    let proc_dir = root.join("proc");
    std::fs::create_dir_all(proc_dir.join("net"))?;
    std::fs::create_dir_all(proc_dir.join("1/net"))?;
    std::fs::create_dir_all(proc_dir.join("77"))?;
    std::fs::create_dir_all(root.join("data"))?;
    let files = [
        (
            "stat",
            "cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 50 0 50 400 0 0 0 0 0 0\ncpu1 50 0 50 400 0 0 0 0 0 0\n",
        ),
        ("loadavg", "1.50 1.00 0.50 1/100 77\n"),
        (
            "meminfo",
            "MemTotal:        4000 kB\nMemFree:         1000 kB\nMemAvailable:    3000 kB\nSwapTotal:       2000 kB\nSwapFree:        2000 kB\n",
        ),
        ("uptime", "123.45 200.00\n"),
        (
            "net/dev",
            "Inter-| header\n face | header\n  eth7: 11 12 13 14 0 0 0 0 21 22 23 24 0 0 0 0\n",
        ),
        (
            "diskstats",
            "   8       0 vdz 5 0 8 9 6 0 16 10 0 11 12 0 0 0 0\n",
        ),
        ("filesystems", "nodev\tproc\n\text4\n"),
        (
            "1/mounts",
            "proc /proc proc rw 0 0\n/dev/vdz1 /data ext4 rw 0 0\n",
        ),
        ("1/stat", "1 (init) S 0 1 1\n"),
        ("77/stat", "77 (a (b) c) Z 1 77 77\n"),
        ("1/cmdline", "/sbin/init\0splash\0"),
        // The host's sockets (init's network namespace): one listening,
        // one established TCP socket, one UDP socket.
        (
            "1/net/tcp",
            "  sl  local_address rem_address   st tx_queue rx_queue\n   0: 00000000:0016 00000000:0000 0A 00000000:00000000\n   1: 0A000001:0016 0A000002:C350 01 00000000:00000000\n",
        ),
        (
            "1/net/udp",
            "  sl  local_address rem_address   st\n   0: 00000000:0044 00000000:0000 07\n",
        ),
        (
            "1/net/sockstat",
            "sockets: used 3\nTCP: inuse 2 orphan 1 tw 0 alloc 2 mem 2\nUDP: inuse 1 mem 1\n",
        ),
    ];
    for (name, text) in files {
        std::fs::write(proc_dir.join(name), text)?;
    }
    Ok(())
}

#[test]
fn hostfs_reads_the_hosts_files_not_the_containers() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("hostfs");
    recorded_host(&root)?;
    // All but `cpu`: a recorded /proc/stat does not move between readings.
    let ms: Vec<&str> = METRICSETS.into_iter().filter(|m| *m != "cpu").collect();
    let p = policy(dir.path(), Some(&root), &ms)?;
    let _agent = AgentProc::start(
        &p,
        Path::new("/nonexistent"),
        1,
        "default",
        &dir.path().join("out"),
    )?;
    let docs = wait_docs(&dir.path().join("out"), &ms, Duration::from_secs(10))?;
    let get = |m: &str| docs[m][0]["system"].clone();
    assert_eq!(get("load")["load"]["1"], 1.5);
    assert_eq!(
        get("load")["load"]["norm"]["1"],
        0.75,
        "2 cores in the recorded stat"
    );
    let mem = get("memory")["memory"].clone();
    assert_eq!(mem["total"], 4000 * 1024);
    assert_eq!(mem["actual"]["used"]["bytes"], 1000 * 1024);
    assert_eq!(mem["swap"]["used"]["pct"], 0.0);
    let net = get("network")["network"].clone();
    assert_eq!(net["name"], "eth7");
    assert_eq!(net["in"]["dropped"], 14);
    assert_eq!(net["out"]["bytes"], 21);
    let disk = get("diskio")["diskio"].clone();
    assert_eq!(disk["name"], "vdz");
    assert_eq!(disk["read"]["bytes"], 8 * 512);
    assert_eq!(disk["io"]["time"], 11);
    let fs = get("filesystem")["filesystem"].clone();
    assert_eq!(fs["mount_point"], "/data", "proc (nodev) is left out");
    assert_eq!(fs["device_name"], "/dev/vdz1");
    assert!(
        fs["total"].as_u64().is_some_and(|t| t > 0),
        "statvfs of hostfs/data: {fs}"
    );
    assert_eq!(docs["filesystem"].len(), 1);
    let sum = get("process_summary")["process"]["summary"].clone();
    assert_eq!(
        (
            sum["total"].as_u64(),
            sum["sleeping"].as_u64(),
            sum["zombie"].as_u64()
        ),
        (Some(2), Some(1), Some(1))
    );
    assert_eq!(get("uptime")["uptime"]["duration"]["ms"], 123_450);
    let sockets = get("socket_summary")["socket"]["summary"].clone();
    assert_eq!(sockets["tcp"]["all"]["listening"], 1, "{sockets}");
    assert_eq!(sockets["tcp"]["all"]["established"], 1, "{sockets}");
    assert_eq!(sockets["tcp"]["all"]["orphan"], 1, "{sockets}");
    assert_eq!(sockets["udp"]["all"]["count"], 1, "{sockets}");
    assert_eq!(sockets["all"]["count"], 3, "{sockets}");
    let fsstat = get("fsstat")["fsstat"].clone();
    assert_eq!(fsstat["count"], 1, "{fsstat}");
    assert_eq!(fsstat["total_size"]["total"], fs["total"], "{fsstat}");
    // The recorded host's processes, not ours.
    let mut pids: Vec<u64> = docs["process"]
        .iter()
        .filter(|d| d["@timestamp"] == docs["process"][0]["@timestamp"])
        .filter_map(|d| d["process"]["pid"].as_u64())
        .collect();
    pids.sort_unstable();
    assert_eq!(pids, [1, 77]);
    let init = docs["process"]
        .iter()
        .find(|d| d["process"]["pid"] == 1)
        .context("init")?;
    assert_eq!(
        init["process"]["command_line"], "/sbin/init splash",
        "{init}"
    );
    assert_eq!(init["process"]["name"], "init", "{init}");
    Ok(())
}
