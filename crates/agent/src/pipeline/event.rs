//! The event an input produces and an output writes: one JSON object,
//! serialized once, when it is produced.
//!
//! Inputs give their payload; the runtime's sink adds the common fields
//! (`@timestamp`, `agent`, `input`, `data_stream`, `leader`) and serializes
//! the document before it reaches an output queue, so outputs only move
//! bytes (an Elasticsearch bulk body takes the same bytes as its source).

use std::sync::Arc;

use leasehold_policy::fnv::Fnv64;
use serde_json::{Map, Value};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;

use crate::pipeline::ack::Ack;

/// The leadership term a leader-gated event was produced in. Once the
/// term ends its events must not reach a sink: the successor re-reads
/// them from the last acknowledged checkpoint, so nothing is lost, and no
/// term's data arrives after its successor's. An output that writes such
/// an event holds the term's step-down (see [`GatedTerm::hold`]) for the
/// length of the write.
#[derive(Debug)]
pub struct GatedTerm {
    ended: CancellationToken,
    step_down: TaskTracker,
}

impl GatedTerm {
    /// A term that ends when `ended` is cancelled and whose
    /// step-down waits for `step_down` to empty.
    pub fn new(ended: CancellationToken, step_down: TaskTracker) -> Arc<GatedTerm> {
        Arc::new(GatedTerm { ended, step_down })
    }

    /// A term known to be over: that of a gated event an
    /// earlier run of the agent stored in a disk queue (its term ended
    /// with that run, and its checkpoint never moved past it).
    pub fn of_an_earlier_run() -> Arc<GatedTerm> {
        let ended = CancellationToken::new();
        ended.cancel();
        GatedTerm::new(ended, TaskTracker::new())
    }

    /// True once the term has ended.
    pub fn is_over(&self) -> bool {
        self.ended.is_cancelled()
    }

    /// Keeps the term's step-down from completing while the guard lives.
    /// Take it before checking [`GatedTerm::is_over`]: a write that then
    /// finds the term running finishes before the step-down does.
    pub fn hold(&self) -> TaskTrackerToken {
        self.step_down.token()
    }
}

/// Where an event goes and what it is called there, known when the event
/// is produced and kept beside its line, so an output routes it without
/// parsing the document: the index of its data stream, its `_id`, and
/// where the `@metadata` object (which Elasticsearch does not index) sits
/// in the line. An event without it (one read back from an earlier run's
/// disk queue, or whose payload names its own data stream) is parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    /// `{type}-{dataset}-{namespace}` of its data stream.
    pub index: Arc<str>,
    /// The document id (`@metadata._id`), if the input gives one.
    pub id: Option<Box<str>>,
    /// The bytes `,"@metadata":{…}` occupy in the line, if present.
    pub metadata: Option<std::ops::Range<usize>>,
}

/// `data_stream` parts of an event that names none (or leaves one empty).
pub const DEFAULT_TYPE: &str = "logs";
pub const DEFAULT_DATASET: &str = "generic";
pub const DEFAULT_NAMESPACE: &str = "default";

/// The index of a data stream, `{type}-{dataset}-{namespace}`, with the
/// default of each part that is missing or empty.
pub fn data_stream_index(
    kind: Option<&str>,
    dataset: Option<&str>,
    namespace: Option<&str>,
) -> String {
    let part = |v: Option<&str>, default: &'static str| -> String {
        v.filter(|s| !s.is_empty()).unwrap_or(default).to_string()
    };
    format!(
        "{}-{}-{}",
        part(kind, DEFAULT_TYPE),
        part(dataset, DEFAULT_DATASET),
        part(namespace, DEFAULT_NAMESPACE),
    )
}

/// What travels beside an event's line and is never written anywhere:
/// its acknowledgement, its term and its routing. A disk queue keeps it in
/// memory next to the stored record, so a gated event read back from disk
/// is still acknowledged only when delivered and still discarded when its
/// term ends.
#[derive(Debug)]
pub struct Carried {
    /// Settled once the event is delivered.
    pub ack: Ack,
    /// The leadership term of a gated event.
    pub term: Option<Arc<GatedTerm>>,
    /// Where it goes, as known when it was produced.
    pub meta: Option<Box<Meta>>,
}

/// One event: its NDJSON line (newline included), the id of the input
/// that produced it (kept beside the document for per-input metrics), its
/// acknowledgement (every event ends once: delivered, dropped or
/// discarded), and for leader-gated inputs the term it belongs to.
#[derive(Debug)]
pub struct Event {
    /// The producing input's id.
    pub input_id: Arc<str>,
    line: Vec<u8>,
    ack: Ack,
    term: Option<Arc<GatedTerm>>,
    meta: Option<Box<Meta>>,
}

/// Events are equal when their input and document are: the
/// acknowledgement is how they travel, not what they are.
impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.input_id == other.input_id && self.line == other.line
    }
}

impl Eq for Event {}

impl Event {
    /// An event of `input_id` with `doc` as its document, acknowledged
    /// through `ack`.
    pub fn new(input_id: Arc<str>, doc: Map<String, Value>, ack: Ack) -> Self {
        let mut line = serde_json::to_vec(&doc).unwrap_or_else(|_| b"{}".to_vec());
        line.push(b'\n');
        Event::from_line(input_id, line, ack)
    }

    /// An event whose document is already serialized: `line` must be one
    /// JSON object followed by a newline.
    pub fn from_line(input_id: Arc<str>, line: Vec<u8>, ack: Ack) -> Self {
        Event {
            input_id,
            line,
            ack,
            term: None,
            meta: None,
        }
    }

    /// The same event with another acknowledgement (tests build events
    /// first and pick their acknowledgement after).
    #[cfg(test)]
    pub fn with_ack(mut self, ack: Ack) -> Self {
        self.ack = ack;
        self
    }

    /// The same event, bound to the term of `term`.
    pub fn with_term(mut self, term: Arc<GatedTerm>) -> Self {
        self.term = Some(term);
        self
    }

    /// The same event, with its routing known (see [`Meta`]).
    pub fn with_meta(mut self, meta: Meta) -> Self {
        self.meta = Some(Box::new(meta));
        self
    }

    /// An event put back together from its line and what travelled
    /// beside it (see [`Event::into_parts`]).
    pub fn from_carried(input_id: Arc<str>, line: Vec<u8>, carried: Carried) -> Self {
        Event {
            input_id,
            line,
            ack: carried.ack,
            term: carried.term,
            meta: carried.meta,
        }
    }

    /// Where the event goes, when known without parsing it.
    pub fn meta(&self) -> Option<&Meta> {
        self.meta.as_deref()
    }

    /// The term the event belongs to, if it comes from a gated input.
    pub fn term(&self) -> Option<&Arc<GatedTerm>> {
        self.term.as_ref()
    }

    /// Counts the event queued (see [`Ack::arm`]).
    pub fn arm(&mut self) {
        self.ack.arm();
    }

    /// Settles the acknowledgement: the event was refused for good
    /// before it was queued (counted dropped; its producer moves past it).
    pub fn refuse(self) {
        let mut ack = self.ack;
        ack.mark_dropped();
        ack.settle();
    }

    /// The document as one line of NDJSON, newline included.
    pub fn ndjson(&self) -> &[u8] {
        &self.line
    }

    /// A copy of [`Event::ndjson`].
    pub fn to_ndjson(&self) -> Vec<u8> {
        self.line.clone()
    }

    /// The line, without copying.
    pub fn into_ndjson(self) -> Vec<u8> {
        self.line
    }

    /// The line and what travels beside it, without copying.
    pub fn into_parts(self) -> (Vec<u8>, Carried) {
        (
            self.line,
            Carried {
                ack: self.ack,
                term: self.term,
                meta: self.meta,
            },
        )
    }
}

/// The current time, RFC 3339 in UTC, whole seconds.
pub fn now_rfc3339() -> String {
    let now = jiff::Timestamp::now();
    jiff::Timestamp::from_second(now.as_second())
        .unwrap_or(now)
        .to_string()
}

/// `@timestamp` of an event produced now: RFC 3339, UTC, microseconds.
pub fn timestamp_now() -> String {
    format_timestamp(jiff::Timestamp::now())
}

/// RFC 3339 in UTC with exactly six fractional digits, e.g.
/// `2026-12-03T07:31:48.123456Z`. Written by hand: it runs once per event.
pub fn format_timestamp(t: jiff::Timestamp) -> String {
    let dt = jiff::tz::Offset::UTC.to_datetime(t);
    let micros = t.subsec_microsecond().rem_euclid(1_000_000);
    let mut s = String::with_capacity(27);
    push_digits(&mut s, i64::from(dt.year()), 4);
    s.push('-');
    push_digits(&mut s, i64::from(dt.month()), 2);
    s.push('-');
    push_digits(&mut s, i64::from(dt.day()), 2);
    s.push('T');
    push_digits(&mut s, i64::from(dt.hour()), 2);
    s.push(':');
    push_digits(&mut s, i64::from(dt.minute()), 2);
    s.push(':');
    push_digits(&mut s, i64::from(dt.second()), 2);
    s.push('.');
    push_digits(&mut s, i64::from(micros), 6);
    s.push('Z');
    s
}

fn push_digits(s: &mut String, v: i64, width: usize) {
    let mut buf = [b'0'; 8];
    fill_digits(&mut buf[..width], v.unsigned_abs());
    s.push_str(std::str::from_utf8(&buf[..width]).unwrap_or("0"));
}

/// The last `digits.len()` decimal digits of `v`, zero-padded.
fn fill_digits(digits: &mut [u8], mut v: u64) {
    for slot in digits.iter_mut().rev() {
        *slot = b'0' + (v % 10) as u8;
        v /= 10;
    }
}

/// A deterministic document id: 128 bits (two FNV-1a 64-bit hashes with
/// different offsets) of the parts, each length-prefixed, in hex.
pub fn document_id(parts: &[&str]) -> String {
    let mut a = Fnv64::new();
    let mut b = Fnv64::with_offset(0x8422_2325_cbf2_9ce4);
    let mut feed = |bytes: &[u8]| {
        a.write(bytes);
        for &x in bytes {
            b.write_byte(x.rotate_left(3));
        }
    };
    for p in parts {
        feed(&(p.len() as u64).to_le_bytes());
        feed(p.as_bytes());
    }
    format!("{:016x}{:016x}", a.finish(), b.finish())
}

/// Microseconds since the epoch of an RFC 3339 time. The form container
/// runtimes and the agent write, `YYYY-MM-DDTHH:MM:SS[.fraction]Z`, is
/// read by hand (one per log line); any other form (an offset, a leap
/// second, a lower-case `t`) is read by jiff.
pub fn parse_rfc3339_us(t: &str) -> Option<i64> {
    utc_us(t.as_bytes()).or_else(|| {
        t.parse::<jiff::Timestamp>()
            .ok()
            .map(|ts| ts.as_microsecond())
    })
}

/// `YYYY-MM-DDTHH:MM:SS[.f{1,9}]Z` as microseconds (the fraction
/// truncated toward zero), or `None` for anything else.
fn utc_us(b: &[u8]) -> Option<i64> {
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        b.get(r)?.iter().try_fold(0i64, |n, &c| {
            c.is_ascii_digit().then(|| n * 10 + i64::from(c - b'0'))
        })
    };
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b.last() != Some(&b'Z')
    {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let fraction = &b[19..b.len() - 1];
    let nanos = match fraction {
        [] => 0,
        [b'.', digits @ ..] if (1..=9).contains(&digits.len()) => {
            num(20..20 + digits.len())? * 10i64.pow(9 - digits.len() as u32)
        }
        _ => return None,
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if !(1..=month_days).contains(&day) || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    // Days since 1970-01-01 of a proleptic Gregorian date (years 0000 to
    // 9999 here), counting years from March so that the leap day is last.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    let secs = ((days * 24 + hour) * 60 + minute) * 60 + second;
    // Truncated toward zero, as jiff's `as_microsecond` does before 1970.
    let micros = (i128::from(secs) * 1_000_000_000 + i128::from(nanos)) / 1000;
    i64::try_from(micros).ok()
}

/// RFC 3339 (UTC, microseconds) of a wall-clock time in microseconds.
pub fn rfc3339_us(us: i64) -> String {
    jiff::Timestamp::from_microsecond(us)
        .map(format_timestamp)
        .unwrap_or_else(|_| timestamp_now())
}

/// Appends what [`rfc3339_us`] returns for `us`, without allocating: the
/// text of the whole second is kept per thread, and lines come many to a
/// second, so most events write only their microseconds.
pub fn push_rfc3339_us(out: &mut Vec<u8>, us: i64) {
    use std::cell::Cell;
    /// `YYYY-MM-DDTHH:MM:SS.`: 20 bytes.
    type Head = [u8; 20];
    thread_local! {
        static SECOND: Cell<(i64, Head)> = const { Cell::new((i64::MIN, [0; 20])) };
    }
    let second = us.div_euclid(1_000_000);
    let micros = us.rem_euclid(1_000_000);
    let head = SECOND.with(|c| {
        let (cached, head) = c.get();
        if cached == second {
            return Some(head);
        }
        let text = format_timestamp(jiff::Timestamp::from_second(second).ok()?);
        let head: Head = text.as_bytes().get(..20)?.try_into().ok()?;
        c.set((second, head));
        Some(head)
    });
    let Some(head) = head else {
        out.extend_from_slice(rfc3339_us(us).as_bytes());
        return;
    };
    out.extend_from_slice(&head);
    let mut digits = [b'Z'; 7];
    fill_digits(&mut digits[..6], micros.unsigned_abs());
    out.extend_from_slice(&digits);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pushed(us: i64) -> String {
        let mut out = Vec::new();
        push_rfc3339_us(&mut out, us);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_pushed_time_is_the_formatted_one_across_seconds_and_back() {
        // The same second twice, the next, back again, before 1970, and
        // out of range (now, as `rfc3339_us`).
        for us in [
            1_796_284_960_685_504,
            1_796_284_960_999_999,
            1_796_284_961_000_000,
            1_796_284_960_000_001,
            -1,
            -1_000_000,
            -62_135_596_800_000_000,
            0,
        ] {
            assert_eq!(pushed(us), rfc3339_us(us), "{us}");
        }
        let late = pushed(i64::MAX);
        assert_eq!(late.len(), 27, "{late}");
    }

    proptest::proptest! {
        #[test]
        fn any_pushed_time_is_the_formatted_one(
            us in -377_705_116_800_000_000_i64..253_402_300_796_999_999,
            step in 0_i64..3_000_000,
        ) {
            proptest::prop_assert_eq!(pushed(us), rfc3339_us(us));
            proptest::prop_assert_eq!(pushed(us + step), rfc3339_us(us + step));
        }
    }

    #[test]
    fn timestamps_are_utc_with_microseconds() {
        let t: jiff::Timestamp = "2026-12-03T07:31:48.1234567Z".parse().unwrap();
        assert_eq!(format_timestamp(t), "2026-12-03T07:31:48.123456Z");
        let t: jiff::Timestamp = "2026-12-03T07:31:48Z".parse().unwrap();
        assert_eq!(format_timestamp(t), "2026-12-03T07:31:48.000000Z");
        let t: jiff::Timestamp = "0999-01-02T03:04:05.000007Z".parse().unwrap();
        assert_eq!(format_timestamp(t), "0999-01-02T03:04:05.000007Z");
        // Agrees with jiff's own formatting at every microsecond tested.
        for us in [
            0_i64,
            1,
            999_999,
            1_796_284_960_685_504,
            951_782_400_000_001,
        ] {
            let t = jiff::Timestamp::from_microsecond(us).unwrap();
            assert_eq!(
                format_timestamp(t),
                t.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
            );
        }
    }

    #[test]
    fn the_hand_read_form_agrees_with_jiff_and_others_go_to_jiff() {
        for t in [
            "2026-12-03T10:00:00.000000000Z",
            "2026-12-03T10:00:00Z",
            "2024-02-29T23:59:59.9Z",
            "1970-01-01T00:00:00.000001Z",
            "1969-12-31T23:59:59.999999999Z",
            "0001-03-01T00:00:00Z",
            "2000-02-29T12:00:00.123456789Z",
        ] {
            let jiff = t.parse::<jiff::Timestamp>().unwrap().as_microsecond();
            assert_eq!(utc_us(t.as_bytes()), Some(jiff), "{t}");
        }
        // Not the hand-read form: jiff decides.
        for t in [
            "2026-12-03T10:00:00+01:00",
            "2026-12-03t10:00:00Z",
            "2026-12-03T10:00:60Z",
            "2023-02-29T10:00:00Z",
            "2026-12-03T10:00:00.Z",
            "2026-12-03T10:00:00.1234567890Z",
            "2026-13-03T10:00:00Z",
        ] {
            assert_eq!(utc_us(t.as_bytes()), None, "{t}");
            assert_eq!(
                parse_rfc3339_us(t),
                t.parse::<jiff::Timestamp>()
                    .ok()
                    .map(|x| x.as_microsecond()),
                "{t}"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn any_utc_time_reads_as_jiff_reads_it(
            secs in -62_135_596_800_i64..253_402_300_799,
            nanos in 0u32..1_000_000_000,
            digits in 0usize..=9,
        ) {
            let t = jiff::Timestamp::new(secs, 0).unwrap();
            let base = t.strftime("%Y-%m-%dT%H:%M:%S").to_string();
            let fraction = format!("{nanos:09}");
            let text = match digits {
                0 => format!("{base}Z"),
                n => format!("{base}.{}Z", &fraction[..n]),
            };
            let jiff = text.parse::<jiff::Timestamp>().unwrap().as_microsecond();
            proptest::prop_assert_eq!(parse_rfc3339_us(&text), Some(jiff), "{}", text);
            proptest::prop_assert_eq!(utc_us(text.as_bytes()), Some(jiff), "{}", text);
        }
    }

    #[test]
    fn ndjson_is_one_line() {
        let mut doc = Map::new();
        doc.insert("message".into(), Value::String("a\nb".into()));
        let line = Event::new("x".into(), doc, Ack::untracked()).into_ndjson();
        assert_eq!(line, b"{\"message\":\"a\\nb\"}\n");
    }
}
