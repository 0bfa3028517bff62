//! The registry: per file, the offset up to which every line was
//! delivered, kept under the agent's data path
//! (`DATA/registry/filestream/STREAM-ID.json`) so a restarted agent
//! resumes where delivery stopped. Written atomically (a temporary file,
//! fsync, rename) every [`FLUSH_EVERY`] when something moved, and once
//! more when the agent stops after its outputs are drained.
//!
//! In memory each file has a [`Cursor`]: the acknowledgement window of its
//! events in flight and where the next reader of it starts.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};

use super::identity::{FileId, Fingerprint};
use crate::owner_only;
use crate::pipeline::ack::{AckTarget, InOrder};

/// How often changed registries are written.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// The registry file format.
const VERSION: u32 = 1;

/// One file's state as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedFile {
    #[serde(flatten)]
    pub id: FileId,
    /// Where it was last seen.
    pub path: String,
    /// Every line before this offset was delivered.
    pub offset: u64,
    pub fingerprint: Fingerprint,
}

#[derive(Debug, Serialize, Deserialize)]
struct Saved {
    version: u32,
    files: Vec<SavedFile>,
}

/// What a reader of a file needs to know and update.
#[derive(Debug)]
pub struct CursorState {
    pub path: String,
    pub fingerprint: Fingerprint,
    /// The events in flight, each numbered with the offset it ends at.
    pub window: InOrder<u64>,
    /// Every line before this offset was delivered: what is saved.
    pub delivered: u64,
    /// Where the next reader starts: the end of the last event queued (or
    /// the delivered offset after a start).
    pub resume: u64,
}

impl CursorState {
    /// Reads the file again from 0: what was in flight described bytes
    /// that are gone, and their acknowledgements are ignored.
    pub fn start_over(&mut self) {
        self.window.reset();
        self.delivered = 0;
        self.resume = 0;
    }
}

/// One file's cursor; outputs acknowledge its events through it.
#[derive(Debug)]
pub struct Cursor {
    state: Mutex<CursorState>,
    dirty: Arc<AtomicBool>,
}

impl Cursor {
    /// The cursor's state, locked.
    pub fn lock(&self) -> MutexGuard<'_, CursorState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the registry as changed.
    pub fn touch(&self) {
        self.dirty.store(true, Ordering::Release);
    }

    fn saved(&self, id: FileId) -> SavedFile {
        let s = self.lock();
        SavedFile {
            id,
            path: s.path.clone(),
            offset: s.delivered,
            fingerprint: s.fingerprint,
        }
    }
}

impl AckTarget for Cursor {
    fn acknowledged(&self, seq: u64) {
        let mut s = self.lock();
        if let Some(end) = s.window.ack(seq) {
            s.delivered = s.delivered.max(end);
            drop(s);
            self.touch();
        }
    }
}

/// The registry of one filestream stream.
#[derive(Debug)]
pub struct StreamRegistry {
    file: PathBuf,
    cursors: Mutex<HashMap<FileId, Arc<Cursor>>>,
    dirty: Arc<AtomicBool>,
    /// Serializes writers of the file.
    writing: Mutex<()>,
}

impl StreamRegistry {
    fn load(file: PathBuf) -> StreamRegistry {
        let dirty = Arc::new(AtomicBool::new(false));
        let mut cursors = HashMap::new();
        match fs::read(&file) {
            Ok(bytes) => match serde_json::from_slice::<Saved>(&bytes) {
                Ok(saved) if saved.version == VERSION => {
                    for f in saved.files {
                        cursors.insert(f.id, Arc::new(new_cursor(&f, &dirty)));
                    }
                }
                Ok(saved) => tracing::error!(
                    file = %file.display(),
                    version = saved.version,
                    "registry written by another version of leasehold; files are read again from their start"
                ),
                Err(e) => {
                    let aside = file.with_extension("json.corrupt");
                    let _ = fs::rename(&file, &aside);
                    tracing::error!(
                        file = %file.display(),
                        moved_to = %aside.display(),
                        error = %e,
                        "registry cannot be read; it was moved aside and files are read again from their start (lines may repeat, none are lost)"
                    );
                }
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => tracing::error!(
                file = %file.display(),
                error = %e,
                "registry cannot be read; files are read again from their start"
            ),
        }
        StreamRegistry {
            file,
            cursors: Mutex::new(cursors),
            dirty,
            writing: Mutex::new(()),
        }
    }

    fn cursors(&self) -> MutexGuard<'_, HashMap<FileId, Arc<Cursor>>> {
        self.cursors.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cursor of `id`, if the registry knows it.
    pub fn get(&self, id: FileId) -> Option<Arc<Cursor>> {
        self.cursors().get(&id).cloned()
    }

    /// Every known file, with its cursor.
    pub fn all(&self) -> Vec<(FileId, Arc<Cursor>)> {
        self.cursors()
            .iter()
            .map(|(id, c)| (*id, Arc::clone(c)))
            .collect()
    }

    /// A cursor for a file seen for the first time (or whose identity was
    /// reused by a new file), starting at `offset`.
    pub fn start(
        &self,
        id: FileId,
        path: &str,
        fingerprint: Fingerprint,
        offset: u64,
    ) -> Arc<Cursor> {
        let cursor = Arc::new(new_cursor(
            &SavedFile {
                id,
                path: path.to_string(),
                offset,
                fingerprint,
            },
            &self.dirty,
        ));
        self.cursors().insert(id, Arc::clone(&cursor));
        self.dirty.store(true, Ordering::Release);
        cursor
    }

    /// Forgets a file that is gone.
    pub fn remove(&self, id: FileId) {
        if self.cursors().remove(&id).is_some() {
            self.dirty.store(true, Ordering::Release);
        }
    }

    /// Writes the registry if anything changed since the last write.
    pub fn flush(&self) -> io::Result<()> {
        let _writing = self.writing.lock().unwrap_or_else(|p| p.into_inner());
        if !self.dirty.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        let mut files: Vec<SavedFile> = self.all().iter().map(|(id, c)| c.saved(*id)).collect();
        files.sort_by_key(|f| f.id);
        let saved = Saved {
            version: VERSION,
            files,
        };
        let result = write_atomically(&self.file, &saved);
        if result.is_err() {
            self.dirty.store(true, Ordering::Release);
        }
        result
    }
}

fn new_cursor(f: &SavedFile, dirty: &Arc<AtomicBool>) -> Cursor {
    Cursor {
        state: Mutex::new(CursorState {
            path: f.path.clone(),
            fingerprint: f.fingerprint,
            window: InOrder::default(),
            delivered: f.offset,
            resume: f.offset,
        }),
        dirty: Arc::clone(dirty),
    }
}

fn write_atomically(file: &Path, saved: &Saved) -> io::Result<()> {
    let dir = file.parent().unwrap_or(Path::new("."));
    owner_only::create_dir_all(dir)?;
    let tmp = file.with_extension("json.tmp");
    let mut f = owner_only::create(&tmp)?;
    serde_json::to_writer(&mut f, saved)?;
    f.write_all(b"\n")?;
    f.sync_data()?;
    fs::rename(&tmp, file)?;
    // The rename itself is durable once the directory is.
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StreamLabels {
    stream: String,
}

/// What a stream's readers count, for `/metrics`.
#[derive(Clone, Debug, Default)]
pub struct StreamMetrics {
    /// `leasehold_filestream_files_open{stream}`.
    pub files_open: Gauge,
    /// `leasehold_filestream_bytes_read_total{stream}`.
    pub bytes_read: Counter,
}

/// The metric families of every stream.
#[derive(Clone, Debug, Default)]
struct Families {
    files_open: Family<StreamLabels, Gauge>,
    bytes_read: Family<StreamLabels, Counter>,
    write_errors: Counter,
}

/// The registries of every filestream stream of the agent, under one data
/// path. Streams restarted within a process share their in-memory state.
#[derive(Debug)]
pub struct Registries {
    dir: PathBuf,
    streams: Mutex<HashMap<String, Arc<StreamRegistry>>>,
    /// The streams each input opened, by input id.
    owners: Mutex<HashMap<String, Vec<String>>>,
    families: Families,
}

impl Registries {
    /// Registries kept under `data_path`.
    pub fn new(data_path: &Path) -> Arc<Registries> {
        Arc::new(Registries {
            dir: data_path.join("registry").join("filestream"),
            streams: Mutex::new(HashMap::new()),
            owners: Mutex::new(HashMap::new()),
            families: Families::default(),
        })
    }

    /// Registers the filestream metrics: files open and bytes read per
    /// stream, and failed registry writes.
    pub fn register_metrics(&self, registry: &mut Registry) {
        registry.register(
            "leasehold_filestream_files_open",
            "Files a filestream stream has open",
            self.families.files_open.clone(),
        );
        registry.register(
            "leasehold_filestream_bytes_read",
            "Bytes a filestream stream read from its files",
            self.families.bytes_read.clone(),
        );
        registry.register(
            "leasehold_filestream_registry_write_errors",
            "Failed writes of a filestream registry (retried every second)",
            self.families.write_errors.clone(),
        );
    }

    /// The metrics of stream `id`.
    pub fn metrics(&self, id: &str) -> StreamMetrics {
        let labels = StreamLabels {
            stream: id.to_string(),
        };
        StreamMetrics {
            files_open: self.families.files_open.get_or_create(&labels).clone(),
            bytes_read: self.families.bytes_read.get_or_create(&labels).clone(),
        }
    }

    /// The registry of stream `id` of input `input`, loaded from disk on
    /// first use.
    pub fn open_for(&self, input: &str, id: &str) -> Arc<StreamRegistry> {
        let mut owners = self.owners.lock().unwrap_or_else(|p| p.into_inner());
        let streams = owners.entry(input.to_string()).or_default();
        if !streams.iter().any(|s| s == id) {
            streams.push(id.to_string());
        }
        drop(owners);
        self.open(id)
    }

    /// Forgets the streams of `input`, which is gone for good (a pod's
    /// container-log input after the pod went): their registries leave
    /// memory and disk, their metrics `/metrics`. Called once the input
    /// stopped, so nothing writes them again.
    pub fn forget_input(&self, input: &str) {
        let ids = self
            .owners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(input)
            .unwrap_or_default();
        for id in ids {
            self.streams
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            let file = self.file_of(&id);
            if let Err(e) = fs::remove_file(&file)
                && e.kind() != io::ErrorKind::NotFound
            {
                tracing::warn!(file = %file.display(), "cannot remove the registry of a finished stream: {e}");
            }
            let labels = StreamLabels { stream: id };
            self.families.files_open.remove(&labels);
            self.families.bytes_read.remove(&labels);
        }
    }

    /// The registry of stream `id`, loaded from disk on first use.
    pub fn open(&self, id: &str) -> Arc<StreamRegistry> {
        let mut streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(
            streams
                .entry(id.to_string())
                .or_insert_with(|| Arc::new(StreamRegistry::load(self.file_of(id)))),
        )
    }

    /// Where stream `id`'s registry is written.
    pub fn file_of(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{}.json", file_name(id)))
    }

    /// Writes every changed registry, logging failures.
    pub fn flush_all(&self) -> Option<String> {
        let streams: Vec<Arc<StreamRegistry>> = self
            .streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        let mut first = None;
        for s in streams {
            if let Err(e) = s.flush() {
                self.families.write_errors.inc();
                first.get_or_insert_with(|| {
                    format!(
                        "cannot write {}: {e}; delivered offsets are not recorded, so after a restart these files are read again from older offsets: make the data path writable",
                        s.file.display()
                    )
                });
            }
        }
        first
    }

    /// Writes changed registries every [`FLUSH_EVERY`], forever, telling
    /// `report` whether they could be written (`Some(error)` while they
    /// cannot; logged once per outage).
    pub async fn flush_loop(self: Arc<Self>, report: impl Fn(Option<String>) + Send + 'static) {
        let mut tick = tokio::time::interval(FLUSH_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            tick.tick().await;
            let me = Arc::clone(&self);
            let error = tokio::task::spawn_blocking(move || me.flush_all())
                .await
                .unwrap_or_else(|e| Some(format!("writing the filestream registry failed: {e}")));
            match (&error, failing) {
                (Some(e), false) => tracing::error!("{e}; retrying every second"),
                (None, true) => tracing::info!("the filestream registry is written again"),
                _ => {}
            }
            failing = error.is_some();
            report(error);
        }
    }
}

/// A stream id as a file name: characters other than letters, digits,
/// `-`, `_` and `.` become `_`, and a hash of the id keeps two ids that
/// map to the same name apart.
fn file_name(id: &str) -> String {
    let clean: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    if clean == id && !id.starts_with('.') && !id.is_empty() {
        clean
    } else {
        format!(
            "{clean}-{:016x}",
            Fingerprint::of_bytes(id.as_bytes()).fnv1a
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp() -> Fingerprint {
        Fingerprint::of_bytes(b"line\n")
    }

    #[test]
    fn delivered_offsets_survive_a_reload_and_only_they_do() {
        let dir = tempfile::tempdir().unwrap();
        let regs = Registries::new(dir.path());
        let reg = regs.open("logs");
        let id = FileId {
            device: 1,
            inode: 42,
        };
        let cursor = reg.start(id, "/var/log/a.log", fp(), 0);
        let (a, b) = {
            let mut s = cursor.lock();
            (s.window.push(10), s.window.push(25))
        };
        cursor.acknowledged(a);
        regs.flush_all();
        // b is queued, not delivered: a new process starts after a.
        let _ = b;
        let again = Registries::new(dir.path()).open("logs");
        let c = again.get(id).expect("the file is known");
        assert_eq!(c.lock().resume, 10);
        assert_eq!(c.lock().path, "/var/log/a.log");
        assert_eq!(c.lock().fingerprint, fp());
        // Removal is written too.
        again.remove(id);
        again.flush().unwrap();
        assert!(Registries::new(dir.path()).open("logs").get(id).is_none());
    }

    #[test]
    fn a_corrupt_registry_is_moved_aside_and_reading_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        let regs = Registries::new(dir.path());
        let file = regs.file_of("logs");
        fs::create_dir_all(file.parent().unwrap()).unwrap();
        fs::write(&file, b"{not json").unwrap();
        let reg = regs.open("logs");
        assert!(reg.all().is_empty());
        assert!(file.with_extension("json.corrupt").exists());
    }

    #[test]
    fn stream_ids_become_safe_distinct_file_names() {
        assert_eq!(file_name("container-logs"), "container-logs");
        let a = file_name("a/b");
        let b = file_name("a_b");
        assert_ne!(a, b);
        assert!(!a.contains('/'));
        assert!(file_name("..").starts_with("..-"));
        assert!(!file_name("").is_empty());
    }

    #[test]
    fn the_registry_and_its_new_directories_are_private_to_the_agent() {
        use crate::owner_only::mode_of;
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let regs = Registries::new(&data);
        let reg = regs.open("logs");
        let id = FileId {
            device: 1,
            inode: 7,
        };
        reg.start(id, "/var/log/a.log", fp(), 0);
        reg.flush().unwrap();
        let file = regs.file_of("logs");
        assert_eq!(mode_of(&file), 0o600);
        for d in [
            data.clone(),
            data.join("registry"),
            data.join("registry/filestream"),
        ] {
            assert_eq!(mode_of(&d), 0o700, "{}", d.display());
        }

        // A temporary file left by a crash, with wider modes, does not
        // widen the registry it replaces.
        fs::write(file.with_extension("json.tmp"), b"").unwrap();
        fs::set_permissions(
            file.with_extension("json.tmp"),
            std::os::unix::fs::PermissionsExt::from_mode(0o644),
        )
        .unwrap();
        reg.remove(id);
        reg.flush().unwrap();
        assert_eq!(mode_of(&file), 0o600);
    }
}
