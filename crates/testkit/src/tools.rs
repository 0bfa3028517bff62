//! The client tools tests run as a user would: `kubectl` and `helm`.
//!
//! Both are built from the Go module proxy by `controlplane/tools`, the same
//! script a user runs, and cached per version outside the repository; the
//! first call on a machine builds them, later calls only look them up.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use anyhow::{Context, Result, anyhow, bail};

use crate::plane::script;

/// Path of `kubectl` (v1.36.3), built if the cache lacks it.
pub fn kubectl() -> Result<PathBuf> {
    static KUBECTL: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    cached(&KUBECTL, "kubectl")
}

/// Path of `helm` (v4.3.2), built if the cache lacks it.
pub fn helm() -> Result<PathBuf> {
    static HELM: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    cached(&HELM, "helm")
}

/// Runs `controlplane/tools build NAME` at most once per process; a failure
/// is remembered too, so every caller gets the same reason.
fn cached(cell: &OnceLock<Result<PathBuf, String>>, name: &str) -> Result<PathBuf> {
    cell.get_or_init(|| build(name).map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(|e| anyhow!(e))
}

fn build(name: &str) -> Result<PathBuf> {
    let out = Command::new(script("tools"))
        .args(["build", name])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running controlplane/tools build {name}"))?;
    if !out.status.success() {
        bail!(
            "controlplane/tools build {name} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let path = stdout
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .ok_or_else(|| {
            anyhow!("controlplane/tools build {name} printed no `{name} PATH` line: {stdout:?}")
        })?;
    Ok(PathBuf::from(path.trim()))
}
