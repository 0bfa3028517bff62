//! A report as a table for people or as JSON for scripts.

use jiff::{SignedDuration, Timestamp};

use super::assess::{HolderPod, Report, human};

/// The table form.
pub fn table(r: &Report) -> String {
    let mut out = String::new();
    let mut row = |k: &str, v: String| out.push_str(&format!("{k:<13}{v}\n"));
    row("Lease:", format!("{}/{}", r.namespace, r.lease));
    row("Verdict:", verdict_words(r));
    let at: Option<Timestamp> = r.at.parse().ok();
    let ago = |s: &Option<String>| -> String {
        match (s, at) {
            (Some(t), Some(now)) => match t.parse::<Timestamp>() {
                Ok(ts) => format!("{t} ({})", relative(now.duration_since(ts))),
                Err(_) => t.clone(),
            },
            (Some(t), None) => t.clone(),
            (None, _) => "-".into(),
        }
    };
    if r.renewed_at.is_some() || r.holder.is_some() {
        let holder = match (&r.holder, &r.holder_pod) {
            (None, _) => "none (released)".to_string(),
            (Some(h), HolderPod::Present { phase, daemonset }) => format!(
                "{h} (pod {phase}{})",
                daemonset
                    .as_deref()
                    .map_or(String::new(), |d| format!(", DaemonSet {d}"))
            ),
            (Some(h), HolderPod::Absent) => format!("{h} (no such pod)"),
            (Some(h), HolderPod::Unknown { reason }) => format!("{h} (pod unknown: {reason})"),
            (Some(h), HolderPod::NotChecked) => h.clone(),
        };
        row("Holder:", holder);
        row("Acquired:", ago(&r.acquired_at));
        row("Renewed:", ago(&r.renewed_at));
        let duration = match (r.duration_s, r.expires_in_s) {
            (Some(d), Some(left)) if r.holder.is_some() => {
                let left = SignedDuration::from_secs_f64(left);
                if left.is_negative() {
                    format!("{d}s (expired {} ago)", human(-left))
                } else {
                    format!("{d}s (expires in {})", human(left))
                }
            }
            (Some(d), _) => format!("{d}s"),
            (None, _) => "-".into(),
        };
        row("Duration:", duration);
        row(
            "Transitions:",
            r.transitions.map_or("-".into(), |t| t.to_string()),
        );
        if r.checkpoints.is_empty() {
            row("Checkpoints:", "none".into());
        } else {
            for (i, (k, v)) in r.checkpoints.iter().enumerate() {
                row(if i == 0 { "Checkpoints:" } else { "" }, format!("{k}={v}"));
            }
        }
    }
    row("Judged at:", r.at.clone());
    if !r.problems.is_empty() {
        out.push_str("\nProblems:\n");
        for p in &r.problems {
            out.push_str(&format!("  - {}\n    fix: {}\n", p.problem, p.fix));
        }
    }
    out
}

fn verdict_words(r: &Report) -> String {
    use super::assess::Standing::*;
    match r.verdict {
        Healthy => "healthy: held and renewed".into(),
        Released => "released: free for the next candidate".into(),
        Expired => "expired: the holder stopped renewing; a candidate should take over".into(),
        Stuck => "stuck: the election cannot move on by itself".into(),
        Missing => "missing: no such Lease".into(),
    }
}

fn relative(d: SignedDuration) -> String {
    if d.is_negative() {
        format!("in {}", human(-d))
    } else {
        format!("{} ago", human(d))
    }
}

/// The JSON form (one document, pretty-printed, newline-terminated).
pub fn json(r: &Report) -> String {
    let mut s = serde_json::to_string_pretty(r).unwrap_or_else(|_| "{}".into());
    s.push('\n');
    s
}
