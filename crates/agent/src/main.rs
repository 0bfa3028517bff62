use clap::Parser;

fn main() {
    let cli = leasehold::cli::Cli::parse();
    std::process::exit(leasehold::cli::run(cli));
}
