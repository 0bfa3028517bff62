//! Parser for the Prometheus text exposition format (0.0.4) and OpenMetrics
//! 1.0 text, plus the grouping that Metricbeat's `prometheus/metrics`
//! `collector` metricset applies to a scrape. Pure: no I/O, no panics on any
//! input, memory linear in the input's size.
//!
//! Why hand-written: `prometheus-parse` 0.2.5 is regex-based, knows only the
//! text format (no `# EOF`, `# UNIT`, exemplars, `info`/`stateset`/
//! `gaugehistogram`), reports no line numbers and pulls in chrono, itertools
//! and lazy_static. `openmetrics-parser` 0.4.4/0.5.0 covers both formats but
//! is LGPL-3.0 (the workspace is Apache-2.0), is built on pest + auto_ops and
//! parses all-or-nothing, with no way to skip a bad line while scraping.
//! `prom_text_format_parser` 0.1.0 and `openmetrics` 0.2.x are text-only or
//! an unfinished pest grammar. A line-based parser is a few hundred lines.
//!
//! ```
//! use leasehold_prometheus_text::{Format, MetricType, parse};
//!
//! let text = "# TYPE rpc_seconds histogram\n\
//!             rpc_seconds_bucket{le=\"0.1\"} 3\n\
//!             rpc_seconds_bucket{le=\"+Inf\"} 5\n\
//!             rpc_seconds_sum 0.7\n\
//!             rpc_seconds_count 5\n";
//! let families = parse(text, Format::Text).unwrap();
//! assert_eq!(families[0].kind, MetricType::Histogram);
//! assert_eq!(families[0].samples.len(), 4);
//! ```

use std::fmt;
use std::sync::Arc;

mod group;
mod parser;

pub use group::{Group, NameFilter, filter, group_by_labels};

/// A name or label value of an exposition, shared by every sample that
/// repeats it.
pub type Text = Arc<str>;

/// A label: its name and value.
pub type Label = (Text, Text);

/// The two exposition formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Prometheus text format 0.0.4 (`text/plain; version=0.0.4`).
    Text,
    /// OpenMetrics 1.0 text (`application/openmetrics-text; version=1.0.0`).
    OpenMetrics,
}

/// Picks the format from a Content-Type header value
/// (`application/openmetrics-text` → OpenMetrics, else Text).
pub fn format_of(content_type: Option<&str>) -> Format {
    let Some(value) = content_type else {
        return Format::Text;
    };
    let media_type = value.split(';').next().unwrap_or("").trim();
    if media_type.eq_ignore_ascii_case("application/openmetrics-text") {
        Format::OpenMetrics
    } else {
        Format::Text
    }
}

/// The TYPE of a metric family. The text format's `untyped` is `Unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetricType {
    Counter,
    Gauge,
    Histogram,
    GaugeHistogram,
    Summary,
    Info,
    StateSet,
    Unknown,
}

impl MetricType {
    /// The OpenMetrics spelling (`gaugehistogram`, `stateset`, `unknown`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
            MetricType::GaugeHistogram => "gaugehistogram",
            MetricType::Summary => "summary",
            MetricType::Info => "info",
            MetricType::StateSet => "stateset",
            MetricType::Unknown => "unknown",
        }
    }
}

impl fmt::Display for MetricType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One sample line. `name` is the full sample name (`foo_bucket`, `foo_total`);
/// label values are unescaped; labels keep their order in the line. Texts
/// are shared: one copy of each distinct name and value per exposition.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: Text,
    pub labels: Vec<Label>,
    pub value: f64,
    /// Milliseconds since the epoch. OpenMetrics timestamps (seconds, may be
    /// fractional) are converted to milliseconds and rounded.
    pub timestamp_ms: Option<i64>,
}

/// A metric family: its metadata and every sample that belongs to it.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    pub name: String,
    pub kind: MetricType,
    /// Unescaped HELP text.
    pub help: Option<String>,
    /// OpenMetrics `# UNIT` (the text format has none).
    pub unit: Option<String>,
    pub samples: Vec<Sample>,
}

/// A malformed line. `line` is 1-based.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub line: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for ParseError {}

/// Parses a whole exposition.
///
/// Samples are attached to the family whose name is their base name: the
/// suffixes `_bucket`/`_sum`/`_count`/`_created`/`_total`/`_gsum`/`_gcount`/
/// `_info` are stripped when the family's TYPE makes that suffix belong to it
/// (a sample whose full name is itself a family that accepts it goes there
/// first). A sample with no TYPE'd family gets its own `Unknown` family.
/// Families come out in the order they first appear.
///
/// Format rules enforced (each violation is an error naming its line):
/// - both: metric and label name syntax, quoted label values with the escapes
///   `\\`, `\"`, `\n` only, no duplicate label names, a float value (`NaN`,
///   `+Inf`, `-Inf` included), an optional integer timestamp (milliseconds;
///   OpenMetrics: seconds), nothing after it, at most one HELP/TYPE (and
///   UNIT) per family, no TYPE after the family's first sample.
/// - text: blank lines and `#` comments other than HELP/TYPE are skipped.
/// - OpenMetrics: the exposition must end with `# EOF` (one trailing newline
///   allowed) and nothing may follow it; blank lines and other comments are
///   errors; a family's lines must be contiguous and its metadata must
///   precede its samples; a UNIT must be a suffix of the family name;
///   exemplars (` # {labels} value [timestamp]`) are checked and dropped.
///
/// Whitespace between tokens may be any run of spaces and tabs in both
/// formats, and a `\r` before a line's `\n` is ignored.
pub fn parse(input: &str, format: Format) -> Result<Vec<Family>, ParseError> {
    let (families, mut errors) = parser::run(input, format, false, None);
    if errors.is_empty() {
        Ok(families)
    } else {
        Err(errors.swap_remove(0))
    }
}

/// Lenient variant for scraping: skips bad lines and returns them as errors
/// beside what parsed. At most one error per line; after an OpenMetrics
/// `# EOF` the first further line is reported and the rest ignored.
pub fn parse_lenient(input: &str, format: Format) -> (Vec<Family>, Vec<ParseError>) {
    parser::run(input, format, true, None)
}

/// [`parse_lenient`] building only the families whose name `keep` accepts:
/// the samples of the others are skipped after reading their metric name,
/// never checked, allocated or returned (nor their errors). A scrape of
/// which a few families are used (kube-state-metrics, a filtered
/// collector) then costs memory for those alone.
pub fn parse_lenient_keeping(
    input: &str,
    format: Format,
    keep: &dyn Fn(&str) -> bool,
) -> (Vec<Family>, Vec<ParseError>) {
    parser::run(input, format, true, Some(keep))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_of_content_types() {
        assert_eq!(format_of(None), Format::Text);
        assert_eq!(format_of(Some("")), Format::Text);
        assert_eq!(
            format_of(Some("text/plain; version=0.0.4; charset=utf-8")),
            Format::Text
        );
        assert_eq!(
            format_of(Some(
                "application/openmetrics-text; version=1.0.0; charset=utf-8"
            )),
            Format::OpenMetrics
        );
        assert_eq!(
            format_of(Some(" Application/OpenMetrics-Text ;version=0.0.1")),
            Format::OpenMetrics
        );
        assert_eq!(
            format_of(Some("application/openmetrics-textual")),
            Format::Text
        );
    }

    #[test]
    fn parse_error_display() {
        let e = ParseError {
            line: 7,
            message: "invalid value \"x\"".into(),
        };
        assert_eq!(e.to_string(), "line 7: invalid value \"x\"");
    }

    #[test]
    fn metric_type_names() {
        assert_eq!(MetricType::GaugeHistogram.to_string(), "gaugehistogram");
        assert_eq!(MetricType::StateSet.as_str(), "stateset");
    }
}
