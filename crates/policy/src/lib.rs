//! The policy language of leasehold: a pure function from (policy, provider
//! variables) to the set of inputs that should run.
//!
//! Policies are Elastic Agent standalone policies: `agent`, `providers`,
//! `inputs`, `outputs`. This crate does no I/O; callers pass text and a file
//! name (used only in messages) and get back values or errors that name
//! file, line and column.

pub mod cond;
pub mod dynamic;
pub mod elections;
pub mod error;
pub mod exec_script;
pub mod fnv;
pub mod incremental;
pub mod inputs_d;
pub mod lint;
pub mod model;
pub mod providers;
pub mod render;
pub mod subst;
pub mod value;
pub mod vars;
pub mod yaml;

pub use cond::{CondError, Condition, EvalOptions};
pub use error::{PolicyError, Pos};
pub use lint::{Diagnostic, Severity, check};
pub use model::{Node, NodeKind, Policy};
pub use render::{
    Dropped, Rendered, RenderedInput, ShardedElection, render, render_sharded, render_with,
};
pub use value::{Map, Value};
pub use vars::Vars;
