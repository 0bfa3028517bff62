//! Readers of the kernel's text files under `/proc`, without I/O: each
//! takes the file's text and returns numbers. Hand-written because every
//! file is a few lines of a stable format, the host root must be
//! replaceable (`system.hostfs`), and pure functions test on recorded text.

use std::collections::BTreeMap;

/// Cumulative CPU time by state, in clock ticks (`/proc/stat`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTicks {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    pub steal: u64,
}

impl CpuTicks {
    /// All states together.
    pub fn total(&self) -> u64 {
        self.user
            + self.nice
            + self.system
            + self.idle
            + self.iowait
            + self.irq
            + self.softirq
            + self.steal
    }
}

/// The `cpu` line of `/proc/stat` and the number of `cpuN` lines.
pub fn cpu(stat: &str) -> Option<(CpuTicks, usize)> {
    let mut total = None;
    let mut cores = 0;
    for line in stat.lines() {
        let mut f = line.split_whitespace();
        match f.next() {
            Some("cpu") => {
                let n: Vec<u64> = f.map(|x| x.parse().unwrap_or(0)).collect();
                let at = |i: usize| n.get(i).copied().unwrap_or(0);
                total = Some(CpuTicks {
                    user: at(0),
                    nice: at(1),
                    system: at(2),
                    idle: at(3),
                    iowait: at(4),
                    irq: at(5),
                    softirq: at(6),
                    steal: at(7),
                });
            }
            Some(c) if c.starts_with("cpu") => cores += 1,
            _ => {}
        }
    }
    total.map(|t| (t, cores.max(1)))
}

/// `/proc/loadavg`: the 1, 5 and 15 minute load averages.
pub fn loadavg(text: &str) -> Option<[f64; 3]> {
    let mut f = text.split_whitespace().map(|x| x.parse::<f64>().ok());
    Some([f.next()??, f.next()??, f.next()??])
}

/// `/proc/meminfo` in bytes, by key (`MemTotal`, `MemAvailable`, …).
pub fn meminfo(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let Some(Ok(n)) = f.next().map(str::parse::<u64>) else {
            continue;
        };
        let scale = if f.next() == Some("kB") { 1024 } else { 1 };
        out.insert(key.trim().to_string(), n * scale);
    }
    out
}

/// One interface of `/proc/net/dev` (cumulative counters).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub in_bytes: u64,
    pub in_packets: u64,
    pub in_errors: u64,
    pub in_dropped: u64,
    pub out_bytes: u64,
    pub out_packets: u64,
    pub out_errors: u64,
    pub out_dropped: u64,
}

/// `/proc/net/dev`: one entry per interface.
pub fn net_dev(text: &str) -> Vec<Interface> {
    text.lines()
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let n: Vec<u64> = rest
                .split_whitespace()
                .map(|x| x.parse().unwrap_or(0))
                .collect();
            if n.len() < 12 {
                return None;
            }
            Some(Interface {
                name: name.trim().to_string(),
                in_bytes: n[0],
                in_packets: n[1],
                in_errors: n[2],
                in_dropped: n[3],
                out_bytes: n[8],
                out_packets: n[9],
                out_errors: n[10],
                out_dropped: n[11],
            })
        })
        .collect()
}

/// One device of `/proc/diskstats` (cumulative counters).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Disk {
    pub name: String,
    pub reads: u64,
    pub read_bytes: u64,
    pub read_ms: u64,
    pub writes: u64,
    pub write_bytes: u64,
    pub write_ms: u64,
    pub io_ms: u64,
}

/// `/proc/diskstats`; sectors are 512 bytes whatever the device's own
/// sector size. Devices that never did any I/O are left out.
pub fn diskstats(text: &str) -> Vec<Disk> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 14 {
                return None;
            }
            let n = |i: usize| f[i].parse::<u64>().unwrap_or(0);
            let d = Disk {
                name: f[2].to_string(),
                reads: n(3),
                read_bytes: n(5) * 512,
                read_ms: n(6),
                writes: n(7),
                write_bytes: n(9) * 512,
                write_ms: n(10),
                io_ms: n(12),
            };
            (d.reads + d.writes > 0).then_some(d)
        })
        .collect()
}

/// One line of `/proc/<pid>/mounts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub device: String,
    pub mount_point: String,
    pub fs_type: String,
}

/// `/proc/<pid>/mounts`, with the kernel's octal escapes (`\040` for a
/// space) decoded.
pub fn mounts(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            Some(Mount {
                device: unescape(f.next()?),
                mount_point: unescape(f.next()?),
                fs_type: f.next()?.to_string(),
            })
        })
        .collect()
}

fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The file systems of `/proc/filesystems` marked `nodev` (no block
/// device: proc, sysfs, cgroup, …).
pub fn nodev_filesystems(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("nodev"))
        .map(|t| t.trim().to_string())
        .collect()
}

/// `/proc/uptime`: seconds since boot.
pub fn uptime(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok()
}

/// The state letter of `/proc/<pid>/stat` (after the command in parens,
/// which may itself hold spaces and parens).
pub fn process_state(stat: &str) -> Option<char> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().next()?.chars().next()
}

/// Sockets of `/proc/net/tcp` (and `tcp6`) by state: `[established,
/// syn_sent, syn_recv, fin_wait1, fin_wait2, time_wait, close, close_wait,
/// last_ack, listen, closing]`, and the number of lines.
pub fn tcp_states(text: &str) -> ([u64; 11], u64) {
    let mut counts = [0u64; 11];
    let mut all = 0;
    for line in text.lines().skip(1) {
        let Some(st) = line.split_whitespace().nth(3) else {
            continue;
        };
        all += 1;
        if let Ok(n) = u8::from_str_radix(st, 16)
            && (1..=11).contains(&n)
        {
            counts[usize::from(n - 1)] += 1;
        }
    }
    (counts, all)
}

/// Sockets listed in `/proc/net/udp` (or `udp6`).
pub fn socket_lines(text: &str) -> u64 {
    text.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .count() as u64
}

/// `/proc/net/sockstat`: `(TCP orphan, TCP mem pages, UDP mem pages)`.
pub fn sockstat(text: &str) -> (u64, u64, u64) {
    let field = |line: &str, key: &str| -> u64 {
        let f: Vec<&str> = line.split_whitespace().collect();
        f.iter()
            .position(|x| *x == key)
            .and_then(|i| f.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let mut out = (0, 0, 0);
    for line in text.lines() {
        if line.starts_with("TCP:") {
            out.0 = field(line, "orphan");
            out.1 = field(line, "mem");
        } else if line.starts_with("UDP:") {
            out.2 = field(line, "mem");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_udp_and_sockstat_count_sockets() {
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:4A6B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0\n   1: 0100007F:4A6B 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0 20 4 30 10 -1\n   2: 0100007F:D2F2 0100007F:4A6B 06 00000000:00000000 03:00000ADF 00000000     0        0 0 3 0\n";
        let (c, all) = tcp_states(tcp);
        assert_eq!(all, 3);
        assert_eq!(
            (c[0], c[5], c[9]),
            (1, 1, 1),
            "established, time_wait, listen"
        );
        assert_eq!(socket_lines("  sl local\n 0: a\n 1: b\n"), 2);
        assert_eq!(
            sockstat(
                "sockets: used 120\nTCP: inuse 5 orphan 2 tw 1 alloc 7 mem 3\nUDP: inuse 1 mem 4\n"
            ),
            (2, 3, 4)
        );
    }

    // Recorded from a Linux 6.x machine (2 CPUs).
    const STAT: &str = "cpu  107362 1292 40813 5612032 8232 0 1931 12 0 0\ncpu0 53800 640 20389 2805900 4100 0 1200 6 0 0\ncpu1 53562 652 20424 2806132 4132 0 731 6 0 0\nintr 1 2 3\nctxt 123\nbtime 1796290000\nprocesses 9000\nprocs_running 2\n";

    #[test]
    fn cpu_reads_the_total_line_and_counts_cores() {
        let (t, cores) = cpu(STAT).unwrap();
        assert_eq!(cores, 2);
        assert_eq!(t.user, 107362);
        assert_eq!(t.idle, 5612032);
        assert_eq!(t.steal, 12);
        assert_eq!(
            t.total(),
            107362 + 1292 + 40813 + 5612032 + 8232 + 1931 + 12
        );
        assert!(cpu("intr 1\n").is_none());
    }

    #[test]
    fn meminfo_is_in_bytes() {
        let m = meminfo(
            "MemTotal:       24576000 kB\nMemFree:         1000 kB\nHugePages_Total:       0\n",
        );
        assert_eq!(m["MemTotal"], 24576000 * 1024);
        assert_eq!(m["MemFree"], 1000 * 1024);
        assert_eq!(m["HugePages_Total"], 0);
    }

    #[test]
    fn net_dev_and_diskstats_read_their_columns() {
        let dev = "Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    lo: 1000 10 0 0 0 0 0 0 1000 10 0 0 0 0 0 0\n  eth0: 5000 50 1 2 0 0 0 0 7000 70 3 4 0 0 0 0\n";
        let ifs = net_dev(dev);
        assert_eq!(ifs.len(), 2);
        assert_eq!(ifs[1].name, "eth0");
        assert_eq!(
            (ifs[1].in_bytes, ifs[1].in_errors, ifs[1].in_dropped),
            (5000, 1, 2)
        );
        assert_eq!(
            (ifs[1].out_bytes, ifs[1].out_packets, ifs[1].out_dropped),
            (7000, 70, 4)
        );
        let disks = diskstats(
            "   8       0 sda 100 5 2000 30 200 10 4000 50 0 70 80 0 0 0 0\n   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
        );
        assert_eq!(disks.len(), 1, "idle devices are left out");
        assert_eq!(disks[0].name, "sda");
        assert_eq!(disks[0].read_bytes, 2000 * 512);
        assert_eq!(disks[0].write_bytes, 4000 * 512);
        assert_eq!(disks[0].io_ms, 70);
    }

    #[test]
    fn mounts_decode_escapes_and_the_rest_parse() {
        let m = mounts("/dev/sda1 /mnt/my\\040disk ext4 rw 0 0\nproc /proc proc rw 0 0\n");
        assert_eq!(m[0].mount_point, "/mnt/my disk");
        assert_eq!(m[1].fs_type, "proc");
        assert_eq!(
            nodev_filesystems("nodev\tsysfs\n\text4\nnodev\tproc\n"),
            ["sysfs", "proc"]
        );
        assert_eq!(
            loadavg("0.52 0.58 0.59 2/345 12345\n"),
            Some([0.52, 0.58, 0.59])
        );
        assert_eq!(uptime("350735.47 234388.90\n"), Some(350735.47));
        assert_eq!(process_state("42 (a (weird) name) S 1 42 42"), Some('S'));
        assert!(loadavg("").is_none());
    }
}
