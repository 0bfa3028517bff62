//! A real kube-apiserver and etcd for tests, with a client per identity and
//! the faults leader election must survive.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use leasehold_testkit::ControlPlane;
//! let plane = ControlPlane::shared();
//! let ns = plane.namespace("my-test").await?;
//! let agent = plane.agent_client(1).await?;
//! // ... run a candidate as agent 1 in `ns.name()` ...
//! ns.revoke(1).await?; // agent 1 loses its lease rights there
//! # let _ = agent; Ok(()) }
//! ```
//!
//! The binaries are built from the Go module proxy by `controlplane/` and
//! cached outside the repository; the first test run on a machine builds them.

pub mod candidates;
mod ksm;
mod lease;
mod load;
mod namespace;
pub mod node;
pub mod objects;
pub mod overlap;
mod plane;
mod process;
mod proxy;
pub mod simulated;
pub mod sinks;
pub mod tools;
pub mod work;

pub use ksm::{KubeStateMetrics, SCRAPE_TIMEOUT};
pub use lease::{LeaseAdmin, LeaseView};
pub use load::CpuLoad;
pub use namespace::{LEASE_VERBS, ROLE, TestNamespace};
pub use plane::{AGENTS, BASE_NAMESPACE, Component, ControlPlane};
pub use process::process_running;
pub use proxy::{Fault, FaultProxy};
