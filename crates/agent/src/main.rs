use clap::Parser;

fn main() {
    leasehold::allocator::tune();
    // Elastic Agent's command line (`-c FILE -e`, `container`) runs the
    // agent too; arguments that are not text are left to the parser.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = match args
        .iter()
        .map(|a| a.to_str().map(str::to_string))
        .collect::<Option<Vec<String>>>()
    {
        Some(text) => {
            let state = std::env::var("STATE_PATH").ok();
            match leasehold::cli::elastic::translate(text, state.as_deref()) {
                Ok(translated) => leasehold::cli::Cli::parse_from(translated),
                Err(e) => {
                    eprintln!("leasehold: {e}");
                    std::process::exit(2);
                }
            }
        }
        None => leasehold::cli::Cli::parse_from(args),
    };
    std::process::exit(leasehold::cli::run(cli));
}
