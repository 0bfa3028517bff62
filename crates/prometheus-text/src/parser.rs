//! Line parser and family assembly. Every slice index is taken with `get`
//! and every cursor step lands on a char boundary, so no input can panic.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::{Family, Format, Label, MetricType, ParseError, Sample};

/// One copy of each distinct text of an exposition (label names and
/// values, sample names): a Pod's name, namespace and uid repeat in every
/// family that describes it, and label names in every sample.
#[derive(Default)]
pub(crate) struct Interner(HashSet<Arc<str>>);

impl Interner {
    fn get(&mut self, text: &str) -> Arc<str> {
        if let Some(t) = self.0.get(text) {
            return t.clone();
        }
        let t: Arc<str> = Arc::from(text);
        self.0.insert(t.clone());
        t
    }
}

/// Longest piece of input quoted in an error message, in chars.
const SNIPPET_CHARS: usize = 48;

/// Suffixes a sample name may carry beyond its family's name.
const SUFFIXES: [&str; 8] = [
    "_total", "_created", "_bucket", "_sum", "_count", "_gsum", "_gcount", "_info",
];

/// Which families to build: the others' samples are skipped unread.
pub(crate) type Keep<'k> = Option<&'k dyn Fn(&str) -> bool>;

pub(crate) fn run(
    input: &str,
    format: Format,
    lenient: bool,
    keep: Keep<'_>,
) -> (Vec<Family>, Vec<ParseError>) {
    let mut state = State::new(format);
    let mut texts = Interner::default();
    let mut errors = Vec::new();
    let mut line_no = 0usize;
    let mut saw_eof = false;
    for raw in input.split_inclusive('\n') {
        line_no += 1;
        let line = raw.strip_suffix('\n').unwrap_or(raw);
        let line = line.strip_suffix('\r').unwrap_or(line);
        if saw_eof {
            errors.push(ParseError {
                line: line_no,
                message: "content after # EOF".into(),
            });
            return (state.kept(keep), errors);
        }
        if let Some(keep) = keep
            && let Some(family) = state.family_of_sample_line(line)
            && !keep(family)
        {
            continue;
        }
        let outcome = parse_line(line, format, &mut texts).and_then(|parsed| match parsed {
            Line::Eof => {
                saw_eof = true;
                Ok(())
            }
            other => state.apply(other),
        });
        if let Err(message) = outcome {
            errors.push(ParseError {
                line: line_no,
                message,
            });
            if !lenient {
                return (state.kept(keep), errors);
            }
        }
    }
    if format == Format::OpenMetrics && !saw_eof {
        errors.push(ParseError {
            line: line_no + 1,
            message: "missing # EOF at the end of the exposition".into(),
        });
    }
    (state.kept(keep), errors)
}

/// What one line says.
#[derive(Debug)]
enum Line<'a> {
    Skip,
    Eof,
    Help(&'a str, String),
    Type(&'a str, MetricType),
    Unit(&'a str, &'a str),
    Sample(Sample),
}

fn parse_line<'a>(line: &'a str, format: Format, texts: &mut Interner) -> Result<Line<'a>, String> {
    let om = format == Format::OpenMetrics;
    let line = if om {
        line
    } else {
        line.trim_start_matches([' ', '\t'])
    };
    if line.trim_matches([' ', '\t']).is_empty() {
        return if om {
            Err("empty line".into())
        } else {
            Ok(Line::Skip)
        };
    }
    match line.strip_prefix('#') {
        Some(rest) => parse_comment(rest, om),
        None => parse_sample(line, om, texts).map(Line::Sample),
    }
}

fn parse_comment(rest: &str, om: bool) -> Result<Line<'_>, String> {
    if om && rest == " EOF" {
        return Ok(Line::Eof);
    }
    let mut c = Cursor::new(rest);
    let leading = c.skip_ws();
    let keyword = c.token();
    let known = match keyword {
        "HELP" | "TYPE" => true,
        "UNIT" => om,
        _ => false,
    };
    if !known {
        return if om && keyword == "EOF" {
            Err(format!("malformed # EOF line: {}", snippet(rest)))
        } else if om {
            Err(format!(
                "unexpected comment (OpenMetrics allows only HELP, TYPE, UNIT and EOF): {}",
                snippet(rest)
            ))
        } else {
            Ok(Line::Skip)
        };
    }
    if om && leading != 1 {
        return Err(format!("expected \"# {keyword}\""));
    }
    if c.skip_ws() == 0 {
        return Err(format!("expected a metric name after {keyword}"));
    }
    let name = c
        .metric_name()
        .ok_or_else(|| format!("invalid metric name in {keyword}: {}", snippet(c.rest())))?;
    let after_name = c.skip_ws();
    if after_name == 0 && !c.at_end() {
        return Err(format!(
            "invalid metric name in {keyword}: {}",
            snippet(&name_and_rest(name, c.rest()))
        ));
    }
    match keyword {
        "HELP" => {
            let text = unescape_help(c.rest(), om)?;
            Ok(Line::Help(name, text))
        }
        "TYPE" => {
            let word = c.token();
            c.skip_ws();
            if !c.at_end() {
                return Err(format!("unexpected text after TYPE: {}", snippet(c.rest())));
            }
            let kind = metric_type(word, om)
                .ok_or_else(|| format!("unknown metric type {}", snippet(word)))?;
            Ok(Line::Type(name, kind))
        }
        _ => {
            let unit = c.token();
            c.skip_ws();
            if !c.at_end() {
                return Err(format!("unexpected text after UNIT: {}", snippet(c.rest())));
            }
            if !unit
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
            {
                return Err(format!("invalid unit {}", snippet(unit)));
            }
            let suffixed = name
                .strip_suffix(unit)
                .is_some_and(|base| base.ends_with('_'));
            if !unit.is_empty() && !suffixed {
                return Err(format!(
                    "unit {} is not a suffix of metric name {}",
                    snippet(unit),
                    snippet(name)
                ));
            }
            Ok(Line::Unit(name, unit))
        }
    }
}

fn name_and_rest<'a>(name: &'a str, rest: &'a str) -> String {
    let mut s = String::with_capacity(SNIPPET_CHARS);
    s.push_str(name);
    s.extend(rest.chars().take(SNIPPET_CHARS));
    s
}

fn metric_type(word: &str, om: bool) -> Option<MetricType> {
    if om {
        Some(match word {
            "counter" => MetricType::Counter,
            "gauge" => MetricType::Gauge,
            "histogram" => MetricType::Histogram,
            "gaugehistogram" => MetricType::GaugeHistogram,
            "summary" => MetricType::Summary,
            "info" => MetricType::Info,
            "stateset" => MetricType::StateSet,
            "unknown" => MetricType::Unknown,
            _ => return None,
        })
    } else {
        let lower = word.to_ascii_lowercase();
        Some(match lower.as_str() {
            "counter" => MetricType::Counter,
            "gauge" => MetricType::Gauge,
            "histogram" => MetricType::Histogram,
            "summary" => MetricType::Summary,
            "untyped" => MetricType::Unknown,
            _ => return None,
        })
    }
}

/// HELP text: the text format knows `\\` and `\n`; OpenMetrics also `\"`.
fn unescape_help(text: &str, om: bool) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(ch) = chars.next() {
        if ch != '\\' {
            out.push(ch);
            continue;
        }
        match chars.next() {
            Some('\\') => out.push('\\'),
            Some('n') => out.push('\n'),
            Some('"') if om => out.push('"'),
            Some(other) => {
                return Err(format!(
                    "invalid escape sequence {} in HELP",
                    snippet(&format!("\\{other}"))
                ));
            }
            None => return Err("HELP ends with a lone backslash".into()),
        }
    }
    Ok(out)
}

fn parse_sample(line: &str, om: bool, texts: &mut Interner) -> Result<Sample, String> {
    let mut c = Cursor::new(line);
    let name = c
        .metric_name()
        .ok_or_else(|| format!("expected a metric name, found {}", snippet(c.rest())))?;
    let mut gap = c.skip_ws();
    let mut labels = Vec::new();
    if c.eat(b'{') {
        labels = parse_labels(&mut c, om, texts)?;
        gap = c.skip_ws();
    }
    if gap == 0 {
        return Err(if c.at_end() {
            "missing value".into()
        } else {
            format!("unexpected text after metric name: {}", snippet(c.rest()))
        });
    }
    let value_token = c.token();
    if value_token.is_empty() {
        return Err("missing value".into());
    }
    let value = parse_value(value_token)?;
    c.skip_ws();
    let mut timestamp_ms = None;
    if !c.at_end() && c.peek() != Some(b'#') {
        let token = c.token();
        timestamp_ms = Some(if om {
            parse_om_timestamp(token)?
        } else {
            token
                .parse::<i64>()
                .map_err(|_| format!("invalid timestamp {}", snippet(token)))?
        });
        c.skip_ws();
    }
    if !c.at_end() {
        if om && c.peek() == Some(b'#') {
            parse_exemplar(&mut c).map_err(|e| format!("invalid exemplar: {e}"))?;
        } else {
            return Err(format!(
                "unexpected text after value: {}",
                snippet(c.rest())
            ));
        }
    }
    Ok(Sample {
        name: texts.get(name),
        labels,
        value,
        timestamp_ms,
    })
}

/// Parses the labels after `{` up to and including `}`.
fn parse_labels(c: &mut Cursor<'_>, om: bool, texts: &mut Interner) -> Result<Vec<Label>, String> {
    let mut labels: Vec<Label> = Vec::new();
    let mut after_comma = false;
    loop {
        c.skip_ws();
        if c.eat(b'}') {
            if om && after_comma {
                return Err("trailing comma in labels".into());
            }
            break;
        }
        if c.at_end() {
            return Err("unterminated label set (missing '}')".into());
        }
        let name = c
            .label_name()
            .ok_or_else(|| format!("expected a label name, found {}", snippet(c.rest())))?;
        c.skip_ws();
        if !c.eat(b'=') {
            return Err(format!("expected '=' after label name {}", snippet(name)));
        }
        c.skip_ws();
        if !c.eat(b'"') {
            return Err(format!(
                "expected '\"' to start the value of label {}",
                snippet(name)
            ));
        }
        let value = c.quoted(name)?;
        labels.push((texts.get(name), texts.get(&value)));
        c.skip_ws();
        if c.eat(b',') {
            after_comma = true;
            continue;
        }
        if c.eat(b'}') {
            break;
        }
        return Err(if c.at_end() {
            "unterminated label set (missing '}')".into()
        } else {
            format!(
                "expected ',' or '}}' in labels, found {}",
                snippet(c.rest())
            )
        });
    }
    if labels.len() > 1 {
        let mut names: Vec<&str> = labels.iter().map(|(n, _)| &**n).collect();
        names.sort_unstable();
        if let Some(pair) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("duplicate label name {}", snippet(pair[0])));
        }
    }
    // Held for the whole scrape: no spare capacity.
    labels.shrink_to_fit();
    Ok(labels)
}

/// ` # {labels} value [timestamp]`, starting at `#`.
fn parse_exemplar(c: &mut Cursor<'_>) -> Result<(), String> {
    c.eat(b'#');
    if c.skip_ws() == 0 {
        return Err("expected a space after '#'".into());
    }
    if !c.eat(b'{') {
        return Err(format!("expected '{{', found {}", snippet(c.rest())));
    }
    parse_labels(c, true, &mut Interner::default())?;
    if c.skip_ws() == 0 {
        return Err("missing value".into());
    }
    let value = c.token();
    if value.is_empty() {
        return Err("missing value".into());
    }
    parse_value(value)?;
    if c.skip_ws() > 0 && !c.at_end() {
        parse_om_timestamp(c.token())?;
        c.skip_ws();
    }
    if c.at_end() {
        Ok(())
    } else {
        Err(format!("unexpected text: {}", snippet(c.rest())))
    }
}

fn parse_value(token: &str) -> Result<f64, String> {
    // Rust's float syntax is the formats' (decimal, exponent, case-insensitive
    // `NaN`/`Inf`/`Infinity` with an optional sign).
    token
        .parse::<f64>()
        .map_err(|_| format!("invalid value {}", snippet(token)))
}

/// OpenMetrics timestamps are seconds (maybe fractional); returns ms.
fn parse_om_timestamp(token: &str) -> Result<i64, String> {
    let invalid = || format!("invalid timestamp {}", snippet(token));
    let secs: f64 = token.parse().map_err(|_| invalid())?;
    let ms = (secs * 1000.0).round();
    // i64 spans ±9.22e18; stay well clear of the edge so the cast is exact.
    if !ms.is_finite() || ms.abs() >= 9.0e18 {
        return Err(invalid());
    }
    Ok(ms as i64)
}

/// `input` quoted for a message: Debug-escaped, cut to a bounded length.
fn snippet(input: &str) -> String {
    let mut cut: String = input.chars().take(SNIPPET_CHARS).collect();
    let longer = cut.len() < input.len();
    if longer {
        cut.push('…');
    }
    format!("{cut:?}")
}

struct Cursor<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(s: &'a str) -> Self {
        Cursor { s, pos: 0 }
    }

    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.pos).copied()
    }

    fn at_end(&self) -> bool {
        self.pos >= self.s.len()
    }

    fn rest(&self) -> &'a str {
        self.s.get(self.pos..).unwrap_or("")
    }

    fn eat(&mut self, byte: u8) -> bool {
        if self.peek() == Some(byte) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Skips spaces and tabs; returns how many.
    fn skip_ws(&mut self) -> usize {
        let start = self.pos;
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.pos += 1;
        }
        self.pos - start
    }

    /// Everything up to the next space or tab (or the end).
    fn token(&mut self) -> &'a str {
        let start = self.pos;
        while let Some(b) = self.peek() {
            if b == b' ' || b == b'\t' {
                break;
            }
            self.pos += 1;
        }
        self.s.get(start..self.pos).unwrap_or("")
    }

    /// ASCII run where `first` holds for the first byte and `rest` after it.
    fn ident(&mut self, first: fn(u8) -> bool, rest: fn(u8) -> bool) -> Option<&'a str> {
        let start = self.pos;
        match self.peek() {
            Some(b) if first(b) => self.pos += 1,
            _ => return None,
        }
        while matches!(self.peek(), Some(b) if rest(b)) {
            self.pos += 1;
        }
        self.s.get(start..self.pos)
    }

    /// `[a-zA-Z_:][a-zA-Z0-9_:]*`
    fn metric_name(&mut self) -> Option<&'a str> {
        self.ident(
            |b| b.is_ascii_alphabetic() || b == b'_' || b == b':',
            |b| b.is_ascii_alphanumeric() || b == b'_' || b == b':',
        )
    }

    /// `[a-zA-Z_][a-zA-Z0-9_]*`
    fn label_name(&mut self) -> Option<&'a str> {
        self.ident(
            |b| b.is_ascii_alphabetic() || b == b'_',
            |b| b.is_ascii_alphanumeric() || b == b'_',
        )
    }

    /// A label value after its opening quote, through the closing quote.
    fn quoted(&mut self, label: &str) -> Result<String, String> {
        let rest = self.rest();
        let mut out = String::new();
        let mut chars = rest.char_indices();
        while let Some((i, ch)) = chars.next() {
            match ch {
                '"' => {
                    self.pos += i + 1;
                    return Ok(out);
                }
                '\\' => match chars.next() {
                    Some((_, '\\')) => out.push('\\'),
                    Some((_, '"')) => out.push('"'),
                    Some((_, 'n')) => out.push('\n'),
                    Some((_, other)) => {
                        return Err(format!(
                            "invalid escape sequence {} in the value of label {}",
                            snippet(&format!("\\{other}")),
                            snippet(label)
                        ));
                    }
                    None => break,
                },
                _ => out.push(ch),
            }
        }
        Err(format!(
            "unterminated value of label {} (missing closing quote)",
            snippet(label)
        ))
    }
}

/// Which metadata lines a family has had.
#[derive(Default)]
struct Meta {
    help: bool,
    typed: bool,
    unit: bool,
    /// OpenMetrics: another family came after this one.
    closed: bool,
}

struct State {
    om: bool,
    families: Vec<Family>,
    meta: Vec<Meta>,
    by_name: HashMap<String, usize>,
    current: Option<usize>,
}

impl State {
    fn new(format: Format) -> Self {
        State {
            om: format == Format::OpenMetrics,
            families: Vec::new(),
            meta: Vec::new(),
            by_name: HashMap::new(),
            current: None,
        }
    }

    fn apply(&mut self, line: Line<'_>) -> Result<(), String> {
        match line {
            Line::Skip | Line::Eof => Ok(()),
            Line::Help(name, text) => {
                let i = self.family_for_metadata(name, "HELP")?;
                if self.meta[i].help {
                    return Err(format!("second HELP for {}", snippet(name)));
                }
                self.meta[i].help = true;
                self.families[i].help = Some(text);
                Ok(())
            }
            Line::Type(name, kind) => {
                let i = self.family_for_metadata(name, "TYPE")?;
                if self.meta[i].typed {
                    return Err(format!("second TYPE for {}", snippet(name)));
                }
                if !self.families[i].samples.is_empty() {
                    return Err(format!("TYPE for {} after its samples", snippet(name)));
                }
                self.meta[i].typed = true;
                self.families[i].kind = kind;
                Ok(())
            }
            Line::Unit(name, unit) => {
                let i = self.family_for_metadata(name, "UNIT")?;
                if self.meta[i].unit {
                    return Err(format!("second UNIT for {}", snippet(name)));
                }
                self.meta[i].unit = true;
                self.families[i].unit = Some(unit.to_owned());
                Ok(())
            }
            Line::Sample(sample) => {
                let i = self.family_for_sample(&sample.name)?;
                self.families[i].samples.push(sample);
                Ok(())
            }
        }
    }

    fn family_for_metadata(&mut self, name: &str, what: &str) -> Result<usize, String> {
        let Some(&i) = self.by_name.get(name) else {
            return Ok(self.add_family(name));
        };
        if self.om {
            if self.meta[i].closed {
                return Err(format!(
                    "{what} for {} after another family's lines (families must not interleave)",
                    snippet(name)
                ));
            }
            if !self.families[i].samples.is_empty() {
                return Err(format!("{what} for {} after its samples", snippet(name)));
            }
        }
        Ok(i)
    }

    fn family_for_sample(&mut self, name: &str) -> Result<usize, String> {
        let i = match self.find_family(name) {
            Some(i) => i,
            None => {
                if let Some(&i) = self.by_name.get(name) {
                    let kind = self.families[i].kind;
                    return Err(format!(
                        "sample name {} does not fit {kind} family {}",
                        snippet(name),
                        snippet(name)
                    ));
                }
                return Ok(self.add_family(name));
            }
        };
        if self.om && self.current != Some(i) {
            if self.meta[i].closed {
                return Err(format!(
                    "sample {} of family {} after another family's lines (families must not interleave)",
                    snippet(name),
                    snippet(&self.families[i].name)
                ));
            }
            self.switch_to(i);
        }
        Ok(i)
    }

    /// The name of the family a sample line would go to (an existing one,
    /// or a new one of its own name); `None` for other lines. Reads only
    /// the metric name: nothing is allocated.
    fn family_of_sample_line<'l>(&'l self, line: &'l str) -> Option<&'l str> {
        let line = line.trim_start_matches([' ', '\t']);
        if line.starts_with('#') {
            return None;
        }
        let name = Cursor::new(line).metric_name()?;
        Some(match self.find_family(name) {
            Some(i) => &self.families[i].name,
            None => name,
        })
    }

    /// The families, without those `keep` leaves out (their metadata was
    /// read, their samples skipped).
    fn kept(self, keep: Keep<'_>) -> Vec<Family> {
        match keep {
            None => self.families,
            Some(keep) => self
                .families
                .into_iter()
                .filter(|f| keep(&f.name))
                .collect(),
        }
    }

    /// The family a sample called `name` belongs to, if one exists.
    fn find_family(&self, name: &str) -> Option<usize> {
        if let Some(&i) = self.by_name.get(name)
            && accepts(self.families[i].kind, "", self.om)
        {
            return Some(i);
        }
        SUFFIXES.iter().find_map(|suffix| {
            let base = name.strip_suffix(suffix)?;
            let &i = self.by_name.get(base)?;
            accepts(self.families[i].kind, suffix, self.om).then_some(i)
        })
    }

    fn add_family(&mut self, name: &str) -> usize {
        let i = self.families.len();
        self.families.push(Family {
            name: name.to_owned(),
            kind: MetricType::Unknown,
            help: None,
            unit: None,
            samples: Vec::new(),
        });
        self.meta.push(Meta::default());
        self.by_name.insert(name.to_owned(), i);
        if self.om {
            self.switch_to(i);
        }
        i
    }

    fn switch_to(&mut self, i: usize) {
        if let Some(previous) = self.current
            && previous != i
        {
            self.meta[previous].closed = true;
        }
        self.current = Some(i);
    }
}

/// Whether a family of `kind` owns samples named `<family><suffix>`.
fn accepts(kind: MetricType, suffix: &str, om: bool) -> bool {
    match kind {
        // OpenMetrics counters are only `_total` (+ `_created`); text-format
        // counters are usually bare but `_total` is common too.
        MetricType::Counter => {
            matches!(suffix, "_total" | "_created") || (!om && suffix.is_empty())
        }
        MetricType::Gauge | MetricType::StateSet | MetricType::Unknown => suffix.is_empty(),
        MetricType::Histogram => matches!(suffix, "_bucket" | "_sum" | "_count" | "_created"),
        MetricType::GaugeHistogram => matches!(suffix, "_bucket" | "_gsum" | "_gcount"),
        MetricType::Summary => matches!(suffix, "" | "_sum" | "_count" | "_created"),
        MetricType::Info => suffix == "_info",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_names() {
        let mut c = Cursor::new("a:b_1{x");
        assert_eq!(c.metric_name(), Some("a:b_1"));
        assert_eq!(c.rest(), "{x");
        let mut c = Cursor::new("1abc");
        assert_eq!(c.metric_name(), None);
        let mut c = Cursor::new("a:b");
        assert_eq!(c.label_name(), Some("a"));
    }

    #[test]
    fn quoted_values_unescape() {
        let mut c = Cursor::new(r#"a\\b\"c\nd" rest"#);
        assert_eq!(c.quoted("l").unwrap(), "a\\b\"c\nd");
        assert_eq!(c.rest(), " rest");
        let mut c = Cursor::new("ünï\"");
        assert_eq!(c.quoted("l").unwrap(), "ünï");
        assert!(Cursor::new(r"bad\t").quoted("l").is_err());
        assert!(Cursor::new(r"open\").quoted("l").is_err());
        assert!(Cursor::new("open").quoted("l").is_err());
    }

    #[test]
    fn values_and_timestamps() {
        assert!(parse_value("NaN").unwrap().is_nan());
        assert_eq!(parse_value("+Inf").unwrap(), f64::INFINITY);
        assert_eq!(parse_value("-Inf").unwrap(), f64::NEG_INFINITY);
        assert_eq!(parse_value("1.5e3").unwrap(), 1500.0);
        assert!(parse_value("1,5").is_err());
        assert_eq!(
            parse_om_timestamp("1700000000.123").unwrap(),
            1_700_000_000_123
        );
        assert_eq!(parse_om_timestamp("-1.5").unwrap(), -1500);
        assert!(parse_om_timestamp("NaN").is_err());
        assert!(parse_om_timestamp("1e300").is_err());
    }

    #[test]
    fn snippets_are_bounded() {
        let long = "é".repeat(1000);
        let s = snippet(&long);
        assert!(s.chars().count() <= SNIPPET_CHARS + 3);
        assert_eq!(snippet("ab"), "\"ab\"");
    }

    #[test]
    fn suffix_ownership() {
        assert!(accepts(MetricType::Counter, "", false));
        assert!(!accepts(MetricType::Counter, "", true));
        assert!(accepts(MetricType::Info, "_info", true));
        assert!(!accepts(MetricType::Gauge, "_count", true));
        assert!(accepts(MetricType::GaugeHistogram, "_gsum", true));
        assert!(!accepts(MetricType::GaugeHistogram, "_sum", true));
    }
}
