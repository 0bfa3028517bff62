//! Command-line interface of the `leasehold` binary. Each subcommand lives in
//! its own module and returns the process exit code.

use clap::{Parser, Subcommand};

pub mod check;
pub mod elect;
pub mod eval;
pub mod inspect;
pub mod run;
pub mod status;

/// Top-level command line.
#[derive(Debug, Parser)]
#[command(
    name = "leasehold",
    version,
    about = "Kubernetes-native agent with Lease-based leader election"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands of `leasehold`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the version of leasehold.
    Version,
    /// Evaluate a condition; prints `true` or `false` (exit 0), or an error (exit 2).
    Eval(eval::EvalArgs),
    /// Render a policy and print the inputs it would run and those it drops.
    Inspect(inspect::InspectArgs),
    /// Validate a policy: exit 0, or 2 listing every problem with its location.
    Check(check::CheckArgs),
    /// Run the agent: the policy's inputs, leader-gated ones only while leading.
    Run(run::RunArgs),
    /// Which agent leads, and is it healthy: judge a Lease, or a running agent's /status.
    Status(status::StatusArgs),
    /// Join a Lease election; print a JSON line per change; run CMD only while leading.
    Elect(elect::ElectArgs),
    /// Holds one term's command tree for `elect` (internal, not for users).
    #[command(name = "__keep", hide = true)]
    Keep(elect::KeepArgs),
}

/// Runs a parsed command line and returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    match cli.command {
        Command::Version => {
            println!("leasehold {}", env!("CARGO_PKG_VERSION"));
            0
        }
        Command::Eval(args) => eval::run(&args),
        Command::Inspect(args) => inspect::run(&args),
        Command::Check(args) => check::run(&args),
        Command::Run(args) => run::run(&args),
        Command::Status(args) => status::run(&args),
        Command::Elect(args) => elect::run(&args),
        Command::Keep(args) => elect::keep(&args),
    }
}
