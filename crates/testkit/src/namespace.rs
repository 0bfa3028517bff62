//! Per-test namespaces with lease rights for every agent, revocable one agent
//! at a time, so tests that take rights away do not disturb each other.

use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::{Api, Client};

use crate::plane::{BASE_NAMESPACE, ControlPlane};

/// Verbs of the Role `controlplane/up` creates, and of [`ControlPlane::namespace`].
pub const LEASE_VERBS: &[&str] = &["get", "list", "watch", "create", "update", "patch"];

/// Name of the Role in every test namespace.
pub const ROLE: &str = "leasehold-lease";

/// A namespace of one test. Namespaces are not deleted afterwards: a bare API
/// server has no namespace controller to finish the deletion, and a unique
/// name per test already keeps tests apart.
pub struct TestNamespace {
    name: String,
    admin: Client,
    agents: u32,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

impl TestNamespace {
    pub(crate) async fn create(
        plane: &ControlPlane,
        prefix: &str,
        verbs: &[&str],
    ) -> Result<TestNamespace> {
        let admin = plane.admin_client().await?;
        let name = format!(
            "{}-{}-{:04x}",
            prefix
                .to_lowercase()
                .replace(|c: char| !c.is_ascii_alphanumeric(), "-"),
            COUNTER.fetch_add(1, Ordering::Relaxed),
            rand::random::<u16>()
        );
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(admin.clone())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        let role = Role {
            metadata: ObjectMeta {
                name: Some(ROLE.into()),
                ..Default::default()
            },
            rules: Some(vec![PolicyRule {
                api_groups: Some(vec!["coordination.k8s.io".into()]),
                resources: Some(vec!["leases".into()]),
                verbs: verbs.iter().map(|v| v.to_string()).collect(),
                ..Default::default()
            }]),
        };
        Api::<Role>::namespaced(admin.clone(), &name)
            .create(&PostParams::default(), &role)
            .await
            .with_context(|| format!("creating Role {ROLE} in {name}"))?;
        let this = TestNamespace {
            name,
            admin,
            agents: plane.agents(),
        };
        for k in 1..=this.agents {
            this.grant(k).await?;
        }
        Ok(this)
    }

    /// The namespace `controlplane/up` created; revoking there is what an
    /// operator deleting `leasehold-lease-agent-K` does.
    pub(crate) async fn base(plane: &ControlPlane) -> Result<TestNamespace> {
        Ok(TestNamespace {
            name: BASE_NAMESPACE.into(),
            admin: plane.admin_client().await?,
            agents: plane.agents(),
        })
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Name of agent `k`'s RoleBinding in this namespace.
    pub fn binding_name(k: u32) -> String {
        format!("{ROLE}-agent-{k}")
    }

    /// Binds the Role to agent `k` (idempotent).
    pub async fn grant(&self, k: u32) -> Result<()> {
        let binding = RoleBinding {
            metadata: ObjectMeta {
                name: Some(Self::binding_name(k)),
                ..Default::default()
            },
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "Role".into(),
                name: ROLE.into(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".into(),
                name: format!("agent-{k}"),
                namespace: Some(BASE_NAMESPACE.into()),
                ..Default::default()
            }]),
        };
        match self
            .bindings()
            .create(&PostParams::default(), &binding)
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(e) => {
                Err(e).with_context(|| format!("granting agent-{k} lease rights in {}", self.name))
            }
        }
    }

    /// Deletes agent `k`'s RoleBinding (idempotent). The API server's
    /// authorizer sees it within milliseconds, not synchronously.
    pub async fn revoke(&self, k: u32) -> Result<()> {
        match self
            .bindings()
            .delete(&Self::binding_name(k), &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => {
                Err(e).with_context(|| format!("revoking agent-{k} lease rights in {}", self.name))
            }
        }
    }

    fn bindings(&self) -> Api<RoleBinding> {
        Api::namespaced(self.admin.clone(), &self.name)
    }
}
