//! Byte work shared by the network outputs' request bodies.

use std::io::{self, Write as _};

/// A queued NDJSON line without its line end (`\n`, `\r\n`).
pub(super) fn without_line_end(line: &[u8]) -> &[u8] {
    let mut l = line;
    while let [rest @ .., b'\n' | b'\r'] = l {
        l = rest;
    }
    l
}

/// `out` followed by `data` gzipped at `level` (1 fastest, 9 smallest).
pub(super) fn gzip_after(out: Vec<u8>, data: &[u8], level: u32) -> io::Result<Vec<u8>> {
    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::new(level));
    gz.write_all(data)?;
    gz.finish()
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use super::*;

    #[test]
    fn line_ends_go_and_gzip_follows_what_is_there() {
        assert_eq!(without_line_end(b"{}\r\n"), b"{}");
        assert_eq!(without_line_end(b"{}"), b"{}");
        let out = gzip_after(vec![7, 7], b"hello", 1).unwrap();
        assert_eq!(&out[..2], &[7, 7]);
        let mut back = String::new();
        flate2::read::GzDecoder::new(&out[2..])
            .read_to_string(&mut back)
            .unwrap();
        assert_eq!(back, "hello");
    }
}
