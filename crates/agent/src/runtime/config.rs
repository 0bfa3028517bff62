//! The agent's own settings (`agent:` section) and resolving the static
//! variables in settings that are not inputs (`outputs:`, `agent:`), as
//! Elastic's standalone manifests do (`hosts: ['${ES_HOST}']`).

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use leasehold_policy::subst::{self, Resolved};
use leasehold_policy::{Policy, Value, Vars};

use crate::settings::{self, Problem};

/// `agent.shutdown_timeout` when not set: below a pod's default 30 s grace.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(25);
/// Elastic Agent's monitoring port.
pub const DEFAULT_MONITORING_PORT: u16 = 6791;

/// The `agent:` settings leasehold uses.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSettings {
    /// SIGTERM to exit, at most.
    pub shutdown_timeout: Duration,
    /// `agent.monitoring.http`: where to serve, when enabled.
    pub monitoring: Option<SocketAddr>,
    /// `agent.monitoring` shipping the agent's own logs and metrics.
    pub shipping: Option<Shipping>,
}

/// What `agent.monitoring` ships of the agent itself, and where: Elastic
/// Agent's `enabled`, `use_output`, `logs`, `metrics`, `namespace` and
/// `metrics_period`.
#[derive(Debug, Clone, PartialEq)]
pub struct Shipping {
    /// The output (`use_output`, default `default`).
    pub use_output: String,
    /// Its log records, to `logs-elastic_agent-<namespace>`.
    pub logs: bool,
    /// Its process figures, to `metrics-elastic_agent.elastic_agent-<namespace>`.
    pub metrics: bool,
    /// The data streams' namespace (default `default`).
    pub namespace: String,
    /// How often the figures are taken (default 60 s).
    pub period: Duration,
}

/// Substitutes static variables in every string of `v`; `path` names the
/// setting in errors.
pub fn resolve(
    v: &Value,
    vars: &Vars,
    default_provider: &str,
    path: &str,
) -> Result<Value, String> {
    Ok(match v {
        Value::Str(s) if subst::may_contain_vars(s) => {
            match subst::substitute(s, vars, default_provider)
                .map_err(|e| format!("`{path}`: {}", e.message))?
            {
                Resolved::Value(v) => v,
                Resolved::Optional(_) => Value::Null,
                Resolved::NoMatch(r) => {
                    return Err(format!(
                        "`{path}`: variable {r} could not be resolved (only env, host, agent and local variables can be used here)"
                    ));
                }
            }
        }
        Value::List(items) => Value::List(
            items
                .iter()
                .enumerate()
                .map(|(i, x)| resolve(x, vars, default_provider, &format!("{path}.{i}")))
                .collect::<Result<_, _>>()?,
        ),
        Value::Map(m) => {
            let mut out = leasehold_policy::Map::new();
            for (k, x) in m.iter() {
                out.insert(
                    k.clone(),
                    resolve(x, vars, default_provider, &format!("{path}.{k}"))?,
                );
            }
            Value::Map(out)
        }
        other => other.clone(),
    })
}

/// A section of the policy with static variables resolved (`Null` when
/// absent).
pub fn section(policy: &Policy, name: &str, vars: &Vars) -> Result<Value, String> {
    match policy.section(name) {
        None => Ok(Value::Null),
        Some(n) => resolve(&n.to_value(), vars, &policy.default_provider(), name),
    }
}

impl AgentSettings {
    /// Reads the resolved `agent:` section; every problem is listed with
    /// its key.
    pub fn from_section(agent: &Value) -> Result<AgentSettings, Vec<String>> {
        let mut errors: Vec<Problem> = Vec::new();
        let get = |path: &str| -> Option<&Value> {
            let mut at = agent;
            for seg in path.split('.') {
                match at {
                    Value::Map(m) => at = m.get(seg)?,
                    _ => return None,
                }
            }
            Some(at)
        };
        let shutdown_timeout = match get("shutdown_timeout") {
            None | Some(Value::Null) => DEFAULT_SHUTDOWN_TIMEOUT,
            Some(v) => settings::duration_in(
                "agent.shutdown_timeout",
                v,
                Duration::from_secs(1),
                Duration::from_secs(3600),
                &mut errors,
            )
            .unwrap_or(DEFAULT_SHUTDOWN_TIMEOUT),
        };
        let enabled = match get("monitoring.http.enabled") {
            None | Some(Value::Null) => false,
            Some(v) => {
                settings::flag("agent.monitoring.http.enabled", v, &mut errors).unwrap_or(false)
            }
        };
        let host = match get("monitoring.http.host") {
            None | Some(Value::Null) => "localhost".to_string(),
            Some(Value::Str(s)) => s.clone(),
            Some(other) => {
                errors.push(Problem::new(
                    "agent.monitoring.http.host",
                    format!("must be a string, found {}", settings::describe(other)),
                ));
                "localhost".into()
            }
        };
        let port = match get("monitoring.http.port") {
            None | Some(Value::Null) => DEFAULT_MONITORING_PORT,
            Some(Value::Int(p)) if (0..=65535).contains(p) => *p as u16,
            Some(Value::Str(s)) if s.parse::<u16>().is_ok() => {
                s.parse().unwrap_or(DEFAULT_MONITORING_PORT)
            }
            Some(other) => {
                errors.push(Problem::new(
                    "agent.monitoring.http.port",
                    format!(
                        "must be a port number (0-65535), found {}",
                        other.to_subst_text()
                    ),
                ));
                DEFAULT_MONITORING_PORT
            }
        };
        let monitoring = if enabled {
            match listen_addr(&host, port) {
                Ok(a) => Some(a),
                Err(e) => {
                    errors.push(Problem::new("agent.monitoring.http.host", e));
                    None
                }
            }
        } else {
            None
        };
        let shipping = shipping(&get, &mut errors);
        if errors.is_empty() {
            Ok(AgentSettings {
                shutdown_timeout,
                monitoring,
                shipping,
            })
        } else {
            Err(errors.iter().map(ToString::to_string).collect())
        }
    }
}

/// Reads `agent.monitoring`'s shipping. It is on when `enabled: true` is
/// written, or when the section sets `logs`, `metrics`, `use_output` or
/// `namespace` without `enabled: false` (as Elastic's manifests write it);
/// a section holding only `http` ships nothing.
fn shipping<'a>(
    get: &dyn Fn(&str) -> Option<&'a Value>,
    errors: &mut Vec<Problem>,
) -> Option<Shipping> {
    let given = |k: &str| get(&format!("monitoring.{k}")).filter(|v| !matches!(v, Value::Null));
    let mut flag = |k: &str, default: bool| match given(k) {
        None => default,
        Some(v) => settings::flag(&format!("agent.monitoring.{k}"), v, errors).unwrap_or(default),
    };
    let asked = ["logs", "metrics", "use_output", "namespace"]
        .iter()
        .any(|k| given(k).is_some());
    let enabled = flag("enabled", asked);
    let logs = flag("logs", true);
    let metrics = flag("metrics", true);
    let mut text = |k: &str, default: &str| match given(k) {
        None => default.to_string(),
        Some(Value::Str(s)) if !s.is_empty() => s.clone(),
        Some(other) => {
            errors.push(Problem::new(
                format!("agent.monitoring.{k}"),
                format!("must be a name, found {}", other.to_subst_text()),
            ));
            default.to_string()
        }
    };
    let use_output = text("use_output", "default");
    let namespace = text("namespace", "default");
    let period = match given("metrics_period") {
        None => crate::inputs::monitoring::DEFAULT_PERIOD,
        Some(v) => settings::duration_in(
            "agent.monitoring.metrics_period",
            v,
            Duration::from_secs(1),
            Duration::from_secs(24 * 3600),
            errors,
        )
        .unwrap_or(crate::inputs::monitoring::DEFAULT_PERIOD),
    };
    (enabled && (logs || metrics)).then_some(Shipping {
        use_output,
        logs,
        metrics,
        namespace,
        period,
    })
}

/// Resolves `host:port` to one address to listen on.
pub fn listen_addr(host: &str, port: u16) -> Result<SocketAddr, String> {
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host:?} has no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(yaml: &str) -> Result<AgentSettings, Vec<String>> {
        let p = Policy::parse(yaml, "a.yml").unwrap();
        AgentSettings::from_section(&section(&p, "agent", &Vars::new()).unwrap())
    }

    #[test]
    fn defaults_and_overrides() {
        let a = agent("inputs: []\n").unwrap();
        assert_eq!(a.shutdown_timeout, DEFAULT_SHUTDOWN_TIMEOUT);
        assert_eq!(a.monitoring, None);
        let a = agent("agent:\n  shutdown_timeout: 1m30s\n  monitoring:\n    http: {enabled: true, host: 127.0.0.1, port: 0}\n").unwrap();
        assert_eq!(a.shutdown_timeout, Duration::from_secs(90));
        assert_eq!(a.monitoring, Some("127.0.0.1:0".parse().unwrap()));
        let e = agent("agent:\n  shutdown_timeout: soon\n  monitoring:\n    http: {enabled: yes please, port: 70000}\n").unwrap_err();
        assert_eq!(e.len(), 3, "{e:?}");
        assert!(e[0].contains("`agent.shutdown_timeout`"), "{e:?}");
    }

    #[test]
    fn monitoring_ships_as_elastics_manifest_asks_and_not_for_http_alone() {
        let a = agent("agent:\n  monitoring:\n    enabled: true\n    use_output: default\n    logs: true\n    metrics: true\n").unwrap();
        assert_eq!(
            a.shipping,
            Some(Shipping {
                use_output: "default".into(),
                logs: true,
                metrics: true,
                namespace: "default".into(),
                period: Duration::from_secs(60),
            })
        );
        let a = agent("agent.monitoring:\n  use_output: mon\n  logs: false\n  namespace: team\n  metrics_period: 10s\n").unwrap();
        let s = a.shipping.unwrap();
        assert_eq!(
            (s.use_output.as_str(), s.logs, s.metrics),
            ("mon", false, true)
        );
        assert_eq!(
            (s.namespace.as_str(), s.period),
            ("team", Duration::from_secs(10))
        );
        for off in [
            "inputs: []\n",
            "agent:\n  monitoring:\n    http: {enabled: true, port: 0}\n",
            "agent:\n  monitoring:\n    enabled: false\n    logs: true\n",
            "agent:\n  monitoring:\n    enabled: true\n    logs: false\n    metrics: false\n",
        ] {
            assert_eq!(agent(off).unwrap().shipping, None, "{off}");
        }
        let e = agent("agent:\n  monitoring:\n    enabled: sure\n    metrics_period: 0s\n")
            .unwrap_err();
        assert_eq!(e.len(), 2, "{e:?}");
    }

    #[test]
    fn static_variables_resolve_in_settings() {
        let p = Policy::parse("outputs:\n  default:\n    path: ${env.DIR}/out\n", "o.yml").unwrap();
        let mut vars = Vars::new();
        vars.set_provider(
            "env",
            Value::Map(
                [("DIR".to_string(), Value::Str("/data".into()))]
                    .into_iter()
                    .collect(),
            ),
        );
        let v = section(&p, "outputs", &vars).unwrap();
        assert_eq!(
            v.lookup_path("default.path"),
            Some(&Value::Str("/data/out".into()))
        );
        let e = section(&p, "outputs", &Vars::new()).unwrap_err();
        assert!(e.contains("`outputs.default.path`"), "{e}");
    }
}
