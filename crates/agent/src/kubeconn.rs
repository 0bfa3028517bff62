//! Connecting to the API server and the defaults a pod provides (identity,
//! namespace), shared by `elect` and `run`.

use std::path::Path;

/// The pod name (`POD_NAME`), else the hostname.
pub fn default_identity() -> Option<String> {
    let env = std::env::var("POD_NAME").ok().filter(|s| !s.is_empty());
    env.or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    })
    .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
}

/// The pod's namespace (service account file, then `POD_NAMESPACE`),
/// else `default`.
pub fn default_namespace() -> String {
    const SA: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
    std::fs::read_to_string(SA)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| {
            std::env::var("POD_NAMESPACE")
                .ok()
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| "default".into())
}

/// The API client and, for error messages, the server URL and who we are.
pub struct Connection {
    /// The client.
    pub client: kube::Client,
    /// The API server URL.
    pub server: String,
    /// Who we are, in words (kubeconfig user or inferred credentials).
    pub user: String,
}

/// Builds the client. Every problem here is a usage error (exit 2) with a
/// hint, since nothing can work until the configuration is fixed.
pub async fn connect(kubeconfig: Option<&Path>) -> Result<Connection, String> {
    let (config, user) = match kubeconfig {
        Some(path) => {
            let kc = crate::kubeconfig::read(path)
                .map_err(|e| format!("{e}; pass --kubeconfig with a readable kubeconfig file"))?;
            let context = kc.current_context.clone().unwrap_or_default();
            let user = kc
                .contexts
                .iter()
                .find(|c| c.name == context)
                .and_then(|c| c.context.as_ref())
                .and_then(|c| c.user.clone())
                .unwrap_or_default();
            let config = kube::Config::from_custom_kubeconfig(
                kc,
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .map_err(|e| {
                format!(
                    "kubeconfig {}: {e}; check that current-context names a context with a cluster and a user",
                    path.display()
                )
            })?;
            (
                config,
                format!("user {user:?} of kubeconfig {}", path.display()),
            )
        }
        None => crate::kubeconfig::infer().await.map_err(|e| {
            format!(
                "no Kubernetes configuration found: {e}; pass --kubeconfig, set KUBECONFIG, or run in a pod with a service account"
            )
        })?,
    };
    let server = config.cluster_url.to_string();
    let client = kube::Client::try_from(config).map_err(|e| format!("building the client: {e}"))?;
    Ok(Connection {
        client,
        server,
        user,
    })
}
