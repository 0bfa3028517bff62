//! A JSON string written into a document being built. Each log line's
//! `message` is most of its document's bytes, and almost never holds a
//! byte JSON must escape: the writer finds the clean run before the next
//! such byte 16 bytes at a time (SSE2, part of every x86-64; eight at a
//! time by word arithmetic elsewhere) and copies it whole, where
//! `serde_json` looks up every byte. The output is byte for byte
//! `serde_json`'s (the property test holds it).

/// Appends `s` as a quoted JSON string.
pub fn push_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut i = 0;
    loop {
        let run = clean_run(&bytes[i..]);
        out.extend_from_slice(&bytes[i..i + run]);
        i += run;
        let Some(&b) = bytes.get(i) else { break };
        match escape(b) {
            Some(escaped) => push_escape(out, b, escaped),
            None => out.push(b),
        }
        i += 1;
    }
    out.push(b'"');
}

/// How many bytes `b` starts with that JSON leaves as they are.
#[cfg(target_arch = "x86_64")]
fn clean_run(b: &[u8]) -> usize {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_max_epu8, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8,
    };
    /// Bit k set where byte k of the 16 at `at` needs escaping.
    fn dirty(b: &[u8], at: usize) -> u32 {
        let block = &b[at..at + 16];
        // SAFETY: SSE2 is in every x86-64's baseline (the intrinsics are
        // `unsafe` only for want of a `#[target_feature]` here); the load is
        // unaligned and reads exactly `block`'s 16 bytes.
        unsafe {
            let v = _mm_loadu_si128(block.as_ptr().cast::<__m128i>());
            let quote = _mm_set1_epi8(b'"' as i8);
            let backslash = _mm_set1_epi8(b'\\' as i8);
            let last_control = _mm_set1_epi8(0x1f);
            // max(v, 0x1f) == 0x1f exactly where v <= 0x1f (unsigned).
            let control = _mm_cmpeq_epi8(_mm_max_epu8(v, last_control), last_control);
            let special = _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash));
            _mm_movemask_epi8(_mm_or_si128(control, special)) as u32
        }
    }
    if b.len() < 16 {
        return clean_run_bytes(b);
    }
    let mut at = 0;
    while at + 16 <= b.len() {
        let mask = dirty(b, at);
        if mask != 0 {
            return at + mask.trailing_zeros() as usize;
        }
        at += 16;
    }
    if at == b.len() {
        return at;
    }
    // The last 16 bytes, overlapping what was found clean.
    let last = b.len() - 16;
    match dirty(b, last) {
        0 => b.len(),
        mask => last + mask.trailing_zeros() as usize,
    }
}

/// As the SSE2 version, eight bytes at a time by word arithmetic.
#[cfg(any(test, not(target_arch = "x86_64")))]
fn clean_run_words(b: &[u8]) -> usize {
    let mut at = 0;
    while let Some(word) = b.get(at..at + 8) {
        if needs_escape(word_at(word, 0)) {
            break;
        }
        at += 8;
    }
    at + clean_run_bytes(&b[at..])
}

#[cfg(not(target_arch = "x86_64"))]
fn clean_run(b: &[u8]) -> usize {
    clean_run_words(b)
}

/// One byte at a time.
fn clean_run_bytes(b: &[u8]) -> usize {
    b.iter()
        .position(|&c| escape(c).is_some())
        .unwrap_or(b.len())
}

/// Appends `n` in decimal, without the allocation of `to_string`.
pub fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// The eight bytes of `b` from `at` (which has them) as one word.
#[cfg(any(test, not(target_arch = "x86_64")))]
fn word_at(b: &[u8], at: usize) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(word)
}

#[cfg(any(test, not(target_arch = "x86_64")))]
const ONES: u64 = 0x0101_0101_0101_0101;
#[cfg(any(test, not(target_arch = "x86_64")))]
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Whether some byte of `word` is zero (exact for the word as a whole).
#[cfg(any(test, not(target_arch = "x86_64")))]
fn has_zero(word: u64) -> bool {
    word.wrapping_sub(ONES) & !word & HIGHS != 0
}

/// Whether some byte of `word` is a control character, `"` or `\`.
#[cfg(any(test, not(target_arch = "x86_64")))]
fn needs_escape(word: u64) -> bool {
    // A byte below 0x20: subtracting 0x20 borrows into its high bit, and
    // the byte's own high bit was clear (UTF-8 bytes >= 0x80 are excluded).
    let control = word.wrapping_sub(ONES * 0x20) & !word & HIGHS != 0;
    control
        || has_zero(word ^ (ONES * u64::from(b'"')))
        || has_zero(word ^ (ONES * u64::from(b'\\')))
}

/// How `b` is escaped: its short form, `u` for `\u00XX`, or `None`.
fn escape(b: u8) -> Option<u8> {
    match b {
        b'"' => Some(b'"'),
        b'\\' => Some(b'\\'),
        b'\n' => Some(b'n'),
        b'\r' => Some(b'r'),
        b'\t' => Some(b't'),
        0x08 => Some(b'b'),
        0x0c => Some(b'f'),
        0x00..=0x1f => Some(b'u'),
        _ => None,
    }
}

fn push_escape(out: &mut Vec<u8>, b: u8, escaped: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    if escaped == b'u' {
        out.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[usize::from(b >> 4)],
            HEX[usize::from(b & 0xf)],
        ]);
    } else {
        out.extend_from_slice(&[b'\\', escaped]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn serde(s: &str) -> Vec<u8> {
        serde_json::to_vec(s).unwrap()
    }

    fn mine(s: &str) -> Vec<u8> {
        let mut out = Vec::new();
        push_str(&mut out, s);
        out
    }

    #[test]
    fn every_byte_that_needs_escaping_is_escaped_as_serde_json_does() {
        for b in 0u8..=0x7f {
            let c = char::from(b);
            // At every position of a block and of a word, and in the tail.
            for at in 0..70 {
                let mut s = "x".repeat(at);
                s.push(c);
                s.push_str(&"y".repeat(70 - at));
                assert_eq!(mine(&s), serde(&s), "byte {b:#04x} at {at}");
            }
        }
        let s = "héllo \u{1F600} wörld\u{7f}\u{80}\u{ff}";
        assert_eq!(mine(s), serde(s));
        assert_eq!(mine(""), b"\"\"");
    }

    #[test]
    fn every_clean_run_finder_stops_at_the_first_byte_to_escape() {
        for b in 0u8..=0xff {
            for len in 0..70 {
                for at in 0..=len {
                    let mut s = vec![b'x'; len];
                    if at < len {
                        s[at] = b;
                    }
                    let want = if at < len && escape(b).is_some() {
                        at
                    } else {
                        len
                    };
                    assert_eq!(clean_run(&s), want, "byte {b:#04x} at {at} of {len}");
                    assert_eq!(
                        clean_run_words(&s),
                        want,
                        "words: byte {b:#04x} at {at} of {len}"
                    );
                    assert_eq!(
                        clean_run_bytes(&s),
                        want,
                        "bytes: byte {b:#04x} at {at} of {len}"
                    );
                }
            }
        }
    }

    #[test]
    fn numbers_are_written_as_to_string_writes_them() {
        for n in [0, 1, 9, 10, 99, 100, 123_456_789, u64::MAX - 1, u64::MAX] {
            let mut out = b"x".to_vec();
            push_u64(&mut out, n);
            assert_eq!(out, format!("x{n}").into_bytes());
        }
    }

    proptest! {
        #[test]
        fn the_output_is_serde_jsons(
            s in "(?s:.{0,80})",
            special in "[\"\\\\\\x00-\\x1fa-z\u{e9}]{0,40}",
            clean in "[a-z ]{0,40}",
        ) {
            // Mostly-clean strings with escapes spread through them.
            let mixed = format!("{clean}{special}{clean}{s}");
            prop_assert_eq!(mine(&mixed), serde(&mixed));
            prop_assert_eq!(mine(&s), serde(&s));
            prop_assert_eq!(mine(&special), serde(&special));
        }

        #[test]
        fn any_number_is_written_as_to_string_writes_it(n: u64) {
            let mut out = Vec::new();
            push_u64(&mut out, n);
            prop_assert_eq!(out, n.to_string().into_bytes());
        }
    }
}
