//! `leasehold inspect -c POLICY [--vars FILE] [--format yaml|json]`: prints
//! the inputs a policy renders to with the given variables, and the inputs it
//! drops with the reason. Input types need not exist. Errors exit with 2.
//!
//! Values of secret settings (passwords, API keys, tokens, `Authorization`
//! headers) are printed as `[redacted]` and URLs without their userinfo:
//! the output is meant to be pasted into tickets.

use std::path::{Path, PathBuf};

use leasehold_policy::value::to_yaml;
use leasehold_policy::{Policy, Value, Vars};

use crate::redact::{self, REDACTED, Redactor};

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
            let mut r = Redactor::new();
            if let Ok(text) = std::fs::read_to_string(&args.config) {
                r.add_text(&text);
            }
            eprintln!("error: {}", r.redact(&e));
            return 2;
        }
    };
    let mut doc = rendered.to_json();
    redact_json(&mut doc, false);
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default()),
        Format::Yaml => print!("{}", to_yaml(&Value::from_json(&doc))),
    }
    0
}

/// Replaces, in place, every scalar under a secret key with `[redacted]`
/// and cuts userinfo from every URL string.
fn redact_json(v: &mut serde_json::Value, secret: bool) {
    use serde_json::Value as J;
    match v {
        J::Object(m) => {
            for (k, inner) in m.iter_mut() {
                redact_json(inner, secret || redact::is_secret_key(k));
            }
        }
        J::Array(items) => items.iter_mut().for_each(|i| redact_json(i, secret)),
        J::Null => {}
        _ if secret => *v = J::String(REDACTED.into()),
        J::String(s) => {
            if let std::borrow::Cow::Owned(clean) = redact::strip_userinfo(s) {
                *s = clean;
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_settings_and_url_userinfo_are_not_printed() {
        let mut doc = serde_json::json!({
            "inputs": [{
                "id": "p",
                "hosts": ["http://u:url-pw@node:9100"],
                "password": 12345,
                "headers": {"Authorization": "Bearer t0k", "X-Tenant": "blue"},
                "auth": {"api_key": {"id": "a", "key": "k3y"}},
                "bearer_token_file": "/var/run/token",
            }],
            "dropped": [],
        });
        redact_json(&mut doc, false);
        let text = doc.to_string();
        for secret in ["url-pw", "12345", "t0k", "k3y"] {
            assert!(!text.contains(secret), "{secret}: {text}");
        }
        let i = &doc["inputs"][0];
        assert_eq!(i["hosts"][0], "http://node:9100");
        assert_eq!(i["headers"]["X-Tenant"], "blue");
        assert_eq!(i["bearer_token_file"], "/var/run/token");
        assert_eq!(i["auth"]["api_key"]["id"], REDACTED);
    }
}
