//! The leasehold agent: providers, the input runtime, inputs, outputs and CLI.

pub mod cli;
