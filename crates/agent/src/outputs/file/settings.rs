//! The `file` output's settings: the directory, the files' base name,
//! their rotation and their mode (Beats' file output's keys).

use std::collections::BTreeMap;
use std::path::PathBuf;

use leasehold_policy::Value;

use crate::settings::{Problem, describe, given, int_in};

/// Default base name of the files of a file output.
pub const DEFAULT_FILENAME: &str = "leasehold";
/// Default size at which a file is rotated, in KiB (10 MiB).
pub const DEFAULT_ROTATE_EVERY_KB: u64 = 10 * 1024;
/// The largest accepted `rotate_every_kb` (1 TiB).
pub const MAX_ROTATE_EVERY_KB: u64 = 1 << 30;
/// Default number of files kept, the current one included.
pub const DEFAULT_NUMBER_OF_FILES: usize = 7;
/// The accepted range of `number_of_files`.
pub const NUMBER_OF_FILES_RANGE: std::ops::RangeInclusive<usize> = 2..=1024;
/// Default mode of created files.
pub const DEFAULT_PERMISSIONS: u32 = 0o600;

/// The keys of a `file` output, beside those of every output.
pub const KEYS: [&str; 5] = [
    "path",
    "filename",
    "rotate_every_kb",
    "number_of_files",
    "permissions",
];

/// Settings of a `file` output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSettings {
    /// The directory the files are written to (created when missing).
    pub path: PathBuf,
    /// Base name: the current file is `<filename>.ndjson`.
    pub filename: String,
    /// Size a file may reach before the next line goes to a new one, in KiB.
    pub rotate_every_kb: u64,
    /// Files kept, the current one included.
    pub number_of_files: usize,
    /// Mode of the files created.
    pub permissions: u32,
}

impl FileSettings {
    /// Settings with every default and `path` as the directory.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        FileSettings {
            path: path.into(),
            filename: DEFAULT_FILENAME.to_string(),
            rotate_every_kb: DEFAULT_ROTATE_EVERY_KB,
            number_of_files: DEFAULT_NUMBER_OF_FILES,
            permissions: DEFAULT_PERMISSIONS,
        }
    }

    /// The file being written: `<path>/<filename>.ndjson`.
    pub fn current_file(&self) -> PathBuf {
        self.path.join(format!("{}.ndjson", self.filename))
    }

    /// A rotated file: `<path>/<filename>.ndjson.<index>`, 1 the newest.
    pub fn rotated_file(&self, index: usize) -> PathBuf {
        self.path.join(format!("{}.ndjson.{index}", self.filename))
    }

    /// The rotation size in bytes.
    pub fn rotate_bytes(&self) -> u64 {
        self.rotate_every_kb.saturating_mul(1024)
    }
}

/// Reads a `file` output's settings, recording each problem in `errors`.
pub fn parse(
    base: &str,
    keys: &BTreeMap<String, Value>,
    errors: &mut Vec<Problem>,
) -> FileSettings {
    let get = |key: &str| given(keys, key);
    let mut s = FileSettings::new("");
    let path_key = format!("{base}.path");
    match get("path") {
        None => errors.push(Problem::new(
            &path_key,
            "required for a file output: the directory the files are written to",
        )),
        Some(Value::Str(p)) if !p.is_empty() && !p.contains('\0') => s.path = PathBuf::from(p),
        Some(other) => errors.push(Problem::new(
            &path_key,
            format!(
                "must be a non-empty string naming a directory, found {}",
                describe(other)
            ),
        )),
    }
    if let Some(v) = get("filename") {
        match v {
            Value::Str(f) if valid_filename(f) => s.filename = f.clone(),
            other => errors.push(Problem::new(
                format!("{base}.filename"),
                format!(
                    "must be a non-empty file name without `/` (not `.` or `..`), found {}",
                    describe(other)
                ),
            )),
        }
    }
    if let Some(v) = get("rotate_every_kb")
        && let Some(n) = int_in(
            &format!("{base}.rotate_every_kb"),
            v,
            1,
            MAX_ROTATE_EVERY_KB as i64,
            errors,
        )
    {
        s.rotate_every_kb = n as u64;
    }
    if let Some(v) = get("number_of_files")
        && let Some(n) = int_in(
            &format!("{base}.number_of_files"),
            v,
            *NUMBER_OF_FILES_RANGE.start() as i64,
            *NUMBER_OF_FILES_RANGE.end() as i64,
            errors,
        )
    {
        s.number_of_files = n as usize;
    }
    if let Some(v) = get("permissions") {
        match parse_mode(v) {
            Some(mode) => s.permissions = mode,
            None => errors.push(Problem::new(
                format!("{base}.permissions"),
                format!(
                    "must be a file mode from 0 to 0777: an octal string such as \"0600\", \
                     or an octal YAML number such as 0600; found {}",
                    describe(v)
                ),
            )),
        }
    }
    s
}

fn valid_filename(f: &str) -> bool {
    !f.is_empty() && f != "." && f != ".." && !f.contains('/') && !f.contains('\0')
}

/// A file mode from an integer (already the mode, as YAML reads `0600`) or
/// an octal string (`"0600"`, `"600"`, `"0o600"`).
fn parse_mode(v: &Value) -> Option<u32> {
    let mode = match v {
        Value::Int(i) => u32::try_from(*i).ok()?,
        Value::Str(s) => {
            let digits = s.strip_prefix("0o").unwrap_or(s);
            if digits.is_empty() || !digits.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
                return None;
            }
            u32::from_str_radix(digits, 8).ok()?
        }
        _ => return None,
    };
    (mode <= 0o777).then_some(mode)
}
