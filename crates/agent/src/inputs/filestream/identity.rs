//! What makes a file the same file: its device and inode while it exists,
//! checked against a fingerprint of its first bytes, because a deleted
//! file's inode is soon given to a new one.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};

use serde::{Deserialize, Serialize};

/// Bytes a fingerprint covers at most (Filebeat's fingerprint length).
pub const FINGERPRINT_BYTES: u64 = 1024;

/// Device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FileId {
    pub device: u64,
    pub inode: u64,
}

impl FileId {
    /// The identity of the file `meta` describes.
    pub fn of(meta: &std::fs::Metadata) -> FileId {
        FileId {
            device: meta.dev(),
            inode: meta.ino(),
        }
    }
}

/// A hash of a file's first `len` bytes (FNV-1a, 64 bits: small, stable
/// across versions and platforms, and only ever compared for equality).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    pub len: u64,
    pub fnv1a: u64,
}

impl Fingerprint {
    /// The fingerprint of `bytes`.
    pub fn of_bytes(bytes: &[u8]) -> Fingerprint {
        Fingerprint {
            len: bytes.len() as u64,
            fnv1a: leasehold_policy::fnv::fnv1a64(bytes),
        }
    }

    /// The fingerprint of the first `len` bytes of `file`, or `None` when
    /// it has fewer.
    pub fn read(file: &File, len: u64) -> io::Result<Option<Fingerprint>> {
        let mut buf = vec![0u8; len.min(FINGERPRINT_BYTES) as usize];
        let mut got = 0;
        while got < buf.len() {
            match file.read_at(&mut buf[got..], got as u64) {
                Ok(0) => return Ok(None),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Some(Fingerprint::of_bytes(&buf)))
    }

    /// The longest fingerprint `file` of `size` bytes has.
    pub fn longest(file: &File, size: u64) -> io::Result<Fingerprint> {
        Ok(Fingerprint::read(file, size.min(FINGERPRINT_BYTES))?
            .unwrap_or_else(|| Fingerprint::of_bytes(&[])))
    }

    /// Whether `file` starts with the bytes this fingerprint was taken of.
    pub fn matches(&self, file: &File) -> io::Result<bool> {
        Ok(Fingerprint::read(file, self.len)? == Some(*self))
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn a_fingerprint_tells_a_grown_file_from_a_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        let mut f = File::create(&path).unwrap();
        f.write_all(b"first line\n").unwrap();
        let fp = Fingerprint::longest(&File::open(&path).unwrap(), 11).unwrap();
        assert_eq!(fp.len, 11);
        f.write_all(&[b'x'; 3000]).unwrap();
        let grown = File::open(&path).unwrap();
        assert!(fp.matches(&grown).unwrap(), "the same file, grown");
        assert_eq!(Fingerprint::longest(&grown, 3011).unwrap().len, 1024);
        std::fs::write(&path, b"other line\n").unwrap();
        assert!(!fp.matches(&File::open(&path).unwrap()).unwrap());
        std::fs::write(&path, b"first").unwrap();
        assert!(
            !fp.matches(&File::open(&path).unwrap()).unwrap(),
            "shorter than the fingerprint: not the same"
        );
        // Stable: the value is part of the registry's format.
        assert_eq!(Fingerprint::of_bytes(b"a").fnv1a, 0xaf63_dc4c_8601_ec8c);
    }
}
