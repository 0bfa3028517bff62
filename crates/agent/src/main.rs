use clap::Parser;

fn main() {
    limit_malloc_arenas();
    let cli = leasehold::cli::Cli::parse();
    std::process::exit(leasehold::cli::run(cli));
}

/// glibc gives threads that allocate at once arenas of their own (up to
/// eight per core) and keeps what each freed: an agent whose scrapes and
/// file reads run on several threads holds far more than it uses (80 MiB
/// instead of 66 for Elastic's policy shape, `bench/run-cluster`). Two
/// arenas, unless the user set `MALLOC_ARENA_MAX` themselves.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only changes the allocator's tuning; called
        // before any other thread exists.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}
