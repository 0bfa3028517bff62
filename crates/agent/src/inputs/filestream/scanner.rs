//! Finds the files a stream reads and decides where reading each starts,
//! from the registry: a known file resumes at its cursor, a file whose
//! inode now holds other bytes (the fingerprint differs) or that shrank
//! starts over, a new file starts at 0. Blocking: it runs on tokio's
//! blocking threads.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
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
        c.start_over();
        c.fingerprint = Fingerprint::longest(&file, f.size)?;
        drop(c);
        cursor.touch();
        return Ok(Some(cursor));
    }
    let more = f.size > c.resume;
    drop(c);
    Ok((more && !old).then_some(cursor))
}

/// Known files that no glob matched in this scan and that no reader has
/// open, followed by identity. The rule, at every scan:
///
/// - a file renamed to a path the stream's globs still match is found by
///   the scan itself: [`decide`] moves its cursor to the new path and reads
///   what was appended;
/// - a file renamed to a name no glob matches (`a.log` to `a.log.1`), or
///   rotated while the agent was not running, is looked for in the
///   directory it was last seen in (for a symlink, also in its target's),
///   by device + inode checked against its fingerprint. Found there, its cursor follows it to the new name, and
///   the bytes past the cursor (lines appended before, or after, the
///   rename: a writer may still hold it open) are read to the end. The
///   include/exclude filters still apply to the new name;
/// - a file found in neither directory is forgotten by
///   [`forget_gone`] (`clean_removed`).
///
/// So no line appended to a closed file is lost to a rename between two
/// scans, whichever name it gets in its directory.
pub fn follow_moved(
    reg: &StreamRegistry,
    s: &StreamSettings,
    matched: &HashSet<FileId>,
    busy: &HashSet<FileId>,
) -> Vec<(Found, Arc<Cursor>)> {
    // Each directory is listed at most once per scan.
    let mut listings: HashMap<PathBuf, HashMap<FileId, Found>> = HashMap::new();
    let mut out = Vec::new();
    for (id, cursor) in reg.all() {
        if matched.contains(&id) || busy.contains(&id) {
            continue;
        }
        let recorded = cursor.lock().path.clone();
        let f = match found(Path::new(&recorded), false) {
            Some(f) if f.id == id => Some(f),
            _ => dirs_of(&recorded, s.symlinks).into_iter().find_map(|dir| {
                listings
                    .entry(dir)
                    .or_insert_with_key(|d| list(d))
                    .get(&id)
                    .cloned()
            }),
        };
        let Some(f) = f else {
            continue; // gone: forget_gone decides
        };
        let (resume, fp) = {
            let c = cursor.lock();
            (c.resume, c.fingerprint)
        };
        let moved = f.path != recorded;
        if !moved && f.size <= resume {
            continue; // read to its end where it was left
        }
        if !s.wants(&f.path) {
            continue;
        }
        let same = File::open(&f.path).and_then(|file| fp.matches(&file));
        if !same.unwrap_or(false) {
            continue; // another file holds the inode now
        }
        if moved {
            tracing::info!(stream = %s.id, from = %recorded, to = %f.path, "following a known file to its new name");
            cursor.lock().path = f.path.clone();
            cursor.touch();
        }
        if f.size > resume {
            tracing::info!(stream = %s.id, path = %f.path, offset = resume, size = f.size, "reading the rest of a known file no path matches any more");
            out.push((f, cursor));
        }
    }
    out
}

/// Where a known file that left `recorded` is looked for: that directory,
/// and, for a symlink followed to it, its target's directory (kubelet
/// renames `/var/log/pods/…/0.log` there, while the symlink under
/// `/var/log/containers/` moves on to the new file).
fn dirs_of(recorded: &str, symlinks: bool) -> Vec<PathBuf> {
    let path = Path::new(recorded);
    let mut dirs: Vec<PathBuf> = path.parent().map(Path::to_path_buf).into_iter().collect();
    if symlinks
        && fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
        && let Ok(target) = fs::canonicalize(path)
        && let Some(dir) = target.parent()
        && !dirs.iter().any(|d| d == dir)
    {
        dirs.push(dir.to_path_buf());
    }
    dirs
}

/// The regular files directly in `dir`, by identity (symlinks skipped).
fn list(dir: &Path) -> HashMap<FileId, Found> {
    let Ok(entries) = fs::read_dir(dir) else {
        return HashMap::new();
    };
    entries
        .flatten()
        .filter_map(|e| found(&e.path(), false))
        .map(|f| (f.id, f))
        .collect()
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
        settings_from(&format!(r#"{{"paths": ["{}/*.log"]}}"#, dir.display()))
    }

    fn settings_from(yaml: &str) -> StreamSettings {
        let json: serde_json::Value = serde_json::from_str(yaml).unwrap();
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
        let r = follow_moved(&reg, &s, &matched, &HashSet::new());
        assert_eq!(r.len(), 1);
        assert!(r[0].0.path.ends_with("a.log.1"));
        assert_eq!(r[0].1.lock().resume, 4);

        fs::remove_file(dir.path().join("a.log.1")).unwrap();
        forget_gone(&reg, &HashSet::new());
        assert!(reg.get(found.id).is_none());
    }

    #[test]
    fn a_closed_file_renamed_out_of_the_globs_is_followed_and_read_when_it_grows() {
        let dir = tempfile::tempdir().unwrap();
        let data = tempfile::tempdir().unwrap();
        let s = settings(dir.path());
        let reg = Registries::new(data.path()).open("s");
        let path = dir.path().join("a.log");
        let rotated = dir.path().join("a.log.1");
        fs::write(&path, b"one\ntwo\n").unwrap();
        let found = one(&s, "a.log");
        let c = decide(&reg, &s, &found, SystemTime::now())
            .unwrap()
            .unwrap();
        c.lock().resume = 8;
        fs::rename(&path, &rotated).unwrap();
        let none = HashSet::new();

        // Read to its end: followed to its new name, nothing to read, kept.
        assert!(follow_moved(&reg, &s, &none, &none).is_empty());
        assert_eq!(c.lock().path, rotated.to_str().unwrap());
        forget_gone(&reg, &none);
        assert!(reg.get(found.id).is_some(), "still in its directory");

        // A writer that still holds it appends: the rest is read.
        fs::OpenOptions::new()
            .append(true)
            .open(&rotated)
            .unwrap()
            .write_all(b"three\n")
            .unwrap();
        let busy: HashSet<FileId> = [found.id].into();
        assert!(
            follow_moved(&reg, &s, &none, &busy).is_empty(),
            "a reader has it open"
        );
        let r = follow_moved(&reg, &s, &none, &none);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].0.path, rotated.to_str().unwrap());
        assert_eq!(r[0].1.lock().resume, 8);

        // Excluded by name: not read, and forgotten once it moves on.
        let excluded = {
            let mut e = settings(dir.path());
            e.exclude = vec![regex::Regex::new(r"\.2$").unwrap()];
            e
        };
        fs::rename(&rotated, dir.path().join("a.log.2")).unwrap();
        assert!(follow_moved(&reg, &excluded, &none, &none).is_empty());
        forget_gone(&reg, &none);
        assert!(reg.get(found.id).is_none());
    }

    #[test]
    fn a_file_rotated_behind_a_symlink_is_followed_in_the_targets_directory() {
        let root = tempfile::tempdir().unwrap();
        let data = tempfile::tempdir().unwrap();
        let (links, pods) = (root.path().join("containers"), root.path().join("pods"));
        fs::create_dir_all(&links).unwrap();
        fs::create_dir_all(&pods).unwrap();
        let s = settings_from(&format!(
            r#"{{"paths": ["{}/*.log"], "prospector.scanner.symlinks": true}}"#,
            links.display()
        ));
        let reg = Registries::new(data.path()).open("s");
        let log = pods.join("0.log");
        fs::write(&log, b"one\n").unwrap();
        std::os::unix::fs::symlink(&log, links.join("c.log")).unwrap();
        let found = one(&s, "c.log");
        let c = decide(&reg, &s, &found, SystemTime::now())
            .unwrap()
            .unwrap();
        c.lock().resume = 4;
        // kubelet: 0.log renamed, a new 0.log the symlink now names; the
        // runtime wrote one more line to the old file before reopening.
        let rotated = pods.join("0.log.20261203-101500");
        fs::rename(&log, &rotated).unwrap();
        fs::write(&log, b"new\n").unwrap();
        fs::OpenOptions::new()
            .append(true)
            .open(&rotated)
            .unwrap()
            .write_all(b"two\n")
            .unwrap();
        let matched: HashSet<FileId> = scan(&s).iter().map(|f| f.id).collect();
        assert!(!matched.contains(&found.id));
        let r = follow_moved(&reg, &s, &matched, &HashSet::new());
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].0.path, rotated.to_str().unwrap());
        assert_eq!(r[0].1.lock().resume, 4);
    }
}
