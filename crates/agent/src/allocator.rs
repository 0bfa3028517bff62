//! glibc's allocator, tuned for a long-running agent with bursty large
//! buffers (no-ops with other allocators).

/// At start, before any other thread exists: two arenas.
///
/// glibc gives threads that allocate at once arenas of their own (up to
/// eight per core) and keeps what each freed: an agent whose scrapes and
/// file reads run on several threads holds far more than it uses (80 MiB
/// instead of 66 for Elastic's policy shape, `bench/run-cluster`). Two
/// arenas, unless the user set `MALLOC_ARENA_MAX` themselves.
pub fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only changes the allocator's tuning; called
        // before any other thread exists.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

/// Hands the pages of freed memory back to the system, after a burst of
/// large buffers (a scrape of megabytes) that will not be needed until
/// the next one. glibc keeps freed memory for reuse and, after the first
/// large buffer is freed, serves the next ones from its heap instead of
/// mapping them apart: without this, an agent's resident memory stays at
/// its largest scrape's peak.
pub fn release_free() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages; it is thread-safe.
    unsafe {
        libc::malloc_trim(0);
    }
}
