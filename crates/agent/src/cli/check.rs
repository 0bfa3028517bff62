//! `leasehold check -c POLICY [--vars FILE]`: validates everything that can
//! be checked without running the policy. Exits 0, or 2 after listing every
//! error with its location; warnings (such as a condition comparing a
//! boolean variable with a string) are listed but do not fail the check.

use std::path::PathBuf;

use leasehold_policy::Severity;

/// Arguments of `leasehold check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The policy file (YAML or JSON).
    #[arg(short = 'c', long = "config", value_name = "POLICY")]
    pub config: PathBuf,
    /// Optional sample variables (same format as for `eval`), used to know
    /// the types of provider variables in lints.
    #[arg(long, value_name = "FILE")]
    pub vars: Option<PathBuf>,
}

/// Runs the command and returns the exit code.
pub fn run(args: &CheckArgs) -> i32 {
    let policy = match super::inspect::load_policy(&args.config) {
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
    let diags = leasehold_policy::check(&policy, sample.as_ref());
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
