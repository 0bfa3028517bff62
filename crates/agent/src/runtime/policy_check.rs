//! What `check` finds and `run` refuses, without running anything: the
//! policy's own rules, the input types and their settings, the outputs and
//! which inputs use them.

use leasehold_policy::{Diagnostic, Node, Policy, Severity, Vars};

/// Output types of Elastic Agent that this version does not have: a
/// warning in `check`; `run` refuses them.
const OUTPUTS_NOT_YET: [&str; 2] = ["logstash", "kafka"];

/// Everything `check` finds: the policy's own rules, the input types and
/// their settings, the outputs and which inputs use them. `run` refuses a
/// policy with any error here.
pub fn diagnostics(policy: &Policy, sample: Option<&Vars>) -> Vec<Diagnostic> {
    let mut out = leasehold_policy::check(policy, sample);
    out.extend(crate::inputs::check_policy(policy));
    let at = |node: &Node, dotted: &str| {
        let path: Vec<String> = dotted.split('.').skip(1).map(str::to_string).collect();
        crate::inputs::position(node, &path)
    };
    let mut defined: Vec<String> = Vec::new();
    if let Some(section) = policy.section("outputs") {
        defined = section
            .entries()
            .iter()
            .map(|(k, _)| k.name.clone())
            .collect();
        if let Err(errors) = crate::outputs::parse_outputs(&section.to_value()) {
            for e in errors {
                let path = e.key();
                let pos = at(section, &path);
                let value = section.to_value();
                let raw = value.lookup_path(path.trim_start_matches("outputs."));
                if raw.is_some_and(crate::settings::unresolved) {
                    continue;
                }
                let kind = path
                    .strip_suffix(".type")
                    .and_then(|p| {
                        value.lookup_path(&format!("{}.type", p.trim_start_matches("outputs.")))
                    })
                    .and_then(|v| match v {
                        leasehold_policy::Value::Str(s) => Some(s.clone()),
                        _ => None,
                    });
                let (severity, message) = match kind {
                    Some(k) if OUTPUTS_NOT_YET.contains(&k.as_str()) => (
                        Severity::Warning,
                        format!(
                            "output type `{k}` is not available in this version of leasehold; `run` refuses this policy"
                        ),
                    ),
                    _ => (Severity::Error, e.to_string()),
                };
                out.push(Diagnostic {
                    severity,
                    file: policy.file.clone(),
                    pos,
                    message,
                    hint: Some(format!(
                        "available output types: {}",
                        crate::outputs::output_types().join(", ")
                    )),
                });
            }
        }
    }
    if let Some(section) = policy.section("outputs") {
        for (path, why) in crate::outputs::output_notes(&section.to_value()) {
            out.push(Diagnostic {
                severity: Severity::Warning,
                file: policy.file.clone(),
                pos: at(section, &path),
                message: format!("`{path}`: {why}"),
                hint: None,
            });
        }
    }
    if let Some(node) = policy
        .section("providers")
        .and_then(|p| p.get(crate::runtime::kubernetes::PROVIDER))
    {
        let raw = node.to_value();
        let (errors, warnings, hints_on) = match crate::runtime::kubernetes::settings::parse(&raw) {
            Ok(p) => {
                let hints_on = p.settings.as_ref().is_some_and(|s| s.hints.enabled);
                (Vec::new(), p.warnings, hints_on)
            }
            Err(e) => (e, Vec::new(), false),
        };
        // In hints mode the provider publishes `kubernetes.hints.*` only: an
        // input reading its other variables would never run.
        if hints_on {
            let default_provider = policy.default_provider();
            for input in policy.inputs() {
                let other: Vec<String> = leasehold_policy::dynamic::provider_vars(
                    input,
                    crate::runtime::kubernetes::PROVIDER,
                    &default_provider,
                )
                .into_iter()
                .filter(|v| !v.starts_with("kubernetes.hints."))
                .collect();
                if let Some(first) = other.first() {
                    out.push(Diagnostic {
                        severity: Severity::Warning,
                        file: policy.file.clone(),
                        pos: input.pos,
                        message: format!(
                            "this input reads `${{{first}}}`, but with `providers.kubernetes.hints.enabled: true` the provider publishes only `kubernetes.hints.*`: it will not run"
                        ),
                        hint: Some("read `${kubernetes.hints.container_id}` and the other hints (docs/configuration.md, Hints), or turn hints off".into()),
                    });
                }
            }
        }
        let mut note = |severity, message: String| {
            // The key is the first `…` of the message.
            let key = message.split('`').nth(1).unwrap_or_default().to_string();
            let rel = key.trim_start_matches("providers.kubernetes.");
            // A value that uses variables is judged by `run`.
            if severity == Severity::Error
                && raw
                    .lookup_path(rel)
                    .is_some_and(crate::inputs::settings::unresolved)
            {
                return;
            }
            // `hints.enabled: true` is one key; `hints: {enabled: true}` two.
            let path: Vec<String> = if node.get(rel).is_some() {
                vec![rel.to_string()]
            } else {
                rel.split('.').map(str::to_string).collect()
            };
            let pos = crate::inputs::position(node, &path);
            out.push(Diagnostic {
                severity,
                file: policy.file.clone(),
                pos,
                message,
                hint: None,
            });
        };
        for e in errors {
            note(Severity::Error, e);
        }
        for w in warnings {
            note(Severity::Warning, w);
        }
    }
    for input in policy.inputs() {
        let (name, pos) = match input.get("use_output") {
            Some(n) => match n.as_str() {
                Some(s) if !s.contains("${") => (s.to_string(), n.pos),
                _ => continue,
            },
            None => ("default".to_string(), input.pos),
        };
        if !defined.contains(&name) {
            out.push(Diagnostic {
                severity: Severity::Error,
                file: policy.file.clone(),
                pos,
                message: format!(
                    "the input's events go to output `{name}`, which `outputs:` does not define"
                ),
                hint: Some(if defined.is_empty() {
                    "add an `outputs:` section, e.g. `outputs: {default: {type: console}}`"
                        .to_string()
                } else {
                    format!(
                        "defined outputs: {}; or set `use_output`",
                        defined.join(", ")
                    )
                }),
            });
        }
    }
    out.sort_by_key(|d| d.pos);
    out
}
