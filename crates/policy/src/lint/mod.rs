//! `check`: every problem a policy has that can be found without running it
//! (shape, provider settings, substitutions, conditions), plus warnings for
//! conditions that cannot work as written, such as comparing the boolean
//! `${kubernetes_leaderelection.leader}` with the string `'true'`.

use std::fmt;

use crate::cond::{BinOp, Condition, Expr, ExprKind, Func, VarAlt};
use crate::error::Pos;
use crate::model::{Key, Node, NodeKind, Policy};
use crate::render::column_in_file;
use crate::subst;
use crate::value::Value;
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

/// Providers leasehold implements.
pub const SUPPORTED_PROVIDERS: [&str; 5] =
    ["env", "host", "agent", "local", "kubernetes_leaderelection"];

/// A static type, as far as one is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    Null,
    Bool,
    Int,
    Float,
    Str,
    List,
    Map,
}

impl Ty {
    fn of(v: &Value) -> Ty {
        match v {
            Value::Null => Ty::Null,
            Value::Bool(_) => Ty::Bool,
            Value::Int(_) => Ty::Int,
            Value::Float(_) => Ty::Float,
            Value::Str(_) => Ty::Str,
            Value::List(_) => Ty::List,
            Value::Map(_) => Ty::Map,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Ty::Null => "null",
            Ty::Bool => "boolean",
            Ty::Int => "integer",
            Ty::Float => "float",
            Ty::Str => "string",
            Ty::List => "list",
            Ty::Map => "map",
        }
    }
    fn numeric(self) -> bool {
        matches!(self, Ty::Int | Ty::Float)
    }
}

/// Types of the variables providers are known to publish.
fn known_var_type(name: &str) -> Option<Ty> {
    Some(match name {
        "kubernetes_leaderelection.leader" => Ty::Bool,
        "kubernetes_leaderelection.term" => Ty::Int,
        "kubernetes_leaderelection.holder" => Ty::Str,
        "host.name" | "host.hostname" | "host.platform" | "host.architecture" | "host.os" => {
            Ty::Str
        }
        "host.ip" | "host.mac" => Ty::List,
        "agent.id" | "agent.version" => Ty::Str,
        n if n.starts_with("env.") && n.len() > 4 && !n[4..].contains('.') => Ty::Str,
        _ => return None,
    })
}

enum EqOutcome {
    Fine,
    AlwaysUnequal,
    Fails,
}

/// What `l == r` does for values of these types (mirrors the evaluator).
fn eq_outcome(l: Ty, r: Ty) -> EqOutcome {
    match l {
        Ty::Null => EqOutcome::Fine,
        Ty::Int | Ty::Float => {
            if r.numeric() || r == Ty::Null {
                EqOutcome::Fine
            } else {
                EqOutcome::Fails
            }
        }
        _ if l == r || r == Ty::Null => EqOutcome::Fine,
        _ => EqOutcome::AlwaysUnequal,
    }
}

struct Checker<'a> {
    policy: &'a Policy,
    sample: Option<&'a Vars>,
    providers: Vec<String>,
    out: Vec<Diagnostic>,
}

impl Checker<'_> {
    fn push(&mut self, severity: Severity, pos: Pos, message: String, hint: Option<String>) {
        self.out.push(Diagnostic {
            severity,
            file: self.policy.file.clone(),
            pos,
            message,
            hint,
        });
    }

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
        known_var_type(name)
    }

    fn providers_section(&mut self) {
        let policy = self.policy;
        for (key, node) in policy.providers() {
            if !SUPPORTED_PROVIDERS.contains(&key.name.as_str()) {
                self.push(
                    Severity::Warning,
                    key.pos,
                    format!("provider `{}` is not supported by leasehold; its variables will not resolve", key.name),
                    Some(format!("supported providers: {}", SUPPORTED_PROVIDERS.join(", "))),
                );
            }
            if !matches!(node.kind, NodeKind::Map(_) | NodeKind::Null) {
                self.push(
                    Severity::Error,
                    node.pos,
                    format!(
                        "the settings of provider `{}` must be a mapping, found {}",
                        key.name,
                        node.type_name()
                    ),
                    None,
                );
                continue;
            }
            match key.name.as_str() {
                "kubernetes_leaderelection" => self.leader_election(node),
                "local" => {
                    if let Some(v) = node.get("vars")
                        && !matches!(v.kind, NodeKind::Map(_))
                    {
                        self.push(
                            Severity::Error,
                            v.pos,
                            "`providers.local.vars` must be a mapping".into(),
                            None,
                        );
                    }
                }
                _ => {}
            }
        }
    }

    fn leader_election(&mut self, node: &Node) {
        let mut timings = [
            ("leader_leaseduration", 15i64),
            ("leader_renewdeadline", 10),
            ("leader_retryperiod", 2),
        ];
        let mut timing_pos = node.pos;
        for (key, value) in node.entries() {
            let want = match key.name.as_str() {
                "enabled" | "release_on_shutdown" => "bool",
                "leader_lease" | "kube_config" | "namespace" | "identity" => "string",
                "leader_leaseduration" | "leader_renewdeadline" | "leader_retryperiod" => "int",
                "kube_client_options" => "map",
                _ => {
                    self.push(
                        Severity::Warning,
                        key.pos,
                        format!("unknown setting `{}` of provider kubernetes_leaderelection is ignored", key.name),
                        Some("known settings: enabled, leader_lease, leader_leaseduration, leader_renewdeadline, leader_retryperiod, kube_config, kube_client_options, namespace, identity, release_on_shutdown".into()),
                    );
                    continue;
                }
            };
            if let NodeKind::Str { value: s, .. } = &value.kind
                && s.contains('$')
            {
                continue;
            }
            if value.type_name() != want {
                let hint = if want == "int" {
                    Some(format!("give whole seconds, e.g. `{}: 15`", key.name))
                } else {
                    None
                };
                self.push(
                    Severity::Error,
                    value.pos,
                    format!(
                        "`{}` must be a {want}, found {}",
                        key.name,
                        value.type_name()
                    ),
                    hint,
                );
                continue;
            }
            match (&key.name[..], &value.kind) {
                ("leader_lease", NodeKind::Str { value: s, .. }) if !is_dns_subdomain(s) => self.push(
                    Severity::Error,
                    value.pos,
                    format!("lease name {s:?} is not a valid Kubernetes object name"),
                    Some("use lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters".into()),
                ),
                ("namespace", NodeKind::Str { value: s, .. }) if !is_dns_label(s) => self.push(
                    Severity::Error,
                    value.pos,
                    format!("namespace {s:?} is not a valid namespace name"),
                    Some("use lower-case letters, digits and '-', at most 63 characters".into()),
                ),
                ("identity", NodeKind::Str { value: s, .. }) if s.is_empty() => self.push(
                    Severity::Error,
                    value.pos,
                    "identity must not be empty".into(),
                    Some("remove it to default to the pod name".into()),
                ),
                (name, NodeKind::Int(i)) => {
                    if *i <= 0 {
                        self.push(Severity::Error, value.pos, format!("`{name}` must be positive, found {i}"), None);
                    }
                    if let Some(t) = timings.iter_mut().find(|(n, _)| *n == name) {
                        t.1 = *i;
                        timing_pos = value.pos;
                    }
                }
                _ => {}
            }
        }
        let [(_, d), (_, r), (_, p)] = timings;
        if d > 0 && r > 0 && p > 0 && !(d > r && (r as f64) > 1.2 * p as f64) {
            self.push(
                Severity::Error,
                timing_pos,
                format!("lease timings must satisfy duration > renew deadline > 1.2 x retry period; got {d}s / {r}s / {p}s"),
                Some("the defaults are 15 / 10 / 2 seconds".into()),
            );
        }
    }

    fn inputs_section(&mut self) {
        let policy = self.policy;
        let mut ids: Vec<(String, Pos)> = Vec::new();
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
                        if let Some((_, first)) = ids.iter().find(|(x, _)| x == value) {
                            let first = *first;
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
                            ids.push((value.clone(), id.pos));
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
                            if r.alts.is_empty() && !r.optional {
                                self.push(
                                    Severity::Error,
                                    column_in_file(node, r.column),
                                    "empty variable `${}` can never resolve".into(),
                                    Some("name a variable, e.g. ${env.HOSTNAME}".into()),
                                );
                            }
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
                        self.condition(k, v);
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
            self.push(
                Severity::Warning,
                pos,
                format!("variable `{name}` names provider `{provider}`, which is neither supported nor configured; it will not resolve"),
                Some(format!("supported providers: {}", SUPPORTED_PROVIDERS.join(", "))),
            );
        }
    }

    fn condition(&mut self, key: &Key, node: &Node) {
        let src = match &node.kind {
            NodeKind::Bool(_) => return,
            NodeKind::Str { value, .. } => value.clone(),
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
        let _ = key;
        match Condition::parse(&src) {
            Err(e) => self.push(
                Severity::Error,
                column_in_file(node, e.column),
                format!("condition `{src}`: {}", e.message),
                e.hint,
            ),
            Ok(c) => {
                let top = self.expr(c.expr(), node, &src);
                if let Some(t) = top
                    && t != Ty::Bool
                {
                    self.push(
                        Severity::Error,
                        node.pos,
                        format!(
                            "condition `{src}` evaluates to a {}, not a boolean",
                            t.name()
                        ),
                        Some("compare the value, e.g. `... == true`".into()),
                    );
                }
            }
        }
    }

    /// Lints an expression and returns its static type when known.
    fn expr(&mut self, e: &Expr, node: &Node, src: &str) -> Option<Ty> {
        match &e.kind {
            ExprKind::Lit(v) => Some(Ty::of(v)),
            ExprKind::Var(alts) => {
                let mut ty = None;
                for a in alts {
                    match a {
                        VarAlt::Name(n) => {
                            if !n.contains('.') && !self.provider_known(n) {
                                self.push(
                                    Severity::Warning,
                                    column_in_file(node, e.col),
                                    format!("`${{{n}}}` in a condition is looked up as written (conditions do not use the default provider), so it is always null"),
                                    Some(format!("name the provider, e.g. ${{env.{n}}}")),
                                );
                            } else if n.contains('.') {
                                self.check_provider(n, column_in_file(node, e.col));
                            }
                            if alts.len() == 1 {
                                ty = self.var_type(n);
                            }
                        }
                        VarAlt::Const(_) => {}
                    }
                }
                ty
            }
            ExprKind::Not(inner) => {
                let t = self.expr(inner, node, src);
                if let Some(t) = t
                    && t != Ty::Bool
                {
                    self.push(
                        Severity::Warning,
                        column_in_file(node, e.col),
                        format!(
                            "`not` is applied to a {}; this fails at evaluation",
                            t.name()
                        ),
                        Some(
                            "note that `not` binds tighter than comparisons: write `not (a == b)`"
                                .into(),
                        ),
                    );
                }
                Some(Ty::Bool)
            }
            ExprKind::Binary(op, l, r) => {
                let lt = self.expr(l, node, src);
                let rt = self.expr(r, node, src);
                let pos = column_in_file(node, e.col);
                match op {
                    BinOp::Eq | BinOp::Neq => {
                        if let (Some(a), Some(b)) = (lt, rt) {
                            self.compare_lint(*op, a, b, l, r, pos, src);
                        }
                        Some(Ty::Bool)
                    }
                    BinOp::Lt | BinOp::Lte | BinOp::Gt | BinOp::Gte => {
                        for t in [lt, rt].into_iter().flatten() {
                            if !t.numeric() {
                                self.push(
                                    Severity::Warning,
                                    pos,
                                    format!("`{}` compares a {}; ordering works on numbers only, so this fails at evaluation", op.symbol(), t.name()),
                                    Some("convert with number(...) if the value is numeric text".into()),
                                );
                                break;
                            }
                        }
                        Some(Ty::Bool)
                    }
                    BinOp::And | BinOp::Or => {
                        for t in [lt, rt].into_iter().flatten() {
                            if t != Ty::Bool {
                                self.push(
                                    Severity::Warning,
                                    pos,
                                    format!("`{}` is applied to a {}; it needs booleans, so this fails at evaluation", op.symbol(), t.name()),
                                    None,
                                );
                                break;
                            }
                        }
                        Some(Ty::Bool)
                    }
                    _ => match (lt, rt) {
                        (Some(Ty::Int), Some(Ty::Int)) => Some(Ty::Int),
                        (Some(a), Some(b)) if a.numeric() && b.numeric() => Some(Ty::Float),
                        _ => None,
                    },
                }
            }
            ExprKind::Call(f, args) => {
                for a in args {
                    self.expr(a, node, src);
                }
                let (min, max) = f.arity();
                if args.len() < min || max.is_some_and(|m| args.len() > m) {
                    self.push(
                        Severity::Error,
                        column_in_file(node, e.col),
                        format!(
                            "`{}` called with {} argument(s); it takes {}",
                            f.name(),
                            args.len(),
                            match max {
                                Some(m) if m == min => format!("exactly {min}"),
                                Some(m) => format!("{min} to {m}"),
                                None => format!("at least {min}"),
                            }
                        ),
                        None,
                    );
                }
                match f {
                    Func::ArrayContains
                    | Func::HasKey
                    | Func::EndsWith
                    | Func::StartsWith
                    | Func::StringContains
                    | Func::Match => Some(Ty::Bool),
                    Func::Length | Func::IndexOf | Func::Number | Func::Modulo => Some(Ty::Int),
                    Func::Concat | Func::String => Some(Ty::Str),
                    _ => None,
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn compare_lint(&mut self, op: BinOp, a: Ty, b: Ty, l: &Expr, r: &Expr, pos: Pos, src: &str) {
        let always = if op == BinOp::Eq {
            "always false"
        } else {
            "always true"
        };
        match eq_outcome(a, b) {
            EqOutcome::Fine => {}
            EqOutcome::AlwaysUnequal => {
                let lit = [l, r].into_iter().find_map(|x| match &x.kind {
                    ExprKind::Lit(Value::Str(s)) => Some(s.clone()),
                    _ => None,
                });
                let hint = match (a, b, lit.as_deref()) {
                    (Ty::Bool, Ty::Str, Some(s)) | (Ty::Str, Ty::Bool, Some(s)) if s == "true" || s == "false" => {
                        format!("compare with the boolean: `{} {s}` (no quotes)", op.symbol())
                    }
                    (Ty::Str, Ty::Int | Ty::Float, _) => "compare with a quoted string, or convert with number(...)".to_string(),
                    _ => format!("compare with a {} value", a.name()),
                };
                self.push(
                    Severity::Warning,
                    pos,
                    format!("`{src}` compares a {} with a {} and is {always}", a.name(), b.name()),
                    Some(hint),
                );
            }
            EqOutcome::Fails => self.push(
                Severity::Warning,
                pos,
                format!("`{src}` compares a {} with a {}; a number can only be compared with numbers, so this fails at evaluation", a.name(), b.name()),
                Some("put the value of the other type on the left, or convert with number(...) / string(...)".into()),
            ),
        }
    }
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// Checks a policy. `sample` variables, when given, make provider variable
/// types known beyond the built-in ones. Errors sort before warnings only by
/// position; callers fail when any [`Severity::Error`] is present.
pub fn check(policy: &Policy, sample: Option<&Vars>) -> Vec<Diagnostic> {
    let mut c = Checker {
        policy,
        sample,
        providers: policy
            .providers()
            .iter()
            .map(|(k, _)| k.name.clone())
            .collect(),
        out: Vec::new(),
    };
    c.providers_section();
    c.inputs_section();
    c.out.sort_by_key(|d| d.pos);
    c.out
}
