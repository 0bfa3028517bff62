//! `leasehold eval [--vars FILE] [--strict] EXPR`: evaluates one condition.
//! Prints `true` or `false` and exits 0; a parse or evaluation error goes to
//! stderr with exit code 2.

use std::path::{Path, PathBuf};

use leasehold_policy::{EvalOptions, Vars};

/// Arguments of `leasehold eval`.
#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// JSON object mapping provider name to its variables, e.g.
    /// {"kubernetes_leaderelection": {"leader": true}}.
    #[arg(long, value_name = "FILE")]
    pub vars: Option<PathBuf>,
    /// Make a missing variable an error instead of null.
    #[arg(long)]
    pub strict: bool,
    /// The condition. Put it after `--` when it starts with `-`.
    #[arg(value_name = "EXPR", allow_hyphen_values = true)]
    pub expr: String,
}

/// Reads a `--vars` file.
pub(crate) fn read_vars(path: &Path) -> Result<Vars, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        format!(
            "{}:{}:{}: invalid JSON: {e}",
            path.display(),
            e.line(),
            e.column()
        )
    })?;
    Vars::from_json(&json).map_err(|e| format!("{}: {e}", path.display()))
}

/// Runs the command and returns the exit code.
pub fn run(args: &EvalArgs) -> i32 {
    let vars = match &args.vars {
        Some(p) => match read_vars(p) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("error: {e}");
                return 2;
            }
        },
        None => Vars::new(),
    };
    let opts = EvalOptions {
        strict: args.strict,
    };
    match leasehold_policy::cond::eval_str(&args.expr, &vars, opts) {
        Ok(b) => {
            println!("{b}");
            0
        }
        Err(e) => {
            eprintln!("error: {e}");
            eprintln!("  {}", args.expr);
            eprintln!("  {}^", " ".repeat(e.column.saturating_sub(1)));
            2
        }
    }
}
