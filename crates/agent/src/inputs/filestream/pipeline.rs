//! A file's lines through its `parsers`, in the order written: container
//! records joined per stream, multiline groups, NDJSON. Each message keeps
//! the offsets of the bytes it came from, so the registry records the end
//! of the last line of a message only once the message is delivered. No
//! I/O: the reader feeds lines and the clock.

use std::time::{Duration, Instant};

use regex::Regex;
use serde_json::{Map, Value};

use super::parsers::{self, Joiner, Match, Multiline, Record, Stream};

/// `container.stream`: which of a container's streams to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamFilter {
    All,
    Only(Stream),
}

/// `container.format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Auto,
    Cri,
    Docker,
}

/// `ndjson`'s settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NdjsonSettings {
    /// Where the decoded keys go; empty: the document's root.
    pub target: String,
    /// The decoded key whose text becomes `message`.
    pub message_key: Option<String>,
    /// Decoded keys replace the agent's own (`message`, `log` …).
    pub overwrite_keys: bool,
    /// A line that is not a JSON object gets `error.message`.
    pub add_error_key: bool,
}

/// One parser, as configured.
#[derive(Debug, Clone)]
pub enum ParserSpec {
    Container {
        stream: StreamFilter,
        format: Format,
    },
    Multiline {
        pattern: Regex,
        negate: bool,
        how: Match,
        max_lines: usize,
        timeout: Duration,
    },
    Ndjson(NdjsonSettings),
}

/// A line or a group of lines on its way to becoming an event.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub text: String,
    /// Offset of its first byte in the file.
    pub start: u64,
    /// Offset just after its last line.
    pub end: u64,
    /// The container runtime's time of the record.
    pub time: Option<String>,
    pub stream: Option<Stream>,
    /// Keys decoded by `ndjson`.
    pub decoded: Option<Map<String, Value>>,
    /// Why a parser could not read it (the text is kept as it was).
    pub error: Option<String>,
    /// Flags Filebeat writes to `log.flags` (`truncated`, `multiline`).
    pub flags: Vec<&'static str>,
}

impl Message {
    /// A raw line of the file.
    pub fn line(text: String, start: u64, end: u64) -> Message {
        Message {
            text,
            start,
            end,
            time: None,
            stream: None,
            decoded: None,
            error: None,
            flags: Vec::new(),
        }
    }
}

/// A parser with its state.
enum Stage {
    Container {
        stream: StreamFilter,
        format: Format,
        joiner: Joiner,
        /// Each stream's partial line: the offsets of its first byte and
        /// of the end of its last part (its text is in the joiner).
        starts: [Option<(u64, u64)>; 2],
    },
    Multiline {
        lines: Multiline,
        timeout: Duration,
        /// The first message of the group being gathered, and when its
        /// last line came.
        head: Option<Message>,
        last_end: u64,
        count: usize,
        since: Option<Instant>,
    },
    Ndjson(NdjsonSettings),
}

/// The parsers of one file.
pub struct Pipeline {
    stages: Vec<Stage>,
}

impl Pipeline {
    /// A pipeline of `specs`, in order.
    pub fn new(specs: &[ParserSpec]) -> Pipeline {
        let stages = specs
            .iter()
            .map(|s| match s {
                ParserSpec::Container { stream, format } => Stage::Container {
                    stream: *stream,
                    format: *format,
                    joiner: Joiner::default(),
                    starts: [None, None],
                },
                ParserSpec::Multiline {
                    pattern,
                    negate,
                    how,
                    max_lines,
                    timeout,
                } => Stage::Multiline {
                    lines: Multiline::new(pattern.clone(), *negate, *how, *max_lines),
                    timeout: *timeout,
                    head: None,
                    last_end: 0,
                    count: 0,
                    since: None,
                },
                ParserSpec::Ndjson(n) => Stage::Ndjson(n.clone()),
            })
            .collect();
        Pipeline { stages }
    }

    /// Feeds one line; returns the messages it completes.
    pub fn push(&mut self, line: Message, now: Instant) -> Vec<Message> {
        let out = self.run_from(0, vec![line], now);
        self.clamp(out)
    }

    /// The first byte of a line some parser holds back, if any.
    fn held_from(&self) -> Option<u64> {
        self.stages
            .iter()
            .filter_map(|s| match s {
                Stage::Container { starts, .. } => starts.iter().flatten().map(|p| p.0).min(),
                Stage::Multiline { head, .. } => head.as_ref().map(|h| h.start),
                Stage::Ndjson(_) => None,
            })
            .min()
    }

    /// A message's `end` is where a restart may resume once it is
    /// delivered: never past a line still held back (stdout and stderr
    /// interleave, so a whole stderr line can end after a partial stdout
    /// line began).
    fn clamp(&self, mut out: Vec<Message>) -> Vec<Message> {
        if let Some(held) = self.held_from() {
            for m in &mut out {
                m.end = m.end.min(held);
            }
        }
        out
    }

    /// Messages a multiline group waited too long for: flushed.
    pub fn flush_due(&mut self, now: Instant) -> Vec<Message> {
        let mut out = Vec::new();
        for i in 0..self.stages.len() {
            let due = match &mut self.stages[i] {
                Stage::Multiline {
                    since: Some(t),
                    timeout,
                    ..
                } if now.duration_since(*t) >= *timeout => flush_multiline(&mut self.stages[i]),
                _ => None,
            };
            if let Some(m) = due {
                out.extend(self.run_from(i + 1, vec![m], now));
            }
        }
        self.clamp(out)
    }

    /// True while some parser holds lines back (a partial record, a
    /// multiline group).
    pub fn holds_lines(&self) -> bool {
        self.stages.iter().any(|s| match s {
            Stage::Container { starts, .. } => starts.iter().any(Option::is_some),
            Stage::Multiline { head, .. } => head.is_some(),
            Stage::Ndjson(_) => false,
        })
    }

    /// Everything held back, as messages: the file ends here.
    pub fn finish(&mut self, now: Instant) -> Vec<Message> {
        let mut out = Vec::new();
        for i in 0..self.stages.len() {
            let held: Vec<Message> = match &mut self.stages[i] {
                Stage::Container { joiner, starts, .. } => {
                    let mut held = Vec::new();
                    for s in [Stream::Stdout, Stream::Stderr] {
                        if let Some((start, end)) = starts[s as usize].take()
                            && let Some(r) = joiner.take(s)
                        {
                            held.push(from_record(r, start, end));
                        }
                    }
                    held.sort_by_key(|m| m.start);
                    held
                }
                stage @ Stage::Multiline { .. } => flush_multiline(stage).into_iter().collect(),
                Stage::Ndjson(_) => Vec::new(),
            };
            if !held.is_empty() {
                out.extend(self.run_from(i + 1, held, now));
            }
        }
        out
    }

    fn run_from(&mut self, first: usize, mut msgs: Vec<Message>, now: Instant) -> Vec<Message> {
        for stage in self.stages.iter_mut().skip(first) {
            let mut next = Vec::with_capacity(msgs.len());
            for m in msgs {
                stage_push(stage, m, now, &mut next);
            }
            msgs = next;
        }
        msgs
    }
}

fn from_record(r: Record, start: u64, end: u64) -> Message {
    Message {
        text: r.content,
        start,
        end,
        time: Some(r.time),
        stream: Some(r.stream),
        decoded: None,
        error: None,
        flags: Vec::new(),
    }
}

fn stage_push(stage: &mut Stage, mut m: Message, now: Instant, out: &mut Vec<Message>) {
    match stage {
        Stage::Container {
            stream,
            format,
            joiner,
            starts,
        } => {
            let record = match format {
                Format::Auto => parsers::container(&mut m.text),
                Format::Cri => parsers::cri_taken(&mut m.text),
                Format::Docker => parsers::docker_json(&m.text),
            };
            let Some(r) = record else {
                out.push(Message {
                    error: Some("not a CRI or Docker JSON container log record".into()),
                    ..m
                });
                return;
            };
            let s = r.stream as usize;
            let part = starts[s].get_or_insert((m.start, m.end));
            part.1 = m.end;
            let start = part.0;
            let keep = match stream {
                StreamFilter::All => true,
                StreamFilter::Only(only) => *only == r.stream,
            };
            if let Some(whole) = joiner.push(r) {
                starts[s] = None;
                if keep {
                    out.push(from_record(whole, start, m.end));
                }
            }
        }
        Stage::Multiline {
            lines,
            head,
            last_end,
            count,
            since,
            ..
        } => {
            let mut meta = m;
            let text = std::mem::take(&mut meta.text);
            let end = meta.end;
            let was_empty = head.is_none();
            let done = lines.push(text);
            match done {
                Some(text) if !lines.is_empty() => {
                    // `after`: the group before this line is complete;
                    // this line starts the next one.
                    let h = head.replace(meta).unwrap_or_default_message();
                    out.push(group(h, text, *last_end, *count));
                    *count = 1;
                }
                Some(text) => {
                    // `before`: this line completes the group.
                    let h = if was_empty {
                        meta
                    } else {
                        head.take().unwrap_or_default_message()
                    };
                    *head = None;
                    out.push(group(h, text, end, *count + 1));
                    *count = 0;
                }
                None => {
                    if was_empty {
                        *head = Some(meta);
                        *count = 0;
                    }
                    *count += 1;
                }
            }
            *last_end = end;
            *since = head.as_ref().map(|_| now);
        }
        Stage::Ndjson(n) => out.push(decode(n, m)),
    }
}

/// `head` with the group's text, end and flags.
fn group(head: Message, text: String, end: u64, lines: usize) -> Message {
    let mut flags = head.flags;
    if lines > 1 {
        flags.push("multiline");
    }
    Message {
        text,
        end,
        flags,
        ..head
    }
}

fn flush_multiline(stage: &mut Stage) -> Option<Message> {
    let Stage::Multiline {
        lines,
        head,
        last_end,
        count,
        since,
        ..
    } = stage
    else {
        return None;
    };
    *since = None;
    let text = lines.flush()?;
    let h = head.take()?;
    let n = std::mem::take(count);
    Some(group(h, text, *last_end, n))
}

trait OrDefaultMessage {
    fn unwrap_or_default_message(self) -> Message;
}

impl OrDefaultMessage for Option<Message> {
    fn unwrap_or_default_message(self) -> Message {
        self.unwrap_or_else(|| Message::line(String::new(), 0, 0))
    }
}

/// Decodes `m`'s line. As in Filebeat, a decoded line's text is the
/// `message_key`'s string, or nothing: the raw line is not kept beside
/// the keys it was decoded into (a document would carry it twice), so the
/// event's `message` is the decoded one when the line has one. A line
/// that is not a JSON object keeps its text.
fn decode(n: &NdjsonSettings, m: Message) -> Message {
    match serde_json::from_str::<Value>(&m.text) {
        Ok(Value::Object(mut keys)) => {
            let text = n
                .message_key
                .as_ref()
                .and_then(|k| keys.get(k))
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_default();
            let decoded = if n.target.is_empty() {
                keys
            } else {
                let mut wrapped = Map::new();
                wrapped.insert(n.target.clone(), Value::Object(std::mem::take(&mut keys)));
                wrapped
            };
            Message {
                text,
                decoded: Some(decoded),
                ..m
            }
        }
        Ok(_) | Err(_) if n.add_error_key => Message {
            error: Some("the line is not a JSON object (ndjson parser)".into()),
            ..m
        },
        Ok(_) | Err(_) => m,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(p: &mut Pipeline, lines: &[&str]) -> Vec<Message> {
        let now = Instant::now();
        let mut out = Vec::new();
        let mut at = 0u64;
        for l in lines {
            let end = at + l.len() as u64 + 1;
            out.extend(p.push(Message::line(l.to_string(), at, end), now));
            at = end;
        }
        out
    }

    fn container() -> ParserSpec {
        ParserSpec::Container {
            stream: StreamFilter::All,
            format: Format::Auto,
        }
    }

    fn java_multiline() -> ParserSpec {
        ParserSpec::Multiline {
            pattern: Regex::new(r"^\s+at |^Caused by:|^\s+\.\.\. \d+ more").unwrap(),
            negate: false,
            how: Match::After,
            max_lines: 500,
            timeout: Duration::from_secs(5),
        }
    }

    #[test]
    fn partial_cri_records_are_joined_per_stream_with_the_offsets_of_all_parts() {
        let mut p = Pipeline::new(&[container()]);
        let lines = [
            "2026-12-03T10:00:00.000000001Z stdout P hello ",
            "2026-12-03T10:00:00.000000002Z stderr F an error",
            "2026-12-03T10:00:00.000000003Z stdout P big ",
            "2026-12-03T10:00:00.000000004Z stdout F world",
        ];
        let out = feed(&mut p, &lines);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].text, "an error");
        assert_eq!(out[0].stream, Some(Stream::Stderr));
        assert_eq!(out[1].text, "hello big world");
        assert_eq!(out[1].stream, Some(Stream::Stdout));
        assert_eq!(
            out[1].time.as_deref(),
            Some("2026-12-03T10:00:00.000000001Z")
        );
        assert_eq!(out[1].start, 0, "starts at the first part");
        let total: u64 = lines.iter().map(|l| l.len() as u64 + 1).sum();
        assert_eq!(out[1].end, total, "ends after the last part");
        assert!(!p.holds_lines());
    }

    #[test]
    fn docker_json_lines_split_over_16k_are_joined() {
        let mut p = Pipeline::new(&[container()]);
        let out = feed(
            &mut p,
            &[
                r#"{"log":"first half ","stream":"stdout","time":"2026-12-03T10:00:00.1Z"}"#,
                r#"{"log":"second half\n","stream":"stdout","time":"2026-12-03T10:00:00.2Z"}"#,
                r#"{"log":"alone\n","stream":"stderr","time":"2026-12-03T10:00:00.3Z"}"#,
            ],
        );
        let texts: Vec<&str> = out.iter().map(|m| m.text.as_str()).collect();
        assert_eq!(texts, ["first half second half", "alone"]);
        assert_eq!(out[1].stream, Some(Stream::Stderr));
    }

    #[test]
    fn a_java_stack_trace_in_cri_records_becomes_one_event() {
        let mut p = Pipeline::new(&[container(), java_multiline()]);
        let t = "2026-12-03T10:00:00.000000001Z stdout F";
        let lines = [
            format!("{t} Exception in thread \"main\" java.lang.IllegalStateException: boom"),
            format!("{t} \tat com.example.App.run(App.java:42)"),
            format!("{t} \tat com.example.App.main(App.java:7)"),
            format!("{t} Caused by: java.io.IOException: disk"),
            format!("{t} \t... 2 more"),
            format!("{t} next event"),
        ];
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        let out = feed(&mut p, &refs);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].text.lines().count(), 5);
        assert!(out[0].text.starts_with("Exception in thread"));
        assert!(out[0].text.ends_with("\t... 2 more"));
        assert_eq!(out[0].flags, ["multiline"]);
        assert_eq!(out[0].start, 0);
        let five: u64 = lines[..5].iter().map(|l| l.len() as u64 + 1).sum();
        assert_eq!(
            out[0].end, five,
            "the group ends where the next line starts"
        );
        assert!(p.holds_lines(), "`next event` waits for its own group");
        // The timeout flushes it.
        let later = Instant::now() + Duration::from_secs(6);
        let due = p.flush_due(later);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].text, "next event");
        assert!(due[0].flags.is_empty());
        assert!(!p.holds_lines());
    }

    #[test]
    fn multiline_before_ends_a_group_on_a_non_matching_line() {
        let mut p = Pipeline::new(&[ParserSpec::Multiline {
            pattern: Regex::new(r"\\$").unwrap(),
            negate: false,
            how: Match::Before,
            max_lines: 10,
            timeout: Duration::from_secs(5),
        }]);
        let out = feed(&mut p, &["a \\", "b \\", "c", "d"]);
        let texts: Vec<&str> = out.iter().map(|m| m.text.as_str()).collect();
        assert_eq!(texts, ["a \\\nb \\\nc", "d"]);
        assert_eq!(out[0].end, 10);
        assert_eq!(out[1].start, 10);
        assert_eq!(out[1].end, 12);
    }

    #[test]
    fn ndjson_decodes_into_the_target_and_marks_what_it_cannot_read() {
        let mut p = Pipeline::new(&[ParserSpec::Ndjson(NdjsonSettings {
            target: "json".into(),
            message_key: Some("msg".into()),
            overwrite_keys: false,
            add_error_key: true,
        })]);
        let out = feed(&mut p, &[r#"{"msg":"hi","level":"info"}"#, "not json"]);
        assert_eq!(out[0].text, "hi");
        assert_eq!(out[0].decoded.as_ref().unwrap()["json"]["level"], "info");
        assert_eq!(out[1].text, "not json");
        assert!(
            out[1]
                .error
                .as_deref()
                .unwrap()
                .contains("not a JSON object")
        );
    }

    #[test]
    fn a_decoded_line_without_message_key_keeps_no_text() {
        let mut p = Pipeline::new(&[ParserSpec::Ndjson(NdjsonSettings {
            target: String::new(),
            message_key: None,
            overwrite_keys: false,
            add_error_key: false,
        })]);
        let out = feed(&mut p, &[r#"{"message":"hi","n":1}"#, "plain"]);
        assert_eq!(out[0].text, "", "the line is in its keys, not beside them");
        assert_eq!(out[0].decoded.as_ref().unwrap()["message"], "hi");
        assert_eq!(out[1].text, "plain");
        assert!(out[1].decoded.is_none());
    }

    #[test]
    fn a_line_that_is_no_container_record_is_kept_with_an_error() {
        let mut p = Pipeline::new(&[container()]);
        let out = feed(&mut p, &["garbage"]);
        assert_eq!(out[0].text, "garbage");
        assert!(out[0].error.is_some());
    }

    #[test]
    fn finish_hands_over_what_is_held_back() {
        let mut p = Pipeline::new(&[container(), java_multiline()]);
        let out = feed(
            &mut p,
            &[
                "2026-12-03T10:00:00Z stdout F one",
                "2026-12-03T10:00:00Z stdout P two-",
            ],
        );
        assert!(out.is_empty());
        let rest = p.finish(Instant::now());
        let texts: Vec<&str> = rest.iter().map(|m| m.text.as_str()).collect();
        assert_eq!(
            texts,
            ["one", "two-"],
            "in order: the group, then the partial"
        );
        assert!(!p.holds_lines());
    }
}
