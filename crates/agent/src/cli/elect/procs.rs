//! The process table as `/proc` shows it, and signalling and reaping by
//! pid. Linux only: a process tree is found by parent pid, because a
//! process that started its own session or group (`setsid`, a daemonising
//! double fork) can no longer be reached through its old group.

use std::collections::{BTreeSet, HashMap};

/// One process: the fields of `/proc/<pid>/stat` that containment needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
    pub pgrp: i32,
    pub session: i32,
}

/// Parses `/proc/<pid>/stat`. The command name is in parentheses and may
/// itself hold spaces and parentheses, so fields are counted after the last
/// `)`.
pub fn parse_stat(stat: &str) -> Option<Proc> {
    let (head, rest) = stat.rsplit_once(')')?;
    let pid = head.split_once(" (")?.0.trim().parse().ok()?;
    let mut fields = rest.split_whitespace();
    let _state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    let session = fields.next()?.parse().ok()?;
    Some(Proc {
        pid,
        ppid,
        pgrp,
        session,
    })
}

/// Every process visible now. Processes that exit while being read are
/// simply missing, which is what a later round of the caller's loop
/// expects.
pub fn scan() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| {
        let entry = entry.ok()?;
        let name = entry.file_name();
        let name = name.to_str()?;
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        parse_stat(&std::fs::read_to_string(format!("/proc/{name}/stat")).ok()?)
    })
    .collect()
}

/// The pids of every descendant of `root` in `table` (not `root` itself).
pub fn descendants(table: &[Proc], root: i32) -> BTreeSet<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for p in table {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    let mut found = BTreeSet::new();
    let mut todo = vec![root];
    while let Some(pid) = todo.pop() {
        for &child in children.get(&pid).into_iter().flatten() {
            // A pid seen twice would be a cycle in a torn read: skip it.
            if child != root && found.insert(child) {
                todo.push(child);
            }
        }
    }
    found
}

/// Sends `sig` to process `pid` (or to group `-pid`); a process that is
/// already gone is not an error worth reporting.
pub fn signal(pid: i32, sig: i32) {
    if pid == 0 || pid == -1 {
        return; // never the caller's own group, never everything
    }
    // SAFETY: kill(2) has no memory effects.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// What reaping the caller's children found.
#[derive(Debug, PartialEq, Eq)]
pub enum Reaped {
    /// Some children still run.
    Running,
    /// The caller has no child left at all.
    None,
}

/// Reaps every child of the caller that has exited, without blocking;
/// calls `exited(pid, status)` for each. Only for a process whose children
/// are all its own business (the keeper): it takes any child's status.
pub fn reap_all(mut exited: impl FnMut(i32, i32)) -> Reaped {
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes only to `status`.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        match pid {
            0 => return Reaped::Running,
            p if p > 0 => exited(p, status),
            _ => match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                _ => return Reaped::None,
            },
        }
    }
}

/// Reaps child `pid` if it has exited, without blocking; true if it is
/// gone (reaped now, or not a child of the caller any more).
pub fn reap_one(pid: i32) -> bool {
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes only to `status`.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        match r {
            0 => return false,
            r if r > 0 => return true,
            _ => match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                _ => return true,
            },
        }
    }
}

/// A wait status as a shell reports it: the exit code, or 128 + signal.
pub fn exit_code(status: i32) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        1
    }
}

/// Makes the calling process a child subreaper: its orphaned descendants
/// are re-parented to it instead of to init, so a tree that daemonised
/// can still be found (by parent pid) and reaped.
pub fn become_subreaper() -> std::io::Result<()> {
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER) has no memory effects.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse_even_with_odd_command_names() {
        let p = parse_stat("42 (a) b (c) S 7 42 40 0 -1 4194560 0").unwrap();
        assert_eq!(
            p,
            Proc {
                pid: 42,
                ppid: 7,
                pgrp: 42,
                session: 40
            }
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn descendants_follow_parent_links_transitively() {
        let p = |pid, ppid| Proc {
            pid,
            ppid,
            pgrp: pid,
            session: pid,
        };
        let table = [p(1, 0), p(10, 1), p(11, 10), p(12, 11), p(13, 1), p(14, 10)];
        assert_eq!(
            descendants(&table, 10),
            [11, 12, 14].into_iter().collect::<BTreeSet<_>>()
        );
        assert!(descendants(&table, 12).is_empty());
    }

    #[test]
    fn the_own_process_is_in_the_table() {
        let me = std::process::id() as i32;
        let table = scan();
        let own = table.iter().find(|p| p.pid == me).unwrap();
        // SAFETY: getppid has no memory effects.
        assert_eq!(own.ppid, unsafe { libc::getppid() });
    }
}
