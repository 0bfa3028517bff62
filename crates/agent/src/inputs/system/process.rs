//! The `process` metricset: one document per process of the top N by CPU
//! and by memory (Metricbeat's `process.include_top_n`), among those whose
//! name or command line matches `processes`. CPU shares need two readings:
//! the first period reports memory and state, and CPU from the second on.

use std::collections::HashMap;

use regex::Regex;
use serde_json::{Value, json};

/// What the stream asked for.
#[derive(Debug, Clone)]
pub struct ProcessOptions {
    /// `processes`: patterns a process's name or command line must match
    /// (any); empty: every process.
    pub patterns: Vec<Regex>,
    /// `process.include_top_n`: `None` when disabled (every matching
    /// process), else how many by CPU and by memory.
    pub top_n: Option<(usize, usize)>,
}

impl PartialEq for ProcessOptions {
    fn eq(&self, other: &Self) -> bool {
        self.top_n == other.top_n
            && self
                .patterns
                .iter()
                .map(Regex::as_str)
                .eq(other.patterns.iter().map(Regex::as_str))
    }
}

impl Default for ProcessOptions {
    /// Metricbeat's defaults: top 5 by CPU and by memory.
    fn default() -> Self {
        ProcessOptions {
            patterns: Vec::new(),
            top_n: Some((5, 5)),
        }
    }
}

/// One process as read from `/proc/<pid>/stat`.
#[derive(Debug, Clone, PartialEq)]
pub struct Stat {
    pub pid: u32,
    pub name: String,
    pub state: char,
    pub ppid: u32,
    pub pgid: u32,
    /// user + system time, clock ticks.
    pub ticks: u64,
    /// Of which in user space.
    pub user_ticks: u64,
    /// Of which in the kernel.
    pub system_ticks: u64,
    /// Ticks after boot when it started.
    pub start: u64,
    /// Virtual size, bytes.
    pub vsize: u64,
    /// Resident pages.
    pub rss_pages: u64,
}

/// Parses `/proc/<pid>/stat`; the command (in parens) may hold spaces and
/// parens itself.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text[..open].trim().parse().ok()?;
    let name = text.get(open + 1..close)?.to_string();
    let f: Vec<&str> = text[close + 1..].split_whitespace().collect();
    // Fields after the command, from field 3 (`state`) on.
    let n = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    Some(Stat {
        pid,
        name,
        state: f.first()?.chars().next()?,
        ppid: n(1) as u32,
        pgid: n(2) as u32,
        ticks: n(11) + n(12),
        user_ticks: n(11),
        system_ticks: n(12),
        start: n(19),
        vsize: n(20),
        rss_pages: n(21),
    })
}

/// The state letter as Metricbeat writes it.
fn state_name(c: char) -> &'static str {
    match c {
        'R' => "running",
        'S' => "sleeping",
        'D' => "idle",
        'T' | 't' => "stopped",
        'Z' => "zombie",
        'I' => "idle",
        'X' | 'x' => "dead",
        _ => "unknown",
    }
}

/// The previous reading: total CPU ticks of the machine and each
/// process's ticks by (pid, start), so a reused pid starts over.
#[derive(Debug, Default)]
pub struct Previous {
    total: Option<u64>,
    procs: HashMap<(u32, u64), u64>,
}

/// One process read, with what the documents need.
#[derive(Debug, Clone)]
pub struct Proc {
    pub stat: Stat,
    pub cmdline: Vec<String>,
    pub uid: Option<u32>,
    pub fd_open: Option<u64>,
    pub share_pages: Option<u64>,
}

/// Machine facts the shares need.
#[derive(Debug, Clone, Copy)]
pub struct Machine {
    /// Total CPU ticks so far (all cores, all states).
    pub total_ticks: u64,
    pub cores: usize,
    pub mem_total: u64,
    pub page_size: u64,
    pub ticks_per_second: u64,
    /// Boot time, seconds since the epoch.
    pub boot_time: u64,
}

/// The documents for `procs` (all processes read now): filtered by the
/// patterns, CPU shares since `prev`, cut to the top N; `users` names uids.
/// `prev` becomes this reading.
pub fn documents(
    procs: Vec<Proc>,
    m: Machine,
    opts: &ProcessOptions,
    prev: &mut Previous,
    users: &HashMap<u32, String>,
) -> Vec<(String, serde_json::Map<String, Value>)> {
    let dt = prev.total.map(|t| m.total_ticks.saturating_sub(t));
    let mut now = HashMap::with_capacity(procs.len());
    let mut rows: Vec<(Proc, Option<f64>)> = Vec::new();
    for p in procs {
        let key = (p.stat.pid, p.stat.start);
        now.insert(key, p.stat.ticks);
        let matches = opts.patterns.is_empty()
            || opts
                .patterns
                .iter()
                .any(|r| r.is_match(&p.stat.name) || r.is_match(&p.cmdline.join(" ")));
        if !matches {
            continue;
        }
        // Share of the whole machine since the previous reading.
        let share = match (dt, prev.procs.get(&key)) {
            (Some(dt), Some(before)) if dt > 0 => {
                Some(p.stat.ticks.saturating_sub(*before) as f64 / dt as f64)
            }
            _ => None,
        };
        rows.push((p, share));
    }
    prev.total = Some(m.total_ticks);
    prev.procs = now;
    if let Some((by_cpu, by_mem)) = opts.top_n {
        let mut keep = vec![false; rows.len()];
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_by(|&a, &b| {
            rows[b]
                .1
                .unwrap_or(0.0)
                .total_cmp(&rows[a].1.unwrap_or(0.0))
        });
        for &i in order.iter().take(by_cpu) {
            keep[i] = true;
        }
        order.sort_by_key(|&i| std::cmp::Reverse(rows[i].0.stat.rss_pages));
        for &i in order.iter().take(by_mem) {
            keep[i] = true;
        }
        let mut k = keep.into_iter();
        rows.retain(|_| k.next().unwrap_or(false));
    }
    rows.into_iter()
        .map(|(p, share)| (p.stat.pid.to_string(), document(&p, share, m, users)))
        .collect()
}

fn document(
    p: &Proc,
    share: Option<f64>,
    m: Machine,
    users: &HashMap<u32, String>,
) -> serde_json::Map<String, Value> {
    let s = &p.stat;
    let rss = s.rss_pages * m.page_size;
    let cmdline = p.cmdline.join(" ");
    let hz = m.ticks_per_second.max(1);
    let start_ms = m.boot_time * 1000 + s.start * 1000 / hz;
    let start = jiff::Timestamp::from_millisecond(start_ms as i64)
        .map(crate::pipeline::event::format_timestamp)
        .unwrap_or_default();
    let mut cpu = json!({"total": {"value": s.ticks * 1000 / hz}, "start_time": start});
    if let Some(share) = share {
        cpu["total"]["pct"] = json!(share * m.cores as f64);
        cpu["total"]["norm"] = json!({"pct": share});
    }
    let mut memory = json!({
        "size": s.vsize,
        "rss": {"bytes": rss, "pct": if m.mem_total == 0 { 0.0 } else { rss as f64 / m.mem_total as f64 }},
    });
    if let Some(share) = p.share_pages {
        memory["share"] = json!(share * m.page_size);
    }
    let mut system = json!({"state": state_name(s.state), "cpu": cpu, "memory": memory});
    if !cmdline.is_empty() {
        system["cmdline"] = json!(cmdline);
    }
    if let Some(fds) = p.fd_open {
        system["fd"] = json!({"open": fds});
    }
    let mut process = json!({
        "pid": s.pid, "parent": {"pid": s.ppid}, "pgid": s.pgid, "name": s.name,
        "state": state_name(s.state),
    });
    if !p.cmdline.is_empty() {
        process["command_line"] = json!(cmdline);
        process["args"] = json!(p.cmdline);
        process["args_count"] = json!(p.cmdline.len());
    }
    let mut out = serde_json::Map::new();
    out.insert("process".into(), process);
    out.insert("system".into(), json!({"process": system}));
    if let Some(uid) = p.uid {
        let mut user = json!({"id": uid.to_string()});
        if let Some(name) = users.get(&uid) {
            user["name"] = json!(name);
        }
        out.insert("user".into(), user);
    }
    out
}

/// The real uid from `/proc/<pid>/status`.
pub fn uid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Shared pages, the third field of `/proc/<pid>/statm`.
pub fn share_pages(statm: &str) -> Option<u64> {
    statm.split_whitespace().nth(2)?.parse().ok()
}

/// uid → name from `/etc/passwd`.
pub fn users(passwd: &str) -> HashMap<u32, String> {
    passwd
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            Some((f.get(2)?.parse().ok()?, f.first()?.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc_(pid: u32, name: &str, ticks: u64, rss_pages: u64) -> Proc {
        Proc {
            stat: Stat {
                pid,
                name: name.into(),
                state: 'S',
                ppid: 1,
                pgid: pid,
                ticks,
                user_ticks: ticks,
                system_ticks: 0,
                start: 100,
                vsize: 4096,
                rss_pages,
            },
            cmdline: vec![format!("/bin/{name}"), "--flag".into()],
            uid: Some(0),
            fd_open: Some(3),
            share_pages: Some(2),
        }
    }

    fn machine(total: u64) -> Machine {
        Machine {
            total_ticks: total,
            cores: 2,
            mem_total: 1 << 20,
            page_size: 4096,
            ticks_per_second: 100,
            boot_time: 1_796_000_000,
        }
    }

    #[test]
    fn stat_lines_with_odd_names_parse() {
        let s = parse_stat("42 (my (odd) proc) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 12345 10485760 300 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n").unwrap();
        assert_eq!(s.pid, 42);
        assert_eq!(s.name, "my (odd) proc");
        assert_eq!(s.state, 'S');
        assert_eq!((s.ppid, s.pgid), (1, 42));
        assert_eq!(s.ticks, 300);
        assert_eq!((s.user_ticks, s.system_ticks), (250, 50));
        assert_eq!(s.start, 12345);
        assert_eq!(s.vsize, 10_485_760);
        assert_eq!(s.rss_pages, 300);
        assert_eq!(uid("Name:\tx\nUid:\t1000\t1000\t1000\t1000\n"), Some(1000));
        assert_eq!(share_pages("100 50 7 1 0 20 0\n"), Some(7));
        assert_eq!(
            users("root:x:0:0::/root:/bin/sh\nbad\n")
                .get(&0)
                .map(String::as_str),
            Some("root")
        );
    }

    #[test]
    fn top_n_by_cpu_and_memory_with_shares_from_the_second_reading() {
        let opts = ProcessOptions {
            patterns: Vec::new(),
            top_n: Some((1, 1)),
        };
        let mut prev = Previous::default();
        let users = HashMap::from([(0, "root".to_string())]);
        let read = |a: u64, b: u64, c: u64| {
            vec![
                proc_(1, "busy", a, 10),
                proc_(2, "big", b, 5000),
                proc_(3, "idle", c, 20),
            ]
        };
        // First reading: no shares yet; top by memory is `big`, by CPU (all
        // unknown) the first.
        let first = documents(read(100, 0, 0), machine(1000), &opts, &mut prev, &users);
        assert!(
            first
                .iter()
                .all(|(_, d)| d["system"]["process"]["cpu"]["total"].get("pct").is_none())
        );
        // 200 machine ticks later: busy used 100 of them (half the machine).
        let docs = documents(read(200, 10, 0), machine(1200), &opts, &mut prev, &users);
        let pids: Vec<&str> = docs.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(pids, ["1", "2"]);
        let busy = &docs[0].1;
        assert_eq!(
            busy["system"]["process"]["cpu"]["total"]["norm"]["pct"],
            0.5
        );
        assert_eq!(busy["system"]["process"]["cpu"]["total"]["pct"], 1.0);
        assert_eq!(busy["system"]["process"]["cpu"]["total"]["value"], 2000);
        assert_eq!(busy["process"]["name"], "busy");
        assert_eq!(busy["process"]["command_line"], "/bin/busy --flag");
        assert_eq!(busy["user"]["name"], "root");
        assert_eq!(busy["system"]["process"]["memory"]["rss"]["bytes"], 40960);
        assert_eq!(busy["system"]["process"]["memory"]["share"], 8192);
        assert_eq!(busy["system"]["process"]["state"], "sleeping");
        // Patterns filter by name or command line.
        let only = ProcessOptions {
            patterns: vec![Regex::new("^idle$").unwrap()],
            top_n: None,
        };
        let docs = documents(read(300, 20, 0), machine(1400), &only, &mut prev, &users);
        assert_eq!(docs.len(), 1);
        assert_eq!(docs[0].1["process"]["pid"], 3);
    }
}
