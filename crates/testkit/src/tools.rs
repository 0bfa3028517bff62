//! The client tools tests run as a user would: `kubectl` and `helm`.
//!
//! Both are built from the Go module proxy by `controlplane/tools`, the same
//! script a user runs, and cached per version outside the repository; the
//! first call on a machine builds them, later calls only look them up.

use std::path::{Path, PathBuf};
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

/// Runs `program` (feeding `stdin` when given); its standard output, or
/// an error with the command and its standard error.
pub fn run(program: &Path, args: &[&str], stdin: Option<&str>) -> Result<String> {
    use std::io::Write;
    let mut child = Command::new(program)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", program.display()))?;
    if let (Some(text), Some(mut input)) = (stdin, child.stdin.take()) {
        input.write_all(text.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "{} {}: {}\n{}",
            program.display(),
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
