//! Command-line interface of the `leasehold` binary. Each subcommand lives in
//! its own module and returns the process exit code.

use clap::{Parser, Subcommand};

pub mod check;
pub mod elastic;
pub mod elect;
pub mod eval;
mod fleet;
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
    /// Hands the data directory to the agent's uid (the Helm chart's root
    /// init container for a hostPath data volume; internal).
    #[command(name = "__chown-data", hide = true)]
    ChownData(ChownDataArgs),
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
        Command::ChownData(args) => chown_data(&args),
    }
}

/// `__chown-data DIR UID GID`.
#[derive(Debug, clap::Args)]
pub struct ChownDataArgs {
    dir: std::path::PathBuf,
    uid: u32,
    gid: u32,
}

/// Makes `dir` (created if missing) owned by `uid:gid`, mode 0700: the
/// agent's queues and registry are its own. Runs in an init container with
/// `CAP_CHOWN` alone: the mode is set while the directory is still root's
/// (changing another user's mode needs `CAP_FOWNER`), then it is handed
/// over; a directory already handed over is left as it is.
fn chown_data(args: &ChownDataArgs) -> i32 {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let hand_over = || -> std::io::Result<()> {
        std::fs::create_dir_all(&args.dir)?;
        let meta = std::fs::metadata(&args.dir)?;
        if meta.permissions().mode() & 0o7777 != 0o700 {
            std::fs::set_permissions(&args.dir, std::fs::Permissions::from_mode(0o700))?;
        }
        if meta.uid() != args.uid || meta.gid() != args.gid {
            std::os::unix::fs::chown(&args.dir, Some(args.uid), Some(args.gid))?;
        }
        Ok(())
    };
    let result = hand_over();
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!(
                "leasehold: cannot hand {} to {}:{}: {e}",
                args.dir.display(),
                args.uid,
                args.gid
            );
            1
        }
    }
}
