//! The leasehold agent: providers, the input runtime, inputs, outputs and CLI.

pub mod allocator;
pub mod cli;
pub mod inputs;
pub mod kubeconfig;
pub mod kubeconn;
pub mod kubeobj;
pub mod kubewatch;
pub mod logtap;
pub mod monitor;
pub mod outputs;
pub mod owner_only;
pub mod pipeline;
pub mod redact;
pub mod runtime;
pub mod settings;
pub mod tls;
pub mod units;
