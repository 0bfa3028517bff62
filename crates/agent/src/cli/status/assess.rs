//! Judges a Lease as an operator would: who holds it, whether the holder
//! still renews, and whether anything about it would keep the election
//! from moving on (a holder that is no pod of the agents, a duration far
//! above the configured one, a clock ahead of this one), each problem
//! with what to do about it. Pure: the facts and the time come in.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use serde::Serialize;

/// What was read from the API.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseFacts {
    pub namespace: String,
    pub name: String,
    /// `None`: the Lease does not exist.
    pub record: Option<Record>,
    /// Whether the holder is a pod of the agents.
    pub holder_pod: HolderPod,
}

/// The Lease's spec and checkpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub holder: Option<String>,
    pub acquired: Option<Timestamp>,
    pub renewed: Option<Timestamp>,
    pub duration_s: Option<i64>,
    pub transitions: Option<i64>,
    pub checkpoints: BTreeMap<String, String>,
}

/// What is known about the pod named like the holder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum HolderPod {
    /// Not looked up (no holder).
    NotChecked,
    /// A pod of that name runs in the namespace.
    Present {
        phase: String,
        /// The DaemonSet owning it, if any.
        daemonset: Option<String>,
    },
    /// No pod of that name in the namespace.
    Absent,
    /// The pod could not be read.
    Unknown { reason: String },
}

/// The overall verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Standing {
    /// Held and renewed.
    Healthy,
    /// Released: free for the next candidate.
    Released,
    /// The holder stopped renewing; a candidate should take it soon.
    Expired,
    /// Something keeps the election from moving on.
    Stuck,
    /// No such Lease.
    Missing,
}

/// One thing wrong, and the fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub problem: String,
    pub fix: String,
}

/// The assessment, as `--format json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub namespace: String,
    pub lease: String,
    pub verdict: Standing,
    pub holder: Option<String>,
    pub acquired_at: Option<String>,
    pub renewed_at: Option<String>,
    /// Seconds since the last renewal (negative: in the future).
    pub renewed_ago_s: Option<f64>,
    pub duration_s: Option<i64>,
    /// Seconds until the Lease expires by its own timestamps (negative:
    /// expired that long ago).
    pub expires_in_s: Option<f64>,
    pub transitions: Option<i64>,
    pub checkpoints: BTreeMap<String, String>,
    pub holder_pod: HolderPod,
    /// When this was judged.
    pub at: String,
    pub problems: Vec<Problem>,
}

/// How the caller expects the election to be configured.
#[derive(Debug, Clone)]
pub struct Expect {
    /// The agents' configured `leader_leaseduration`.
    pub duration_s: i64,
    /// The DaemonSet whose pods are the candidates, when known.
    pub daemonset: Option<String>,
}

/// A recorded duration this many times the configured one is "far above".
const FAR_ABOVE: i64 = 2;
/// Clocks may differ this much before it is worth saying.
const SKEW_SLACK: SignedDuration = SignedDuration::from_secs(2);

/// Judges `facts` at `now`.
pub fn assess(facts: &LeaseFacts, expect: &Expect, now: Timestamp) -> Report {
    let mut report = Report {
        namespace: facts.namespace.clone(),
        lease: facts.name.clone(),
        verdict: Standing::Missing,
        holder: None,
        acquired_at: None,
        renewed_at: None,
        renewed_ago_s: None,
        duration_s: None,
        expires_in_s: None,
        transitions: None,
        checkpoints: BTreeMap::new(),
        holder_pod: facts.holder_pod.clone(),
        at: now.to_string(),
        problems: Vec::new(),
    };
    let Some(r) = &facts.record else {
        report.problems.push(Problem {
            problem: format!(
                "there is no Lease {}/{}: no candidate has stood for this election, or the name or namespace is not the one the agents use",
                facts.namespace, facts.name
            ),
            fix: "check `leader_lease` and `namespace` of the policy's kubernetes_leaderelection provider, and that agents run (a candidate creates a missing Lease after seeing it missing for one lease duration); a candidate that cannot create it logs a 403".into(),
        });
        return report;
    };
    report.holder = r.holder.clone().filter(|h| !h.is_empty());
    report.acquired_at = r.acquired.map(|t| t.to_string());
    report.renewed_at = r.renewed.map(|t| t.to_string());
    report.duration_s = r.duration_s;
    report.transitions = r.transitions;
    report.checkpoints = r.checkpoints.clone();
    let ago = r.renewed.map(|t| now.duration_since(t));
    report.renewed_ago_s = ago.map(|d| d.as_secs_f64());
    let duration = r.duration_s.map(SignedDuration::from_secs);
    let left = match (ago, duration) {
        (Some(a), Some(d)) => Some(d - a),
        _ => None,
    };
    report.expires_in_s = left.map(|d| d.as_secs_f64());

    let Some(holder) = report.holder.clone() else {
        report.verdict = Standing::Released;
        let long = SignedDuration::from_secs(2 * expect.duration_s.max(1));
        if ago.is_some_and(|a| a > long) {
            report.verdict = Standing::Stuck;
            report.problems.push(Problem {
                problem: format!(
                    "released {} ago and nobody took it: no candidate runs, or none may update the Lease",
                    human(ago.unwrap_or_default())
                ),
                fix: "check that the agents run and that their Role allows get/update on this Lease (a 403 in their logs says it does not)".into(),
            });
        }
        return report;
    };
    report.verdict = Standing::Healthy;
    if left.is_none() {
        report.verdict = Standing::Stuck;
        report.problems.push(Problem {
            problem: "the Lease names a holder but no renewTime or leaseDurationSeconds: no candidate can tell when it expires".into(),
            fix: "it was not written by an elector; delete it (`kubectl delete lease -n NS NAME`): candidates wait one lease duration after seeing it missing, then elect a leader".into(),
        });
    }
    if let Some(l) = left
        && l.is_negative()
    {
        let overdue = -l;
        let grace = SignedDuration::from_secs(expect.duration_s.max(1));
        if overdue > grace {
            report.verdict = Standing::Stuck;
            report.problems.push(Problem {
                problem: format!(
                    "{holder} stopped renewing {} ago and the Lease expired {} ago, yet no candidate took it over",
                    human(ago.unwrap_or_default()),
                    human(overdue)
                ),
                fix: "candidates are missing or cannot write the Lease: check the agents' pods and logs (a 403 on leases means their Role lacks get/update on this Lease)".into(),
            });
        } else {
            report.verdict = Standing::Expired;
            report.problems.push(Problem {
                problem: format!(
                    "{holder} stopped renewing {} ago; the Lease expired {} ago",
                    human(ago.unwrap_or_default()),
                    human(overdue)
                ),
                fix: "nothing yet: a candidate takes it over within its retry period; if this persists past one more lease duration, the election is stuck".into(),
            });
        }
    }
    if let Some(a) = ago
        && a < -SKEW_SLACK
    {
        report.problems.push(Problem {
            problem: format!(
                "renewTime is {} in the future: the holder's clock is ahead of this one",
                human(-a)
            ),
            fix: "synchronize the nodes' clocks (NTP); electors judge expiry by when they observed the Lease change, so skew does not make two leaders, but this report's ages are off by as much".into(),
        });
    }
    if let Some(d) = r.duration_s
        && d > FAR_ABOVE * expect.duration_s
    {
        report.problems.push(Problem {
            problem: format!(
                "the Lease records a duration of {d}s, far above the configured {}s: if its holder fails, the election waits that long",
                expect.duration_s
            ),
            fix: "the holder writes its own duration at its next renewal unless someone else keeps editing the Lease; if it stays, find the writer in the Lease's managedFields. To recover at once, delete the Lease (candidates then wait one lease duration)".into(),
        });
    }
    let live = left.is_some_and(|l| !l.is_negative());
    match &facts.holder_pod {
        HolderPod::Absent if live => {
            report.verdict = Standing::Stuck;
            report.problems.push(Problem {
                problem: format!(
                    "the holder {holder} is no pod in {}, yet the Lease is renewed",
                    facts.namespace
                ),
                fix: "something other than an agent pod holds it (a manual edit, a process outside the cluster, an agent whose identity is not its pod name): find the writer in the Lease's managedFields and stop it; the agents take over one lease duration after it stops".into(),
            });
        }
        HolderPod::Present {
            daemonset: owner, ..
        } if live => {
            if let Some(want) = &expect.daemonset
                && owner.as_deref() != Some(want.as_str())
            {
                report.verdict = Standing::Stuck;
                report.problems.push(Problem {
                    problem: format!(
                        "the holder {holder} is a pod of {}, not of DaemonSet {want}",
                        owner.as_deref().map_or("no DaemonSet".to_string(), |o| format!("DaemonSet {o}"))
                    ),
                    fix: "two installs share this Lease: give each its own `leader_lease` (the Helm chart derives it from the release name)".into(),
                });
            }
        }
        _ => {}
    }
    report
}

/// A duration in words: `850ms`, `42s`, `5m3s`, `2h5m`.
pub fn human(d: SignedDuration) -> String {
    let sign = if d.is_negative() { "-" } else { "" };
    let d = d.abs();
    let ms = d.as_millis();
    let s = d.as_secs();
    if ms < 1000 {
        return format!("{sign}{ms}ms");
    }
    if s < 60 {
        return format!("{sign}{s}s");
    }
    if s < 3600 {
        return format!("{sign}{}m{}s", s / 60, s % 60);
    }
    format!("{sign}{}h{}m", s / 3600, (s % 3600) / 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn facts(holder: Option<&str>, renewed: &str, duration: i64, pod: HolderPod) -> LeaseFacts {
        LeaseFacts {
            namespace: "ns".into(),
            name: "l".into(),
            record: Some(Record {
                holder: holder.map(str::to_string),
                acquired: Some(t("2026-12-03T10:00:00Z")),
                renewed: Some(t(renewed)),
                duration_s: Some(duration),
                transitions: Some(3),
                checkpoints: BTreeMap::new(),
            }),
            holder_pod: pod,
        }
    }

    fn expect() -> Expect {
        Expect {
            duration_s: 15,
            daemonset: Some("leasehold".into()),
        }
    }

    fn pod(ds: &str) -> HolderPod {
        HolderPod::Present {
            phase: "Running".into(),
            daemonset: Some(ds.into()),
        }
    }

    #[test]
    fn each_state_is_told_apart_with_its_fix() {
        let now = t("2026-12-03T10:05:00Z");
        let healthy = assess(
            &facts(Some("a"), "2026-12-03T10:04:58Z", 15, pod("leasehold")),
            &expect(),
            now,
        );
        assert_eq!(healthy.verdict, Standing::Healthy);
        assert!(healthy.problems.is_empty());
        assert_eq!(healthy.expires_in_s, Some(13.0));

        let expired = assess(
            &facts(Some("a"), "2026-12-03T10:04:40Z", 15, pod("leasehold")),
            &expect(),
            now,
        );
        assert_eq!(expired.verdict, Standing::Expired);

        let stuck = assess(
            &facts(Some("a"), "2026-12-03T10:00:00Z", 15, pod("leasehold")),
            &expect(),
            now,
        );
        assert_eq!(stuck.verdict, Standing::Stuck);
        assert!(stuck.problems[0].fix.contains("403"));

        let released = assess(
            &facts(None, "2026-12-03T10:04:59Z", 15, HolderPod::NotChecked),
            &expect(),
            now,
        );
        assert_eq!(released.verdict, Standing::Released);
        let abandoned = assess(
            &facts(None, "2026-12-03T10:00:00Z", 15, HolderPod::NotChecked),
            &expect(),
            now,
        );
        assert_eq!(abandoned.verdict, Standing::Stuck);

        let stranger = assess(
            &facts(Some("x"), "2026-12-03T10:04:59Z", 15, HolderPod::Absent),
            &expect(),
            now,
        );
        assert_eq!(stranger.verdict, Standing::Stuck);
        assert!(stranger.problems[0].problem.contains("no pod"));

        let other = assess(
            &facts(Some("a"), "2026-12-03T10:04:59Z", 15, pod("other")),
            &expect(),
            now,
        );
        assert_eq!(other.verdict, Standing::Stuck);
        assert!(other.problems[0].fix.contains("own `leader_lease`"));

        let long = assess(
            &facts(Some("a"), "2026-12-03T10:04:59Z", 3600, pod("leasehold")),
            &expect(),
            now,
        );
        assert_eq!(long.verdict, Standing::Healthy, "held, but worth a word");
        assert!(long.problems[0].problem.contains("3600s"));

        let ahead = assess(
            &facts(Some("a"), "2026-12-03T10:05:30Z", 15, pod("leasehold")),
            &expect(),
            now,
        );
        assert!(
            ahead
                .problems
                .iter()
                .any(|p| p.problem.contains("in the future"))
        );

        let missing = assess(
            &LeaseFacts {
                namespace: "ns".into(),
                name: "l".into(),
                record: None,
                holder_pod: HolderPod::NotChecked,
            },
            &expect(),
            now,
        );
        assert_eq!(missing.verdict, Standing::Missing);
    }

    #[test]
    fn durations_read_as_words() {
        assert_eq!(human(SignedDuration::from_millis(850)), "850ms");
        assert_eq!(human(SignedDuration::from_secs(42)), "42s");
        assert_eq!(human(SignedDuration::from_secs(303)), "5m3s");
        assert_eq!(human(SignedDuration::from_secs(7500)), "2h5m");
        assert_eq!(human(SignedDuration::from_secs(-3)), "-3s");
    }
}
