//! Metricbeat's `prometheus/metrics` `collector` shape (without `use_types`)
//! and its `metrics_filters`.

use std::collections::HashMap;

use regex::Regex;

use crate::{Family, Label, Text};

/// One event's worth of samples: every sample with exactly these labels.
///
/// `labels` are sorted by name; `metrics` maps each sample name to its value,
/// in the order first seen (a repeated sample name keeps the last value).
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub labels: Vec<Label>,
    pub metrics: Vec<(Text, f64)>,
}

/// One group per distinct label set (labels sorted by name), holding every
/// sample with exactly those labels: (sample name → value). This is
/// Metricbeat's shape: one event per label set, `prometheus.labels.*` = the
/// labels, `prometheus.metrics.<sample name>` = value. Histogram buckets
/// (`le`) and summary quantiles (`quantile`) keep their label, so each
/// bucket/quantile is its own group; `_sum`/`_count` share the group of the
/// series without `le`/`quantile`. NaN values are dropped (Metricbeat drops
/// them); +Inf/-Inf kept as f64. Groups come out in the order first seen.
pub fn group_by_labels(families: &[Family]) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    let mut by_labels: HashMap<Vec<Label>, usize> = HashMap::new();
    // Per group: sample name → position in `metrics`.
    let mut by_metric: Vec<HashMap<Text, usize>> = Vec::new();
    for sample in families.iter().flat_map(|f| f.samples.iter()) {
        if sample.value.is_nan() {
            continue;
        }
        let mut labels = sample.labels.clone();
        labels.sort_by(|a, b| a.0.cmp(&b.0));
        let g = match by_labels.get(&labels) {
            Some(&g) => g,
            None => {
                let g = groups.len();
                by_labels.insert(labels.clone(), g);
                groups.push(Group {
                    labels,
                    metrics: Vec::new(),
                });
                by_metric.push(HashMap::new());
                g
            }
        };
        let (Some(group), Some(names)) = (groups.get_mut(g), by_metric.get_mut(g)) else {
            continue;
        };
        match names.get(&sample.name) {
            Some(&m) => {
                if let Some(slot) = group.metrics.get_mut(m) {
                    slot.1 = sample.value;
                }
            }
            None => {
                names.insert(sample.name.clone(), group.metrics.len());
                group.metrics.push((sample.name.clone(), sample.value));
            }
        }
    }
    groups
}

/// Keeps families whose name matches any include pattern (if any) and none
/// of the exclude patterns; see [`NameFilter`].
pub fn filter(families: Vec<Family>, include: &[Regex], exclude: &[Regex]) -> Vec<Family> {
    if include.is_empty() && exclude.is_empty() {
        return families;
    }
    let names = NameFilter::new(include, exclude);
    families
        .into_iter()
        .filter(|f| names.keeps(&f.name))
        .collect()
}

/// Metricbeat's `metrics_filters` as a test of a family name: it passes
/// when it matches any include pattern (if any) and none of the exclude
/// patterns; patterns are regexes anchored on the whole name (`node_.*`
/// keeps `node_load1`, `load` does not). Anchoring rebuilds each pattern
/// from its source text, so flags set through `RegexBuilder` rather than
/// inline (`(?i)`) are not kept.
pub struct NameFilter<'a> {
    include: Vec<WholeName<'a>>,
    exclude: Vec<WholeName<'a>>,
}

impl<'a> NameFilter<'a> {
    /// The filter of `include` and `exclude` patterns.
    pub fn new(include: &'a [Regex], exclude: &'a [Regex]) -> Self {
        NameFilter {
            include: include.iter().map(WholeName::new).collect(),
            exclude: exclude.iter().map(WholeName::new).collect(),
        }
    }

    /// Whether a family called `name` passes.
    pub fn keeps(&self, name: &str) -> bool {
        (self.include.is_empty() || self.include.iter().any(|m| m.matches(name)))
            && !self.exclude.iter().any(|m| m.matches(name))
    }
}

/// A regex that must match a whole name.
struct WholeName<'a> {
    given: &'a Regex,
    anchored: Option<Regex>,
}

impl<'a> WholeName<'a> {
    fn new(given: &'a Regex) -> Self {
        let anchored = Regex::new(&format!("^(?:{})$", given.as_str())).ok();
        WholeName { given, anchored }
    }

    fn matches(&self, name: &str) -> bool {
        match &self.anchored {
            Some(re) => re.is_match(name),
            // Only if the anchored form exceeds the size limit: accept a
            // leftmost match that happens to span the whole name.
            None => self
                .given
                .find(name)
                .is_some_and(|m| m.start() == 0 && m.end() == name.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MetricType, Sample};

    type Row<'a> = (&'a str, &'a [(&'a str, &'a str)], f64);

    fn family(name: &str, samples: &[Row<'_>]) -> Family {
        Family {
            name: name.into(),
            kind: MetricType::Unknown,
            help: None,
            unit: None,
            samples: samples
                .iter()
                .map(|(n, labels, v)| Sample {
                    name: (*n).into(),
                    labels: labels
                        .iter()
                        .map(|(k, v)| ((*k).into(), (*v).into()))
                        .collect(),
                    value: *v,
                    timestamp_ms: None,
                })
                .collect(),
        }
    }

    #[test]
    fn label_order_does_not_split_groups() {
        let f = family(
            "x",
            &[
                ("a", &[("b", "1"), ("a", "2")], 1.0),
                ("c", &[("a", "2"), ("b", "1")], 2.0),
                ("d", &[], f64::NAN),
                ("e", &[], f64::NEG_INFINITY),
                ("a", &[("a", "2"), ("b", "1")], 3.0),
            ],
        );
        let groups = group_by_labels(&[f]);
        assert_eq!(groups.len(), 2);
        assert_eq!(
            groups[0].labels,
            vec![("a".into(), "2".into()), ("b".into(), "1".into())]
        );
        assert_eq!(
            groups[0].metrics,
            vec![("a".into(), 3.0), ("c".into(), 2.0)]
        );
        assert!(groups[1].labels.is_empty());
        assert_eq!(groups[1].metrics, vec![("e".into(), f64::NEG_INFINITY)]);
    }

    #[test]
    fn all_nan_makes_no_group() {
        let f = family("x", &[("x", &[], f64::NAN)]);
        assert!(group_by_labels(&[f]).is_empty());
    }

    #[test]
    fn filter_anchors_patterns() {
        let fams = vec![
            family("node_load1", &[]),
            family("node_cpu_seconds", &[]),
            family("go_goroutines", &[]),
            family("xnode_load1", &[]),
        ];
        let names = |v: &[Family]| v.iter().map(|f| f.name.clone()).collect::<Vec<_>>();
        let inc = [Regex::new("node_.*").unwrap()];
        let exc = [Regex::new("node_cpu|node_cpu_seconds").unwrap()];
        let kept = filter(fams.clone(), &inc, &exc);
        assert_eq!(names(&kept), ["node_load1"]);
        let kept = filter(fams.clone(), &[Regex::new("load").unwrap()], &[]);
        assert!(kept.is_empty());
        let kept = filter(fams.clone(), &[], &[Regex::new("go_.*").unwrap()]);
        assert_eq!(
            names(&kept),
            ["node_load1", "node_cpu_seconds", "xnode_load1"]
        );
        assert_eq!(filter(fams.clone(), &[], &[]).len(), 4);
        let kept = filter(fams, &[Regex::new("^go_goroutines$").unwrap()], &[]);
        assert_eq!(names(&kept), ["go_goroutines"]);
    }
}
