//! `leasehold check -c POLICY [--vars FILE]`: validates everything that can
//! be checked without running the policy. Exits 0, or 2 after listing every
//! error with its location; warnings (such as a condition comparing a
//! boolean variable with a string) are listed but do not fail the check.

use std::path::PathBuf;

use leasehold_policy::{Diagnostic, Policy, Severity};

pub use crate::runtime::policy_check::diagnostics;

/// Arguments of `leasehold check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The policy file (YAML or JSON).
    #[arg(short = 'c', long = "config", value_name = "POLICY")]
    pub config: PathBuf,
    /// A directory of files of inputs, as `leasehold run --inputs-dir`
    /// takes it: their inputs are checked with the policy.
    #[arg(long, value_name = "DIR")]
    pub inputs_dir: Option<PathBuf>,
    /// Optional sample variables (same format as for `eval`), used to know
    /// the types of provider variables in lints.
    #[arg(long, value_name = "FILE")]
    pub vars: Option<PathBuf>,
}

/// The policy, with the inputs of the files in `inputs_dir` when given
/// (what the ignored keys of those files are is said on stderr).
fn read_policy(
    config: &std::path::Path,
    inputs_dir: Option<&std::path::Path>,
) -> Result<Policy, String> {
    let files = crate::runtime::policy_files::PolicyFiles {
        policy: config.to_path_buf(),
        inputs_dir: inputs_dir.map(std::path::Path::to_path_buf),
    };
    let (policy, warnings) = files
        .read()?
        .parse(&config.display().to_string())
        .map_err(|e| e.to_string())?;
    for w in warnings {
        eprintln!("{w}");
    }
    Ok(policy)
}

/// Runs the command and returns the exit code.
pub fn run(args: &CheckArgs) -> i32 {
    let policy = match read_policy(&args.config, args.inputs_dir.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let sample = match &args.vars {
        Some(p) => match super::eval::read_vars(p) {
            Ok(v) => Some(v),
            Err(e) => {
                eprintln!("error: {e}");
                return 2;
            }
        },
        None => None,
    };
    let diags: Vec<Diagnostic> = diagnostics(&policy, sample.as_ref())
        .into_iter()
        .map(|d| policy.relocate_diagnostic(d))
        .collect();
    for d in &diags {
        eprintln!("{d}");
    }
    let errors = diags
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .count();
    let warnings = diags.len() - errors;
    if errors > 0 {
        eprintln!("{}: {errors} error(s), {warnings} warning(s)", policy.file);
        2
    } else {
        println!(
            "{}: ok ({} input(s), {warnings} warning(s))",
            policy.file,
            policy.inputs().len()
        );
        0
    }
}
