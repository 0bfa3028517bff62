//! `check`: every problem a policy has that can be found without running it
//! (shape, provider settings, substitutions, conditions), plus warnings for
//! conditions that cannot work as written, such as comparing the boolean
//! `${kubernetes_leaderelection.leader}` with the string `'true'`.
//!
//! This module walks inputs and outputs and checks substitutions; the
//! provider settings are [`crate::providers`]' job and the condition type
//! checker is in `lint::condition`.

mod condition;
mod stream_ids;

use std::collections::HashMap;
use std::fmt;

use self::condition::{Known, Ty};
use crate::error::Pos;
use crate::model::{Node, NodeKind, Policy};
pub use crate::providers::SUPPORTED_PROVIDERS;
use crate::render::column_in_file;
use crate::subst;
use crate::vars::Vars;

/// How bad a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// The policy is wrong: `check` fails.
    Error,
    /// The policy loads but probably does not do what was meant.
    Warning,
}

/// One finding of [`check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// File name.
    pub file: String,
    /// Where.
    pub pos: Pos,
    /// What.
    pub message: String,
    /// How to fix it.
    pub hint: Option<String>,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(
            f,
            "{}:{}:{}: {sev}: {}",
            self.file, self.pos.line, self.pos.column, self.message
        )?;
        if let Some(h) = &self.hint {
            write!(f, " (hint: {h})")?;
        }
        Ok(())
    }
}

/// Diagnostics being collected for one policy file.
pub(crate) struct Report<'a> {
    file: &'a str,
    out: Vec<Diagnostic>,
}

impl Report<'_> {
    /// Adds a diagnostic.
    pub(crate) fn push(
        &mut self,
        severity: Severity,
        pos: Pos,
        message: String,
        hint: Option<String>,
    ) {
        self.out.push(Diagnostic {
            severity,
            file: self.file.to_string(),
            pos,
            message,
            hint,
        });
    }
}

/// The warning for a variable whose provider is neither supported nor
/// configured: (message, hint).
fn unknown_provider(name: &str, provider: &str) -> (String, String) {
    (
        format!(
            "variable `{name}` names provider `{provider}`, which is neither supported nor configured; it will not resolve"
        ),
        format!("supported providers: {}", SUPPORTED_PROVIDERS.join(", ")),
    )
}

struct Checker<'a> {
    policy: &'a Policy,
    sample: Option<&'a Vars>,
    providers: Vec<String>,
    report: Report<'a>,
}

impl Known for Checker<'_> {
    fn provider_known(&self, p: &str) -> bool {
        SUPPORTED_PROVIDERS.contains(&p)
            || self.providers.iter().any(|x| x == p)
            || self.sample.is_some_and(|s| s.has_provider(p))
    }

    fn var_type(&self, name: &str) -> Option<Ty> {
        if let Some(s) = self.sample
            && let Some(v) = s.lookup(name)
        {
            return Some(Ty::of(v));
        }
        condition::known_var_type(name)
    }
}

impl Checker<'_> {
    fn push(&mut self, severity: Severity, pos: Pos, message: String, hint: Option<String>) {
        self.report.push(severity, pos, message, hint);
    }

    fn inputs_section(&mut self) {
        let policy = self.policy;
        let mut ids: HashMap<&str, Pos> = HashMap::new();
        for (i, input) in policy.inputs().iter().enumerate() {
            match input.get("type") {
                None => self.push(
                    Severity::Error,
                    input.pos,
                    format!("input {i} has no `type`"),
                    Some("add `type: <input type>` to the input".into()),
                ),
                Some(t) if t.as_str().is_none_or(str::is_empty) => self.push(
                    Severity::Error,
                    t.pos,
                    format!("`type` must be a non-empty string, found {}", t.type_name()),
                    None,
                ),
                _ => {}
            }
            if let Some(id) = input.get("id") {
                match &id.kind {
                    NodeKind::Str { value, .. } if !value.contains('$') => {
                        if let Some(&first) = ids.get(value.as_str()) {
                            self.push(
                                Severity::Error,
                                id.pos,
                                format!(
                                    "id {value:?} is already used at line {} column {}",
                                    first.line, first.column
                                ),
                                Some("give every input a unique id".into()),
                            );
                        } else {
                            ids.insert(value, id.pos);
                        }
                    }
                    NodeKind::Str { .. } | NodeKind::Int(_) | NodeKind::Float(_) => {}
                    _ => self.push(
                        Severity::Error,
                        id.pos,
                        format!(
                            "`id` must be a string or a number, found {}",
                            id.type_name()
                        ),
                        None,
                    ),
                }
            }
            self.walk(input);
        }
        if let Some(outputs) = policy.section("outputs") {
            self.walk(outputs);
        }
    }

    fn walk(&mut self, node: &Node) {
        match &node.kind {
            NodeKind::Str { value, .. } if subst::may_contain_vars(value) => {
                match subst::parse(value, &self.policy.default_provider()) {
                    Err(e) => self.push(
                        Severity::Error,
                        column_in_file(node, e.column),
                        e.message,
                        Some(e.hint),
                    ),
                    Ok(t) => {
                        let refs: Vec<_> = t.refs().cloned().collect();
                        for r in refs {
                            let consts = r
                                .alts
                                .iter()
                                .filter(|a| matches!(a, subst::Alt::Const(_)))
                                .count();
                            if consts > 1 {
                                self.push(
                                    Severity::Warning,
                                    column_in_file(node, r.column),
                                    format!("`{}` has {consts} constants; only the first is ever used", r.repr()),
                                    Some("every `:` starts a new constant: quote a default that contains `:`, e.g. ${env.URL:'http://localhost:9200'}".into()),
                                );
                            }
                            for a in &r.alts {
                                if let subst::Alt::Var(name) = a {
                                    self.check_provider(name, column_in_file(node, r.column));
                                }
                            }
                        }
                    }
                }
            }
            NodeKind::List(items) => items.iter().for_each(|n| self.walk(n)),
            NodeKind::Map(entries) => {
                for (k, v) in entries {
                    if k.name == "condition" {
                        self.condition(v);
                    } else {
                        self.walk(v);
                    }
                }
            }
            _ => {}
        }
    }

    fn check_provider(&mut self, name: &str, pos: Pos) {
        let provider = name.split('.').next().unwrap_or(name);
        if !self.provider_known(provider) {
            let (message, hint) = unknown_provider(name, provider);
            self.push(Severity::Warning, pos, message, Some(hint));
        }
    }

    fn condition(&mut self, node: &Node) {
        let src = match &node.kind {
            NodeKind::Bool(_) => return,
            NodeKind::Str { value, .. } => value,
            _ => {
                self.push(
                    Severity::Error,
                    node.pos,
                    format!(
                        "`condition` must be a string or a boolean, found {}",
                        node.type_name()
                    ),
                    Some("quote the expression".into()),
                );
                return;
            }
        };
        for f in condition::check_condition(src, self) {
            let pos = f.column.map_or(node.pos, |c| column_in_file(node, c));
            self.push(f.severity, pos, f.message, f.hint);
        }
    }
}

/// Checks a policy. `sample` variables, when given, make provider variable
/// types known beyond the built-in ones. Diagnostics are sorted by position;
/// callers fail when any [`Severity::Error`] is present.
pub fn check(policy: &Policy, sample: Option<&Vars>) -> Vec<Diagnostic> {
    let mut c = Checker {
        policy,
        sample,
        providers: policy
            .providers()
            .iter()
            .map(|(k, _)| k.name.clone())
            .collect(),
        report: Report {
            file: &policy.file,
            out: Vec::new(),
        },
    };
    crate::providers::check(policy, sample, &mut c.report);
    c.inputs_section();
    stream_ids::check(policy, &mut c.report);
    exec_scripts(policy, &mut c.report);
    let mut out = c.report.out;
    out.sort_by_key(|d| d.pos);
    out
}

/// Warns about `exec` commands that would run a Pod's values as code
/// ([`crate::exec_script`]); the agent does not run them.
fn exec_scripts(policy: &Policy, report: &mut Report<'_>) {
    use crate::dynamic::POD_PROVIDER;
    use crate::exec_script::{CodeFromPod, code_from_pod};
    let provider = policy.default_provider();
    for input in policy.inputs() {
        if let Some(c) = code_from_pod(input, POD_PROVIDER, &provider) {
            report.push(
                Severity::Warning,
                c.pos,
                format!("{}; the agent does not run this input", c.message()),
                Some(CodeFromPod::hint().into()),
            );
        }
    }
}
