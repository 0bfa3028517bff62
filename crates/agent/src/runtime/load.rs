//! Loading a policy: its files read and checked (every problem with its
//! place, no secret quoted), its sections resolved with the static
//! variables, and what a reload of it would change that only a restart
//! applies.

use leasehold_policy::{Policy, Severity, Value, Vars};

use super::config::{self, AgentSettings};
use super::policy_files::{PolicyFiles, Snapshot};
use super::{elastic_defaults, kubernetes, policy_check, providers, self_monitoring};
use crate::outputs;
use crate::pipeline::publisher::AgentFields;
use crate::redact::Redactor;

/// A policy that passed every check, with what was derived from it.
pub struct Loaded {
    /// The policy.
    pub policy: Policy,
    /// Its files' texts, to notice changes.
    pub snapshot: Snapshot,
    /// Static variables.
    pub vars: Vars,
    /// `agent:` settings.
    pub settings: AgentSettings,
    /// `outputs:` settings.
    pub outputs: Vec<outputs::OutputSettings>,
    /// The elections some input refers to.
    pub elections: Vec<leasehold_policy::elections::ElectionSpec>,
    /// Its secrets (as written and as resolved), kept out of messages.
    pub redactor: Redactor,
    /// `providers.kubernetes`, when given and enabled.
    pub kubernetes: Option<kubernetes::settings::ProviderSettings>,
}

/// The static provider values, read once.
pub struct Statics {
    /// `env`.
    pub env: Value,
    /// `host`.
    pub host: Value,
    /// `agent`.
    pub agent: Value,
    /// The agent's fields on events.
    pub fields: AgentFields,
    /// Run with Elastic Agent's defaults where they differ from
    /// leasehold's (started by Elastic's command line): the Lease of the
    /// single election is `elastic-agent-cluster-leader`.
    pub elastic_defaults: bool,
}

/// Reads and checks a policy: every problem with file:line:column, the
/// same as `check` says, plus what only the agent can find (settings that
/// do not resolve). No message quotes a secret of the file: values of
/// secret keys and URL userinfo are redacted.
pub fn load(files: &PolicyFiles, statics: &Statics) -> Result<Loaded, Vec<String>> {
    let snapshot = files.read().map_err(|e| vec![e])?;
    let mut redactor = Redactor::new();
    for text in snapshot.texts() {
        redactor.add_text(text);
    }
    let redact_all = |errors: Vec<String>, r: &Redactor| -> Vec<String> {
        errors.iter().map(|e| r.redact(e)).collect()
    };
    let (policy, file_warnings) = snapshot
        .parse(&files.policy.display().to_string())
        .map_err(|e| redact_all(vec![e.to_string()], &redactor))?;
    for w in file_warnings {
        tracing::warn!("{}", redactor.redact(&w));
    }
    redactor.add_value("", &policy.root.to_value());
    let diags: Vec<_> = policy_check::diagnostics(&policy, None)
        .into_iter()
        .map(|d| policy.relocate_diagnostic(d))
        .collect();
    let errors: Vec<String> = diags
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(ToString::to_string)
        .collect();
    for d in diags.iter().filter(|d| d.severity == Severity::Warning) {
        tracing::warn!("{}", redactor.redact(&d.to_string()));
    }
    if !errors.is_empty() {
        return Err(redact_all(errors, &redactor));
    }
    let file = policy.file.clone();
    let vars = providers::static_vars(&policy, &statics.env, &statics.host, &statics.agent);
    let mut errors = Vec::new();
    // Resolved sections may hold secrets taken from variables (`${env.X}`).
    let mut resolved = |name: &str| {
        let v = config::section(&policy, name, &vars);
        if let Ok(v) = &v {
            redactor.add_value(name, v);
        }
        v
    };
    let agent_section = resolved("agent");
    let outputs_section = resolved("outputs");
    let settings = agent_section
        .map_err(|e| vec![e])
        .and_then(|v| AgentSettings::from_section(&v))
        .map_err(|e| errors.extend(e.into_iter().map(|m| format!("{file}: {m}"))))
        .ok();
    let outs = outputs_section
        .map_err(|e| vec![e])
        .and_then(|v| match v {
            Value::Null => Err(vec![
                "no `outputs:` section: define at least `outputs.default`".to_string(),
            ]),
            v => outputs::parse_outputs(&v)
                .map_err(|errs| errs.into_iter().map(|e| e.to_string()).collect()),
        })
        .map_err(|e| errors.extend(e.into_iter().map(|m| format!("{file}: {m}"))))
        .ok();
    let elections = leasehold_policy::elections::elections(&policy, &vars)
        .map(|specs| {
            if statics.elastic_defaults {
                elastic_defaults::lease(&policy, specs)
            } else {
                specs
            }
        })
        .map_err(|e| errors.push(e.to_string()))
        .ok();
    let kube = kubernetes_settings(&policy, &vars)
        .map_err(|e| errors.extend(e.into_iter().map(|m| format!("{file}: {m}"))))
        .ok();
    let mut policy = policy;
    if let (Some(s), Some(o)) = (settings.as_ref().and_then(|s| s.shipping.as_ref()), &outs) {
        let names: Vec<String> = o.iter().map(|o| o.name.clone()).collect();
        if let Err(e) = self_monitoring::add_inputs(&mut policy, s, &names, &statics.fields.id) {
            errors.push(format!("{file}: {e}"));
        }
    }
    match (settings, outs, elections, kube) {
        (Some(settings), Some(outputs), Some(elections), Some(kubernetes)) if errors.is_empty() => {
            Ok(Loaded {
                kubernetes,
                policy,
                snapshot,
                vars,
                settings,
                outputs,
                elections,
                redactor,
            })
        }
        _ => Err(redact_all(errors, &redactor)),
    }
}

/// Reads `providers.kubernetes` (resolved with the static variables);
/// warnings about keys without effect are logged.
fn kubernetes_settings(
    policy: &Policy,
    vars: &Vars,
) -> Result<Option<kubernetes::settings::ProviderSettings>, Vec<String>> {
    let Some(node) = policy
        .section("providers")
        .and_then(|p| p.get(kubernetes::PROVIDER))
    else {
        return Ok(None);
    };
    let path = format!("providers.{}", kubernetes::PROVIDER);
    let v = config::resolve(&node.to_value(), vars, &policy.default_provider(), &path)
        .map_err(|e| vec![e])?;
    let parsed = kubernetes::settings::parse(&v)?;
    for w in &parsed.warnings {
        tracing::warn!("{w}");
    }
    Ok(parsed.settings)
}

/// `outputs` with every disk queue that names no path placed under
/// `data_path` (`DATA/queue/OUTPUT`).
pub(super) fn with_data_path(
    outputs: &[outputs::OutputSettings],
    data_path: &std::path::Path,
) -> Vec<outputs::OutputSettings> {
    let mut out = outputs.to_vec();
    for o in &mut out {
        if let Some(d) = &mut o.disk
            && d.path.is_none()
        {
            d.path = Some(data_path.join("queue").join(&o.name));
        }
    }
    out
}

/// What a reloaded policy changes that only a restart applies (its
/// outputs, its `agent:` settings), each said with what changed; empty
/// when nothing waits.
pub(super) fn waiting_for_restart(old: &Loaded, new: &Loaded) -> Vec<String> {
    let mut waiting = Vec::new();
    if new.outputs != old.outputs {
        let names = |o: &[outputs::OutputSettings]| -> Vec<String> {
            o.iter().map(|x| x.name.clone()).collect()
        };
        let (before, now) = (names(&old.outputs), names(&new.outputs));
        let added: Vec<&String> = now.iter().filter(|n| !before.contains(n)).collect();
        let removed: Vec<&String> = before.iter().filter(|n| !now.contains(n)).collect();
        let changed: Vec<&String> = new
            .outputs
            .iter()
            .filter(|o| old.outputs.iter().any(|r| r.name == o.name && r != *o))
            .map(|o| &o.name)
            .collect();
        let mut what = Vec::new();
        for (label, list) in [("added", added), ("removed", removed), ("changed", changed)] {
            if !list.is_empty() {
                let quoted: Vec<String> = list.iter().map(|n| format!("`{n}`")).collect();
                what.push(format!("{label} {}", quoted.join(", ")));
            }
        }
        waiting.push(format!("`outputs:` changed ({})", what.join("; ")));
    }
    if new.settings != old.settings {
        waiting.push("`agent:` settings changed".to_string());
    }
    waiting
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn a_line_cut_at_the_default_message_max_bytes_fits_an_outputs_default_event() {
        // The line's JSON (a few escapes) and the document's other fields.
        let cut = crate::inputs::filestream::settings::MESSAGE_MAX_BYTES as u64;
        let max = crate::outputs::DEFAULT_MAX_EVENT_BYTES;
        assert!(max >= cut + cut / 4, "{max} < {cut} + 25 %");
        assert!(
            max <= crate::outputs::DEFAULT_QUEUE_BYTES / 2,
            "two fit in the queue"
        );
    }

    fn statics(elastic_defaults: bool) -> Statics {
        Statics {
            env: Value::Null,
            host: Value::Null,
            agent: Value::Null,
            fields: AgentFields {
                id: "id-1".into(),
                name: "agent-a".into(),
                version: "1".into(),
                node: "node-a".into(),
            },
            elastic_defaults,
        }
    }

    fn files(dir: &Path, policy: &str) -> PolicyFiles {
        let path = dir.join("agent.yml");
        std::fs::write(&path, policy).unwrap();
        PolicyFiles {
            policy: path,
            inputs_dir: None,
        }
    }

    const GATED: &str = "providers:\n  kubernetes_leaderelection:\n    leader_lease: cluster-lock\noutputs:\n  default: {type: file, path: /var/out}\n  spool: {type: file, path: /var/out2, queue.disk: {max_size: 1MiB}}\ninputs:\n  - id: cluster\n    type: exec\n    condition: ${kubernetes_leaderelection.leader} == true\n    command: [echo, hi]\n";

    #[test]
    fn a_policy_loads_with_its_outputs_and_elections_and_disk_queues_go_under_the_data_path() {
        let dir = tempfile::tempdir().unwrap();
        let loaded = load(&files(dir.path(), GATED), &statics(false)).unwrap();
        let names: Vec<&str> = loaded.outputs.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["default", "spool"]);
        assert_eq!(loaded.elections.len(), 1);
        assert_eq!(loaded.elections[0].lease, "cluster-lock");
        assert!(loaded.kubernetes.is_none());
        let placed = with_data_path(&loaded.outputs, Path::new("/data"));
        assert_eq!(placed[0].disk, None);
        assert_eq!(
            placed[1].disk.as_ref().and_then(|d| d.path.clone()),
            Some(Path::new("/data/queue/spool").to_path_buf())
        );
    }

    #[test]
    fn elastics_command_line_takes_elastics_lease_name() {
        let dir = tempfile::tempdir().unwrap();
        let unnamed = GATED.replace(
            "    leader_lease: cluster-lock\n",
            "    leader_renewdeadline: 10\n",
        );
        let loaded = load(&files(dir.path(), &unnamed), &statics(true)).unwrap();
        assert_eq!(loaded.elections[0].lease, "elastic-agent-cluster-leader");
        // A Lease the policy names stays.
        let named = load(&files(dir.path(), GATED), &statics(true)).unwrap();
        assert_eq!(named.elections[0].lease, "cluster-lock");
    }

    #[test]
    fn every_problem_is_named_with_its_place_and_no_secret_is_quoted() {
        let dir = tempfile::tempdir().unwrap();
        let policy = "outputs:\n  default:\n    type: elasticsearch\n    hosts: [localhost]\n    password: hunter2-secret\n    worker: many\ninputs:\n  - id: a\n    type: exec\n    command: 3\n";
        let Err(errors) = load(&files(dir.path(), policy), &statics(false)) else {
            panic!("loaded");
        };
        let all = errors.join("\n");
        assert!(all.contains("agent.yml"), "{all}");
        assert!(all.contains("command"), "{all}");
        assert!(!all.contains("hunter2-secret"), "{all}");
        let Err(missing) = load(&files(dir.path(), "inputs: []\n"), &statics(false)) else {
            panic!("loaded without outputs");
        };
        assert!(
            missing.iter().any(|e| e.contains("no `outputs:` section")),
            "{missing:?}"
        );
    }

    #[test]
    fn a_reload_says_which_outputs_and_settings_wait_for_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let before = GATED.replace("outputs:\n", "outputs:\n  gone: {type: console}\n");
        let old = load(&files(dir.path(), &before), &statics(false)).unwrap();
        let same = load(&files(dir.path(), &before), &statics(false)).unwrap();
        assert!(waiting_for_restart(&old, &same).is_empty());
        let changed = GATED
            .replace("/var/out2", "/var/elsewhere")
            .replace("outputs:\n", "outputs:\n  extra: {type: console}\n")
            .replace("providers:", "agent:\n  shutdown_timeout: 7s\nproviders:");
        let new = load(&files(dir.path(), &changed), &statics(false)).unwrap();
        assert_eq!(
            waiting_for_restart(&old, &new),
            [
                "`outputs:` changed (added `extra`; removed `gone`; changed `spool`)",
                "`agent:` settings changed"
            ]
        );
    }
}
