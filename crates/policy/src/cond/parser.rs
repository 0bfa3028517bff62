//! Parser for the condition language.
//!
//! Precedence, tightest first, each level left-associative:
//! `* / %`, `+ -`, `not`, `==`, `!=`, `<=`, `>=`, `<`, `>`, `and`, `or`.
//! Every comparison operator has its own level (as in the reference
//! grammar), so `1 < 2 == true` reads as `1 < (2 == true)`; and `not`
//! binds tighter than comparisons, so `not 1 == 1` is `(not 1) == 1`.
//! Parenthesise when in doubt. Array and map literals hold constants only.

use super::CondError;
use super::functions::Func;
use super::lexer::{Tok, Token, tokenize};
use crate::value::{Map, Value};

/// Expression trees deeper than this are refused so evaluation cannot
/// exhaust the stack.
pub const MAX_DEPTH: usize = 256;
/// Parentheses, `not` and function calls nested deeper than this are refused
/// so parsing cannot exhaust the stack.
pub const MAX_NESTING: usize = 64;

/// A binary operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Mod,
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `==`
    Eq,
    /// `!=`
    Neq,
    /// `<=`
    Lte,
    /// `>=`
    Gte,
    /// `<`
    Lt,
    /// `>`
    Gt,
    /// `and`
    And,
    /// `or`
    Or,
}

impl BinOp {
    fn from_tok(t: &Tok) -> Option<BinOp> {
        Some(match t {
            Tok::Mul => BinOp::Mul,
            Tok::Div => BinOp::Div,
            Tok::Mod => BinOp::Mod,
            Tok::Add => BinOp::Add,
            Tok::Sub => BinOp::Sub,
            Tok::Eq => BinOp::Eq,
            Tok::Neq => BinOp::Neq,
            Tok::Lte => BinOp::Lte,
            Tok::Gte => BinOp::Gte,
            Tok::Lt => BinOp::Lt,
            Tok::Gt => BinOp::Gt,
            Tok::And => BinOp::And,
            Tok::Or => BinOp::Or,
            _ => return None,
        })
    }

    /// Binding strength; higher binds tighter.
    pub fn precedence(self) -> u8 {
        match self {
            BinOp::Mul | BinOp::Div | BinOp::Mod => 11,
            BinOp::Add | BinOp::Sub => 10,
            BinOp::Eq => 8,
            BinOp::Neq => 7,
            BinOp::Lte => 6,
            BinOp::Gte => 5,
            BinOp::Lt => 4,
            BinOp::Gt => 3,
            BinOp::And => 2,
            BinOp::Or => 1,
        }
    }

    /// The operator as written.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Mod => "%",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Eq => "==",
            BinOp::Neq => "!=",
            BinOp::Lte => "<=",
            BinOp::Gte => ">=",
            BinOp::Lt => "<",
            BinOp::Gt => ">",
            BinOp::And => "and",
            BinOp::Or => "or",
        }
    }
}

const NOT_PRECEDENCE: u8 = 9;

/// One alternative of `${a|b|'c'}`.
#[derive(Debug, Clone, PartialEq)]
pub enum VarAlt {
    /// A variable name, looked up as written (no default provider).
    Name(String),
    /// A constant fallback.
    Const(Value),
}

/// An expression node.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    /// What it is.
    pub kind: ExprKind,
    /// 1-based column where it starts (for binary operators: the operator).
    pub col: usize,
    depth: usize,
}

/// The kinds of expression.
#[derive(Debug, Clone, PartialEq)]
pub enum ExprKind {
    /// A literal value (bool, number, string, array, map).
    Lit(Value),
    /// `${…}`
    Var(Vec<VarAlt>),
    /// `not e`
    Not(Box<Expr>),
    /// `l op r`
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `f(args)`
    Call(Func, Vec<Expr>),
}

struct Parser {
    toks: Vec<Token>,
    pos: usize,
    nesting: usize,
}

fn mk(kind: ExprKind, col: usize, depth: usize) -> Result<Expr, CondError> {
    if depth > MAX_DEPTH {
        return Err(CondError::new(
            col,
            format!("condition nests deeper than {MAX_DEPTH} levels"),
        )
        .with_hint("split it or remove redundant parentheses"));
    }
    Ok(Expr { kind, col, depth })
}

/// Parses a condition.
pub fn parse(src: &str) -> Result<Expr, CondError> {
    if src.is_empty() {
        return Err(
            CondError::new(1, "a condition must not be empty").with_hint(
                "write a boolean expression such as `${kubernetes_leaderelection.leader} == true`",
            ),
        );
    }
    let toks = tokenize(src)?;
    let mut p = Parser {
        toks,
        pos: 0,
        nesting: 0,
    };
    let e = p.exp(0)?;
    let t = p.peek();
    if t.tok != Tok::Eof {
        let mut err = CondError::new(
            t.col,
            format!(
                "unexpected {} after a complete expression",
                t.tok.describe()
            ),
        );
        if matches!(t.tok, Tok::Number(ref n) | Tok::Float(ref n) if n.starts_with('-')) {
            err = err.with_hint("put a space after '-' to subtract: `a - 1`");
        } else {
            err =
                err.with_hint("join expressions with `and`/`or`, or check for a missing operator");
        }
        return Err(err);
    }
    Ok(e)
}

impl Parser {
    fn peek(&self) -> &Token {
        &self.toks[self.pos.min(self.toks.len() - 1)]
    }

    fn next(&mut self) -> Token {
        let t = self.peek().clone();
        if self.pos < self.toks.len() - 1 {
            self.pos += 1;
        }
        t
    }

    fn expect(&mut self, want: Tok, ctx: &str) -> Result<Token, CondError> {
        let t = self.next();
        if t.tok == want {
            Ok(t)
        } else {
            Err(CondError::new(
                t.col,
                format!(
                    "expected {} {ctx}, found {}",
                    want.describe(),
                    t.tok.describe()
                ),
            ))
        }
    }

    fn exp(&mut self, min: u8) -> Result<Expr, CondError> {
        self.nesting += 1;
        if self.nesting > MAX_NESTING {
            let col = self.peek().col;
            return Err(CondError::new(
                col,
                format!("condition nests deeper than {MAX_NESTING} levels"),
            ));
        }
        let mut left = self.primary()?;
        loop {
            let t = self.peek().clone();
            let Some(op) = BinOp::from_tok(&t.tok) else {
                break;
            };
            if op.precedence() < min {
                break;
            }
            self.next();
            let right = self.exp(op.precedence() + 1)?;
            let depth = left.depth.max(right.depth) + 1;
            left = mk(
                ExprKind::Binary(op, Box::new(left), Box::new(right)),
                t.col,
                depth,
            )?;
        }
        self.nesting -= 1;
        Ok(left)
    }

    fn constant(&mut self, ctx: &str) -> Result<Value, CondError> {
        let t = self.next();
        literal(&t).ok_or_else(|| {
            CondError::new(
                t.col,
                format!(
                    "expected a constant (string, number, true or false) {ctx}, found {}",
                    t.tok.describe()
                ),
            )
        })?
    }

    fn primary(&mut self) -> Result<Expr, CondError> {
        let t = self.next();
        let col = t.col;
        match &t.tok {
            Tok::LPar => {
                let e = self.exp(0)?;
                self.expect(Tok::RPar, "to close '('")?;
                Ok(e)
            }
            Tok::Not => {
                let e = self.exp(NOT_PRECEDENCE)?;
                let d = e.depth + 1;
                mk(ExprKind::Not(Box::new(e)), col, d)
            }
            Tok::True
            | Tok::False
            | Tok::Number(_)
            | Tok::Float(_)
            | Tok::SText(_)
            | Tok::DText(_) => {
                let v = literal(&t).unwrap_or(Ok(Value::Null))?;
                mk(ExprKind::Lit(v), col, 1)
            }
            Tok::BeginVar => {
                let mut alts = Vec::new();
                loop {
                    let v = self.next();
                    match &v.tok {
                        Tok::Name(n) | Tok::VName(n) => alts.push(VarAlt::Name(n.clone())),
                        _ => match literal(&v) {
                            Some(c) => alts.push(VarAlt::Const(c?)),
                            None => {
                                return Err(CondError::new(
                                    v.col,
                                    format!(
                                        "expected a variable name or constant inside `${{…}}`, found {}",
                                        v.tok.describe()
                                    ),
                                ));
                            }
                        },
                    }
                    let sep = self.next();
                    match sep.tok {
                        Tok::Pipe => continue,
                        Tok::RDict => break,
                        other => {
                            return Err(CondError::new(
                                sep.col,
                                format!(
                                    "expected '|' or '}}' in a variable, found {}",
                                    other.describe()
                                ),
                            )
                            .with_hint(
                                "variables look like `${provider.name}` or `${a|b|'default'}`",
                            ));
                        }
                    }
                }
                mk(ExprKind::Var(alts), col, 1)
            }
            Tok::Name(name) => {
                let Some(f) = Func::from_name(name) else {
                    let mut e =
                        CondError::new(col, format!("unknown function or bare word `{name}`"));
                    e = if self.peek().tok == Tok::LPar {
                        e.with_hint(format!(
                            "known functions: {}",
                            Func::ALL
                                .iter()
                                .map(|f| f.name())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ))
                    } else {
                        e.with_hint(format!(
                            "quote text ('{name}') or write a variable as ${{{name}}}"
                        ))
                    };
                    return Err(e);
                };
                self.expect(Tok::LPar, &format!("after function name `{name}`"))?;
                let mut args = Vec::new();
                let mut depth = 1;
                if self.peek().tok != Tok::RPar {
                    loop {
                        let a = self.exp(0)?;
                        depth = depth.max(a.depth + 1);
                        args.push(a);
                        let sep = self.next();
                        match sep.tok {
                            Tok::Comma => continue,
                            Tok::RPar => break,
                            other => {
                                return Err(CondError::new(
                                    sep.col,
                                    format!(
                                        "expected ',' or ')' in the arguments of `{name}`, found {}",
                                        other.describe()
                                    ),
                                ));
                            }
                        }
                    }
                } else {
                    self.next();
                }
                mk(ExprKind::Call(f, args), col, depth)
            }
            Tok::LArr => {
                let mut items = Vec::new();
                if self.peek().tok == Tok::RArr {
                    self.next();
                } else {
                    loop {
                        items.push(self.constant("in an array literal")?);
                        let sep = self.next();
                        match sep.tok {
                            Tok::Comma => continue,
                            Tok::RArr => break,
                            other => {
                                return Err(CondError::new(
                                    sep.col,
                                    format!(
                                        "expected ',' or ']' in an array, found {}",
                                        other.describe()
                                    ),
                                ));
                            }
                        }
                    }
                }
                mk(ExprKind::Lit(Value::List(items)), col, 1)
            }
            Tok::LDict => {
                let mut m = Map::new();
                if self.peek().tok == Tok::RDict {
                    self.next();
                } else {
                    loop {
                        let k = self.next();
                        let key = match &k.tok {
                            Tok::Name(s) | Tok::SText(s) | Tok::DText(s) => s.clone(),
                            other => {
                                return Err(CondError::new(
                                    k.col,
                                    format!(
                                        "expected a key (name or quoted text) in a map, found {}",
                                        other.describe()
                                    ),
                                ));
                            }
                        };
                        self.expect(Tok::Colon, "after a map key")?;
                        let v = self.constant("as a map value")?;
                        m.insert(key, v);
                        let sep = self.next();
                        match sep.tok {
                            Tok::Comma => continue,
                            Tok::RDict => break,
                            other => {
                                return Err(CondError::new(
                                    sep.col,
                                    format!(
                                        "expected ',' or '}}' in a map, found {}",
                                        other.describe()
                                    ),
                                ));
                            }
                        }
                    }
                }
                mk(ExprKind::Lit(Value::Map(m)), col, 1)
            }
            Tok::VName(n) => Err(
                CondError::new(col, format!("unexpected name `{n}`")).with_hint(
                    if n.contains('-') || n.contains('/') {
                        "put spaces around '-' and '/' when they are operators: `5 - 3`".to_string()
                    } else {
                        format!("write a variable as ${{{n}}}")
                    },
                ),
            ),
            other => Err(CondError::new(
                col,
                format!("expected a value, found {}", other.describe()),
            )),
        }
    }
}

fn literal(t: &Token) -> Option<Result<Value, CondError>> {
    Some(match &t.tok {
        Tok::True => Ok(Value::Bool(true)),
        Tok::False => Ok(Value::Bool(false)),
        Tok::SText(s) | Tok::DText(s) => Ok(Value::Str(s.clone())),
        Tok::Number(n) => n.parse::<i64>().map(Value::Int).map_err(|_| {
            CondError::new(t.col, format!("integer {n} does not fit in 64 bits")).with_hint(
                "write it as a float, e.g. 1.0e20 is not supported; use a smaller number",
            )
        }),
        Tok::Float(f) => f
            .parse::<f64>()
            .map(Value::Float)
            .map_err(|_| CondError::new(t.col, format!("invalid float {f}"))),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Renders the tree with explicit parentheses.
    fn show(e: &Expr) -> String {
        match &e.kind {
            ExprKind::Lit(Value::Int(i)) => i.to_string(),
            ExprKind::Lit(Value::Bool(b)) => b.to_string(),
            ExprKind::Lit(v) => format!("{v:?}"),
            ExprKind::Var(a) => format!("${a:?}"),
            ExprKind::Not(x) => format!("(not {})", show(x)),
            ExprKind::Binary(op, l, r) => format!("({} {} {})", show(l), op.symbol(), show(r)),
            ExprKind::Call(f, args) => format!(
                "{}({})",
                f.name(),
                args.iter().map(show).collect::<Vec<_>>().join(", ")
            ),
        }
    }

    #[test]
    fn precedence_and_associativity() {
        let cases = [
            ("1 + 2 * 3", "(1 + (2 * 3))"),
            ("1 - 2 - 3", "((1 - 2) - 3)"),
            ("8 / 2 / 2", "((8 / 2) / 2)"),
            ("1 % 2 * 3", "((1 % 2) * 3)"),
            ("true or false and false", "(true or (false and false))"),
            ("true and false or true", "((true and false) or true)"),
            ("not true == false", "((not true) == false)"),
            ("not 1 + 1", "(not (1 + 1))"),
            ("1 < 2 == true", "(1 < (2 == true))"),
            ("1 == 1 != false", "((1 == 1) != false)"),
            ("1 != 1 == false", "(1 != (1 == false))"),
            ("1 <= 2 >= 0", "((1 <= 2) >= 0)"),
            ("1 > 2 < 3", "(1 > (2 < 3))"),
            ("(1 + 2) * 3", "((1 + 2) * 3)"),
            ("not not true", "(not (not true))"),
            ("1 == 1 and 2 == 2", "((1 == 1) and (2 == 2))"),
        ];
        for (src, want) in cases {
            assert_eq!(show(&parse(src).unwrap()), want, "{src}");
        }
    }

    #[test]
    fn syntax_errors_point_at_the_column() {
        let cases = [
            ("", 1),
            ("   ", 4),
            ("1 ==", 5),
            ("(1 == 1", 8),
            ("1 == 1)", 7),
            ("5 -3", 3),
            ("5-3 == 2", 1),
            ("${}", 3),
            ("${a|}", 5),
            ("${a", 4),
            ("[1, ${a}]", 5),
            ("{a 1}", 4),
            ("{true: 1}", 2),
            ("unknown(1)", 1),
            ("hello", 1),
            ("length(1 2)", 10),
            ("1 == 1 2", 8),
            ("99999999999999999999 == 1", 1),
        ];
        for (src, col) in cases {
            let e = parse(src).unwrap_err();
            assert_eq!(e.column, col, "{src:?}: {e}");
        }
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let deep = format!("{}true{}", "(".repeat(10_000), ")".repeat(10_000));
        assert!(parse(&deep).is_err());
        let long = vec!["true"; 5_000].join(" and ");
        assert!(parse(&long).is_err());
        let nots = format!("{}true", "not ".repeat(5_000));
        assert!(parse(&nots).is_err());
    }
}
