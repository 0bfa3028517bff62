//! Exact parses of small hand-written expositions, and their errors.

use leasehold_prometheus_text::{
    Family, Format, MetricType, ParseError, Sample, group_by_labels, parse, parse_lenient,
};

fn sample(name: &str, labels: &[(&str, &str)], value: f64, ts: Option<i64>) -> Sample {
    Sample {
        name: name.into(),
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect(),
        value,
        timestamp_ms: ts,
    }
}

fn err(input: &str, format: Format) -> ParseError {
    match parse(input, format) {
        Ok(f) => panic!("expected an error, parsed {f:?}"),
        Err(e) => e,
    }
}

#[test]
fn text_counter_gauge_help_type_timestamps() {
    let input = "# HELP http_requests_total The total number of HTTP requests.\n\
                 # TYPE http_requests_total counter\n\
                 http_requests_total{method=\"post\",code=\"200\"} 1027 1395066363000\n\
                 http_requests_total{method=\"post\",code=\"400\"}    3 1395066363000\n\
                 \n\
                 # A plain comment.\n\
                 # TYPE temperature gauge\n\
                 temperature -3.5\n\
                 temperature{room=\"a\",} 1e3\n";
    let fams = parse(input, Format::Text).unwrap();
    assert_eq!(
        fams,
        vec![
            Family {
                name: "http_requests_total".into(),
                kind: MetricType::Counter,
                help: Some("The total number of HTTP requests.".into()),
                unit: None,
                samples: vec![
                    sample(
                        "http_requests_total",
                        &[("method", "post"), ("code", "200")],
                        1027.0,
                        Some(1_395_066_363_000)
                    ),
                    sample(
                        "http_requests_total",
                        &[("method", "post"), ("code", "400")],
                        3.0,
                        Some(1_395_066_363_000)
                    ),
                ],
            },
            Family {
                name: "temperature".into(),
                kind: MetricType::Gauge,
                help: None,
                unit: None,
                samples: vec![
                    sample("temperature", &[], -3.5, None),
                    sample("temperature", &[("room", "a")], 1000.0, None),
                ],
            },
        ]
    );
}

#[test]
fn escaped_label_values_and_help() {
    let input = "# HELP msdos_file_access_time_seconds Access time with \\\\ and a\\nnewline.\n\
                 # TYPE msdos_file_access_time_seconds gauge\n\
                 msdos_file_access_time_seconds{path=\"C:\\\\DIR\\\\FILE.TXT\",error=\"Cannot find file:\\n\\\"FILE.TXT\\\"\"} 1.458255915e9\n";
    let fams = parse(input, Format::Text).unwrap();
    assert_eq!(fams.len(), 1);
    assert_eq!(
        fams[0].help.as_deref(),
        Some("Access time with \\ and a\nnewline.")
    );
    assert_eq!(
        fams[0].samples,
        vec![sample(
            "msdos_file_access_time_seconds",
            &[
                ("path", "C:\\DIR\\FILE.TXT"),
                ("error", "Cannot find file:\n\"FILE.TXT\"")
            ],
            1.458255915e9,
            None
        )]
    );
}

#[test]
fn nan_and_infinities() {
    let input = "a NaN\nb +Inf\nc -Inf\nd Inf\ne nan\n";
    let fams = parse(input, Format::Text).unwrap();
    let values: Vec<f64> = fams.iter().map(|f| f.samples[0].value).collect();
    assert!(values[0].is_nan());
    assert_eq!(values[1], f64::INFINITY);
    assert_eq!(values[2], f64::NEG_INFINITY);
    assert_eq!(values[3], f64::INFINITY);
    assert!(values[4].is_nan());
    // Untyped samples each get their own Unknown family.
    assert!(fams.iter().all(|f| f.kind == MetricType::Unknown));
    assert_eq!(
        fams.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
        ["a", "b", "c", "d", "e"]
    );
}

#[test]
fn text_histogram_and_summary_collect_suffixed_samples() {
    let input = "# HELP rpc_duration_seconds A summary of RPC durations.\n\
                 # TYPE rpc_duration_seconds summary\n\
                 rpc_duration_seconds{quantile=\"0.5\"} 4773\n\
                 rpc_duration_seconds{quantile=\"0.99\"} NaN\n\
                 rpc_duration_seconds_sum 1.7560473e+07\n\
                 rpc_duration_seconds_count 2693\n\
                 # TYPE http_request_duration_seconds histogram\n\
                 http_request_duration_seconds_bucket{le=\"0.05\"} 24054\n\
                 http_request_duration_seconds_bucket{le=\"+Inf\"} 144320\n\
                 http_request_duration_seconds_sum 53423\n\
                 http_request_duration_seconds_count 144320\n\
                 # untyped neighbours do not join a family of another type\n\
                 # TYPE queue_depth gauge\n\
                 queue_depth 3\n\
                 queue_depth_count 9\n";
    let fams = parse(input, Format::Text).unwrap();
    let shape: Vec<(&str, MetricType, Vec<&str>)> = fams
        .iter()
        .map(|f| {
            (
                f.name.as_ref(),
                f.kind,
                f.samples.iter().map(|s| &*s.name).collect(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        vec![
            (
                "rpc_duration_seconds",
                MetricType::Summary,
                vec![
                    "rpc_duration_seconds",
                    "rpc_duration_seconds",
                    "rpc_duration_seconds_sum",
                    "rpc_duration_seconds_count"
                ]
            ),
            (
                "http_request_duration_seconds",
                MetricType::Histogram,
                vec![
                    "http_request_duration_seconds_bucket",
                    "http_request_duration_seconds_bucket",
                    "http_request_duration_seconds_sum",
                    "http_request_duration_seconds_count"
                ]
            ),
            ("queue_depth", MetricType::Gauge, vec!["queue_depth"]),
            (
                "queue_depth_count",
                MetricType::Unknown,
                vec!["queue_depth_count"]
            ),
        ]
    );
    assert_eq!(
        fams[1].samples[1].labels,
        vec![("le".into(), "+Inf".into())]
    );
}

const OPENMETRICS: &str = "\
# TYPE acme_http_router_request_seconds histogram
# UNIT acme_http_router_request_seconds seconds
# HELP acme_http_router_request_seconds Latency \\\"quoted\\\" though the router.
acme_http_router_request_seconds_bucket{path=\"/api/v1\",method=\"GET\",le=\"0.1\"} 0 # {trace_id=\"KOO5S4vxi0o\"} 0.067 1520879607.789
acme_http_router_request_seconds_bucket{path=\"/api/v1\",method=\"GET\",le=\"+Inf\"} 2
acme_http_router_request_seconds_sum{path=\"/api/v1\",method=\"GET\"} 9036.32
acme_http_router_request_seconds_count{path=\"/api/v1\",method=\"GET\"} 2
acme_http_router_request_seconds_created{path=\"/api/v1\",method=\"GET\"} 1520430000.123
# TYPE foo counter
foo_total 17.0 1520879607.789 # {trace_id=\"oHg5SJYRHA0\"} 9.8 1520879602.890
foo_created 1520430000
# TYPE build info
build_info{version=\"1.2.3\"} 1
# TYPE feature stateset
feature{feature=\"a\"} 1
feature{feature=\"b\"} 0
# TYPE pool gaugehistogram
pool_bucket{le=\"1\"} 2
pool_bucket{le=\"+Inf\"} 3
pool_gsum 4
pool_gcount 3
# TYPE latency summary
latency{quantile=\"0.9\"} 1.5
latency_sum 7
latency_count 4
# TYPE temp unknown
temp -Inf
# EOF
";

#[test]
fn openmetrics_types_unit_created_total_exemplars() {
    let fams = parse(OPENMETRICS, Format::OpenMetrics).unwrap();
    let kinds: Vec<(&str, MetricType, usize)> = fams
        .iter()
        .map(|f| (f.name.as_ref(), f.kind, f.samples.len()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("acme_http_router_request_seconds", MetricType::Histogram, 5),
            ("foo", MetricType::Counter, 2),
            ("build", MetricType::Info, 1),
            ("feature", MetricType::StateSet, 2),
            ("pool", MetricType::GaugeHistogram, 4),
            ("latency", MetricType::Summary, 3),
            ("temp", MetricType::Unknown, 1),
        ]
    );
    let hist = &fams[0];
    assert_eq!(hist.unit.as_deref(), Some("seconds"));
    assert_eq!(
        hist.help.as_deref(),
        Some("Latency \"quoted\" though the router.")
    );
    // The exemplar is dropped: the bucket keeps its own value and labels.
    assert_eq!(
        hist.samples[0],
        sample(
            "acme_http_router_request_seconds_bucket",
            &[("path", "/api/v1"), ("method", "GET"), ("le", "0.1")],
            0.0,
            None
        )
    );
    // OpenMetrics timestamps are seconds; samples carry milliseconds.
    assert_eq!(
        fams[1].samples[0],
        sample("foo_total", &[], 17.0, Some(1_520_879_607_789))
    );
    assert_eq!(&*fams[1].samples[1].name, "foo_created");
    assert_eq!(&*fams[2].samples[0].name, "build_info");
    assert_eq!(fams[6].samples[0].value, f64::NEG_INFINITY);
}

#[test]
fn openmetrics_eof_rules() {
    // One trailing newline after # EOF is optional.
    assert_eq!(parse("a 1\n# EOF", Format::OpenMetrics).unwrap().len(), 1);
    assert_eq!(parse("a 1\n# EOF\n", Format::OpenMetrics).unwrap().len(), 1);
    assert!(parse("# EOF\n", Format::OpenMetrics).unwrap().is_empty());

    let e = err("a 1\n", Format::OpenMetrics);
    assert_eq!(e.line, 2);
    assert!(e.message.contains("missing # EOF"), "{e}");
    let e = err("", Format::OpenMetrics);
    assert_eq!(e.line, 1);

    let e = err("a 1\n# EOF\nb 2\n", Format::OpenMetrics);
    assert_eq!((e.line, e.message.as_str()), (3, "content after # EOF"));
    let e = err("a 1\n# EOF\n\n", Format::OpenMetrics);
    assert_eq!(e.line, 3);
    let e = err("a 1\n# EOF trailing\n", Format::OpenMetrics);
    assert_eq!(e.line, 2);

    // The text format has no EOF: the line is a comment and more may follow.
    let fams = parse("a 1\n# EOF\nb 2\n", Format::Text).unwrap();
    assert_eq!(fams.len(), 2);
}

#[test]
fn openmetrics_structure_errors() {
    let cases: &[(&str, usize, &str)] = &[
        ("a 1\n\n# EOF\n", 2, "empty line"),
        ("# a comment\n# EOF\n", 1, "unexpected comment"),
        (
            "# TYPE foo counter\nfoo 1\n# EOF\n",
            2,
            "does not fit counter family",
        ),
        (
            "# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\na 2\n# EOF\n",
            5,
            "must not interleave",
        ),
        (
            "# TYPE a gauge\na 1\n# HELP a late\n# EOF\n",
            3,
            "after its samples",
        ),
        ("# UNIT a_bytes seconds\n# EOF\n", 1, "not a suffix"),
        ("# TYPE a untyped\n# EOF\n", 1, "unknown metric type"),
        ("a{x=\"1\",} 1\n# EOF\n", 1, "trailing comma"),
        ("a 1 # {x=\"1\"}\n# EOF\n", 1, "invalid exemplar"),
        ("a 1 # {x=\"1\"} 2 3 4\n# EOF\n", 1, "invalid exemplar"),
        ("a 1 NaN\n# EOF\n", 1, "invalid timestamp"),
    ];
    for (input, line, needle) in cases {
        let e = err(input, Format::OpenMetrics);
        assert_eq!(e.line, *line, "{input:?}: {e}");
        assert!(e.message.contains(needle), "{input:?}: {e}");
    }
}

#[test]
fn errors_carry_line_numbers() {
    let cases: &[(&str, usize, &str)] = &[
        ("ok 1\nbad_value abc\n", 2, "invalid value \"abc\""),
        (
            "ok 1\n\nlabels{a=\"open} 1\n",
            3,
            "unterminated value of label \"a\"",
        ),
        (
            "x{a=\"1\",b=\"2\",a=\"3\"} 1\n",
            1,
            "duplicate label name \"a\"",
        ),
        ("x{a=\"\\t\"} 1\n", 1, "invalid escape sequence"),
        ("x{a=1} 1\n", 1, "expected '\"'"),
        ("x{a=\"1\" 1\n", 1, "expected ',' or '}'"),
        ("x{a=\"1\"\n", 1, "unterminated label set"),
        ("x\n", 1, "missing value"),
        ("x 1 2 3\n", 1, "unexpected text after value"),
        ("x 1 1.5\n", 1, "invalid timestamp"),
        ("x 1 # {a=\"b\"} 1\n", 1, "unexpected text after value"),
        ("{a=\"b\"} 1\n", 1, "expected a metric name"),
        ("x@y 1\n", 1, "unexpected text after metric name"),
        ("# TYPE x counter\n# TYPE x gauge\n", 2, "second TYPE"),
        ("# HELP x a\n# HELP x b\n", 2, "second HELP"),
        (
            "x 1\n# TYPE x gauge\n",
            2,
            "TYPE for \"x\" after its samples",
        ),
        ("# TYPE x bogus\n", 1, "unknown metric type \"bogus\""),
        ("# TYPE x\n", 1, "unknown metric type"),
        ("# TYPE x gauge extra\n", 1, "unexpected text after TYPE"),
        ("# HELP x bad \\q escape\n", 1, "invalid escape sequence"),
        ("# TYPE 1x gauge\n", 1, "invalid metric name"),
        (
            "# TYPE x histogram\nx 1\n",
            2,
            "does not fit histogram family",
        ),
    ];
    for (input, line, needle) in cases {
        let e = err(input, Format::Text);
        assert_eq!(e.line, *line, "{input:?}: {e}");
        assert!(e.message.contains(needle), "{input:?}: {e}");
        assert!(e.to_string().starts_with(&format!("line {line}: ")));
    }
}

#[test]
fn crlf_and_indentation_in_text() {
    let fams = parse(
        "# TYPE a gauge\r\n  a 1\r\n\ta{b=\"c\"}\t2\r\n",
        Format::Text,
    )
    .unwrap();
    assert_eq!(fams.len(), 1);
    assert_eq!(fams[0].samples.len(), 2);
    assert_eq!(fams[0].samples[1].value, 2.0);
}

#[test]
fn lenient_skips_bad_lines_and_reports_them() {
    let input = "# TYPE a gauge\n\
                 a 1\n\
                 a{x=\"unterminated} 2\n\
                 b oops\n\
                 c 3\n";
    let (fams, errors) = parse_lenient(input, Format::Text);
    assert_eq!(
        fams.iter()
            .map(|f| (f.name.as_ref(), f.samples.len()))
            .collect::<Vec<_>>(),
        [("a", 1), ("c", 1)]
    );
    assert_eq!(errors.iter().map(|e| e.line).collect::<Vec<_>>(), [3, 4]);

    let (fams, errors) = parse_lenient("a 1\nb 2\n", Format::OpenMetrics);
    assert_eq!(fams.len(), 2);
    assert_eq!(errors.len(), 1);
    assert!(errors[0].message.contains("missing # EOF"));

    let (fams, errors) = parse_lenient("a 1\n# EOF\nb 2\nc 3\n", Format::OpenMetrics);
    assert_eq!(fams.len(), 1);
    assert_eq!(
        errors,
        vec![ParseError {
            line: 3,
            message: "content after # EOF".into()
        }]
    );
}

#[test]
fn group_histogram_one_group_per_bucket_plus_sum_count() {
    let input = "# TYPE req_seconds histogram\n\
                 req_seconds_bucket{code=\"200\",le=\"0.1\"} 1\n\
                 req_seconds_bucket{code=\"200\",le=\"1\"} 3\n\
                 req_seconds_bucket{code=\"200\",le=\"+Inf\"} 4\n\
                 req_seconds_sum{code=\"200\"} 2.5\n\
                 req_seconds_count{code=\"200\"} 4\n\
                 # TYPE lat summary\n\
                 lat{code=\"200\",quantile=\"0.5\"} NaN\n\
                 lat{code=\"200\",quantile=\"0.9\"} +Inf\n\
                 lat_sum{code=\"200\"} 1\n\
                 lat_count{code=\"200\"} 2\n";
    let fams = parse(input, Format::Text).unwrap();
    let groups = group_by_labels(&fams);
    let l = |pairs: &[(&str, &str)]| -> Vec<(std::sync::Arc<str>, std::sync::Arc<str>)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    };
    let m = |pairs: &[(&str, f64)]| -> Vec<(std::sync::Arc<str>, f64)> {
        pairs.iter().map(|(k, v)| ((*k).into(), *v)).collect()
    };
    let got: Vec<_> = groups
        .iter()
        .map(|g| (g.labels.clone(), g.metrics.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                l(&[("code", "200"), ("le", "0.1")]),
                m(&[("req_seconds_bucket", 1.0)])
            ),
            (
                l(&[("code", "200"), ("le", "1")]),
                m(&[("req_seconds_bucket", 3.0)])
            ),
            (
                l(&[("code", "200"), ("le", "+Inf")]),
                m(&[("req_seconds_bucket", 4.0)])
            ),
            (
                l(&[("code", "200")]),
                m(&[
                    ("req_seconds_sum", 2.5),
                    ("req_seconds_count", 4.0),
                    ("lat_sum", 1.0),
                    ("lat_count", 2.0)
                ])
            ),
            // The NaN quantile is dropped, so its group never appears.
            (
                l(&[("code", "200"), ("quantile", "0.9")]),
                m(&[("lat", f64::INFINITY)])
            ),
        ]
    );
}
