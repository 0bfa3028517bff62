use clap::Parser;

fn main() {
    leasehold::allocator::tune();
    let cli = leasehold::cli::Cli::parse();
    std::process::exit(leasehold::cli::run(cli));
}
