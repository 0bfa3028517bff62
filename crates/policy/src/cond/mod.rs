//! The condition language used by `condition:` keys, compatible with
//! Elastic Agent's: literals (bool, int, float, quoted strings, arrays and
//! maps of constants), variables `${a|b|'c'}`, arithmetic, comparisons,
//! `and`/`or`/`not` (lower or upper case), parentheses and built-in
//! functions. A condition must evaluate to a boolean.

pub mod eval;
pub mod functions;
pub mod lexer;
pub mod parser;

use std::fmt;

pub use eval::EvalOptions;
pub use functions::Func;
pub use parser::{BinOp, Expr, ExprKind, VarAlt};

use crate::vars::Vars;

/// A parse or evaluation error, with the 1-based column in the condition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct CondError {
    /// Column in the condition text, in characters.
    pub column: usize,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub hint: Option<String>,
}

impl CondError {
    /// An error at `column`.
    pub fn new(column: usize, message: impl Into<String>) -> Self {
        Self {
            column,
            message: message.into(),
            hint: None,
        }
    }

    /// Adds a hint.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for CondError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "column {}: {}", self.column, self.message)?;
        if let Some(h) = &self.hint {
            write!(f, " (hint: {h})")?;
        }
        Ok(())
    }
}

/// A parsed condition, ready to be evaluated many times.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    source: String,
    expr: Expr,
}

impl Condition {
    /// Parses a condition.
    pub fn parse(source: &str) -> Result<Condition, CondError> {
        Ok(Condition {
            source: source.to_string(),
            expr: parser::parse(source)?,
        })
    }

    /// The text it was parsed from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The syntax tree (used by lints).
    pub fn expr(&self) -> &Expr {
        &self.expr
    }

    /// Every variable name the condition can look up, in order of
    /// appearance, without repeats: which providers (and which election) a
    /// condition depends on.
    pub fn variables(&self) -> Vec<&str> {
        fn walk<'a>(e: &'a Expr, out: &mut Vec<&'a str>) {
            match &e.kind {
                ExprKind::Lit(_) => {}
                ExprKind::Var(alts) => {
                    for a in alts {
                        if let VarAlt::Name(n) = a
                            && !out.contains(&n.as_str())
                        {
                            out.push(n);
                        }
                    }
                }
                ExprKind::Not(x) => walk(x, out),
                ExprKind::Binary(_, l, r) => {
                    walk(l, out);
                    walk(r, out);
                }
                ExprKind::Call(_, args) => args.iter().for_each(|a| walk(a, out)),
            }
        }
        let mut out = Vec::new();
        walk(&self.expr, &mut out);
        out
    }

    /// Evaluates to a boolean.
    pub fn eval(&self, vars: &Vars, opts: EvalOptions) -> Result<bool, CondError> {
        eval::eval_bool(&self.expr, vars, opts)
    }
}

/// Parses and evaluates in one step.
pub fn eval_str(source: &str, vars: &Vars, opts: EvalOptions) -> Result<bool, CondError> {
    Condition::parse(source)?.eval(vars, opts)
}
