//! Whether a process runs, for processes a test cannot wait on (not its
//! children, such as the control plane or a command orphaned by its parent).

/// True if `pid` exists and is not a zombie: an exited process its new
/// parent has not reaped yet no longer runs anything.
pub fn process_running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            stat.rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().next())
                != Some("Z")
        })
        .unwrap_or(false)
}
