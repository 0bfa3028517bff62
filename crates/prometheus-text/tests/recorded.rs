//! Expositions recorded from real servers (see tests/data/README.md).

use std::collections::BTreeMap;

use leasehold_prometheus_text::{
    Family, Format, MetricType, format_of, group_by_labels, parse, parse_lenient,
};

const KUBE_TEXT: &str = include_str!("data/kube-apiserver.txt");
const KUBE_OM_ACCEPT: &str = include_str!("data/kube-apiserver-openmetrics-accept.txt");
const AGENT_OM: &str = include_str!("data/leasehold-agent.openmetrics.txt");

/// The Content-Types the servers answered with.
const KUBE_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8; escaping=underscores";
const AGENT_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

fn kinds(families: &[Family]) -> BTreeMap<&'static str, usize> {
    let mut out = BTreeMap::new();
    for f in families {
        *out.entry(f.kind.as_str()).or_insert(0) += 1;
    }
    out
}

fn sample_lines(input: &str) -> usize {
    input
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .count()
}

fn check_strict_equals_lenient(input: &str, format: Format) -> Vec<Family> {
    let strict = parse(input, format).unwrap_or_else(|e| panic!("{e}"));
    let (lenient, errors) = parse_lenient(input, format);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(strict, lenient);
    // Every sample is attached to the family named by its base name.
    for f in &strict {
        for s in &f.samples {
            assert!(s.name.starts_with(&f.name), "{} in {}", s.name, f.name);
        }
    }
    assert_eq!(
        strict.iter().map(|f| f.samples.len()).sum::<usize>(),
        sample_lines(input)
    );
    strict
}

fn check_kube(input: &str) {
    let format = format_of(Some(KUBE_CONTENT_TYPE));
    assert_eq!(format, Format::Text);
    let fams = check_strict_equals_lenient(input, format);
    // 22 HELP/TYPE'd families and no stray Unknown family: every suffixed
    // histogram/summary sample found its family.
    assert_eq!(fams.len(), 22);
    assert_eq!(
        kinds(&fams),
        BTreeMap::from([
            ("counter", 5),
            ("gauge", 12),
            ("histogram", 3),
            ("summary", 2)
        ])
    );
    assert!(
        fams.iter()
            .all(|f| f.help.is_some() && !f.samples.is_empty())
    );

    let gc = fams
        .iter()
        .find(|f| f.name == "go_gc_duration_seconds")
        .unwrap();
    assert_eq!(gc.kind, MetricType::Summary);
    let names: Vec<&str> = gc.samples.iter().map(|s| s.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "go_gc_duration_seconds",
            "go_gc_duration_seconds",
            "go_gc_duration_seconds",
            "go_gc_duration_seconds",
            "go_gc_duration_seconds",
            "go_gc_duration_seconds_sum",
            "go_gc_duration_seconds_count"
        ]
    );
    assert_eq!(gc.samples[0].labels, [("quantile".into(), "0".into())]);

    let leases = fams
        .iter()
        .find(|f| f.name == "etcd_lease_object_counts")
        .unwrap();
    assert_eq!(leases.kind, MetricType::Histogram);
    assert_eq!(leases.samples.len(), 10);
    // One group per bucket plus one (no labels) for _sum/_count.
    let groups = group_by_labels(std::slice::from_ref(leases));
    assert_eq!(groups.len(), 9);
    for g in &groups[..8] {
        assert_eq!(g.labels.len(), 1);
        assert_eq!(&*g.labels[0].0, "le");
        assert_eq!(g.metrics.len(), 1);
        assert_eq!(&*g.metrics[0].0, "etcd_lease_object_counts_bucket");
    }
    assert_eq!(&*groups[7].labels[0].1, "+Inf");
    assert!(groups[8].labels.is_empty());
    let names: Vec<&str> = groups[8].metrics.iter().map(|m| m.0.as_ref()).collect();
    assert_eq!(
        names,
        [
            "etcd_lease_object_counts_sum",
            "etcd_lease_object_counts_count"
        ]
    );

    // A labelled histogram: per label set, its buckets are separate groups
    // and _sum/_count share the group without `le`.
    let exec = fams
        .iter()
        .find(|f| f.name == "apiserver_flowcontrol_request_execution_seconds")
        .unwrap();
    let series_without_le = exec
        .samples
        .iter()
        .filter(|s| s.name.ends_with("_sum"))
        .count();
    let buckets = exec
        .samples
        .iter()
        .filter(|s| s.name.ends_with("_bucket"))
        .count();
    let groups = group_by_labels(std::slice::from_ref(exec));
    assert_eq!(groups.len(), buckets + series_without_le);
    for g in groups
        .iter()
        .filter(|g| !g.labels.iter().any(|l| &*l.0 == "le"))
    {
        let names: Vec<&str> = g.metrics.iter().map(|m| m.0.as_ref()).collect();
        assert_eq!(
            names,
            [
                "apiserver_flowcontrol_request_execution_seconds_sum",
                "apiserver_flowcontrol_request_execution_seconds_count"
            ]
        );
    }

    // Grouping the whole scrape: every non-NaN sample lands in exactly one
    // group, once (no duplicate series in a real exposition).
    let all = group_by_labels(&fams);
    let non_nan = fams
        .iter()
        .flat_map(|f| &f.samples)
        .filter(|s| !s.value.is_nan())
        .count();
    assert_eq!(all.iter().map(|g| g.metrics.len()).sum::<usize>(), non_nan);
}

#[test]
fn kube_apiserver_text() {
    check_kube(KUBE_TEXT);
}

#[test]
fn kube_apiserver_answering_an_openmetrics_accept() {
    check_kube(KUBE_OM_ACCEPT);
}

#[test]
fn leasehold_agent_openmetrics() {
    let format = format_of(Some(AGENT_CONTENT_TYPE));
    assert_eq!(format, Format::OpenMetrics);
    let fams = check_strict_equals_lenient(AGENT_OM, format);
    assert_eq!(fams.len(), 10);
    assert_eq!(kinds(&fams), BTreeMap::from([("counter", 7), ("gauge", 3)]));
    for f in fams.iter().filter(|f| f.kind == MetricType::Counter) {
        assert!(!f.name.ends_with("_total"), "{}", f.name);
        assert!(
            f.samples
                .iter()
                .all(|s| *s.name == format!("{}_total", f.name))
        );
    }
    let produced = fams
        .iter()
        .find(|f| f.name == "leasehold_events_produced")
        .unwrap();
    assert_eq!(produced.help.as_deref(), Some("Events an input produced."));
    assert_eq!(produced.samples.len(), 2);

    // Without its final `# EOF` the same text is an error in OpenMetrics and
    // fine as text format.
    let body = AGENT_OM.strip_suffix("# EOF\n").unwrap();
    let e = parse(body, Format::OpenMetrics).unwrap_err();
    assert_eq!(e.line, body.lines().count() + 1);
    assert!(e.message.contains("missing # EOF"));
    assert_eq!(parse(body, Format::Text).unwrap().len(), 10);
}

/// Building only some families gives exactly what building all of them
/// and dropping the others gives, for every family picked alone and for
/// every second family, on each recorded exposition (histograms,
/// summaries, OpenMetrics counters with `_total` samples included).
#[test]
fn keeping_some_families_equals_filtering_after_the_parse() {
    use leasehold_prometheus_text::parse_lenient_keeping;
    for (input, format) in [
        (KUBE_TEXT, Format::Text),
        (KUBE_OM_ACCEPT, Format::Text),
        (AGENT_OM, Format::OpenMetrics),
    ] {
        let (all, errors) = parse_lenient(input, format);
        assert!(errors.is_empty(), "{errors:?}");
        let names: Vec<String> = all.iter().map(|f| f.name.clone()).collect();
        let mut picks: Vec<Vec<&str>> = names.iter().map(|n| vec![n.as_str()]).collect();
        picks.push(names.iter().step_by(2).map(String::as_str).collect());
        for pick in picks {
            let keep = |name: &str| pick.contains(&name);
            let (kept, errors) = parse_lenient_keeping(input, format, &keep);
            assert!(errors.is_empty(), "{pick:?}: {errors:?}");
            let filtered: Vec<Family> = all.iter().filter(|f| keep(&f.name)).cloned().collect();
            assert_eq!(kept, filtered, "{pick:?}");
        }
    }
}

/// A line of a family left out is not read past its name: its errors are
/// not reported either.
#[test]
fn lines_of_families_left_out_are_not_checked() {
    use leasehold_prometheus_text::parse_lenient_keeping;
    let input = "# TYPE a gauge\na{x=\"1\"} 1\n# TYPE b gauge\nb{x=\"1\" oops\nb 2\n";
    let (fams, errors) = parse_lenient_keeping(input, Format::Text, &|n| n == "a");
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(fams.len(), 1);
    assert_eq!(fams[0].samples.len(), 1);
    let (_, errors) = parse_lenient(input, Format::Text);
    assert_eq!(errors.len(), 1, "parsed whole, b's bad line is an error");
}
