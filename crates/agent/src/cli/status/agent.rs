//! `leasehold status --agent URL`: a running agent's own view from its
//! `/status`, with what looks wrong in it.

use http_body_util::BodyExt;
use serde_json::{Value, json};

use super::Format;

/// How long the agent gets to answer.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The report on the agent at `base` and whether it found problems.
pub async fn report(base: &str, format: Format) -> Result<(String, bool), String> {
    let url = format!("{}/status", base.trim_end_matches('/'));
    let uri: hyper::Uri = url
        .parse()
        .map_err(|e| format!("--agent {base:?} is not a URL ({e}); e.g. http://127.0.0.1:6791"))?;
    if uri.scheme_str() != Some("http") {
        return Err(format!(
            "--agent {base:?}: the monitoring endpoint speaks plain http; e.g. http://127.0.0.1:6791"
        ));
    }
    let client = crate::tls::plain_http_client();
    let response = tokio::time::timeout(TIMEOUT, client.get(uri))
        .await
        .map_err(|_| format!("{url} did not answer within {TIMEOUT:?}"))?
        .map_err(|e| {
            format!("cannot reach {url}: {e}; is the agent running with monitoring enabled (`agent.monitoring.http` or --http)?")
        })?;
    let status = response.status();
    let body = tokio::time::timeout(TIMEOUT, response.into_body().collect())
        .await
        .map_err(|_| format!("{url} did not finish its answer within {TIMEOUT:?}"))?
        .map_err(|e| format!("reading {url}: {e}"))?
        .to_bytes();
    if !status.is_success() {
        return Err(format!(
            "{url} answered {status}: {}",
            crate::redact::strip_userinfo(&String::from_utf8_lossy(&body))
        ));
    }
    let doc: Value = serde_json::from_slice(&body)
        .map_err(|e| format!("{url} did not answer a status document: {e}"))?;
    let problems = problems(&doc);
    let text = match format {
        Format::Json => {
            let mut out = doc.clone();
            out["problems"] = json!(problems);
            let mut s = serde_json::to_string_pretty(&out).unwrap_or_default();
            s.push('\n');
            s
        }
        Format::Table => table(base, &doc, &problems),
    };
    // An older agent may serve URLs with credentials: never print them.
    let text = crate::redact::strip_userinfo(&text).into_owned();
    Ok((text, !problems.is_empty()))
}

fn s(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn list(v: &Value) -> &[Value] {
    v.as_array().map_or(&[], Vec::as_slice)
}

/// What looks wrong in a status document, each with its fix.
pub fn problems(doc: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    for e in list(&doc["elections"]) {
        if e["state"] == "unknown" {
            out.push(json!({
                "problem": format!("election {} (Lease {}/{}): the agent cannot tell who leads", s(&e["name"]), s(&e["namespace"]), s(&e["lease"])),
                "fix": "see the agent's log: a 403 means its Role lacks get/update on that Lease; otherwise the API server is unreachable",
            }));
        }
    }
    for p in list(&doc["problems"]) {
        out.push(json!({
            "problem": format!("{}: {}", s(&p["component"]), s(&p["error"])),
            "fix": if p["affects_readiness"] == true {
                "the agent reports itself not ready until this is fixed; the message says how"
            } else {
                "the message says how"
            },
        }));
    }
    for i in list(&doc["inputs"]["running"]) {
        if i["state"] == "failing" {
            out.push(json!({
                "problem": format!("input {} ({}) runs but its work fails: {}", s(&i["id"]), s(&i["type"]), s(&i["last_error"])),
                "fix": "fix what the error names; the input keeps trying every period",
            }));
        }
        if i["state"] == "backoff" {
            out.push(json!({
                "problem": format!("input {} ({}) is failing: {}", s(&i["id"]), s(&i["type"]), s(&i["last_error"])),
                "fix": "fix what the error names; the agent restarts the input with backoff (a gated input failing on the leader hands the Lease over)",
            }));
        }
    }
    for o in list(&doc["outputs"]) {
        if o["state"] == "failing" {
            out.push(json!({
                "problem": format!("output {} ({}) is failing ({} events queued): {}", s(&o["name"]), s(&o["type"]), s(&o["queue_depth"]), s(&o["last_error"])),
                "fix": "events wait in the queue and are retried; fix the destination (address, credentials, disk space)",
            }));
        }
    }
    if let Some(err) = doc["policy"]["last_error"].as_str() {
        out.push(json!({
            "problem": format!("the latest policy change was rejected: {err}"),
            "fix": "the previous policy keeps running; correct the policy (`leasehold check -c FILE` lists every problem)",
        }));
    }
    out
}

fn table(base: &str, doc: &Value, problems: &[Value]) -> String {
    let mut out = format!("Agent:       {} ({base})\n", s(&doc["identity"]));
    out.push_str(&format!(
        "Policy:      {} (loaded {}, {} reload(s))\n",
        s(&doc["policy"]["path"]),
        s(&doc["policy"]["loaded_at"]),
        s(&doc["policy"]["reloads"])
    ));
    let rows = |header: &[&str], rows: Vec<Vec<String>>| -> String {
        let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
        for r in &rows {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(c.len());
            }
        }
        let mut t = String::new();
        let line = |cells: Vec<String>| {
            let mut l = String::from("  ");
            for (c, w) in cells.iter().zip(&widths) {
                l.push_str(&format!("{c:<w$}  "));
            }
            format!("{}\n", l.trim_end())
        };
        t.push_str(&line(header.iter().map(|h| h.to_string()).collect()));
        for r in rows {
            t.push_str(&line(r));
        }
        t
    };
    out.push_str("\nElections:\n");
    out.push_str(&rows(
        &["NAME", "LEASE", "STATE", "HOLDER", "TERM"],
        list(&doc["elections"])
            .iter()
            .map(|e| {
                vec![
                    s(&e["name"]),
                    format!("{}/{}", s(&e["namespace"]), s(&e["lease"])),
                    s(&e["state"]),
                    s(&e["holder"]),
                    s(&e["term"]),
                ]
            })
            .collect(),
    ));
    out.push_str("\nInputs:\n");
    out.push_str(&rows(
        &["ID", "TYPE", "STATE", "SINCE", "RESTARTS"],
        list(&doc["inputs"]["running"])
            .iter()
            .map(|i| {
                vec![
                    s(&i["id"]),
                    s(&i["type"]),
                    s(&i["state"]),
                    s(&i["since"]),
                    s(&i["restarts"]),
                ]
            })
            .chain(list(&doc["inputs"]["dropped"]).iter().map(|d| {
                vec![
                    s(&d["id"]),
                    "-".into(),
                    format!("not run: {}", s(&d["reason"])),
                    "-".into(),
                    "-".into(),
                ]
            }))
            .collect(),
    ));
    out.push_str("\nOutputs:\n");
    out.push_str(&rows(
        &["NAME", "TYPE", "STATE", "QUEUED", "DROPPED", "LAST ERROR"],
        list(&doc["outputs"])
            .iter()
            .map(|o| {
                vec![
                    s(&o["name"]),
                    s(&o["type"]),
                    s(&o["state"]),
                    s(&o["queue_depth"]),
                    s(&o["events_dropped"]),
                    s(&o["last_error"]),
                ]
            })
            .collect(),
    ));
    if !problems.is_empty() {
        out.push_str("\nProblems:\n");
        for p in problems {
            out.push_str(&format!(
                "  - {}\n    fix: {}\n",
                s(&p["problem"]),
                s(&p["fix"])
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failing_parts_of_an_agent_are_problems_with_fixes() {
        let doc = json!({
            "identity": "agent-1",
            "elections": [{"name": "leader", "lease": "l", "namespace": "ns", "state": "unknown", "holder": null, "term": null}],
            "inputs": {"running": [{"id": "ksm", "type": "kubernetes/metrics", "state": "backoff", "since": "t", "restarts": 2, "last_error": "connection refused"}], "dropped": []},
            "outputs": [{"name": "default", "type": "elasticsearch", "state": "failing", "queue_depth": 12, "last_error": "503"}],
            "policy": {"path": "p.yml", "loaded_at": "t", "last_error": "bad", "reloads": 0}
        });
        let p = problems(&doc);
        assert_eq!(p.len(), 4);
        assert!(
            p[1]["problem"]
                .as_str()
                .unwrap()
                .contains("connection refused")
        );
        let t = table("http://x", &doc, &p);
        assert!(t.contains("Agent:       agent-1 (http://x)"), "{t}");
        assert!(t.contains("ns/l"), "{t}");
        assert!(t.contains("fix: events wait in the queue"), "{t}");
    }
}
