//! The `file` output: NDJSON in `<path>/<filename>.ndjson`, rotated like
//! Beats' file output.
//!
//! When writing a line would make the current file exceed the rotation size
//! and the file is not empty, the files are shifted: `<filename>.ndjson.1`
//! becomes `.2` and so on, the current file becomes `.1`, the oldest beyond
//! `number_of_files - 1` rotated files is deleted, and a new current file is
//! created with the configured mode. A line is never split across files.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, IoSlice, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::kind::{OutputKind, OutputType, SinkSettings, no_notes, same};
use super::sink::{Answers, Blocking, BlockingSink, Outgoing, Sink};

pub mod settings;

pub use settings::FileSettings;

/// The `file` output type.
pub(crate) const TYPE: OutputType = OutputType {
    name: "file",
    keys: &settings::KEYS,
    parse: |base, keys, errors| OutputKind::file(settings::parse(base, keys, errors)),
    notes: no_notes,
};

impl OutputKind {
    /// NDJSON in rotated files.
    pub fn file(settings: FileSettings) -> OutputKind {
        OutputKind::new(settings)
    }
}

impl SinkSettings for FileSettings {
    fn type_name(&self) -> &'static str {
        "file"
    }

    fn open(&self) -> io::Result<Box<dyn Sink>> {
        Ok(Box::new(Blocking::new(FileSink::open(self.clone())?)))
    }

    fn same_as(&self, other: &dyn SinkSettings) -> bool {
        same(self, other)
    }
}

/// Mode of the directory when the output creates it.
const DIR_MODE: u32 = 0o750;

/// Writes batches to the current file, rotating as it goes.
pub(super) struct FileSink {
    settings: FileSettings,
    current: PathBuf,
    /// The open current file; `None` after a failed write or rotation, so
    /// that the next attempt opens it again.
    file: Option<File>,
    /// Bytes in the current file.
    size: u64,
}

impl FileSink {
    /// Creates the directory if missing and opens (or creates) the current
    /// file. Errors name the path.
    pub(super) fn open(settings: FileSettings) -> io::Result<FileSink> {
        let mut sink = FileSink {
            current: settings.current_file(),
            settings,
            file: None,
            size: 0,
        };
        sink.open_current()?;
        Ok(sink)
    }

    fn open_current(&mut self) -> io::Result<()> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(&self.settings.path)
            .map_err(at(&self.settings.path))?;
        let mode = self.settings.permissions;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(mode)
            .open(&self.current)
            .map_err(at(&self.current))?;
        let meta = file.metadata().map_err(at(&self.current))?;
        // The mode given at creation is narrowed by the umask: set it exactly.
        if meta.permissions().mode() & 0o7777 != mode {
            file.set_permissions(Permissions::from_mode(mode))
                .map_err(at(&self.current))?;
        }
        self.size = meta.len();
        self.file = Some(file);
        Ok(())
    }

    /// Shifts the rotated files up by one and starts a new current file.
    ///
    /// Safe to repeat after failing part way: shifting stops at the first
    /// missing rotated file, so a retry never deletes a second file.
    fn rotate(&mut self) -> io::Result<()> {
        self.file = None;
        let s = &self.settings;
        let keep = s.number_of_files - 1;
        let mut gap = None;
        for i in 1..=keep {
            if !exists(&s.rotated_file(i))? {
                gap = Some(i);
                break;
            }
        }
        let top = match gap {
            Some(i) => i,
            None => {
                let oldest = s.rotated_file(keep);
                ignore_missing(fs::remove_file(&oldest)).map_err(at(&oldest))?;
                keep
            }
        };
        for i in (1..top).rev() {
            let from = s.rotated_file(i);
            fs::rename(&from, s.rotated_file(i + 1)).map_err(at(&from))?;
        }
        ignore_missing(fs::rename(&self.current, s.rotated_file(1))).map_err(at(&self.current))?;
        // Rotated files beyond the kept ones (from a larger number_of_files).
        for i in s.number_of_files.. {
            if fs::remove_file(s.rotated_file(i)).is_err() {
                break;
            }
        }
        self.open_current()
    }
}

impl FileSink {
    /// Writes `lines[*done..]`, rotating by size, and moves `done` past
    /// every line written whole, also when failing part way (a partly
    /// written chunk is taken back so the retry writes each line once).
    fn write_from(&mut self, lines: &[Vec<u8>], done: &mut usize) -> io::Result<()> {
        let limit = self.settings.rotate_bytes();
        while *done < lines.len() {
            if self.file.is_none() {
                self.open_current()?;
            }
            let mut size = self.size;
            let mut end = *done;
            for line in &lines[*done..] {
                let len = line.len() as u64;
                if size > 0 && size + len > limit {
                    break;
                }
                size += len;
                end += 1;
            }
            if end == *done {
                self.rotate()?;
                continue;
            }
            let Some(file) = self.file.as_mut() else {
                continue;
            };
            if let Err(e) = write_all_lines(file, &lines[*done..end]) {
                let _ = file.set_len(self.size);
                self.file = None;
                return Err(at(&self.current)(e));
            }
            self.size = size;
            *done = end;
        }
        Ok(())
    }
}

impl BlockingSink for FileSink {
    fn send(&mut self, out: &Outgoing) -> Answers {
        let lines = out.lines();
        let mut done = 0;
        if let Err(e) = self.write_from(lines, &mut done) {
            return Answers::written_then_failed(done, lines.len(), e.to_string());
        }
        Answers::delivered(lines.len())
    }

    fn sync(&mut self) -> io::Result<()> {
        match &self.file {
            Some(f) => f.sync_all().map_err(at(&self.current)),
            None => Ok(()),
        }
    }

    fn target(&self) -> String {
        self.current.display().to_string()
    }
}

/// Adds `path` to an error's message.
/// Most slices one `writev` takes (Linux's `IOV_MAX`).
const MAX_SLICES: usize = 1024;

/// Writes `lines` whole, handing the kernel up to [`MAX_SLICES`] lines
/// per call: nothing is copied into a buffer first (the lines are most of
/// the output's work).
fn write_all_lines(file: &mut impl Write, lines: &[Vec<u8>]) -> io::Result<()> {
    let (mut line, mut offset) = (0, 0);
    let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(lines.len().min(MAX_SLICES));
    while line < lines.len() {
        slices.clear();
        slices.push(IoSlice::new(&lines[line][offset..]));
        slices.extend(
            lines[line + 1..]
                .iter()
                .take(MAX_SLICES - 1)
                .map(|l| IoSlice::new(l)),
        );
        let mut written = match file.write_vectored(&slices) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        // Past the slices written whole, into the first one cut short.
        while line < lines.len() && written >= lines[line].len() - offset {
            written -= lines[line].len() - offset;
            line += 1;
            offset = 0;
        }
        offset += written;
    }
    Ok(())
}

fn at(path: &Path) -> impl FnOnce(io::Error) -> io::Error + '_ {
    move |e| io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

fn ignore_missing(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

fn exists(path: &Path) -> io::Result<bool> {
    match fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(at(path)(e)),
    }
}

/// Makes the next rotation of a file output fail until removed: as an
/// ordinary user by making the directory read-only, as root (who may write
/// anyway) by putting non-empty directories where the rotated files go.
#[cfg(test)]
pub(super) struct RotationBlocker {
    settings: FileSettings,
    as_root: bool,
}

#[cfg(test)]
impl RotationBlocker {
    pub(super) fn install(settings: &FileSettings) -> RotationBlocker {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let as_root = unsafe { libc::geteuid() } == 0;
        if as_root {
            for i in 1..settings.number_of_files {
                let dir = settings.rotated_file(i);
                fs::create_dir(&dir).unwrap();
                fs::write(dir.join("keep"), b"x").unwrap();
            }
        } else {
            fs::set_permissions(&settings.path, Permissions::from_mode(0o555)).unwrap();
        }
        RotationBlocker {
            settings: settings.clone(),
            as_root,
        }
    }

    pub(super) fn remove(self) {
        if self.as_root {
            for i in 1..self.settings.number_of_files {
                fs::remove_dir_all(self.settings.rotated_file(i)).unwrap();
            }
        } else {
            fs::set_permissions(&self.settings.path, Permissions::from_mode(0o755)).unwrap();
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A line of exactly 100 bytes, newline included, numbered `n`.
    pub(in crate::outputs) fn line(n: usize) -> Vec<u8> {
        let mut l = format!("{{\"n\":\"{n:04}\",\"pad\":\"").into_bytes();
        l.resize(100 - 3, b'x');
        l.extend_from_slice(b"\"}\n");
        l
    }

    /// The lines of a file, each with its newline.
    pub(in crate::outputs) fn lines_of(path: &Path) -> Vec<Vec<u8>> {
        let data = fs::read(path).unwrap();
        data.split_inclusive(|b| *b == b'\n')
            .map(<[u8]>::to_vec)
            .collect()
    }

    /// Everything written, oldest rotated file first.
    pub(in crate::outputs) fn all_lines(s: &FileSettings) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for i in (1..s.number_of_files).rev() {
            if s.rotated_file(i).exists() {
                out.extend(lines_of(&s.rotated_file(i)));
            }
        }
        out.extend(lines_of(&s.current_file()));
        out
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn settings(dir: &Path, number_of_files: usize) -> FileSettings {
        FileSettings {
            rotate_every_kb: 1,
            number_of_files,
            ..FileSettings::new(dir.join("out"))
        }
    }

    fn write_lines(sink: &mut FileSink, range: std::ops::Range<usize>, per_batch: usize) {
        let all: Vec<usize> = range.collect();
        for chunk in all.chunks(per_batch) {
            let out = Outgoing::of_lines(chunk.iter().map(|n| line(*n)).collect());
            assert_eq!(sink.send(&out), Answers::delivered(chunk.len()));
        }
    }

    #[test]
    fn rotation_keeps_number_of_files_and_every_line_once_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path(), 3);
        let mut sink = FileSink::open(s.clone()).unwrap();
        // 10 lines of 100 bytes fit in 1 KiB; 95 lines make 10 files.
        write_lines(&mut sink, 0..95, 7);
        assert_eq!(
            entries(&s.path),
            [
                "leasehold.ndjson",
                "leasehold.ndjson.1",
                "leasehold.ndjson.2"
            ]
        );
        assert_eq!(
            lines_of(&s.current_file()),
            (90..95).map(line).collect::<Vec<_>>()
        );
        assert_eq!(
            lines_of(&s.rotated_file(1)),
            (80..90).map(line).collect::<Vec<_>>()
        );
        assert_eq!(
            lines_of(&s.rotated_file(2)),
            (70..80).map(line).collect::<Vec<_>>()
        );
        for name in entries(&s.path) {
            assert!(fs::metadata(s.path.join(name)).unwrap().len() <= 1024);
        }
    }

    #[test]
    fn rotation_with_room_keeps_every_line() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path(), 20);
        let mut sink = FileSink::open(s.clone()).unwrap();
        write_lines(&mut sink, 0..95, 2048);
        assert_eq!(entries(&s.path).len(), 10);
        assert_eq!(all_lines(&s), (0..95).map(line).collect::<Vec<_>>());
    }

    #[test]
    fn rotation_removes_files_beyond_number_of_files() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path(), 2);
        fs::create_dir_all(&s.path).unwrap();
        for i in 1..=4 {
            fs::write(s.rotated_file(i), b"old\n").unwrap();
        }
        let mut sink = FileSink::open(s.clone()).unwrap();
        write_lines(&mut sink, 0..15, 15);
        assert_eq!(entries(&s.path), ["leasehold.ndjson", "leasehold.ndjson.1"]);
        assert_eq!(all_lines(&s), (0..15).map(line).collect::<Vec<_>>());
    }

    #[test]
    fn a_line_longer_than_the_rotation_size_is_written_whole() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path(), 3);
        let mut sink = FileSink::open(s.clone()).unwrap();
        let mut long = vec![b'x'; 3000];
        long.push(b'\n');
        let out = Outgoing::of_lines(vec![line(0), long.clone(), line(1)]);
        assert_eq!(sink.send(&out), Answers::delivered(3));
        assert_eq!(lines_of(&s.rotated_file(2)), [line(0)]);
        assert_eq!(lines_of(&s.rotated_file(1)), [long]);
        assert_eq!(lines_of(&s.current_file()), [line(1)]);
    }

    #[test]
    fn an_existing_file_is_appended_to_and_counts_toward_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path(), 3);
        fs::create_dir_all(&s.path).unwrap();
        let old: Vec<Vec<u8>> = (100..109).map(line).collect();
        fs::write(s.current_file(), old.concat()).unwrap();
        let mut sink = FileSink::open(s.clone()).unwrap();
        write_lines(&mut sink, 0..2, 2);
        let mut want = old;
        want.push(line(0));
        assert_eq!(lines_of(&s.rotated_file(1)), want);
        assert_eq!(lines_of(&s.current_file()), [line(1)]);
    }

    #[test]
    fn files_get_the_configured_permissions_and_the_directory_is_created() {
        let dir = tempfile::tempdir().unwrap();
        let s = FileSettings {
            path: dir.path().join("a/b/c"),
            permissions: 0o640,
            ..settings(dir.path(), 3)
        };
        let mut sink = FileSink::open(s.clone()).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&s.current_file()), 0o640);
        write_lines(&mut sink, 0..25, 25);
        assert_eq!(mode(&s.current_file()), 0o640);
        assert_eq!(mode(&s.rotated_file(1)), 0o640);
        assert_eq!(mode(&s.rotated_file(2)), 0o640);

        let s = FileSettings {
            path: dir.path().join("other"),
            ..FileSettings::new("")
        };
        FileSink::open(s.clone()).unwrap();
        assert_eq!(mode(&s.current_file()), 0o600);
    }

    #[test]
    fn a_failed_rotation_keeps_its_place_and_the_retry_writes_each_line_once() {
        use super::super::sink::Answer;
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path(), 3);
        let mut sink = FileSink::open(s.clone()).unwrap();
        let blocker = RotationBlocker::install(&s);
        let delivered = |a: &Answers| {
            a.lines
                .iter()
                .take_while(|l| **l == Answer::Delivered)
                .count()
        };
        let answers = sink.send(&Outgoing::of_lines((0..25).map(line).collect()));
        let err = answers.error.clone().unwrap();
        assert!(err.contains(&*s.path.to_string_lossy()), "{err}");
        assert_eq!(
            delivered(&answers),
            10,
            "the lines before the rotation are written"
        );
        assert_eq!(answers.lines.len(), 25);
        assert!(answers.lines[10..].iter().all(|l| *l == Answer::Retry));
        // Failing again writes nothing.
        let rest = Outgoing::of_lines((10..25).map(line).collect());
        assert_eq!(delivered(&sink.send(&rest)), 0);
        blocker.remove();
        assert_eq!(sink.send(&rest), Answers::delivered(15));
        assert_eq!(all_lines(&s), (0..25).map(line).collect::<Vec<_>>());
    }

    #[test]
    fn opening_fails_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("plain-file");
        fs::write(&blocker, b"").unwrap();
        let s = FileSettings::new(blocker.join("sub"));
        let err = FileSink::open(s).err().unwrap();
        assert!(
            err.to_string().contains(&*blocker.to_string_lossy()),
            "{err}"
        );
    }

    /// Takes at most `per_call` bytes of each `writev`, and fails once
    /// `fail_at` bytes are in.
    struct Trickle {
        got: Vec<u8>,
        per_call: usize,
        fail_at: usize,
    }

    impl Write for Trickle {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.write_vectored(&[IoSlice::new(buf)])
        }
        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            if self.got.len() >= self.fail_at {
                return Err(io::Error::other("disk full"));
            }
            let mut n = 0;
            for b in bufs {
                let take = b.len().min(self.per_call - n);
                self.got.extend_from_slice(&b[..take]);
                n += take;
                if n == self.per_call {
                    break;
                }
            }
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_cut_short_by_the_kernel_are_finished_and_none_is_written_twice() {
        let lines: Vec<Vec<u8>> = (0..3000)
            .map(|i| format!("line {i}\n").into_bytes())
            .collect();
        let whole: Vec<u8> = lines.concat();
        for per_call in [1, 3, 7, 100, 4096, 1 << 20] {
            let mut w = Trickle {
                got: Vec::new(),
                per_call,
                fail_at: usize::MAX,
            };
            write_all_lines(&mut w, &lines).unwrap();
            assert_eq!(w.got, whole, "{per_call} bytes per call");
        }
        let mut w = Trickle {
            got: Vec::new(),
            per_call: 50,
            fail_at: 120,
        };
        assert!(write_all_lines(&mut w, &lines).is_err());
        assert_eq!(
            w.got,
            whole[..150],
            "what was written before the error is in order"
        );
    }

    #[test]
    fn sync_flushes_the_current_file() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path(), 3);
        let mut sink = FileSink::open(s.clone()).unwrap();
        write_lines(&mut sink, 0..3, 3);
        sink.sync().unwrap();
        assert_eq!(sink.target(), s.current_file().display().to_string());
        assert_eq!(lines_of(&s.current_file()).len(), 3);
    }
}
