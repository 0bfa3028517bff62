//! Files and directories only the agent's user may read: what the agent
//! keeps under its data path (disk queue segments, their `ack`, the
//! filestream registry) holds event contents and read positions, so it is
//! created `0600` in directories created `0700`, like the `file` output's
//! files, whatever the umask allows.

use std::fs::{DirBuilder, File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Mode of the files created.
pub const FILE_MODE: u32 = 0o600;
/// Mode of the directories created.
pub const DIR_MODE: u32 = 0o700;

/// Creates `dir` and its missing parents `0700`; existing ones are left
/// as they are (an operator may have chosen their modes).
pub fn create_dir_all(dir: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(DIR_MODE).create(dir)
}

/// Opens `path` for appending, creating it `0600` when missing.
pub fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(FILE_MODE)
        .open(path)
}

/// Creates (or empties) `path` for writing, `0600` even when a file left
/// there before had other modes: it is about to replace a private file by
/// rename.
pub fn create(path: &Path) -> io::Result<File> {
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(FILE_MODE)
        .open(path)?;
    if f.metadata()?.permissions().mode() & 0o777 != FILE_MODE {
        f.set_permissions(Permissions::from_mode(FILE_MODE))?;
    }
    Ok(f)
}

/// Writes `bytes` to a new `0600` file at `path` (see [`create`]).
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    create(path)?.write_all(bytes)
}

/// `path`'s permission bits, for tests.
#[cfg(test)]
pub fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).map_or(0, |m| m.permissions().mode() & 0o777)
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    #[test]
    fn files_are_0600_and_new_directories_0700_and_a_leftover_is_tightened() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("a/b");
        create_dir_all(&deep).unwrap();
        assert_eq!(mode_of(&dir.path().join("a")), 0o700);
        assert_eq!(mode_of(&deep), 0o700);
        open_append(&deep.join("seg")).unwrap();
        assert_eq!(mode_of(&deep.join("seg")), 0o600);
        let tmp = deep.join("tmp");
        fs::write(&tmp, b"old").unwrap();
        fs::set_permissions(&tmp, Permissions::from_mode(0o644)).unwrap();
        write(&tmp, b"new").unwrap();
        assert_eq!(mode_of(&tmp), 0o600);
        assert_eq!(fs::read(&tmp).unwrap(), b"new");
    }
}
