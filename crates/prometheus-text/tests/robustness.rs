//! No input panics; errors always name a real line; strict and lenient agree.

use leasehold_prometheus_text::{Format, group_by_labels, parse, parse_lenient};
use proptest::prelude::*;

const KUBE_TEXT: &str = include_str!("data/kube-apiserver.txt");
const AGENT_OM: &str = include_str!("data/leasehold-agent.openmetrics.txt");
const OM_SAMPLE: &str = "\
# TYPE h_seconds histogram
# UNIT h_seconds seconds
# HELP h_seconds Hist \\\"q\\\" \\n.
h_seconds_bucket{a=\"x\\\\y\",le=\"0.1\"} 0 # {t=\"1\"} 0.05 1.5
h_seconds_bucket{a=\"x\\\\y\",le=\"+Inf\"} 2 17
h_seconds_sum{a=\"x\\\\y\"} NaN
h_seconds_count{a=\"x\\\\y\"} 2
h_seconds_created{a=\"x\\\\y\"} 1.5e9
# TYPE c counter
c_total 1 # {} 1
# TYPE i info
i_info{v=\"1\"} 1
# TYPE s stateset
s{s=\"a\"} 1
# TYPE g gaugehistogram
g_bucket{le=\"+Inf\"} 1
g_gsum 1
g_gcount 1
# EOF
";

const FORMATS: [Format; 2] = [Format::Text, Format::OpenMetrics];

/// Runs every entry point on `input` and checks the invariants.
fn exercise(input: &str) {
    // `split_inclusive` counts lines the way the parser does.
    let lines = input.split_inclusive('\n').count();
    for format in FORMATS {
        let strict = parse(input, format);
        let (families, errors) = parse_lenient(input, format);
        for e in &errors {
            assert!(e.line >= 1 && e.line <= lines + 1, "{e} ({lines} lines)");
            assert!(e.message.len() < 400, "{e}");
        }
        assert!(errors.len() <= lines + 1);
        let samples: usize = families.iter().map(|f| f.samples.len()).sum();
        assert!(samples <= lines);
        match strict {
            Ok(strict) => {
                assert!(errors.is_empty(), "{errors:?}");
                assert_eq!(format!("{strict:?}"), format!("{families:?}"));
            }
            Err(first) => assert_eq!(errors.first(), Some(&first)),
        }
        let groups = group_by_labels(&families);
        let grouped: usize = groups.iter().map(|g| g.metrics.len()).sum();
        assert!(grouped <= samples);
    }
}

fn prefix(s: &str, chars: usize) -> &str {
    match s.char_indices().nth(chars) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Text assembled from the formats' own pieces, so most of it gets deep
/// into the parser before going wrong.
fn syntaxy() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(vec![
        "# HELP ",
        "# TYPE ",
        "# UNIT ",
        "# EOF",
        "#",
        " ",
        "\t",
        "\n",
        "\r\n",
        "{",
        "}",
        "=",
        ",",
        "\"",
        "\\",
        "\\n",
        "\\\"",
        "\\\\",
        "le",
        "quantile",
        "foo",
        "foo_total",
        "foo_bucket",
        "foo_sum",
        "foo_count",
        "foo_created",
        "foo_info",
        "_gsum",
        "counter",
        "gauge",
        "histogram",
        "summary",
        "info",
        "stateset",
        "gaugehistogram",
        "unknown",
        "untyped",
        "1",
        "-1.5e3",
        "NaN",
        "+Inf",
        "-Inf",
        "1e400",
        "9223372036854775808",
        "0.001",
        " # {",
        "é",
        "\u{0}",
        "ü\"",
    ]);
    prop::collection::vec(piece, 0..80).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn arbitrary_strings_never_panic(input in any::<String>()) {
        exercise(&input);
    }

    #[test]
    fn syntax_soup_never_panics(input in syntaxy()) {
        exercise(&input);
    }

    #[test]
    fn truncated_recordings_never_panic(cut in 0usize..30_000, which in 0usize..3) {
        let source = [KUBE_TEXT, AGENT_OM, OM_SAMPLE][which];
        let cut = cut % (source.chars().count() + 1);
        exercise(prefix(source, cut));
    }

    #[test]
    fn mutated_recordings_never_panic(
        edits in prop::collection::vec((0usize..30_000, any::<char>()), 1..8),
        which in 0usize..3,
    ) {
        let source = [KUBE_TEXT, AGENT_OM, OM_SAMPLE][which];
        let mut chars: Vec<char> = source.chars().collect();
        for (at, ch) in edits {
            let at = at % chars.len();
            chars[at] = ch;
        }
        let input: String = chars.into_iter().collect();
        exercise(&input);
    }
}

#[test]
fn om_sample_is_valid() {
    let fams = parse(OM_SAMPLE, Format::OpenMetrics).unwrap();
    assert_eq!(fams.len(), 5);
    assert_eq!(fams[0].samples.len(), 5);
    assert_eq!(fams[0].samples[1].timestamp_ms, Some(17_000));
}

#[test]
fn every_line_prefix_of_an_openmetrics_exposition_misses_eof() {
    let lines: Vec<&str> = AGENT_OM.split_inclusive('\n').collect();
    for n in 0..lines.len() {
        let body = lines[..n].concat();
        let e = parse(&body, Format::OpenMetrics).unwrap_err();
        assert_eq!(e.line, n + 1);
        assert!(e.message.contains("missing # EOF"), "{e}");
    }
}

#[test]
fn pathological_sizes_stay_fast_and_bounded() {
    // Many labels on one line (duplicate check is not quadratic).
    let labels: Vec<String> = (0..50_000).map(|i| format!("l{i}=\"v\"")).collect();
    let line = format!("m{{{}}} 1\n", labels.join(","));
    let fams = parse(&line, Format::Text).unwrap();
    assert_eq!(fams[0].samples[0].labels.len(), 50_000);
    let dup = format!("m{{{},l7=\"x\"}} 1\n", labels.join(","));
    assert!(parse(&dup, Format::Text).is_err());

    // Huge tokens produce short messages.
    let long_value = format!("m {}\n", "9".repeat(200_000) + "x");
    let e = parse(&long_value, Format::Text).unwrap_err();
    assert!(e.message.len() < 200, "{}", e.message.len());
    let open_quote = format!("m{{a=\"{}\n", "\\\\".repeat(100_000));
    let e = parse(&open_quote, Format::Text).unwrap_err();
    assert!(e.message.contains("unterminated"));

    // Many distinct unlabelled series group without quadratic work.
    let many: String = (0..50_000).map(|i| format!("s{i} {i}\n")).collect();
    let fams = parse(&many, Format::Text).unwrap();
    let groups = group_by_labels(&fams);
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].metrics.len(), 50_000);
}
