//! Finds the files a stream reads and decides where reading each starts,
//! from the registry: a known file resumes at its cursor, a file whose
//! inode now holds other bytes (the fingerprint differs) or that shrank
//! starts over, a new file starts at 0. Blocking: it runs on tokio's
//! blocking threads.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use super::identity::{FileId, Fingerprint};
use super::registry::{Cursor, StreamRegistry};
use super::settings::StreamSettings;

/// A file matched by the stream's paths.
#[derive(Debug, Clone)]
pub struct Found {
    pub path: String,
    pub id: FileId,
    pub size: u64,
    pub modified: SystemTime,
}

/// Every regular file the stream's globs match and its filters keep, each
/// identity once (a symlink and its target are one file).
pub fn scan(s: &StreamSettings) -> Vec<Found> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for pattern in &s.paths {
        let Ok(paths) = glob::glob(pattern) else {
            continue; // refused when the settings were read
        };
        for entry in paths.flatten() {
            let Some(path) = entry.to_str() else { continue };
            if !s.wants(path) {
                continue;
            }
            if let Some(f) = found(&entry, s.symlinks)
                && seen.insert(f.id)
            {
                out.push(f);
            }
        }
    }
    out
}

fn found(path: &Path, symlinks: bool) -> Option<Found> {
    let link = fs::symlink_metadata(path).ok()?;
    if link.file_type().is_symlink() && !symlinks {
        return None;
    }
    let meta = fs::metadata(path).ok()?;
    if !meta.is_file() {
        return None;
    }
    Some(Found {
        path: path.to_str()?.to_string(),
        id: FileId::of(&meta),
        size: meta.len(),
        modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
    })
}

/// The cursor to read `f` with, or `None` when there is nothing to read.
pub fn decide(
    reg: &StreamRegistry,
    s: &StreamSettings,
    f: &Found,
    now: SystemTime,
) -> io::Result<Option<Arc<Cursor>>> {
    let old = s
        .ignore_older
        .is_some_and(|d| now.duration_since(f.modified).is_ok_and(|age| age > d));
    let file = File::open(&f.path)?;
    if FileId::of(&file.metadata()?) != f.id {
        return Ok(None); // replaced since the scan: the next scan sees it
    }
    let Some(cursor) = reg.get(f.id) else {
        if old {
            return Ok(None);
        }
        let fp = Fingerprint::longest(&file, f.size)?;
        return Ok(Some(reg.start(f.id, &f.path, fp, 0)));
    };
    let mut c = cursor.lock();
    if !c.fingerprint.matches(&file)? {
        drop(c);
        tracing::info!(path = %f.path, "a new file holds a known inode; reading it from its start");
        let fp = Fingerprint::longest(&file, f.size)?;
        return Ok(Some(reg.start(f.id, &f.path, fp, 0)));
    }
    if c.path != f.path {
        c.path = f.path.clone();
        cursor.touch();
    }
    if f.size < c.resume {
        tracing::info!(path = %f.path, size = f.size, resume = c.resume, "file truncated while not read; reading it again from its start");
        c.window.reset(0);
        c.resume = 0;
        c.fingerprint = Fingerprint::longest(&file, f.size)?;
        drop(c);
        cursor.touch();
        return Ok(Some(cursor));
    }
    let more = f.size > c.resume;
    drop(c);
    Ok((more && !old).then_some(cursor))
}

/// Files the registry knows that no glob matched but that still sit in
/// their directory under another name with unread lines: rotated (by
/// rename) while the agent was not running. Read to their end.
pub fn rotated(
    reg: &StreamRegistry,
    s: &StreamSettings,
    matched: &HashSet<FileId>,
) -> Vec<(Found, Arc<Cursor>)> {
    let mut out = Vec::new();
    for (id, cursor) in reg.all() {
        if matched.contains(&id) {
            continue;
        }
        let (dir, resume, fp) = {
            let c = cursor.lock();
            let dir = Path::new(&c.path).parent().map(Path::to_path_buf);
            (dir, c.resume, c.fingerprint)
        };
        let Some(dir) = dir else { continue };
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Some(f) = found(&entry.path(), false) else {
                continue;
            };
            if f.id != id || f.size <= resume || !s.wants(&f.path) {
                continue;
            }
            let same = File::open(&f.path).and_then(|file| fp.matches(&file));
            if same.unwrap_or(false) {
                tracing::info!(path = %f.path, "reading the rest of a file rotated while the agent was not running");
                cursor.lock().path = f.path.clone();
                cursor.touch();
                out.push((f, Arc::clone(&cursor)));
                break;
            }
        }
    }
    out
}

/// Forgets files that are no longer where they were last seen
/// (`clean_removed`), unless a reader still has them open.
pub fn forget_gone(reg: &StreamRegistry, reading: &HashSet<FileId>) {
    for (id, cursor) in reg.all() {
        if reading.contains(&id) {
            continue;
        }
        let path = cursor.lock().path.clone();
        let there = fs::metadata(&path).is_ok_and(|m| FileId::of(&m) == id);
        if !there {
            reg.remove(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::super::registry::Registries;
    use super::*;

    fn settings(dir: &Path) -> StreamSettings {
        let yaml = format!(r#"{{"paths": ["{}/*.log"]}}"#, dir.display());
        let json: serde_json::Value = serde_json::from_str(&yaml).unwrap();
        let leasehold_policy::Value::Map(m) = leasehold_policy::Value::from_json(&json) else {
            panic!()
        };
        let mut out = Vec::new();
        super::super::settings::read_stream(
            &m,
            "s".into(),
            &crate::inputs::DataStream::default(),
            &mut out,
        )
    }

    fn one(s: &StreamSettings, name: &str) -> Found {
        scan(s)
            .into_iter()
            .find(|f| f.path.ends_with(name))
            .unwrap()
    }

    #[test]
    fn a_known_file_resumes_a_grown_one_continues_a_shrunk_or_replaced_one_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let data = tempfile::tempdir().unwrap();
        let s = settings(dir.path());
        let reg = Registries::new(data.path()).open("s");
        let path = dir.path().join("a.log");
        fs::write(&path, b"one\ntwo\n").unwrap();
        fs::write(dir.path().join("skip.txt"), b"x\n").unwrap();
        assert_eq!(scan(&s).len(), 1, "only *.log");
        let now = SystemTime::now();

        let c = decide(&reg, &s, &one(&s, "a.log"), now).unwrap().unwrap();
        assert_eq!(c.lock().resume, 0, "new: from the start");
        c.lock().resume = 8;
        assert!(
            decide(&reg, &s, &one(&s, "a.log"), now).unwrap().is_none(),
            "read to its end: nothing to do"
        );
        fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"three\n")
            .unwrap();
        let c = decide(&reg, &s, &one(&s, "a.log"), now).unwrap().unwrap();
        assert_eq!(c.lock().resume, 8, "grown: from where it was");

        // Truncated and rewritten shorter: from the start.
        c.lock().resume = 14;
        fs::write(&path, b"one\n").unwrap();
        let c = decide(&reg, &s, &one(&s, "a.log"), now).unwrap().unwrap();
        assert_eq!(c.lock().resume, 0);

        // Same inode, other first bytes, longer: a new file.
        c.lock().resume = 4;
        fs::write(&path, b"ONE\nmore bytes\n").unwrap();
        let c = decide(&reg, &s, &one(&s, "a.log"), now).unwrap().unwrap();
        assert_eq!(c.lock().resume, 0, "the fingerprint differs");
    }

    #[test]
    fn a_file_rotated_while_down_is_found_by_identity_and_gone_files_are_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let data = tempfile::tempdir().unwrap();
        let s = settings(dir.path());
        let reg = Registries::new(data.path()).open("s");
        let path = dir.path().join("a.log");
        fs::write(&path, b"one\ntwo\n").unwrap();
        let found = one(&s, "a.log");
        let c = decide(&reg, &s, &found, SystemTime::now())
            .unwrap()
            .unwrap();
        c.lock().resume = 4;
        fs::rename(&path, dir.path().join("a.log.1")).unwrap();
        fs::write(&path, b"new\n").unwrap();
        let matched: HashSet<FileId> = scan(&s).iter().map(|f| f.id).collect();
        let r = rotated(&reg, &s, &matched);
        assert_eq!(r.len(), 1);
        assert!(r[0].0.path.ends_with("a.log.1"));
        assert_eq!(r[0].1.lock().resume, 4);

        fs::remove_file(dir.path().join("a.log.1")).unwrap();
        forget_gone(&reg, &HashSet::new());
        assert!(reg.get(found.id).is_none());
    }
}
