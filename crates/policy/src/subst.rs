//! `${…}` variable substitution in policy strings.
//!
//! - `${name}`: a variable; a name without a dot belongs to the default
//!   provider (`${HOSTNAME}` is `${env.HOSTNAME}` unless
//!   `agent.providers.default` says otherwise).
//! - `${a|b|'c'}`: the first alternative that resolves; quoted constants use
//!   either quote; `${a:b}` / `${x:}` give a default (everything after `:` is
//!   a constant); `${a|?}` marks the value optional (the key is removed
//!   instead of the input being dropped).
//! - `$${x}` is the literal text `${x}`.
//! - When the whole string is one variable, the value keeps its type (list,
//!   map, bool, number); inside a longer string it becomes text.
//! - A `${` without a matching `}` is an error, and so is `${}` (or `${ }`,
//!   `${|}`: a reference naming nothing), as in Elastic Agent; a variable
//!   that does not resolve is not an error here: the caller drops the input.

use crate::value::Value;
use crate::vars::Vars;

/// One alternative inside `${…}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Alt {
    /// A variable name, with the default provider already applied.
    Var(String),
    /// A constant.
    Const(String),
}

/// One `${…}` reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VarRef {
    /// Alternatives, tried in order.
    pub alts: Vec<Alt>,
    /// `|?` was given: resolve to nothing rather than dropping the input.
    pub optional: bool,
    /// 1-based character column of the `$` in the template.
    pub column: usize,
}

impl VarRef {
    /// The reference written back in canonical form, for messages.
    pub fn repr(&self) -> String {
        let mut s = String::from("${");
        for (i, a) in self.alts.iter().enumerate() {
            if i > 0 {
                s.push('|');
            }
            match a {
                Alt::Var(v) => s.push_str(v),
                Alt::Const(c) => {
                    s.push('\'');
                    s.push_str(c);
                    s.push('\'');
                }
            }
        }
        if self.optional {
            s.push_str("|?");
        }
        s.push('}');
        s
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Text(String),
    Var(VarRef),
}

/// A parsed string value.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    pieces: Vec<Piece>,
    whole: bool,
}

/// A malformed substitution.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SubstError {
    /// 1-based character column in the string.
    pub column: usize,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub hint: String,
}

/// The outcome of applying a template.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolved {
    /// The substituted value.
    Value(Value),
    /// A variable did not resolve: the input owning this string is dropped.
    NoMatch(String),
    /// An optional (`|?`) variable did not resolve: the key is removed.
    Optional(String),
}

fn in_var_class(c: char) -> bool {
    c.is_alphabetic()
        || c.is_ascii_digit()
        || matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0c')
        || matches!(
            c,
            '\\' | '-' | '_' | '|' | '.' | '\'' | '"' | ':' | '/' | '?'
        )
}

/// Returns the byte index of the closing `}` when `s[from..]` is a run of
/// allowed characters followed by `}`.
fn scan_body(s: &str, from: usize) -> Option<usize> {
    for (off, c) in s[from..].char_indices() {
        if c == '}' {
            return Some(from + off);
        }
        if !in_var_class(c) {
            return None;
        }
    }
    None
}

fn column_of(s: &str, byte: usize) -> usize {
    s[..byte].chars().count() + 1
}

/// True when `s` might hold a substitution; strings without `$` can skip
/// parsing entirely.
pub fn may_contain_vars(s: &str) -> bool {
    s.contains('$')
}

/// Parses a string value. `default_provider` is put in front of names
/// without a dot.
pub fn parse(s: &str, default_provider: &str) -> Result<Template, SubstError> {
    let b = s.as_bytes();
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut last = 0;
    let mut i = 0;
    let mut matches = 0;
    let mut whole = false;
    while i < b.len() {
        if b[i] == b'$' {
            let escaped = b.get(i + 1) == Some(&b'$') && b.get(i + 2) == Some(&b'{');
            let body_start = if escaped {
                Some(i + 3)
            } else if b.get(i + 1) == Some(&b'{') {
                Some(i + 2)
            } else {
                None
            };
            if let Some(bs) = body_start
                && let Some(end) = scan_body(s, bs)
            {
                let gap = &s[last..i];
                check_no_open(s, last, gap)?;
                text.push_str(gap);
                matches += 1;
                if escaped {
                    text.push_str(&s[i + 1..=end]);
                } else {
                    let (alts, optional) = extract_vars(&s[bs..end], default_provider).map_err(
                        |(message, hint)| SubstError {
                            column: column_of(s, i),
                            message: format!("in `{}`: {message}", &s[i..=end]),
                            hint,
                        },
                    )?;
                    if !text.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut text)));
                    }
                    whole = i == 0 && end + 1 == s.len();
                    pieces.push(Piece::Var(VarRef {
                        alts,
                        optional,
                        column: column_of(s, i),
                    }));
                }
                i = end + 1;
                last = i;
                continue;
            }
        }
        i += 1;
    }
    let gap = &s[last..];
    check_no_open(s, last, gap)?;
    text.push_str(gap);
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(Template {
        pieces,
        whole: whole && matches == 1,
    })
}

fn check_no_open(s: &str, gap_start: usize, gap: &str) -> Result<(), SubstError> {
    if let Some(off) = gap.find("${") {
        return Err(SubstError {
            column: column_of(s, gap_start + off),
            message: "starting `${` is missing its ending `}`".into(),
            hint: "close the variable with `}` (names may use letters, digits, spaces and - _ . / : | ? ' \" \\), or write `$${` for a literal `${`".into(),
        });
    }
    Ok(())
}

type ExtractError = (String, String);

fn extract_vars(body: &str, default_provider: &str) -> Result<(Vec<Alt>, bool), ExtractError> {
    let mut quote: Option<char> = None;
    let mut constant = false;
    let mut escape = false;
    let mut cur = String::new();
    let mut res = Vec::new();
    let push_var = |res: &mut Vec<Alt>, name: &str| -> Result<(), ExtractError> {
        if name.ends_with('.') {
            return Err((
                format!("variable `{name}` cannot end with '.'"),
                "remove the trailing dot or complete the name".into(),
            ));
        }
        let full = if default_provider.is_empty() || name.contains('.') {
            name.to_string()
        } else {
            format!("{default_provider}.{name}")
        };
        res.push(Alt::Var(full));
        Ok(())
    };
    for r in body.chars() {
        if r == '|' || r == ':' {
            if escape {
                return Err((
                    format!("'{r}' cannot be escaped"),
                    format!("remove the '\\' before '{r}'"),
                ));
            }
            if quote.is_none() {
                if constant {
                    res.push(Alt::Const(std::mem::take(&mut cur)));
                } else if !cur.is_empty() {
                    push_var(&mut res, &cur)?;
                }
                cur.clear();
                constant = r == ':';
            } else {
                cur.push(r);
            }
            continue;
        }
        if !escape && (r == '"' || r == '\'') {
            match quote {
                None => {
                    quote = Some(r);
                    constant = true;
                }
                Some(q) if q == r => quote = None,
                Some(_) => cur.push(r),
            }
            continue;
        }
        escape = !escape && r == '\\';
        if r == '\\' {
            if !escape {
                cur.push(r);
            }
        } else if quote.is_some() || !r.is_whitespace() {
            cur.push(r);
        }
    }
    if let Some(q) = quote {
        return Err((
            format!("starting {q} is missing ending {q}"),
            format!("close the constant with {q}"),
        ));
    }
    let mut optional = false;
    if !constant && cur == "?" {
        optional = true;
    } else if constant {
        res.push(Alt::Const(cur));
    } else if !cur.is_empty() {
        push_var(&mut res, &cur)?;
    }
    if res.is_empty() && !optional {
        return Err((
            "empty variable reference: it names no variable and no constant".into(),
            "name a variable, e.g. ${env.HOSTNAME}, or write $${} for the literal text".into(),
        ));
    }
    Ok((res, optional))
}

impl Template {
    /// The `${…}` references in the string, in order.
    pub fn refs(&self) -> impl Iterator<Item = &VarRef> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Var(v) => Some(v),
            Piece::Text(_) => None,
        })
    }

    /// Substitutes variables.
    pub fn apply(&self, vars: &Vars) -> Resolved {
        if self.whole
            && let [Piece::Var(v)] = self.pieces.as_slice()
        {
            for alt in &v.alts {
                match alt {
                    Alt::Const(c) => return Resolved::Value(Value::Str(c.clone())),
                    Alt::Var(name) => {
                        if let Some(val) = vars.lookup(name) {
                            return Resolved::Value(val.clone());
                        }
                    }
                }
            }
            return unresolved(v);
        }
        let mut out = String::new();
        for p in &self.pieces {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Var(v) => {
                    let mut set = false;
                    for alt in &v.alts {
                        match alt {
                            Alt::Const(c) => {
                                out.push_str(c);
                                set = true;
                            }
                            Alt::Var(name) => {
                                if let Some(val) = vars.lookup(name) {
                                    out.push_str(&val.to_subst_text());
                                    set = true;
                                }
                            }
                        }
                        if set {
                            break;
                        }
                    }
                    if !set {
                        return unresolved(v);
                    }
                }
            }
        }
        Resolved::Value(Value::Str(out))
    }
}

fn unresolved(v: &VarRef) -> Resolved {
    if v.optional {
        Resolved::Optional(v.repr())
    } else {
        Resolved::NoMatch(v.repr())
    }
}

/// Parses and applies in one step (convenience for callers with one string).
pub fn substitute(s: &str, vars: &Vars, default_provider: &str) -> Result<Resolved, SubstError> {
    Ok(parse(s, default_provider)?.apply(vars))
}
