//! Tokens of the condition language.
//!
//! Like the reference grammar's lexer, the longest match wins and ties go to
//! the rule listed first. Two consequences users notice: `5-3` and `8/2` are
//! single name tokens (write `5 - 3`, `8 / 2`), and `-3` directly after a
//! value is a negative literal, not a subtraction.

use super::CondError;

/// A token kind.
#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    /// `|` (alternatives inside `${…}`).
    Pipe,
    /// `,`
    Comma,
    /// `:`
    Colon,
    /// `==`
    Eq,
    /// `!=`
    Neq,
    /// `>`
    Gt,
    /// `<`
    Lt,
    /// `>=`
    Gte,
    /// `<=`
    Lte,
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Mod,
    /// `and` / `AND`
    And,
    /// `or` / `OR`
    Or,
    /// `true` / `TRUE`
    True,
    /// `false` / `FALSE`
    False,
    /// `-?[0-9]+.[0-9]+`
    Float(String),
    /// `-?[0-9]+`
    Number(String),
    /// `not` / `NOT`
    Not,
    /// `[a-zA-Z_][a-zA-Z0-9_]*`
    Name(String),
    /// Dotted variable name.
    VName(String),
    /// Single-quoted text (quotes removed).
    SText(String),
    /// Double-quoted text (quotes removed).
    DText(String),
    /// `(`
    LPar,
    /// `)`
    RPar,
    /// `[`
    LArr,
    /// `]`
    RArr,
    /// `{`
    LDict,
    /// `}`
    RDict,
    /// `${`
    BeginVar,
    /// End of input.
    Eof,
}

impl Tok {
    /// How the token reads in messages.
    pub fn describe(&self) -> String {
        match self {
            Tok::Pipe => "'|'".into(),
            Tok::Comma => "','".into(),
            Tok::Colon => "':'".into(),
            Tok::Eq => "'=='".into(),
            Tok::Neq => "'!='".into(),
            Tok::Gt => "'>'".into(),
            Tok::Lt => "'<'".into(),
            Tok::Gte => "'>='".into(),
            Tok::Lte => "'<='".into(),
            Tok::Add => "'+'".into(),
            Tok::Sub => "'-'".into(),
            Tok::Mul => "'*'".into(),
            Tok::Div => "'/'".into(),
            Tok::Mod => "'%'".into(),
            Tok::And => "'and'".into(),
            Tok::Or => "'or'".into(),
            Tok::True => "'true'".into(),
            Tok::False => "'false'".into(),
            Tok::Not => "'not'".into(),
            Tok::Float(s) | Tok::Number(s) => format!("number {s}"),
            Tok::Name(s) | Tok::VName(s) => format!("name `{s}`"),
            Tok::SText(s) => format!("string '{s}'"),
            Tok::DText(s) => format!("string \"{s}\""),
            Tok::LPar => "'('".into(),
            Tok::RPar => "')'".into(),
            Tok::LArr => "'['".into(),
            Tok::RArr => "']'".into(),
            Tok::LDict => "'{'".into(),
            Tok::RDict => "'}'".into(),
            Tok::BeginVar => "'${'".into(),
            Tok::Eof => "end of condition".into(),
        }
    }
}

/// A token and where it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    /// The kind.
    pub tok: Tok,
    /// 1-based character column.
    pub col: usize,
}

fn is_vchar(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'/')
}

fn digits(b: &[u8], mut i: usize) -> usize {
    let s = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    i - s
}

fn number_len(b: &[u8], p: usize) -> (usize, usize) {
    // (NUMBER length, FLOAT length); 0 when no match
    let sign = usize::from(b.get(p) == Some(&b'-'));
    let d = digits(b, p + sign);
    if d == 0 {
        return (0, 0);
    }
    let int_len = sign + d;
    let after = p + int_len;
    let float_len = if b.get(after) == Some(&b'.') {
        let f = digits(b, after + 1);
        if f > 0 { int_len + 1 + f } else { 0 }
    } else {
        0
    };
    (int_len, float_len)
}

fn vname_len(b: &[u8], p: usize) -> usize {
    let mut i = p;
    while i < b.len() && is_vchar(b[i]) {
        i += 1;
    }
    if i == p {
        return 0;
    }
    loop {
        if b.get(i) == Some(&b'.') && b.get(i + 1).is_some_and(|&c| is_vchar(c)) {
            i += 1;
            while i < b.len() && is_vchar(b[i]) {
                i += 1;
            }
        } else {
            return i - p;
        }
    }
}

fn name_len(b: &[u8], p: usize) -> usize {
    if !b
        .get(p)
        .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_')
    {
        return 0;
    }
    let mut i = p + 1;
    while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
        i += 1;
    }
    i - p
}

fn quoted_len(b: &[u8], p: usize, q: u8) -> usize {
    if b.get(p) != Some(&q) {
        return 0;
    }
    let mut i = p + 1;
    while i < b.len() {
        match b[i] {
            c if c == q => return i + 1 - p,
            b'\r' | b'\n' => return 0,
            _ => i += 1,
        }
    }
    0
}

/// Splits a condition into tokens; the last one is [`Tok::Eof`].
pub fn tokenize(src: &str) -> Result<Vec<Token>, CondError> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut p = 0;
    let mut col = 1;
    while p < b.len() {
        let c = b[p];
        if matches!(c, b' ' | b'\r' | b'\n' | b'\t') {
            p += 1;
            col += 1;
            continue;
        }
        // Candidates in rule order; the longest wins, the first on ties.
        let lit = |s: &str| {
            if b[p..].starts_with(s.as_bytes()) {
                s.len()
            } else {
                0
            }
        };
        let kw = |lo: &str, up: &str| lit(lo).max(lit(up));
        let (num, float) = number_len(b, p);
        let text = |len: usize| src[p + 1..p + len - 1].to_string();
        let word = |len: usize| src[p..p + len].to_string();
        let candidates: [(usize, &dyn Fn(usize) -> Tok); 33] = [
            (lit("|"), &|_| Tok::Pipe),
            (lit(","), &|_| Tok::Comma),
            (lit(":"), &|_| Tok::Colon),
            (lit("=="), &|_| Tok::Eq),
            (lit("!="), &|_| Tok::Neq),
            (lit(">"), &|_| Tok::Gt),
            (lit("<"), &|_| Tok::Lt),
            (lit(">="), &|_| Tok::Gte),
            (lit("<="), &|_| Tok::Lte),
            (lit("+"), &|_| Tok::Add),
            (lit("-"), &|_| Tok::Sub),
            (lit("*"), &|_| Tok::Mul),
            (lit("/"), &|_| Tok::Div),
            (lit("%"), &|_| Tok::Mod),
            (kw("and", "AND"), &|_| Tok::And),
            (kw("or", "OR"), &|_| Tok::Or),
            (kw("true", "TRUE"), &|_| Tok::True),
            (kw("false", "FALSE"), &|_| Tok::False),
            (float, &|l| Tok::Float(word(l))),
            (num, &|l| Tok::Number(word(l))),
            (kw("not", "NOT"), &|_| Tok::Not),
            (name_len(b, p), &|l| Tok::Name(word(l))),
            (vname_len(b, p), &|l| Tok::VName(word(l))),
            (quoted_len(b, p, b'\''), &|l| Tok::SText(text(l))),
            (quoted_len(b, p, b'"'), &|l| Tok::DText(text(l))),
            (lit("("), &|_| Tok::LPar),
            (lit(")"), &|_| Tok::RPar),
            (lit("["), &|_| Tok::LArr),
            (lit("]"), &|_| Tok::RArr),
            (lit("{"), &|_| Tok::LDict),
            (lit("}"), &|_| Tok::RDict),
            (lit("${"), &|_| Tok::BeginVar),
            (0, &|_| Tok::Eof),
        ];
        let mut best: Option<(usize, &dyn Fn(usize) -> Tok)> = None;
        for (len, mk) in candidates.iter() {
            if *len > 0 && best.is_none_or(|(l, _)| *len > l) {
                best = Some((*len, *mk));
            }
        }
        let Some((len, mk)) = best else {
            let ch = src[p..].chars().next().unwrap_or('?');
            let hint = match ch {
                '=' => Some("use `==` to compare"),
                '&' => Some("use `and`"),
                '!' => Some("use `not` or `!=`"),
                _ => None,
            };
            let mut e = CondError::new(col, format!("unexpected character {ch:?}"));
            if let Some(h) = hint {
                e = e.with_hint(h);
            }
            return Err(e);
        };
        out.push(Token { tok: mk(len), col });
        col += src[p..p + len].chars().count();
        p += len;
    }
    out.push(Token { tok: Tok::Eof, col });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        tokenize(s).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn longest_match_and_rule_order() {
        use Tok::*;
        let n = |s: &str| Number(s.into());
        let cases: Vec<(&str, Vec<Tok>)> = vec![
            ("and AND And", vec![And, And, Name("And".into()), Eof]),
            ("android", vec![Name("android".into()), Eof]),
            ("true TRUE True", vec![True, True, Name("True".into()), Eof]),
            ("not NOT", vec![Not, Not, Eof]),
            ("-4 - 4", vec![n("-4"), Sub, n("4"), Eof]),
            ("5-3", vec![VName("5-3".into()), Eof]),
            ("8/2", vec![VName("8/2".into()), Eof]),
            ("8 / 2", vec![n("8"), Div, n("2"), Eof]),
            (
                "1.0 1.0.1",
                vec![Float("1.0".into()), VName("1.0.1".into()), Eof],
            ),
            ("a.b.c", vec![VName("a.b.c".into()), Eof]),
            (
                "'x\"y' \"z\"",
                vec![SText("x\"y".into()), DText("z".into()), Eof],
            ),
            (">= <= > < == !=", vec![Gte, Lte, Gt, Lt, Eq, Neq, Eof]),
            (
                "${a|b}",
                vec![
                    BeginVar,
                    Name("a".into()),
                    Pipe,
                    Name("b".into()),
                    RDict,
                    Eof,
                ],
            ),
        ];
        for (src, want) in cases {
            assert_eq!(toks(src), want, "{src}");
        }
    }

    #[test]
    fn columns_count_characters() {
        let t = tokenize("'é' == x").unwrap();
        assert_eq!(t[1].col, 5);
        assert_eq!(t[2].col, 8);
    }

    #[test]
    fn bad_characters_point_at_their_column() {
        for (src, col) in [
            ("a = b", 3),
            ("1 && 2", 3),
            ("'open", 1),
            ("x\n@", 3),
            ("1.", 2),
        ] {
            let e = tokenize(src).unwrap_err();
            assert_eq!(e.column, col, "{src}: {e}");
        }
    }
}
