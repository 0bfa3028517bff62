//! Elastic Agent's command line, as its container image is started: a
//! DaemonSet written for Elastic Agent passes `args: ["-c",
//! "/etc/elastic-agent/agent.yml", "-e"]` to the image's entrypoint, and
//! its entrypoint runs `elastic-agent container`. Such a command line is
//! turned into `leasehold run …` before it is parsed, so swapping the
//! image is enough; what leasehold has no equivalent for is refused with
//! the equivalent it has. Pure: arguments in, arguments or an error out.

/// Where Elastic Agent's container keeps its state (`STATE_PATH`'s
/// default), the directory Elastic's manifests mount from the host.
pub const ELASTIC_STATE_PATH: &str = "/usr/share/elastic-agent/state";

/// leasehold's own subcommands and flags: a command line starting with
/// one of them is leasehold's, left as it is.
const OWN: [&str; 13] = [
    "version",
    "eval",
    "inspect",
    "check",
    "run",
    "status",
    "elect",
    "help",
    "__chown-data",
    "__keep",
    "-h",
    "--help",
    "-V",
];

/// Elastic Agent's subcommands leasehold does not have, each with what to
/// use instead.
const ELASTIC_ONLY: [(&str, &str); 11] = [
    (
        "enroll",
        "leasehold has no Fleet: write a standalone policy and run it with `leasehold run -c POLICY`",
    ),
    (
        "install",
        "leasehold runs as a DaemonSet: `kubectl apply -k deploy/kubernetes/base` or the Helm chart",
    ),
    (
        "uninstall",
        "delete the DaemonSet (`kubectl delete -k deploy/kubernetes/base`)",
    ),
    (
        "upgrade",
        "change the DaemonSet's image; a rolling update hands leadership over",
    ),
    ("restart", "reload with SIGHUP, or restart the pod"),
    (
        "watch",
        "the kubelet restarts a failed pod; leasehold has no upgrade watcher",
    ),
    (
        "diagnostics",
        "`leasehold status --agent HOST:PORT` and the agent's `/status` and `/metrics`",
    ),
    (
        "logs",
        "`kubectl logs` of the agent's pod (leasehold logs to stderr)",
    ),
    (
        "otel",
        "leasehold ships OTLP itself (`type: otlp` output); it does not embed a Collector",
    ),
    (
        "component",
        "leasehold runs its inputs in process; `leasehold inspect -c POLICY` lists them",
    ),
    (
        "privileged",
        "the pod's securityContext decides leasehold's privileges",
    ),
];

/// The command line to parse: `args` itself when it is leasehold's,
/// else Elastic Agent's root or `container` command as `leasehold run`.
/// `state_path` is `STATE_PATH` from the environment, if set. An error
/// names what is not supported and what to use.
pub fn translate(args: Vec<String>, state_path: Option<&str>) -> Result<Vec<String>, String> {
    let Some(first) = args.get(1) else {
        return Ok(args);
    };
    if OWN.contains(&first.as_str()) || first == "--version" {
        return Ok(args);
    }
    if let Some((name, instead)) = ELASTIC_ONLY.iter().find(|(n, _)| n == first) {
        return Err(format!(
            "`{name}` is an Elastic Agent command leasehold does not have: {instead}"
        ));
    }
    let rest: &[String] = match first.as_str() {
        "container" => &args[2..],
        f if f.starts_with('-') => &args[1..],
        // An unknown word: the parser names it.
        _ => return Ok(args),
    };
    let mut out = vec![
        args[0].clone(),
        "run".to_string(),
        "--elastic-defaults".to_string(),
    ];
    let mut config: Option<String> = None;
    let mut path_config: Option<String> = None;
    let mut data: Option<String> = None;
    let mut it = rest.iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with('-') => (f, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let mut value = |flag: &str| -> Result<String, String> {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("Elastic Agent's `{flag}` needs a value"))
        };
        match flag {
            "-c" | "--config" | "--c" => config = Some(value(flag)?),
            // Logs go to stderr always.
            "-e" => {}
            "-d" => {
                value(flag)?;
                out.extend(["--log-level".into(), "debug".into()]);
            }
            "--path.config" => path_config = Some(value(flag)?),
            "--path.data" => data = Some(value(flag)?),
            // Only the state directory is leasehold's business; its
            // binaries and logs are not kept on disk.
            "--path.home" | "--path.logs" | "--path.downloads" | "--path.socket" => {
                value(flag)?;
            }
            "--environment" => {
                value(flag)?;
            }
            "--strict.perms" | "--develop" => {}
            _ => {
                return Err(format!(
                    "Elastic Agent's `{arg}` has no leasehold equivalent; leasehold takes Elastic's -c FILE, -e, -d SELECTORS, --path.config, --path.data (see `leasehold run --help`)"
                ));
            }
        }
    }
    let config = config.unwrap_or_else(|| "elastic-agent.yml".into());
    let config = match &path_config {
        Some(dir) if !config.starts_with('/') => format!("{}/{config}", dir.trim_end_matches('/')),
        _ => config,
    };
    out.extend(["-c".into(), config]);
    let state = state_path
        .unwrap_or(ELASTIC_STATE_PATH)
        .trim_end_matches('/')
        .to_string();
    let data = data.unwrap_or_else(|| format!("{state}/data"));
    out.extend(["--path.data".into(), data]);
    // Elastic Agent reads external inputs from `inputs.d` of its config
    // directory, which its container keeps in the state path (where the
    // manifest mounts them).
    let inputs = path_config
        .as_deref()
        .unwrap_or(&state)
        .trim_end_matches('/');
    out.extend(["--inputs-dir".into(), format!("{inputs}/inputs.d")]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        std::iter::once("leasehold")
            .chain(line.split_whitespace())
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn elastics_manifest_args_run_the_policy_with_state_under_the_mounted_path() {
        assert_eq!(
            translate(args("-c /etc/elastic-agent/agent.yml -e"), None),
            Ok(args(
                "run --elastic-defaults -c /etc/elastic-agent/agent.yml --path.data /usr/share/elastic-agent/state/data --inputs-dir /usr/share/elastic-agent/state/inputs.d"
            ))
        );
        // The image's own entrypoint form, STATE_PATH set, debug asked.
        assert_eq!(
            translate(
                args("container -e -d * --config=agent.yml --path.config /etc/ea"),
                Some("/state/")
            ),
            Ok(args(
                "run --elastic-defaults --log-level debug -c /etc/ea/agent.yml --path.data /state/data --inputs-dir /etc/ea/inputs.d"
            ))
        );
        assert_eq!(
            translate(
                args("-c a.yml --path.data /d --path.home /h -e --strict.perms=false"),
                None
            ),
            Ok(args(
                "run --elastic-defaults -c a.yml --path.data /d --inputs-dir /usr/share/elastic-agent/state/inputs.d"
            ))
        );
    }

    #[test]
    fn leaseholds_own_command_lines_are_left_as_they_are() {
        for line in [
            "",
            "run -c p.yml",
            "check p.yml",
            "--help",
            "-V",
            "--version",
            "nonsense",
        ] {
            assert_eq!(translate(args(line), None), Ok(args(line)), "{line}");
        }
    }

    #[test]
    fn what_leasehold_has_not_is_refused_naming_the_equivalent() {
        let e = translate(args("enroll --url x"), None).unwrap_err();
        assert!(
            e.contains("`enroll`") && e.contains("leasehold run -c"),
            "{e}"
        );
        let e = translate(args("install"), None).unwrap_err();
        assert!(e.contains("DaemonSet"), "{e}");
        let e = translate(args("-c a.yml --fleet-server-es x"), None).unwrap_err();
        assert!(e.contains("`--fleet-server-es`"), "{e}");
        let e = translate(args("-c"), None).unwrap_err();
        assert!(e.contains("needs a value"), "{e}");
    }
}
