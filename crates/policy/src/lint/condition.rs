//! The condition type checker: infers what it can of the static types in a
//! condition and warns about expressions that cannot work as written, such
//! as comparing the boolean `${kubernetes_leaderelection.leader}` with the
//! string `'true'`. The rules mirror the evaluator ([`crate::cond::eval`]).
//!
//! It knows nothing of files or nodes: findings carry a column in the
//! condition text and the caller places them in the file.

use super::Severity;
use crate::cond::{BinOp, Condition, Expr, ExprKind, Func, VarAlt};
use crate::value::Value;

/// A static type, as far as one is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ty {
    Null,
    Bool,
    Int,
    Float,
    Str,
    List,
    Map,
}

impl Ty {
    pub(super) fn of(v: &Value) -> Ty {
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
pub(super) fn known_var_type(name: &str) -> Option<Ty> {
    Some(match name {
        "kubernetes_leaderelection.leader" => Ty::Bool,
        "kubernetes_leaderelection.term" => Ty::Int,
        "kubernetes_leaderelection.holder" => Ty::Str,
        "kubernetes_leaderelection.shard" | "kubernetes_leaderelection.shards" => Ty::Int,
        "host.name" | "host.hostname" | "host.platform" | "host.architecture" | "host.os" => {
            Ty::Str
        }
        "host.ip" | "host.mac" => Ty::List,
        "agent.id" | "agent.version" | "agent.name" => Ty::Str,
        "host.arch" => Ty::Str,
        n if n.starts_with("kubernetes_leaderelection.") => {
            // A named election: kubernetes_leaderelection.NAME.{leader,term,holder,shard,shards}.
            match n.rsplit_once('.').map(|(_, last)| last) {
                Some("leader") => Ty::Bool,
                Some("term" | "shard" | "shards") => Ty::Int,
                Some("holder") => Ty::Str,
                _ => return None,
            }
        }
        n if n.starts_with("env.") && n.len() > 4 && !n[4..].contains('.') => Ty::Str,
        _ => return None,
    })
}

/// What the checker needs to know about the policy and the sample variables.
pub(super) trait Known {
    /// Whether variables of provider `p` can resolve.
    fn provider_known(&self, p: &str) -> bool;
    /// The type of variable `name`, when known.
    fn var_type(&self, name: &str) -> Option<Ty>;
}

/// One finding, placed by column in the condition (`None`: the whole value).
pub(super) struct Finding {
    pub severity: Severity,
    pub column: Option<usize>,
    pub message: String,
    pub hint: Option<String>,
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

/// Checks the condition `src`: syntax errors, calls with a wrong number of
/// arguments, a result that is not a boolean, and operators applied to
/// types they cannot work on.
pub(super) fn check_condition(src: &str, known: &dyn Known) -> Vec<Finding> {
    let mut c = TypeChecker {
        known,
        src,
        out: Vec::new(),
    };
    match Condition::parse(src) {
        Err(e) => c.out.push(Finding {
            severity: Severity::Error,
            column: Some(e.column),
            message: format!("condition `{src}`: {}", e.message),
            hint: e.hint,
        }),
        Ok(cond) => {
            if let Some(t) = c.expr(cond.expr())
                && t != Ty::Bool
            {
                c.out.push(Finding {
                    severity: Severity::Error,
                    column: None,
                    message: format!(
                        "condition `{src}` evaluates to a {}, not a boolean",
                        t.name()
                    ),
                    hint: Some("compare the value, e.g. `... == true`".into()),
                });
            }
        }
    }
    c.out
}

struct TypeChecker<'a> {
    known: &'a dyn Known,
    src: &'a str,
    out: Vec<Finding>,
}

impl TypeChecker<'_> {
    fn push(&mut self, severity: Severity, column: usize, message: String, hint: Option<String>) {
        self.out.push(Finding {
            severity,
            column: Some(column),
            message,
            hint,
        });
    }

    /// Lints an expression and returns its static type when known.
    fn expr(&mut self, e: &Expr) -> Option<Ty> {
        match &e.kind {
            ExprKind::Lit(v) => Some(Ty::of(v)),
            ExprKind::Var(alts) => self.var(alts, e.col),
            ExprKind::Not(inner) => {
                if let Some(t) = self.expr(inner)
                    && t != Ty::Bool
                {
                    self.push(
                        Severity::Warning,
                        e.col,
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
                let lt = self.expr(l);
                let rt = self.expr(r);
                self.binary(*op, (l, lt), (r, rt), e.col)
            }
            ExprKind::Call(f, args) => {
                for a in args {
                    self.expr(a);
                }
                self.call(*f, args.len(), e.col)
            }
        }
    }

    fn var(&mut self, alts: &[VarAlt], col: usize) -> Option<Ty> {
        let mut ty = None;
        for a in alts {
            let VarAlt::Name(n) = a else { continue };
            if !n.contains('.') && !self.known.provider_known(n) {
                self.push(
                    Severity::Warning,
                    col,
                    format!("`${{{n}}}` in a condition is looked up as written (conditions do not use the default provider), so it is always null"),
                    Some(format!("name the provider, e.g. ${{env.{n}}}")),
                );
            } else if n.contains('.') {
                let provider = n.split('.').next().unwrap_or(n);
                if !self.known.provider_known(provider) {
                    let (message, hint) = super::unknown_provider(n, provider);
                    self.push(Severity::Warning, col, message, Some(hint));
                }
            }
            if alts.len() == 1 {
                ty = self.known.var_type(n);
            }
        }
        ty
    }

    fn binary(
        &mut self,
        op: BinOp,
        (l, lt): (&Expr, Option<Ty>),
        (r, rt): (&Expr, Option<Ty>),
        col: usize,
    ) -> Option<Ty> {
        match op {
            BinOp::Eq | BinOp::Neq => {
                if let (Some(a), Some(b)) = (lt, rt) {
                    self.compare(op, a, b, [l, r], col);
                }
                Some(Ty::Bool)
            }
            BinOp::Lt | BinOp::Lte | BinOp::Gt | BinOp::Gte => {
                if let Some(t) = [lt, rt].into_iter().flatten().find(|t| !t.numeric()) {
                    self.push(
                        Severity::Warning,
                        col,
                        format!("`{}` compares a {}; ordering works on numbers only, so this fails at evaluation", op.symbol(), t.name()),
                        Some("convert with number(...) if the value is numeric text".into()),
                    );
                }
                Some(Ty::Bool)
            }
            BinOp::And | BinOp::Or => {
                if let Some(t) = [lt, rt].into_iter().flatten().find(|t| *t != Ty::Bool) {
                    self.push(
                        Severity::Warning,
                        col,
                        format!(
                            "`{}` is applied to a {}; it needs booleans, so this fails at evaluation",
                            op.symbol(),
                            t.name()
                        ),
                        None,
                    );
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

    fn call(&mut self, f: Func, argc: usize, col: usize) -> Option<Ty> {
        let (min, max) = f.arity();
        if argc < min || max.is_some_and(|m| argc > m) {
            self.push(
                Severity::Error,
                col,
                format!(
                    "`{}` called with {argc} argument(s); it takes {}",
                    f.name(),
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

    fn compare(&mut self, op: BinOp, a: Ty, b: Ty, operands: [&Expr; 2], col: usize) {
        let src = self.src;
        let always = if op == BinOp::Eq {
            "always false"
        } else {
            "always true"
        };
        match eq_outcome(a, b) {
            EqOutcome::Fine => {}
            EqOutcome::AlwaysUnequal => {
                let lit = operands.into_iter().find_map(|x| match &x.kind {
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
                    col,
                    format!("`{src}` compares a {} with a {} and is {always}", a.name(), b.name()),
                    Some(hint),
                );
            }
            EqOutcome::Fails => self.push(
                Severity::Warning,
                col,
                format!("`{src}` compares a {} with a {}; a number can only be compared with numbers, so this fails at evaluation", a.name(), b.name()),
                Some("put the value of the other type on the left, or convert with number(...) / string(...)".into()),
            ),
        }
    }
}
