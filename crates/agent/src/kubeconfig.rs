//! Kubeconfig files read as kubectl reads them (YAML 1.1 turned into the
//! typed kubeconfig), with the policy's YAML parser: the binary carries one
//! YAML parser, not two (kube's own reader brings a second, 0.4 MB of the
//! release). kube still does everything after the parse: contexts,
//! credentials, exec plugins, TLS.
//!
//! As kubectl: a file may hold several YAML documents, merged; relative
//! paths in a file are relative to its directory; `KUBECONFIG` lists files
//! merged first-wins; without it, `~/.kube/config`; failing both, the
//! in-cluster service account.

use std::path::{Path, PathBuf};

use kube::config::{KubeConfigOptions, Kubeconfig};

/// Reads one kubeconfig file. The error names the file and, for a parse
/// error, the line and column.
pub fn read(path: &Path) -> Result<Kubeconfig, String> {
    let name = path.display().to_string();
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("cannot read kubeconfig {name}: {e}"))?;
    let docs = leasehold_policy::yaml::parse_documents(&text, &name)
        .map_err(|e| format!("kubeconfig {e}"))?;
    let dir = path.parent().unwrap_or(Path::new(""));
    let mut merged: Option<Kubeconfig> = None;
    for doc in docs {
        let value = doc.to_value();
        if value == leasehold_policy::Value::Null {
            continue;
        }
        let json = serde_json::to_value(&value).map_err(|e| format!("kubeconfig {name}: {e}"))?;
        let mut kc: Kubeconfig = serde_json::from_value(json)
            .map_err(|e| format!("kubeconfig {name} is not a kubeconfig: {e}"))?;
        absolutize(&mut kc, dir);
        merged = Some(match merged {
            None => kc,
            Some(m) => m.merge(kc).map_err(|e| format!("kubeconfig {name}: {e}"))?,
        });
    }
    Ok(merged.unwrap_or_default())
}

/// The files `KUBECONFIG` lists (empty entries skipped), merged in order,
/// the first to set a value winning; `None` when it is unset or lists none.
pub fn from_env() -> Result<Option<Kubeconfig>, String> {
    let Some(value) = std::env::var_os("KUBECONFIG") else {
        return Ok(None);
    };
    let paths: Vec<PathBuf> = std::env::split_paths(&value)
        .filter(|p| !p.as_os_str().is_empty())
        .collect();
    if paths.is_empty() {
        return Ok(None);
    }
    let mut merged = Kubeconfig::default();
    for p in &paths {
        merged = merged
            .merge(read(p)?)
            .map_err(|e| format!("KUBECONFIG: merging {}: {e}", p.display()))?;
    }
    Ok(Some(merged))
}

/// `KUBECONFIG`, else `~/.kube/config`, else the in-cluster service
/// account, as kubectl and `kube::Config::infer`; with what was used, in
/// words. The error says why each source failed.
pub async fn infer() -> Result<(kube::Config, String), String> {
    let from_files = match from_env() {
        Ok(Some(kc)) => Ok((kc, "KUBECONFIG".to_string())),
        Ok(None) => match std::env::home_dir().map(|h| h.join(".kube").join("config")) {
            Some(p) => read(&p).map(|kc| (kc, p.display().to_string())),
            None => Err("no KUBECONFIG and no home directory".into()),
        },
        Err(e) => Err(e),
    };
    let files_error = match from_files {
        Ok((kc, source)) => {
            match kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await {
                Ok(mut config) => {
                    config.apply_debug_overrides();
                    return Ok((config, format!("the current context of {source}")));
                }
                Err(e) => format!("{source}: {e}"),
            }
        }
        Err(e) => e,
    };
    match kube::Config::incluster() {
        Ok(mut config) => {
            config.apply_debug_overrides();
            Ok((config, "the in-cluster service account".into()))
        }
        Err(e) => Err(format!("{files_error}; in-cluster: {e}")),
    }
}

/// Paths relative to the file's directory, as kubectl resolves them. An
/// exec plugin's command only when it has a separator: a bare name is
/// looked up in `PATH`.
fn absolutize(kc: &mut Kubeconfig, dir: &Path) {
    let abs = |p: &mut Option<String>| {
        if let Some(s) = p.as_deref()
            && Path::new(s).is_relative()
            && let Some(joined) = dir.join(s).to_str()
        {
            *p = Some(joined.to_owned());
        }
    };
    for c in kc.clusters.iter_mut().filter_map(|n| n.cluster.as_mut()) {
        abs(&mut c.certificate_authority);
    }
    for a in kc
        .auth_infos
        .iter_mut()
        .filter_map(|n| n.auth_info.as_mut())
    {
        abs(&mut a.client_certificate);
        abs(&mut a.client_key);
        abs(&mut a.token_file);
        if let Some(exec) = a.exec.as_mut()
            && exec
                .command
                .as_deref()
                .is_some_and(|c| c.contains(std::path::MAIN_SEPARATOR))
        {
            abs(&mut exec.command);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    const ONE: &str = r#"apiVersion: v1
kind: Config
current-context: dev
clusters:
  - name: c1
    cluster:
      server: https://127.0.0.1:6443
      certificate-authority: ca.crt
      insecure-skip-tls-verify: false
contexts:
  - name: dev
    context: {cluster: c1, user: u1, namespace: team-a}
users:
  - name: u1
    user:
      client-certificate: certs/u1.crt
      client-key: /abs/u1.key
      tokenFile: token
      exec:
        apiVersion: client.authentication.k8s.io/v1
        command: ./bin/plugin
        interactiveMode: Never
  - name: u2
    user:
      exec: {apiVersion: client.authentication.k8s.io/v1, command: aws, interactiveMode: Never}
"#;

    #[test]
    fn reads_a_kubeconfig_with_paths_relative_to_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "config", ONE);
        let kc = read(&p).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some("dev"));
        let d = dir.path().to_str().unwrap();
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        assert_eq!(cluster.certificate_authority, Some(format!("{d}/ca.crt")));
        assert_eq!(cluster.insecure_skip_tls_verify, Some(false));
        let u1 = kc.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(u1.client_certificate, Some(format!("{d}/certs/u1.crt")));
        assert_eq!(u1.client_key.as_deref(), Some("/abs/u1.key"));
        assert_eq!(u1.token_file, Some(format!("{d}/token")));
        let cmd = u1.exec.as_ref().unwrap().command.clone();
        assert_eq!(cmd, Some(format!("{d}/./bin/plugin")));
        let u2 = kc.auth_infos[1].auth_info.as_ref().unwrap();
        assert_eq!(u2.exec.as_ref().unwrap().command.as_deref(), Some("aws"));
        let ctx = kc.contexts[0].context.as_ref().unwrap();
        assert_eq!(ctx.namespace.as_deref(), Some("team-a"));
    }

    #[test]
    fn documents_of_a_file_and_files_of_kubeconfig_merge_first_wins() {
        let dir = tempfile::tempdir().unwrap();
        let two = "current-context: a\nclusters: [{name: c, cluster: {server: https://a}}]\n---\n\
                   current-context: b\nclusters: [{name: c, cluster: {server: https://b}}, {name: d, cluster: {server: https://d}}]\n";
        let p = write(dir.path(), "two", two);
        let kc = read(&p).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some("a"));
        let servers: Vec<_> = kc
            .clusters
            .iter()
            .map(|c| c.cluster.as_ref().unwrap().server.clone().unwrap())
            .collect();
        assert_eq!(servers, ["https://a", "https://d"]);
        let empty = read(&write(dir.path(), "empty", "")).unwrap();
        assert!(empty.clusters.is_empty() && empty.current_context.is_none());
    }

    #[test]
    fn errors_name_the_file_and_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let missing = read(&dir.path().join("nope")).unwrap_err();
        assert!(
            missing.starts_with("cannot read kubeconfig ") && missing.contains("nope"),
            "{missing}"
        );
        let bad = read(&write(dir.path(), "bad", "clusters: [\n")).unwrap_err();
        assert!(
            bad.contains("bad:") && bad.contains("invalid YAML"),
            "{bad}"
        );
        let wrong = read(&write(dir.path(), "wrong", "clusters: 3\n")).unwrap_err();
        assert!(wrong.contains("wrong is not a kubeconfig"), "{wrong}");
    }
}
