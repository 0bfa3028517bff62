//! The `system/metrics` metricsets: one reading of the host, as
//! Metricbeat's `system` module shapes its documents.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use super::proc::{self, CpuTicks};
use super::process::ProcessOptions;

/// Metricsets this input runs.
pub const METRICSETS: [&str; 11] = [
    "cpu",
    "load",
    "memory",
    "network",
    "filesystem",
    "fsstat",
    "diskio",
    "process",
    "process_summary",
    "socket_summary",
    "uptime",
];

/// What a stream asked for beyond its metricsets.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Options {
    /// `process` settings.
    pub process: ProcessOptions,
    /// `network.interfaces`: only these (empty: all).
    pub interfaces: Vec<String>,
    /// `diskio.include_devices`: only these (empty: all).
    pub devices: Vec<String>,
    /// `filesystem.ignore_types`: file system types left out of
    /// `filesystem` and `fsstat` (besides those without a device).
    pub ignore_types: Vec<String>,
}

/// What one metricset keeps between periods.
#[derive(Debug, Default)]
pub struct Previous {
    /// The previous CPU reading (`cpu`).
    pub cpu: Option<CpuTicks>,
    /// The previous process reading (`process`).
    pub process: super::process::Previous,
}

/// Reads the host under `root` (`/`, or `/hostfs` where a DaemonSet mounts
/// the host's root).
#[derive(Debug, Clone)]
pub struct Host {
    root: PathBuf,
}

/// One document: what it is about (for its id) and its fields.
pub struct Doc {
    pub object: String,
    pub fields: Map<String, Value>,
}

impl Host {
    /// The host whose root file system is at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Host {
        Host { root: root.into() }
    }

    fn read(&self, rel: &str) -> Result<String, String> {
        let path = self.root.join(rel);
        std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// CPU time so far and the number of cores.
    pub fn cpu_ticks(&self) -> Result<(CpuTicks, usize), String> {
        let text = self.read("proc/stat")?;
        proc::cpu(&text).ok_or_else(|| "proc/stat: no `cpu` line".to_string())
    }

    /// The documents of `metricset`; `prev` holds what the previous
    /// reading left (`cpu` and `process` need two).
    pub fn documents(
        &self,
        metricset: &str,
        prev: &mut Previous,
        opts: &Options,
    ) -> Result<Vec<Doc>, String> {
        let prev_cpu = &mut prev.cpu;
        let one = |fields: Value| {
            Ok(vec![Doc {
                object: String::new(),
                fields: object(fields),
            }])
        };
        match metricset {
            "cpu" => {
                let (now, cores) = self.cpu_ticks()?;
                // No tick since the previous reading (both within one clock
                // tick, as when the agent starts just before a period
                // boundary): the shares are undefined, not zero. Keep the
                // older reading and report at the next period.
                if prev_cpu.is_some_and(|before| before.total() == now.total()) {
                    return Ok(Vec::new());
                }
                let Some(before) = prev_cpu.replace(now) else {
                    return Ok(Vec::new());
                };
                one(cpu_fields(&before, &now, cores))
            }
            "load" => {
                let [l1, l5, l15] = proc::loadavg(&self.read("proc/loadavg")?)
                    .ok_or("proc/loadavg: unreadable")?;
                let cores = self.cpu_ticks()?.1 as f64;
                one(json!({"system": {"load": {
                    "1": l1, "5": l5, "15": l15, "cores": cores as u64,
                    "norm": {"1": l1 / cores, "5": l5 / cores, "15": l15 / cores},
                }}}))
            }
            "memory" => one(memory_fields(&proc::meminfo(&self.read("proc/meminfo")?))),
            "network" => Ok(proc::net_dev(&self.read("proc/net/dev")?)
                .into_iter()
                .filter(|i| opts.interfaces.is_empty() || opts.interfaces.contains(&i.name))
                .map(|i| Doc {
                    object: i.name.clone(),
                    fields: object(json!({"system": {"network": {
                        "name": i.name,
                        "in": {"bytes": i.in_bytes, "packets": i.in_packets, "errors": i.in_errors, "dropped": i.in_dropped},
                        "out": {"bytes": i.out_bytes, "packets": i.out_packets, "errors": i.out_errors, "dropped": i.out_dropped},
                    }}})),
                })
                .collect()),
            "diskio" => Ok(proc::diskstats(&self.read("proc/diskstats")?)
                .into_iter()
                .filter(|d| opts.devices.is_empty() || opts.devices.contains(&d.name))
                .map(|d| Doc {
                    object: d.name.clone(),
                    fields: object(json!({"system": {"diskio": {
                        "name": d.name,
                        "read": {"count": d.reads, "bytes": d.read_bytes, "time": d.read_ms},
                        "write": {"count": d.writes, "bytes": d.write_bytes, "time": d.write_ms},
                        "io": {"time": d.io_ms},
                    }}})),
                })
                .collect()),
            "filesystem" => self.filesystems(&opts.ignore_types),
            "fsstat" => one(fsstat(&self.filesystems(&opts.ignore_types)?)),
            "process" => self.processes(&mut prev.process, &opts.process),
            "socket_summary" => one(self.socket_summary()?),
            "process_summary" => one(self.process_summary()?),
            "uptime" => {
                let s = proc::uptime(&self.read("proc/uptime")?).ok_or("proc/uptime: unreadable")?;
                one(json!({"system": {"uptime": {"duration": {"ms": (s * 1000.0) as u64}}}}))
            }
            other => Err(format!("unknown metricset {other}")),
        }
    }

    fn filesystems(&self, ignore_types: &[String]) -> Result<Vec<Doc>, String> {
        // The host's mount table is init's; our own when the root is ours.
        let table = if self.root == Path::new("/") {
            "proc/self/mounts"
        } else {
            "proc/1/mounts"
        };
        let nodev = proc::nodev_filesystems(&self.read("proc/filesystems").unwrap_or_default());
        let mut docs = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for m in proc::mounts(&self.read(table)?) {
            if nodev.contains(&m.fs_type)
                || ignore_types.contains(&m.fs_type)
                || !seen.insert(m.mount_point.clone())
            {
                continue;
            }
            let path = self.root.join(m.mount_point.trim_start_matches('/'));
            let Some(s) = statvfs(&path) else { continue };
            let used = s.total.saturating_sub(s.free);
            docs.push(Doc {
                object: m.mount_point.clone(),
                fields: object(json!({"system": {"filesystem": {
                    "device_name": m.device,
                    "mount_point": m.mount_point,
                    "type": m.fs_type,
                    "total": s.total,
                    "free": s.free,
                    "available": s.available,
                    "used": {"bytes": used, "pct": ratio(used, used + s.available)},
                    "files": s.files,
                    "free_files": s.free_files,
                }}})),
            });
        }
        Ok(docs)
    }

    /// The net files of the host's network namespace: init's when the
    /// root is the host's mount, else ours.
    fn net_file(&self, name: &str) -> String {
        let dir = if self.root == Path::new("/") {
            "proc/net"
        } else {
            "proc/1/net"
        };
        self.read(&format!("{dir}/{name}")).unwrap_or_default()
    }

    fn socket_summary(&self) -> Result<Value, String> {
        let tcp4 = self.net_file("tcp");
        if tcp4.is_empty() {
            return Err("proc/net/tcp: unreadable".into());
        }
        let (a, n4) = proc::tcp_states(&tcp4);
        let (b, n6) = proc::tcp_states(&self.net_file("tcp6"));
        let st: Vec<u64> = a.iter().zip(b.iter()).map(|(x, y)| x + y).collect();
        let udp =
            proc::socket_lines(&self.net_file("udp")) + proc::socket_lines(&self.net_file("udp6"));
        let (orphan, tcp_mem, udp_mem) = proc::sockstat(&self.net_file("sockstat"));
        let page = page_size();
        let tcp = n4 + n6;
        Ok(json!({"system": {"socket": {"summary": {
            "all": {"count": tcp + udp, "listening": st[9]},
            "tcp": {
                "memory": tcp_mem * page,
                "all": {
                    "count": tcp, "listening": st[9], "established": st[0],
                    "syn_sent": st[1], "syn_recv": st[2], "fin_wait1": st[3],
                    "fin_wait2": st[4], "time_wait": st[5], "close": st[6],
                    "close_wait": st[7], "last_ack": st[8], "closing": st[10],
                    "orphan": orphan,
                },
            },
            "udp": {"memory": udp_mem * page, "all": {"count": udp}},
        }}}}))
    }

    fn processes(
        &self,
        prev: &mut super::process::Previous,
        opts: &ProcessOptions,
    ) -> Result<Vec<Doc>, String> {
        use super::process;
        let stat = self.read("proc/stat")?;
        let (ticks, cores) = proc::cpu(&stat).ok_or("proc/stat: no `cpu` line")?;
        let boot_time = stat
            .lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        let mem_total = proc::meminfo(&self.read("proc/meminfo").unwrap_or_default())
            .get("MemTotal")
            .copied()
            .unwrap_or(0);
        let mut procs = Vec::new();
        for at in self.process_dirs()? {
            // A process may end between the listing and the reads.
            let Some(stat) = std::fs::read_to_string(at.join("stat"))
                .ok()
                .and_then(|t| process::parse_stat(&t))
            else {
                continue;
            };
            let cmdline = std::fs::read(at.join("cmdline"))
                .map(|b| {
                    b.split(|c| *c == 0)
                        .filter(|a| !a.is_empty())
                        .map(|a| String::from_utf8_lossy(a).into_owned())
                        .collect()
                })
                .unwrap_or_default();
            procs.push(process::Proc {
                stat,
                cmdline,
                uid: std::fs::read_to_string(at.join("status"))
                    .ok()
                    .and_then(|s| process::uid(&s)),
                fd_open: std::fs::read_dir(at.join("fd"))
                    .ok()
                    .map(|d| d.count() as u64),
                share_pages: std::fs::read_to_string(at.join("statm"))
                    .ok()
                    .and_then(|s| process::share_pages(&s)),
            });
        }
        let users = process::users(&self.read("etc/passwd").unwrap_or_default());
        let machine = process::Machine {
            total_ticks: ticks.total(),
            cores,
            mem_total,
            page_size: page_size(),
            ticks_per_second: ticks_per_second(),
            boot_time,
        };
        Ok(process::documents(procs, machine, opts, prev, &users)
            .into_iter()
            .map(|(object, fields)| Doc { object, fields })
            .collect())
    }

    /// `proc/<pid>` of every process listed now.
    fn process_dirs(&self) -> Result<Vec<PathBuf>, String> {
        let dir = self.root.join("proc");
        let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(entries
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
            })
            .map(|e| e.path())
            .collect())
    }

    fn process_summary(&self) -> Result<Value, String> {
        let mut counts = [0u64; 7];
        for at in self.process_dirs()? {
            // A process may end between the listing and the read.
            let Ok(stat) = std::fs::read_to_string(at.join("stat")) else {
                continue;
            };
            let i = match proc::process_state(&stat) {
                Some('R') => 0,
                Some('S') => 1,
                Some('D') => 1,
                Some('T' | 't') => 2,
                Some('Z') => 3,
                Some('I') => 4,
                Some('X' | 'x') => 5,
                _ => 6,
            };
            counts[i] += 1;
        }
        let total: u64 = counts.iter().sum();
        Ok(json!({"system": {"process": {"summary": {
            "total": total, "running": counts[0], "sleeping": counts[1], "stopped": counts[2],
            "zombie": counts[3], "idle": counts[4], "dead": counts[5], "unknown": counts[6],
        }}}}))
    }
}

/// CPU use between two readings: `pct` per state is a share of one core
/// times the cores (0 to `cores`), `norm.pct` a share of the machine (0 to
/// 1), as Metricbeat reports them; `total` is everything but idle and
/// iowait.
pub fn cpu_fields(before: &CpuTicks, now: &CpuTicks, cores: usize) -> Value {
    let d = |a: u64, b: u64| b.saturating_sub(a);
    let total = d(before.total(), now.total());
    let cores_f = cores as f64;
    let state = |ticks: u64| {
        let share = ratio(ticks, total);
        json!({"pct": share * cores_f, "norm": {"pct": share}})
    };
    let idle = d(before.idle, now.idle);
    let iowait = d(before.iowait, now.iowait);
    let busy = total.saturating_sub(idle + iowait);
    json!({"system": {"cpu": {
        "cores": cores,
        "user": state(d(before.user, now.user)),
        "nice": state(d(before.nice, now.nice)),
        "system": state(d(before.system, now.system)),
        "idle": state(idle),
        "iowait": state(iowait),
        "irq": state(d(before.irq, now.irq)),
        "softirq": state(d(before.softirq, now.softirq)),
        "steal": state(d(before.steal, now.steal)),
        "total": state(busy),
    }}})
}

/// `system.memory.*` from `/proc/meminfo` (bytes): `used` counts caches,
/// `actual.used` does not (MemAvailable).
pub fn memory_fields(m: &std::collections::BTreeMap<String, u64>) -> Value {
    let get = |k: &str| m.get(k).copied().unwrap_or(0);
    let total = get("MemTotal");
    let free = get("MemFree");
    let available = m.get("MemAvailable").copied().unwrap_or(free);
    let swap_total = get("SwapTotal");
    let swap_free = get("SwapFree");
    let used = total.saturating_sub(free);
    let actual_used = total.saturating_sub(available);
    let swap_used = swap_total.saturating_sub(swap_free);
    json!({"system": {"memory": {
        "total": total,
        "free": free,
        "used": {"bytes": used, "pct": ratio(used, total)},
        "actual": {"free": available, "used": {"bytes": actual_used, "pct": ratio(actual_used, total)}},
        "swap": {"total": swap_total, "free": swap_free, "used": {"bytes": swap_used, "pct": ratio(swap_used, swap_total)}},
    }}})
}

/// `system.fsstat.*`: the `filesystem` documents summed up.
fn fsstat(filesystems: &[Doc]) -> Value {
    let (mut total, mut free, mut used, mut files) = (0u64, 0u64, 0u64, 0u64);
    for d in filesystems {
        let f = &d.fields["system"]["filesystem"];
        let n = |v: &Value| v.as_u64().unwrap_or(0);
        total += n(&f["total"]);
        free += n(&f["free"]);
        used += n(&f["used"]["bytes"]);
        files += n(&f["files"]);
    }
    json!({"system": {"fsstat": {
        "count": filesystems.len(),
        "total_files": files,
        "total_size": {"total": total, "free": free, "used": used},
    }}})
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v > 0 { v as u64 } else { 4096 }
}

/// Clock ticks per second (`/proc` counts CPU time in them).
pub(crate) fn ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if v > 0 { v as u64 } else { 100 }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

struct FsStats {
    total: u64,
    free: u64,
    available: u64,
    files: u64,
    free_files: u64,
}

/// `statvfs(2)` of `path`; `None` when it cannot be read (gone, no
/// permission).
fn statvfs(path: &Path) -> Option<FsStats> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `s` a valid buffer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    let frsize = s.f_frsize as u64;
    Some(FsStats {
        total: s.f_blocks as u64 * frsize,
        free: s.f_bfree as u64 * frsize,
        available: s.f_bavail as u64 * frsize,
        files: s.f_files as u64,
        free_files: s.f_ffree as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_shares_sum_to_the_cores() {
        let a = CpuTicks {
            user: 100,
            system: 50,
            idle: 800,
            iowait: 50,
            ..Default::default()
        };
        let b = CpuTicks {
            user: 300,
            system: 100,
            idle: 1500,
            iowait: 100,
            ..Default::default()
        };
        let v = cpu_fields(&a, &b, 2);
        let c = &v["system"]["cpu"];
        let sum: f64 = [
            "user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal",
        ]
        .iter()
        .map(|s| c[s]["pct"].as_f64().unwrap())
        .sum();
        assert!((sum - 2.0).abs() < 1e-9, "{sum}");
        assert!((c["user"]["norm"]["pct"].as_f64().unwrap() - 0.2).abs() < 1e-9);
        assert!((c["total"]["norm"]["pct"].as_f64().unwrap() - 0.25).abs() < 1e-9);
    }

    #[test]
    fn no_cpu_document_until_a_tick_has_passed() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("proc")).unwrap();
        let stat = |user: u64| {
            let line = format!("cpu  {user} 0 50 800 50 0 0 0 0 0\n");
            let cpu0 = format!("cpu0 {user} 0 50 800 50 0 0 0 0 0\n");
            std::fs::write(root.path().join("proc/stat"), line + &cpu0).unwrap();
        };
        let host = Host::new(root.path());
        stat(100);
        let mut prev = Previous {
            cpu: Some(host.cpu_ticks().unwrap().0),
            ..Previous::default()
        };
        let opts = Options::default();
        // Read again within the same tick: nothing, and the older reading stays.
        assert!(host.documents("cpu", &mut prev, &opts).unwrap().is_empty());
        assert_eq!(prev.cpu.map(|p| p.user), Some(100));
        stat(300);
        let docs = host.documents("cpu", &mut prev, &opts).unwrap();
        assert_eq!(docs.len(), 1);
        let user = &docs[0].fields["system"]["cpu"]["user"]["norm"]["pct"];
        assert!((user.as_f64().unwrap() - 1.0).abs() < 1e-9, "{user}");
        assert_eq!(prev.cpu.map(|p| p.user), Some(300));
    }

    #[test]
    fn memory_used_and_actual_used() {
        let mut m = std::collections::BTreeMap::new();
        m.insert("MemTotal".to_string(), 1000);
        m.insert("MemFree".to_string(), 100);
        m.insert("MemAvailable".to_string(), 600);
        let v = memory_fields(&m);
        let mem = &v["system"]["memory"];
        assert_eq!(mem["used"]["bytes"], 900);
        assert_eq!(mem["actual"]["used"]["bytes"], 400);
        assert_eq!(mem["actual"]["used"]["pct"], 0.4);
        assert_eq!(mem["swap"]["used"]["pct"], 0.0);
    }
}
