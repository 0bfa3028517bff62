//! `kubectl` and `helm` from `controlplane/tools` are the pinned releases,
//! stamped with their versions.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, ensure};
use leasehold_testkit::tools;

fn stdout_of(program: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {}", program.display()))?;
    ensure!(
        out.status.success(),
        "{} {args:?} failed ({}): {}",
        program.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn kubectl_and_helm_report_their_pinned_versions() -> Result<()> {
    let kubectl = stdout_of(&tools::kubectl()?, &["version", "--client"])?;
    assert!(
        kubectl
            .lines()
            .any(|line| line.trim() == "Client Version: v1.36.3"),
        "kubectl version --client: {kubectl}"
    );

    let helm = stdout_of(&tools::helm()?, &["version"])?;
    assert!(helm.contains(r#"Version:"v4.3.2""#), "helm version: {helm}");
    Ok(())
}
