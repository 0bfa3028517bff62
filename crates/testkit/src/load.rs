//! CPU contention: one busy process per core at the lowest priority, so
//! every candidate, its leader-only work and the control plane compete for
//! the CPU the way they do on a busy node.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};

/// Busy-loop processes, killed and reaped when dropped. Each loop also ends
/// by itself once this test process is gone (it checks with `kill -0`), so
/// none outlives a test that was killed before it could drop them.
pub struct CpuLoad {
    children: Vec<Child>,
}

impl CpuLoad {
    /// Starts one `nice -n 19` busy loop per available core.
    pub fn start() -> Result<CpuLoad> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        CpuLoad::with(cores)
    }

    /// Starts `n` busy loops.
    pub fn with(n: usize) -> Result<CpuLoad> {
        let mut load = CpuLoad {
            children: Vec::with_capacity(n),
        };
        let me = std::process::id().to_string();
        for _ in 0..n {
            let child = Command::new("nice")
                .args(["-n", "19", "sh", "-c"])
                .arg(r#"while kill -0 "$0" 2>/dev/null; do :; done"#)
                .arg(&me)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting a busy loop")?;
            load.children.push(child);
        }
        Ok(load)
    }

    /// Pids of the busy loops.
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }
}

impl Drop for CpuLoad {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
        }
        // SIGKILL takes effect at once; reap, bounded to about a second.
        for c in &mut self.children {
            for _ in 0..100 {
                if !matches!(c.try_wait(), Ok(None)) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_loops_run_until_dropped() {
        let load = CpuLoad::with(2).unwrap();
        let pids = load.pids();
        assert_eq!(pids.len(), 2);
        assert!(pids.iter().all(|&p| crate::process_running(p)));
        drop(load);
        assert!(pids.iter().all(|&p| !crate::process_running(p)));
    }
}
