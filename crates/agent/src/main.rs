use clap::Parser;

fn main() {
    limit_malloc_arenas();
    let cli = leasehold::cli::Cli::parse();
    std::process::exit(leasehold::cli::run(cli));
}

/// glibc's tuning for a long-running agent with bursty large buffers.
///
/// - Arenas: glibc gives threads that allocate at once arenas of their own
///   (up to eight per core) and keeps what each freed: an agent whose
///   scrapes and file reads run on several threads holds far more than it
///   uses (80 MiB instead of 66 for Elastic's policy shape,
///   `bench/run-cluster`). Two arenas, unless `MALLOC_ARENA_MAX` is set.
/// - Large buffers (a scrape's body, a parsed exposition, a bulk request):
///   glibc maps them apart and unmaps them when freed, but after the first
///   such free it raises that threshold to the buffer's size, and from then
///   on they come from the heap, which keeps the pages. A fixed 256 KiB
///   threshold returns them every time, unless `MALLOC_MMAP_THRESHOLD_` is
///   set.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
            // SAFETY: mallopt only changes the allocator's tuning; called
            // before any other thread exists.
            unsafe {
                libc::mallopt(libc::M_ARENA_MAX, 2);
            }
        }
        if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
            // SAFETY: as above.
            unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
            }
        }
    }
}
