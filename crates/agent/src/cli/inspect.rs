//! `leasehold inspect -c POLICY [--vars FILE] [--format yaml|json]`: prints
//! the inputs a policy renders to with the given variables, and the inputs it
//! drops with the reason. Input types need not exist. Errors exit with 2.

use std::path::{Path, PathBuf};

use leasehold_policy::value::to_yaml;
use leasehold_policy::{Policy, Value, Vars};

/// Output format of `inspect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// YAML (default).
    Yaml,
    /// `{"inputs": [...], "dropped": [{"id": ..., "reason": ...}]}`.
    Json,
}

/// Arguments of `leasehold inspect`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The policy file (YAML or JSON).
    #[arg(short = 'c', long = "config", value_name = "POLICY")]
    pub config: PathBuf,
    /// JSON object mapping provider name to its variables. Without it, the
    /// `env` provider is this process's environment.
    #[arg(long, value_name = "FILE")]
    pub vars: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Yaml)]
    pub format: Format,
}

/// Reads and parses a policy file.
pub(crate) fn load_policy(path: &Path) -> Result<Policy, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    Policy::parse(&text, &path.display().to_string()).map_err(|e| e.to_string())
}

/// The variables to render with: the `--vars` file (or the process
/// environment as `env`), plus the policy's `local` provider variables.
pub(crate) fn vars_for(policy: &Policy, file: Option<&Path>) -> Result<Vars, String> {
    let mut vars = match file {
        Some(p) => super::eval::read_vars(p)?,
        None => {
            let mut v = Vars::new();
            let env: leasehold_policy::Map =
                std::env::vars().map(|(k, v)| (k, Value::Str(v))).collect();
            v.set_provider("env", Value::Map(env));
            v
        }
    };
    if !vars.has_provider("local")
        && let Some(local) = policy.local_vars()
    {
        vars.set_provider("local", local);
    }
    Ok(vars)
}

/// Runs the command and returns the exit code.
pub fn run(args: &InspectArgs) -> i32 {
    let result = load_policy(&args.config).and_then(|policy| {
        let vars = vars_for(&policy, args.vars.as_deref())?;
        leasehold_policy::render(&policy, &vars).map_err(|e| e.to_string())
    });
    let rendered = match result {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let doc = rendered.to_json();
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default()),
        Format::Yaml => print!("{}", to_yaml(&Value::from_json(&doc))),
    }
    0
}
