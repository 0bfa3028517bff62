//! The `eval`, `inspect` and `check` command contracts.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

fn leasehold(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(args)
        .output()
        .expect("run leasehold")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn example(name: &str) -> String {
    format!("{}/../../examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, content: &str) -> TempFile {
        // Tests run in parallel and several write a file of the same name:
        // each file gets a directory of its own so one test's cleanup cannot
        // remove another's input.
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("leasehold-policy-cli-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, content).unwrap();
        TempFile(p)
    }
    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

fn leader_vars(leader: bool) -> TempFile {
    TempFile::new(
        &format!("vars-{leader}.json"),
        &format!(
            r#"{{"env": {{"HOSTNAME": "node-1", "NODE_NAME": "node-1"}}, "kubernetes_leaderelection": {{"leader": {leader}, "holder": "pod-a"}}}}"#
        ),
    )
}

#[test]
fn eval_prints_true_or_false() {
    let vars = leader_vars(true);
    let cases = [
        (
            vec![
                "eval",
                "--vars",
                vars.path(),
                "${kubernetes_leaderelection.leader} == true",
            ],
            "true\n",
        ),
        (
            vec![
                "eval",
                "--vars",
                vars.path(),
                "${kubernetes_leaderelection.leader} == 'true'",
            ],
            "false\n",
        ),
        (
            vec![
                "eval",
                "--vars",
                vars.path(),
                "startsWith(${env.HOSTNAME}, 'node')",
            ],
            "true\n",
        ),
        (vec!["eval", "1 + 1 == 2"], "true\n"),
        (vec!["eval", "${not.there} == 1"], "false\n"),
        (vec!["eval", "--", "-1 < 0"], "true\n"),
        (vec!["eval", "--strict", "--", "-2 * 2 == -4"], "true\n"),
    ];
    for (args, want) in cases {
        let o = leasehold(&args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        assert_eq!(stdout(&o), want, "{args:?}");
    }
}

#[test]
fn eval_errors_exit_2_with_a_column() {
    let cases: Vec<Vec<&str>> = vec![
        vec!["eval", "1 =="],
        vec!["eval", "1 == 'a'"],
        vec!["eval", "length('x')"],
        vec!["eval", "--strict", "${not.there} == 1"],
        vec!["eval", "--vars", "/nonexistent/vars.json", "true"],
    ];
    for args in cases {
        let o = leasehold(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stdout(&o).is_empty(), "{args:?}");
        assert!(stderr(&o).contains("error"), "{args:?}: {}", stderr(&o));
    }
    let o = leasehold(&["eval", "true and 1 == 'x'"]);
    assert!(stderr(&o).contains("column 12"), "{}", stderr(&o));
    let bad = TempFile::new("bad.json", "[1, 2]");
    let o = leasehold(&["eval", "--vars", bad.path(), "true"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("JSON object"), "{}", stderr(&o));
}

#[test]
fn inspect_json_contract() {
    for (leader, running, dropped) in [
        (
            true,
            vec!["node-metrics", "cluster-state", "events"],
            vec![],
        ),
        (false, vec!["node-metrics", "events"], vec!["cluster-state"]),
    ] {
        let vars = leader_vars(leader);
        let o = leasehold(&[
            "inspect",
            "-c",
            &example("leader-election.yaml"),
            "--vars",
            vars.path(),
            "--format",
            "json",
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        let ids: Vec<&str> = doc["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, running, "leader={leader}");
        let d: Vec<&str> = doc["dropped"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["id"].as_str().unwrap())
            .collect();
        assert_eq!(d, dropped);
        for item in doc["dropped"].as_array().unwrap() {
            assert!(item["reason"].as_str().unwrap().contains("false"));
            assert_eq!(item.as_object().unwrap().len(), 2);
        }
    }
}

#[test]
fn inspect_yaml_renders_any_input_type() {
    let p = TempFile::new(
        "any.yaml",
        "inputs:\n  - id: x\n    type: does-not-exist/anywhere\n    host: ${env.HOSTNAME}\n",
    );
    let vars = leader_vars(true);
    let o = leasehold(&["inspect", "-c", p.path(), "--vars", vars.path()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("\"inputs\":"), "{out}");
    assert!(out.contains("\"host\": \"node-1\""), "{out}");
    assert!(
        out.contains("\"type\": \"does-not-exist/anywhere\""),
        "{out}"
    );
}

#[test]
fn inspect_prints_no_secret_setting_and_no_url_credentials() {
    let p = TempFile::new(
        "secrets.yaml",
        "inputs:\n  - id: x\n    type: prometheus/metrics\n    hosts: ['http://scraper:url-pw-1@node:9100']\n    password: 4242424242\n    headers: {Authorization: 'Bearer tok-3', X-Tenant: blue}\n",
    );
    let vars = leader_vars(true);
    for format in ["json", "yaml"] {
        let o = leasehold(&[
            "inspect",
            "-c",
            p.path(),
            "--vars",
            vars.path(),
            "--format",
            format,
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let out = stdout(&o);
        for secret in ["url-pw-1", "4242424242", "tok-3", "scraper"] {
            assert!(!out.contains(secret), "{format}: {secret} in:\n{out}");
        }
        assert!(
            out.contains("http://node:9100") && out.contains("blue"),
            "{out}"
        );
        assert!(out.contains("[redacted]"), "{out}");
    }
}

#[test]
fn inspect_render_and_load_errors_exit_2() {
    let bad_cond = TempFile::new(
        "badcond.yaml",
        "inputs:\n  - type: t\n    condition: 1 == 'a'\n",
    );
    let o = leasehold(&["inspect", "-c", bad_cond.path(), "--format", "json"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("badcond.yaml:3:18"), "{}", stderr(&o));
    let bad_yaml = TempFile::new("bad.yaml", "inputs: [\n");
    let o = leasehold(&["inspect", "-c", bad_yaml.path()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("bad.yaml:"), "{}", stderr(&o));
    let o = leasehold(&["inspect", "-c", "/nonexistent/policy.yaml"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn check_passes_good_policies_and_warns_on_the_proposal() {
    let o = leasehold(&["check", "-c", &example("leader-election.yaml")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("ok"));

    let o = leasehold(&["check", "-c", &example("leader-election-proposal.yaml")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("leader-election-proposal.yaml:29:"), "{err}");
    assert!(err.contains("warning"), "{err}");
    assert!(err.contains("always false"), "{err}");
    assert!(err.contains("== true"), "{err}");
}

#[test]
fn check_lists_every_problem_and_exits_2() {
    let p = TempFile::new(
        "problems.yaml",
        "providers:\n  kubernetes_leaderelection:\n    leader_leaseduration: 5\ninputs:\n  - id: a\n    condition: 1 ==\n  - type: t\n    x: ${oops\noutputs:\n  default: {type: console}\n",
    );
    let o = leasehold(&["check", "-c", p.path()]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    for needle in [
        "problems.yaml:3:",
        "problems.yaml:5:",
        "problems.yaml:6:",
        "problems.yaml:7:11: error: input `type`: unknown input type `t`",
        "problems.yaml:8:",
        "5 error(s)",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
}

#[test]
fn an_empty_variable_reference_fails_inspect_and_check_with_its_location() {
    let p = TempFile::new(
        "empty-var.yaml",
        "inputs:\n  - id: a\n    type: t\n    host: \"node-${}\"\noutputs:\n  default: {type: console}\n",
    );
    let o = leasehold(&["inspect", "-c", p.path()]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    let err = stderr(&o);
    assert!(err.contains("empty-var.yaml:4:17:"), "{err}");
    assert!(err.contains("empty variable reference"), "{err}");

    let o = leasehold(&["check", "-c", p.path()]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("empty-var.yaml:4:17: error:"), "{err}");
    assert!(err.contains("unknown input type `t`"), "{err}");
    assert!(err.contains("2 error(s)"), "{err}");
}

#[test]
fn check_warns_that_it_cannot_judge_a_lease_timing_from_a_variable_and_judges_it_with_vars() {
    let p = TempFile::new(
        "timings.yml",
        "providers:\n  kubernetes_leaderelection:\n    leader_leaseduration: ${env.LEASE}\n    leader_renewdeadline: 20\noutputs:\n  default: {type: console}\ninputs:\n  - id: a\n    type: exec\n    command: [echo, hi]\n    condition: ${kubernetes_leaderelection.leader} == true\n",
    );
    let o = leasehold(&["check", "-c", p.path()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(":3:27: warning: `leader_leaseduration` is \"${env.LEASE}\": whether it is whole seconds"),
        "{}",
        stderr(&o)
    );
    for (value, error) in [
        (
            "15s",
            "`leader_leaseduration` must be whole seconds, found \"15s\"",
        ),
        (
            "20",
            "leader_leaseduration 20, leader_renewdeadline 20, leader_retryperiod 2",
        ),
    ] {
        let vars = TempFile::new(
            "vars.json",
            &format!(r#"{{"env": {{"LEASE": "{value}"}}}}"#),
        );
        let o = leasehold(&["check", "-c", p.path(), "--vars", vars.path()]);
        assert_eq!(o.status.code(), Some(2), "{value}: {}", stderr(&o));
        assert!(stderr(&o).contains(error), "{value}: {}", stderr(&o));
    }
    let vars = TempFile::new("vars.json", r#"{"env": {"LEASE": "30"}}"#);
    let o = leasehold(&["check", "-c", p.path(), "--vars", vars.path()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
}

/// Keys of Elastic's standalone Kubernetes manifest and Helm chart that
/// used to stop `check`: the output's `ssl.ca_trusted_fingerprint` (from a
/// variable, or empty), `preset` and `loadbalance`, the inputs' `meta` (the
/// integration package), and a Windows-only `winlog` input, which a Linux
/// agent does not run and says so.
#[test]
fn check_takes_elastics_output_keys_package_meta_and_a_windows_only_input() {
    let p = TempFile::new(
        "manifest-shaped.yml",
        "outputs:\n  default:\n    type: elasticsearch\n    hosts: ['${env.ES_HOST}']\n    api_key: ${env.API_KEY}\n    ssl.ca_trusted_fingerprint: ${env.CA_TRUSTED}\ninputs:\n  - id: files\n    type: filestream\n    meta: {package: {name: system, version: 1.0.0}}\n    paths: [/var/log/syslog]\n  - id: windows-events\n    type: winlog\n    meta: {package: {name: system, version: 1.0.0}}\n    streams:\n      - data_stream: {type: logs, dataset: system.application}\n        condition: '${host.platform} == ''windows'''\n",
    );
    let o = leasehold(&["check", "-c", p.path()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("manifest-shaped.yml:13:11: warning: input `type`: input type `winlog` reads Windows-only sources"),
        "{err}"
    );
    assert!(!err.contains("meta"), "{err}");
    assert!(!err.contains("ca_trusted_fingerprint"), "{err}");

    // A preset and `loadbalance` load; what is replaced or not acted on
    // is said.
    let tuned = TempFile::new(
        "tuned.yml",
        "outputs:\n  default:\n    type: elasticsearch\n    hosts: ['http://localhost:9200']\n    preset: throughput\n    worker: 2\n    loadbalance: true\ninputs: []\n",
    );
    let o = leasehold(&["check", "-c", tuned.path()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(
            "tuned.yml:5:13: warning: `outputs.default.preset`: preset `throughput` replaces worker"
        ),
        "{err}"
    );
    assert!(
        err.contains(
            "tuned.yml:7:18: warning: `outputs.default.loadbalance`: accepted, not acted on"
        ),
        "{err}"
    );

    // A fingerprint that is not one is an error naming the key.
    let bad = TempFile::new(
        "bad-pin.yml",
        "outputs:\n  default:\n    type: elasticsearch\n    hosts: ['http://localhost:9200']\n    ssl.ca_trusted_fingerprint: 'not-a-sha256'\ninputs: []\n",
    );
    let o = leasehold(&["check", "-c", bad.path()]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("`outputs.default.ssl.ca_trusted_fingerprint`")
            && err.contains("64 hexadecimal digits"),
        "{err}"
    );
}

#[test]
fn check_takes_elastics_kubernetes_provider_and_names_what_it_does_not_do() {
    let p = TempFile::new(
        "provider.yml",
        "providers:\n  kubernetes:\n    node: ${NODE_NAME}\n    scope: node\n    hints.enabled: true\n    add_resource_metadata:\n      cronjob: true\noutputs:\n  default: {type: console}\ninputs:\n  - id: container-log-${kubernetes.pod.name}-${kubernetes.container.id}\n    type: filestream\n    streams:\n      - parsers: [{container: ~}]\n        paths: ['/var/log/containers/*${kubernetes.container.id}.log']\n",
    );
    let o = leasehold(&["check", "-c", p.path()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    for said in [
        "provider.yml:7:16: warning: `providers.kubernetes.add_resource_metadata.cronjob` has no effect",
        "provider.yml:11:5: warning: this input reads `${kubernetes.pod.name}`, but with `providers.kubernetes.hints.enabled: true` the provider publishes only `kubernetes.hints.*`",
    ] {
        assert!(err.contains(said), "{said}: {err}");
    }
    assert!(!err.contains("not supported"), "{err}");
    assert!(!err.contains("will not resolve"), "{err}");

    let bad = TempFile::new(
        "bad-provider.yml",
        "providers:\n  kubernetes:\n    scope: region\n    cleanup_timeout: ${env.CLEANUP}\noutputs:\n  default: {type: console}\ninputs: []\n",
    );
    let o = leasehold(&["check", "-c", bad.path()]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains(
            "bad-provider.yml:3:12: error: `providers.kubernetes.scope`: must be `node` or `cluster`"
        ),
        "{err}"
    );
    // A value from a variable is judged when the agent runs.
    assert!(!err.contains("cleanup_timeout"), "{err}");
}

/// Elastic's standalone Kubernetes policy, in a shape of our own with all
/// its keys (`tests/policies/elastic-standalone-shape.yml`): `check`
/// accepts it, and warns only about the Windows-only input.
#[test]
fn check_accepts_elastics_standalone_kubernetes_policy_shape() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/policies/elastic-standalone-shape.yml"
    );
    let o = leasehold(&["check", "-c", path]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains(": warning: ")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains("input type `winlog` reads Windows-only sources"),
        "{err}"
    );
    assert!(!err.contains(": error: "), "{err}");
}

/// `check --inputs-dir` checks the inputs of every `*.yml` file there with
/// the policy, and each problem names the file it is in, with its own line.
#[test]
fn check_names_the_file_of_inputs_a_problem_is_in() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("agent.yml");
    std::fs::write(
        &policy,
        "outputs:\n  default: {type: console}\ninputs:\n  - id: main\n    type: exec\n    command: [date]\n",
    )
    .unwrap();
    let inputs = dir.path().join("inputs.d");
    std::fs::create_dir(&inputs).unwrap();
    std::fs::write(
        inputs.join("good.yml"),
        "inputs:\n  - id: good\n    type: exec\n    command: [date]\n",
    )
    .unwrap();
    std::fs::write(
        inputs.join("typo.yml"),
        "# a comment\ninputs:\n  - id: typo\n    type: exce\n",
    )
    .unwrap();
    let check = || {
        leasehold(&[
            "check",
            "-c",
            policy.to_str().unwrap(),
            "--inputs-dir",
            inputs.to_str().unwrap(),
        ])
    };
    let o = check();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let at = format!(
        "{}:4:11: error: input `type`: unknown input type `exce`",
        inputs.join("typo.yml").display()
    );
    assert!(err.contains(&at), "{err}");
    std::fs::write(
        inputs.join("typo.yml"),
        "inputs:\n  - id: typo\n    type: exec\n    command: [date]\n",
    )
    .unwrap();
    let o = check();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("ok (3 input(s)"),
        "{o:?}"
    );
}
