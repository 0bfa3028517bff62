//! The settings of provider `kubernetes_leaderelection`: Elastic's keys as
//! they are (`leader_lease`, `leader_leaseduration`, `leader_renewdeadline`,
//! `leader_retryperiod` in whole seconds, `kube_config`,
//! `kube_client_options`) plus leasehold's `namespace`, `identity` and
//! `release_on_shutdown`, and the lease timing rule.

use std::fmt;

use super::names::{is_dns_label, is_dns_subdomain};
use crate::error::Pos;
use crate::lint::{Report, Severity};
use crate::yaml::{Node, NodeKind};

/// The longest timing the election accepts: one day (the election crate's
/// `MAX_TIMING`), in milliseconds.
pub const MAX_LEASE_TIMING_MS: u64 = 24 * 3600 * 1000;

/// Lease duration, renew deadline and retry period when the policy does not
/// set them (client-go's and Elastic's defaults), in seconds.
pub const DEFAULT_LEASE_TIMINGS_S: [i64; 3] = [15, 10, 2];

/// Why a set of lease timings is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseTimingError {
    /// A timing is zero (`name` says which).
    NotPositive {
        /// "lease duration", "renew deadline" or "retry period".
        name: &'static str,
    },
    /// A timing is longer than [`MAX_LEASE_TIMING_MS`].
    TooLong {
        /// "lease duration", "renew deadline" or "retry period".
        name: &'static str,
    },
    /// `lease duration > renew deadline` does not hold.
    DurationNotAboveDeadline,
    /// `renew deadline > 1.2 × retry period` does not hold.
    DeadlineNotAboveRetry,
}

impl fmt::Display for LeaseTimingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseTimingError::NotPositive { name } => write!(f, "{name} must be positive"),
            LeaseTimingError::TooLong { name } => write!(f, "{name} must be at most one day"),
            LeaseTimingError::DurationNotAboveDeadline => {
                write!(f, "lease duration must be greater than renew deadline")
            }
            LeaseTimingError::DeadlineNotAboveRetry => {
                write!(f, "renew deadline must be greater than 1.2 × retry period")
            }
        }
    }
}

/// The lease timing rule, in integer milliseconds: every timing positive and
/// at most a day, and `lease duration > renew deadline > 1.2 × retry
/// period`. A leader then always stops (at the renew deadline) before
/// another candidate can see its lease as expired (at the lease duration),
/// with time for more than one renew attempt in between.
///
/// This mirrors the election crate's rule (`Timings::new` in
/// `leasehold-election`, which the agent applies at start-up) check for
/// check and in the same order, so `leasehold check` refuses exactly what
/// the agent would. The policy crate stays free of the election crate's
/// Kubernetes and runtime dependencies, so the rule is written here once
/// more; it uses the same exact integer form of the 1.2 factor
/// (`6 × retry < 5 × deadline`), never floating point. Change both together.
pub fn check_lease_timings(
    lease_duration_ms: u64,
    renew_deadline_ms: u64,
    retry_period_ms: u64,
) -> Result<(), LeaseTimingError> {
    for (name, value) in [
        ("lease duration", lease_duration_ms),
        ("renew deadline", renew_deadline_ms),
        ("retry period", retry_period_ms),
    ] {
        if value == 0 {
            return Err(LeaseTimingError::NotPositive { name });
        }
        if value > MAX_LEASE_TIMING_MS {
            return Err(LeaseTimingError::TooLong { name });
        }
    }
    if lease_duration_ms <= renew_deadline_ms {
        return Err(LeaseTimingError::DurationNotAboveDeadline);
    }
    // 1.2 × retry < deadline  <=>  6 × retry < 5 × deadline; both sides are
    // at most 6 × one day in milliseconds, far from overflowing.
    if retry_period_ms * 6 >= renew_deadline_ms * 5 {
        return Err(LeaseTimingError::DeadlineNotAboveRetry);
    }
    Ok(())
}

/// Lease duration, renew deadline and retry period in whole seconds that
/// satisfy [`check_lease_timings`]. [`LeaseTimings::from_secs`] is the only
/// way to build one, so an election can never be given timings the rule
/// refuses, and nothing downstream needs a fallback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTimings {
    secs: [u64; 3],
}

impl LeaseTimings {
    /// Checks the rule on lease duration `d`, renew deadline `r` and retry
    /// period `p`, in seconds.
    pub fn from_secs(d: u64, r: u64, p: u64) -> Result<LeaseTimings, LeaseTimingError> {
        let ms = |s: u64| s.saturating_mul(1000);
        check_lease_timings(ms(d), ms(r), ms(p))?;
        Ok(LeaseTimings { secs: [d, r, p] })
    }

    /// Lease duration, renew deadline, retry period, in seconds.
    pub fn secs(&self) -> [u64; 3] {
        self.secs
    }
}

impl Default for LeaseTimings {
    /// [`DEFAULT_LEASE_TIMINGS_S`] (15 / 10 / 2, which satisfy the rule).
    fn default() -> LeaseTimings {
        let [d, r, p] = DEFAULT_LEASE_TIMINGS_S;
        LeaseTimings {
            secs: [d as u64, r as u64, p as u64],
        }
    }
}

/// A lease timing written as a string (directly, or what a variable gave):
/// whole seconds as digits, e.g. `"15"`, surrounding blanks ignored.
/// Elastic Agent reads these settings as integers, so a duration such as
/// `15s` is not one.
pub fn parse_timing_secs(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `leader_leaseduration 15, leader_renewdeadline 10, leader_retryperiod 2`.
pub fn describe_timings<T: fmt::Display>(secs: [T; 3]) -> String {
    let [d, r, p] = secs;
    format!(
        "{} {d}, {} {r}, {} {p}",
        TIMING_KEYS[0], TIMING_KEYS[1], TIMING_KEYS[2]
    )
}

/// The hint given with a timing that is not whole seconds.
pub const TIMING_HINT: &str = "give whole seconds as an integer or a string of digits, e.g. `15` or `\"15\"` (Elastic Agent reads these as integers; `15s` is not accepted)";

const KNOWN_SETTINGS: &str = "enabled, leader_lease, leader_leaseduration, leader_renewdeadline, leader_retryperiod, kube_config, kube_client_options, namespace, identity, release_on_shutdown, handover_after_failures, elections, shards (per named election)";

const TIMING_KEYS: [&str; 3] = [
    "leader_leaseduration",
    "leader_renewdeadline",
    "leader_retryperiod",
];

/// Names an election may not take: they are the variables of the single
/// form (`kubernetes_leaderelection.leader`), or settings.
pub const RESERVED_ELECTION_NAMES: [&str; 5] = ["leader", "term", "holder", "shard", "shards"];

/// Whether `name` may name an election: it becomes a variable path segment
/// (`${kubernetes_leaderelection.NAME.leader}`) and part of a default Lease
/// name, so lower-case letters, digits and `_`, starting with a letter, at
/// most 40 bytes.
pub fn is_election_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 40
        && name.as_bytes()[0].is_ascii_lowercase()
        && name
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_')
}

/// Timing values as written: (seconds, where), `None` where not written;
/// the seconds are `None` when a variable gives them, which `check` cannot
/// judge without its value.
type Written = [Option<(Option<i64>, Pos)>; 3];

/// Checks the settings mapping of the provider: the shared settings, and
/// each named election under `elections` with the shared ones as defaults.
/// `resolve` substitutes a string with `check`'s sample variables, when it
/// has them and they resolve it.
pub(crate) fn check(node: &Node, report: &mut Report, resolve: &dyn Fn(&str) -> Option<String>) {
    let shared = check_settings(node, report, true, resolve);
    let Some(elections) = node.get("elections") else {
        check_timings(merge(&[shared]), node.pos, report);
        return;
    };
    let NodeKind::Map(entries) = &elections.kind else {
        report.push(
            Severity::Error,
            elections.pos,
            format!(
                "`elections` must be a mapping of election name to settings, found {}",
                elections.type_name()
            ),
            Some("e.g. `elections: {state_metrics: {leader_lease: ksm-leader}}`".into()),
        );
        return;
    };
    if entries.is_empty() {
        report.push(
            Severity::Error,
            elections.pos,
            "`elections` is empty".into(),
            Some("name at least one election, or remove `elections` for the single form".into()),
        );
    }
    let mut leases: Vec<(String, Pos)> = Vec::new();
    for (name, settings) in entries {
        if RESERVED_ELECTION_NAMES.contains(&name.name.as_str()) || !is_election_name(&name.name) {
            report.push(
                Severity::Error,
                name.pos,
                format!("`{}` cannot name an election", name.name),
                Some(format!(
                    "use lower-case letters, digits and '_', starting with a letter, at most 40 characters, and none of: {}",
                    RESERVED_ELECTION_NAMES.join(", ")
                )),
            );
        }
        let own = match &settings.kind {
            NodeKind::Map(_) => check_settings(settings, report, false, resolve),
            NodeKind::Null => [None; 3],
            _ => {
                report.push(
                    Severity::Error,
                    settings.pos,
                    format!(
                        "the settings of election `{}` must be a mapping, found {}",
                        name.name,
                        settings.type_name()
                    ),
                    None,
                );
                continue;
            }
        };
        check_timings(merge(&[shared, own]), settings.pos, report);
        if let Some(lease) = settings.get("leader_lease").and_then(Node::as_str)
            && !lease.contains('$')
        {
            if let Some((_, first)) = leases.iter().find(|(l, _)| l == lease) {
                report.push(
                    Severity::Error,
                    settings.get("leader_lease").map_or(settings.pos, |n| n.pos),
                    format!(
                        "lease {lease:?} is already used by the election at line {}",
                        first.line
                    ),
                    Some("every election needs a Lease of its own".into()),
                );
            } else {
                leases.push((lease.to_string(), name.pos));
            }
        }
    }
}

/// The timings in effect: the last layer that writes a value wins, the
/// defaults fill the rest.
fn merge(layers: &[Written]) -> [(Option<i64>, Option<Pos>); 3] {
    let mut out = DEFAULT_LEASE_TIMINGS_S.map(|s| (Some(s), None::<Pos>));
    for layer in layers {
        for (slot, written) in out.iter_mut().zip(layer) {
            if let Some((v, pos)) = written {
                *slot = (*v, Some(*pos));
            }
        }
    }
    out
}

/// Checks the keys of one settings mapping (the provider's own, or one
/// election's) and returns the timings it writes.
fn check_settings(
    node: &Node,
    report: &mut Report,
    shared: bool,
    resolve: &dyn Fn(&str) -> Option<String>,
) -> Written {
    let mut timings: Written = [None; 3];
    for (key, value) in node.entries() {
        let want = match key.name.as_str() {
            "enabled" | "release_on_shutdown" => "bool",
            "leader_lease" | "kube_config" | "namespace" | "identity" => "string",
            "leader_leaseduration"
            | "leader_renewdeadline"
            | "leader_retryperiod"
            | "handover_after_failures" => "int",
            "kube_client_options" => "map",
            "elections" if shared => continue,
            "shards" if !shared => "int",
            "shards" => {
                report.push(
                    Severity::Error,
                    key.pos,
                    "`shards` is a setting of one named election, not of the provider".into(),
                    Some(
                        "move it under `elections.NAME`, e.g. `elections: {ksm: {shards: 8}}`"
                            .into(),
                    ),
                );
                continue;
            }
            _ => {
                report.push(
                    Severity::Warning,
                    key.pos,
                    format!(
                        "unknown setting `{}` of provider kubernetes_leaderelection is ignored",
                        key.name
                    ),
                    Some(format!("known settings: {KNOWN_SETTINGS}")),
                );
                continue;
            }
        };
        let timing = TIMING_KEYS.iter().position(|k| *k == key.name);
        if let NodeKind::Str { value: s, .. } = &value.kind
            && s.contains('$')
        {
            if let Some(t) = timing {
                if let Some(text) = resolve(s) {
                    timings[t] = Some(timing_secs(&key.name, &text, Some(s), value.pos, report));
                    continue;
                }
                timings[t] = Some((None, value.pos));
                report.push(
                    Severity::Warning,
                    value.pos,
                    format!(
                        "`{}` is {s:?}: whether it is whole seconds and keeps duration > renew deadline > 1.2 × retry period cannot be judged until the variable is resolved; the agent checks both when it loads the policy",
                        key.name
                    ),
                    Some("`check --vars FILE` with a value for the variable judges it now".into()),
                );
            }
            continue;
        }
        if let (Some(t), NodeKind::Str { value: s, .. }) = (timing, &value.kind) {
            timings[t] = Some(timing_secs(&key.name, s, None, value.pos, report));
            continue;
        }
        if value.type_name() != want {
            if let Some(t) = timing {
                timings[t] = Some((None, value.pos));
            }
            let hint = timing.map(|_| TIMING_HINT.to_string());
            report.push(
                Severity::Error,
                value.pos,
                format!(
                    "`{}` must be a {want}, found {}",
                    key.name,
                    value.type_name()
                ),
                hint,
            );
            continue;
        }
        match (&key.name[..], &value.kind) {
            ("leader_lease", NodeKind::Str { value: s, .. }) if !is_dns_subdomain(s) => report.push(
                Severity::Error,
                value.pos,
                format!("lease name {s:?} is not a valid Kubernetes object name"),
                Some("use lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters".into()),
            ),
            ("namespace", NodeKind::Str { value: s, .. }) if !is_dns_label(s) => report.push(
                Severity::Error,
                value.pos,
                format!("namespace {s:?} is not a valid namespace name"),
                Some("use lower-case letters, digits and '-', at most 63 characters".into()),
            ),
            ("identity", NodeKind::Str { value: s, .. }) if s.is_empty() => report.push(
                Severity::Error,
                value.pos,
                "identity must not be empty".into(),
                Some("remove it to default to the pod name".into()),
            ),
            ("shards", NodeKind::Int(i)) if !(1..=i64::from(crate::elections::MAX_SHARDS)).contains(i) => report.push(
                Severity::Error,
                value.pos,
                format!("`shards` must be from 1 to {}, found {i}", crate::elections::MAX_SHARDS),
                Some("each shard is a Lease of its own, spread over the agents".into()),
            ),
            ("handover_after_failures", NodeKind::Int(i)) if !(1..=1000).contains(i) => report.push(
                Severity::Error,
                value.pos,
                format!("`handover_after_failures` must be between 1 and 1000, found {i}"),
                Some("the default is 3 failures in a row".into()),
            ),
            (_, NodeKind::Int(i)) => {
                if let Some(t) = timing {
                    timings[t] = Some((Some(*i), value.pos));
                }
            }
            _ => {}
        }
    }
    timings
}

/// Applies [`check_lease_timings`] to the values written (or defaulted),
/// reporting at the value that breaks it. When a timing is not known here
/// (a variable, or a value already reported as not whole seconds), only
/// the others' own bounds are checked: the relations need all three.
/// A timing setting's whole seconds read from `text` (`from`: the variable
/// reference it was resolved from); an error naming `key` when it is not.
fn timing_secs(
    key: &str,
    text: &str,
    from: Option<&str>,
    pos: Pos,
    report: &mut Report,
) -> (Option<i64>, Pos) {
    if let Some(v) = parse_timing_secs(text).and_then(|v| i64::try_from(v).ok()) {
        return (Some(v), pos);
    }
    let origin = from.map(|s| format!(" (from {s:?})")).unwrap_or_default();
    report.push(
        Severity::Error,
        pos,
        format!("`{key}` must be whole seconds, found {text:?}{origin}"),
        Some(TIMING_HINT.into()),
    );
    (None, pos)
}

fn check_timings(timings: [(Option<i64>, Option<Pos>); 3], provider_pos: Pos, report: &mut Report) {
    let at = |i: usize| timings[i].1.unwrap_or(provider_pos);
    let ms = |secs: i64| u64::try_from(secs).map_or(0, |s| s.saturating_mul(1000));
    let [(Some(d), _), (Some(r), _), (Some(p), _)] = timings else {
        for (i, (v, _)) in timings.iter().enumerate() {
            if let Some(v) = *v {
                bounds(i, v, ms(v), at(i), report);
            }
        }
        return;
    };
    let Err(e) = check_lease_timings(ms(d), ms(r), ms(p)) else {
        return;
    };
    let value = [d, r, p];
    let last_written = timings
        .iter()
        .filter_map(|(_, pos)| *pos)
        .max()
        .unwrap_or(provider_pos);
    let index = |name: &str| match name {
        "lease duration" => 0,
        "renew deadline" => 1,
        _ => 2,
    };
    match e {
        LeaseTimingError::NotPositive { name } | LeaseTimingError::TooLong { name } => {
            let i = index(name);
            bounds(i, value[i], ms(value[i]), at(i), report);
        }
        LeaseTimingError::DurationNotAboveDeadline | LeaseTimingError::DeadlineNotAboveRetry => {
            report.push(
                Severity::Error,
                last_written,
                format!(
                    "lease timings must satisfy duration > renew deadline > 1.2 × retry period ({e}); got {}",
                    describe_timings([d, r, p])
                ),
                Some("the defaults are 15 / 10 / 2 seconds".into()),
            );
        }
    }
}

/// Reports timing `i` (`secs`, `ms` in milliseconds) when it is not
/// positive or longer than a day.
fn bounds(i: usize, secs: i64, ms: u64, at: Pos, report: &mut Report) {
    if ms == 0 {
        report.push(
            Severity::Error,
            at,
            format!("`{}` must be positive, found {secs}", TIMING_KEYS[i]),
            None,
        );
    } else if ms > MAX_LEASE_TIMING_MS {
        report.push(
            Severity::Error,
            at,
            format!(
                "`{}` must be at most {} seconds (one day), found {secs}",
                TIMING_KEYS[i],
                MAX_LEASE_TIMING_MS / 1000
            ),
            None,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_in_milliseconds() {
        assert_eq!(check_lease_timings(15_000, 10_000, 2_000), Ok(()));
        // The election crate's own boundary cases.
        assert_eq!(
            check_lease_timings(10_000, 10_000, 2_000),
            Err(LeaseTimingError::DurationNotAboveDeadline)
        );
        assert_eq!(
            check_lease_timings(15_000, 2_400, 2_000),
            Err(LeaseTimingError::DeadlineNotAboveRetry)
        );
        assert_eq!(check_lease_timings(15_000, 2_410, 2_000), Ok(()));
        assert_eq!(
            check_lease_timings(0, 1_000, 500),
            Err(LeaseTimingError::NotPositive {
                name: "lease duration"
            })
        );
        assert_eq!(
            check_lease_timings(MAX_LEASE_TIMING_MS + 1, 1_000, 500),
            Err(LeaseTimingError::TooLong {
                name: "lease duration"
            })
        );
        assert_eq!(
            check_lease_timings(MAX_LEASE_TIMING_MS, MAX_LEASE_TIMING_MS - 1, 1_000),
            Ok(())
        );
        // Exactly 1.2 × retry is refused, in whole seconds as in milliseconds.
        assert_eq!(
            check_lease_timings(60_000, 12_000, 10_000),
            Err(LeaseTimingError::DeadlineNotAboveRetry)
        );
        assert_eq!(check_lease_timings(60_000, 12_001, 10_000), Ok(()));
    }

    #[test]
    fn lease_timings_exist_only_when_the_rule_holds() {
        let d = LeaseTimings::default();
        assert_eq!(d.secs(), [15, 10, 2]);
        assert_eq!(LeaseTimings::from_secs(15, 10, 2), Ok(d));
        assert_eq!(
            LeaseTimings::from_secs(10, 10, 2),
            Err(LeaseTimingError::DurationNotAboveDeadline)
        );
        assert_eq!(
            LeaseTimings::from_secs(u64::MAX, 10, 2),
            Err(LeaseTimingError::TooLong {
                name: "lease duration"
            })
        );
        assert_eq!(parse_timing_secs("15"), Some(15));
        assert_eq!(parse_timing_secs(" 15\n"), Some(15));
        for bad in [
            "",
            "15s",
            "+15",
            "-1",
            "1.5",
            "1e3",
            "99999999999999999999999",
        ] {
            assert_eq!(parse_timing_secs(bad), None, "{bad:?}");
        }
    }
}
