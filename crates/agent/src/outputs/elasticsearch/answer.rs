//! Reading a server's answer in bounded memory, without I/O.
//!
//! A `_bulk` answer is judged by each item's `status` and the start of its
//! `error`; a server may still send megabytes (an error quoting a whole
//! document, a proxy's page, a hostile sink). [`Shrink`] keeps what the
//! judgement needs: every JSON string is cut at [`MAX_STRING`] bytes (at a
//! character boundary, escapes kept whole, `...` marking the cut), and
//! the whole is cut at a limit the caller derives from the request (so
//! many items, so many bytes). An answer cut by the limit no longer
//! parses: its request is retried, never judged from half an answer.

/// The longest string of an answer kept whole, in bytes.
pub const MAX_STRING: usize = 512;

/// What is kept of an answer beyond its items.
pub const ANSWER_BASE: usize = 64 * 1024;

/// What one `_bulk` item may take once its strings are cut: an error
/// object has about ten strings of at most [`MAX_STRING`] bytes.
pub const ANSWER_PER_ITEM: usize = 8 * 1024;

/// The bytes kept of an answer to a `_bulk` request of `items` documents.
pub fn bulk_limit(items: usize) -> usize {
    ANSWER_BASE.saturating_add(items.saturating_mul(ANSWER_PER_ITEM))
}

/// An answer read chunk by chunk, its strings cut and its size bounded.
#[derive(Debug)]
pub struct Shrink {
    out: Vec<u8>,
    limit: usize,
    /// Inside a string: its bytes so far.
    string: Option<usize>,
    /// The previous byte was a backslash inside a string.
    backslash: bool,
    /// Hex digits of a `\u` escape still to come.
    hex_left: u8,
    /// The rest of the current string is dropped.
    cutting: bool,
    /// The limit was reached: nothing more is kept.
    full: bool,
}

impl Shrink {
    /// Keeps at most `limit` bytes.
    pub fn new(limit: usize) -> Shrink {
        Shrink {
            out: Vec::with_capacity(limit.min(16 * 1024)),
            limit,
            string: None,
            backslash: false,
            hex_left: 0,
            cutting: false,
            full: false,
        }
    }

    /// Takes the next bytes of the answer; `false` once the limit is
    /// reached (the rest need not be read).
    pub fn feed(&mut self, chunk: &[u8]) -> bool {
        for &b in chunk {
            if self.full {
                return false;
            }
            self.byte(b);
        }
        !self.full
    }

    /// The answer as kept, and whether the limit cut it.
    pub fn finish(self) -> (Vec<u8>, bool) {
        (self.out, self.full)
    }

    fn byte(&mut self, b: u8) {
        let Some(len) = self.string else {
            if b == b'"' {
                self.string = Some(0);
            }
            self.push(b);
            return;
        };
        let in_escape = self.backslash || self.hex_left > 0;
        if !in_escape && b == b'"' {
            if self.cutting {
                self.push_all(b"...");
            }
            self.string = None;
            self.cutting = false;
            self.push(b);
            return;
        }
        // A place where the string may be cut: not inside an escape, nor
        // inside a character's UTF-8 sequence.
        if !self.cutting && !in_escape && b & 0xC0 != 0x80 && len >= MAX_STRING {
            self.cutting = true;
        }
        if self.hex_left > 0 {
            self.hex_left -= 1;
        } else if self.backslash {
            self.backslash = false;
            if b == b'u' {
                self.hex_left = 4;
            }
        } else if b == b'\\' {
            self.backslash = true;
        }
        if !self.cutting {
            self.string = Some(len + 1);
            self.push(b);
        }
    }

    fn push(&mut self, b: u8) {
        if self.out.len() >= self.limit {
            self.full = true;
        } else {
            self.out.push(b);
        }
    }

    fn push_all(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.push(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn shrink(answer: &[u8], limit: usize, chunk: usize) -> (Vec<u8>, bool) {
        let mut s = Shrink::new(limit);
        for c in answer.chunks(chunk.max(1)) {
            if !s.feed(c) {
                break;
            }
        }
        s.finish()
    }

    #[test]
    fn a_huge_reason_is_cut_and_the_answer_still_judged() {
        let reason = "x".repeat(60 * 1024 * 1024);
        let answer = json!({"errors": true, "items": [
            {"create": {"status": 400, "error": {"type": "mapper_parsing_exception", "reason": reason}}},
            {"create": {"status": 201}},
        ]})
        .to_string();
        let (kept, cut) = shrink(answer.as_bytes(), bulk_limit(2), 64 * 1024);
        assert!(!cut);
        assert!(kept.len() < 2 * 1024, "{} bytes kept", kept.len());
        let v: Value = serde_json::from_slice(&kept).expect("still JSON");
        assert_eq!(v["items"][0]["create"]["status"], 400);
        assert_eq!(v["items"][1]["create"]["status"], 201);
        let r = v["items"][0]["create"]["error"]["reason"].as_str().unwrap();
        assert_eq!(r.len(), MAX_STRING + 3);
        assert!(r.ends_with("..."));
    }

    #[test]
    fn an_answer_beyond_the_limit_is_cut_there_and_no_longer_parses() {
        let items: Vec<Value> = (0..10_000)
            .map(|_| json!({"create": {"status": 201}}))
            .collect();
        let answer = json!({"errors": false, "items": items}).to_string();
        let (kept, cut) = shrink(answer.as_bytes(), bulk_limit(1), 4096);
        assert!(cut);
        assert_eq!(kept.len(), bulk_limit(1));
        assert!(serde_json::from_slice::<Value>(&kept).is_err());
        // Plain text (a proxy's page) is bounded the same.
        let page = vec![b'<'; 10 * bulk_limit(1)];
        let (kept, cut) = shrink(&page, bulk_limit(1), 8192);
        assert!(cut && kept.len() == bulk_limit(1));
    }

    #[test]
    fn escapes_and_characters_at_the_cut_stay_whole() {
        for pad in 0..8 {
            let mut s = "a".repeat(MAX_STRING - 4 + pad);
            s.push_str("\u{e9}\u{1F600}\"\\\n\u{1}tail");
            s.push_str(&"é".repeat(600));
            let answer = json!({"reason": s}).to_string();
            let (kept, _) = shrink(answer.as_bytes(), 1 << 20, 7);
            let v: Value = serde_json::from_slice(&kept)
                .unwrap_or_else(|e| panic!("pad {pad}: {e}: {}", String::from_utf8_lossy(&kept)));
            let r = v["reason"].as_str().unwrap();
            assert!(s.starts_with(r.trim_end_matches("...")), "pad {pad}");
        }
    }

    proptest! {
        /// Any JSON answer, fed in any chunks, stays JSON; short strings
        /// stay as they were; long ones keep their start.
        #[test]
        fn any_answer_in_any_chunks_stays_json(
            strings in proptest::collection::vec(".{0,700}", 0..6),
            status in 100u16..600,
            chunk in 1usize..300,
        ) {
            let answer = json!({"status": status, "items": strings}).to_string();
            let (kept, cut) = shrink(answer.as_bytes(), 1 << 20, chunk);
            prop_assert!(!cut);
            let v: Value = serde_json::from_slice(&kept).expect("JSON");
            prop_assert_eq!(&v["status"], &json!(status));
            for (k, s) in strings.iter().enumerate() {
                let got = v["items"][k].as_str().unwrap();
                let escaped = serde_json::to_string(s).unwrap();
                if escaped.len() - 2 <= MAX_STRING {
                    prop_assert_eq!(got, s.as_str());
                } else {
                    prop_assert!(s.starts_with(got.trim_end_matches("...")));
                }
            }
        }
    }
}
