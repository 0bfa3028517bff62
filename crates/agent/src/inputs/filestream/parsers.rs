//! The line formats of container logs and the joining of lines into
//! events, without I/O: CRI (`/var/log/containers/*.log` under containerd
//! and CRI-O) and Docker's JSON lines, partial CRI records joined into one,
//! `multiline` as Filebeat defines it, and the Kubernetes names a log
//! file's path carries.

use regex::Regex;

/// Which stream a container wrote a line to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn parse(s: &str) -> Option<Stream> {
        match s {
            "stdout" => Some(Stream::Stdout),
            "stderr" => Some(Stream::Stderr),
            _ => None,
        }
    }

    /// As the formats and Filebeat's `stream` field write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// One record of a container log, either format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The runtime's timestamp (RFC 3339, as written).
    pub time: String,
    pub stream: Stream,
    /// False for a CRI `P` record: the line goes on in the next record.
    pub complete: bool,
    /// The text, without the line's own newline.
    pub content: String,
}

/// A CRI record: `TIME STREAM TAG CONTENT`, TAG `F` (full) or `P`
/// (partial), possibly with more `:`-separated tags.
#[cfg(test)]
pub fn cri(line: &str) -> Option<Record> {
    cri_taken(&mut line.to_string())
}

/// [`cri`] of a line the caller owns: on success the line is taken and
/// becomes the record's content in place (no copy of the text, most of
/// its bytes); otherwise it is left as it was.
pub fn cri_taken(line: &mut String) -> Option<Record> {
    let (time, stream, complete, head) = {
        let mut parts = line.splitn(4, ' ');
        let time = parts.next()?;
        let stream = Stream::parse(parts.next()?)?;
        let tag = parts.next()?;
        let complete = match tag.split(':').next()? {
            "F" => true,
            "P" => false,
            _ => return None,
        };
        if !time.contains('T') {
            return None;
        }
        // TIME STREAM TAG, a space after each (the content may be absent).
        let head = (time.len() + stream.as_str().len() + tag.len() + 3).min(line.len());
        (time.to_string(), stream, complete, head)
    };
    let mut content = std::mem::take(line);
    content.drain(..head);
    let kept = content.trim_end_matches(['\n', '\r']).len();
    content.truncate(kept);
    Some(Record {
        time,
        stream,
        complete,
        content,
    })
}

/// A Docker `json-file` line: `{"log": "...\n", "stream": "...", "time": "..."}`.
/// A `log` without a trailing newline is a partial line (Docker splits
/// lines over 16 KiB).
pub fn docker_json(line: &str) -> Option<Record> {
    #[derive(serde::Deserialize)]
    struct Line {
        log: String,
        stream: String,
        time: String,
    }
    let l: Line = serde_json::from_str(line).ok()?;
    let complete = l.log.ends_with('\n');
    Some(Record {
        time: l.time,
        stream: Stream::parse(&l.stream)?,
        complete,
        content: l.log.trim_end_matches(['\n', '\r']).to_string(),
    })
}

/// A container log line in either format, CRI first.
pub fn container(line: &mut String) -> Option<Record> {
    if line.starts_with('{') {
        docker_json(line).or_else(|| cri_taken(line))
    } else {
        cri_taken(line)
    }
}

/// Joins partial records into whole lines, per stream (stdout and stderr
/// interleave in one file).
#[derive(Debug, Default)]
pub struct Joiner {
    pending: [Option<Record>; 2],
}

impl Joiner {
    /// Adds a record; returns the whole line once its last part arrives.
    pub fn push(&mut self, r: Record) -> Option<Record> {
        let slot = &mut self.pending[r.stream as usize];
        let joined = match slot.take() {
            Some(mut head) => {
                head.content.push_str(&r.content);
                head.complete = r.complete;
                head
            }
            None => r,
        };
        if joined.complete {
            Some(joined)
        } else {
            *slot = Some(joined);
            None
        }
    }

    /// The partial line of `stream` gathered so far, if any.
    pub fn take(&mut self, stream: Stream) -> Option<Record> {
        self.pending[stream as usize].take()
    }
}

/// `multiline.match`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// Matching lines are appended to the line after them.
    Before,
    /// Matching lines are appended to the line before them.
    After,
}

/// Filebeat's `multiline` with `type: pattern`: a line "matches" when
/// `pattern` finds it (inverted by `negate`); matching lines join the
/// event before (`after`) or after (`before`) them. The caller flushes
/// on its timeout or at the end of a file.
#[derive(Debug)]
pub struct Multiline {
    pattern: Regex,
    negate: bool,
    how: Match,
    /// Most lines in one event (`max_lines`); the rest are dropped.
    max_lines: usize,
    event: Vec<String>,
}

impl Multiline {
    pub fn new(pattern: Regex, negate: bool, how: Match, max_lines: usize) -> Multiline {
        Multiline {
            pattern,
            negate,
            how,
            max_lines: max_lines.max(1),
            event: Vec::new(),
        }
    }

    fn matches(&self, line: &str) -> bool {
        self.pattern.is_match(line) != self.negate
    }

    /// Adds a line; returns an event when this line completes one.
    pub fn push(&mut self, line: String) -> Option<String> {
        let m = self.matches(&line);
        match self.how {
            Match::After => {
                // A non-matching line starts a new event.
                let done = if !m && !self.event.is_empty() {
                    self.flush()
                } else {
                    None
                };
                self.add(line);
                done
            }
            Match::Before => {
                // A non-matching line ends the event.
                self.add(line);
                if m { None } else { self.flush() }
            }
        }
    }

    fn add(&mut self, line: String) {
        if self.event.len() < self.max_lines {
            self.event.push(line);
        }
    }

    /// True when no line is gathered.
    pub fn is_empty(&self) -> bool {
        self.event.is_empty()
    }

    /// The event gathered so far, if any.
    pub fn flush(&mut self) -> Option<String> {
        if self.event.is_empty() {
            return None;
        }
        Some(std::mem::take(&mut self.event).join("\n"))
    }
}

/// The Kubernetes names in a container log's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodLog {
    pub namespace: String,
    pub pod_name: String,
    /// Only `/var/log/pods/` paths carry it.
    pub pod_uid: Option<String>,
    pub container_name: String,
    /// Only `/var/log/containers/` names carry it.
    pub container_id: Option<String>,
}

/// Reads `/var/log/containers/POD_NAMESPACE_CONTAINER-ID.log` or
/// `/var/log/pods/NAMESPACE_POD_UID/CONTAINER/N.log` (also as kubelet
/// renames it at rotation, `N.log.TIME`, where the rest of a rotated file
/// is read from). Pod and namespace names cannot hold `_`, which makes the
/// split unambiguous.
pub fn pod_log(path: &str) -> Option<PodLog> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let n = parts.len();
    let pod_file = |f: &str| f.ends_with(".log") || f.contains(".log.");
    if n >= 4 && pod_file(parts[n - 1]) && parts[n - 4] == "pods" {
        // pods/NS_POD_UID/CONTAINER/N.log
        let mut f = parts[n - 3].splitn(3, '_');
        return Some(PodLog {
            namespace: f.next()?.to_string(),
            pod_name: f.next()?.to_string(),
            pod_uid: Some(f.next()?.to_string()),
            container_name: parts[n - 2].to_string(),
            container_id: None,
        });
    }
    let file = parts.last()?.strip_suffix(".log")?;
    let mut f = file.splitn(3, '_');
    let pod_name = f.next()?.to_string();
    let namespace = f.next()?.to_string();
    let rest = f.next()?;
    let (container_name, id) = rest.rsplit_once('-')?;
    if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some(PodLog {
        namespace,
        pod_name,
        pod_uid: None,
        container_name: container_name.to_string(),
        container_id: Some(id.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cri_records_parse_and_partials_join_per_stream() {
        let mut j = Joiner::default();
        let lines = [
            "2026-12-03T10:00:00.000000001Z stdout P hello ",
            "2026-12-03T10:00:00.000000002Z stderr F err line",
            "2026-12-03T10:00:00.000000003Z stdout P big ",
            "2026-12-03T10:00:00.000000004Z stdout F world",
        ];
        let out: Vec<Record> = lines
            .iter()
            .filter_map(|l| j.push(cri(l).unwrap()))
            .collect();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].content, "err line");
        assert_eq!(out[0].stream, Stream::Stderr);
        assert_eq!(out[1].content, "hello big world");
        assert_eq!(
            out[1].time, "2026-12-03T10:00:00.000000001Z",
            "the first part's time"
        );
        assert!(cri("not a cri line").is_none());
        assert!(cri("2026-12-03T10:00:00Z stdout X text").is_none());
        assert_eq!(cri("2026-12-03T10:00:00Z stdout F").unwrap().content, "");
    }

    #[test]
    fn a_taken_line_becomes_the_content_and_a_refused_one_stays_whole() {
        let mut line = "2026-12-03T10:00:00.5Z stderr P:x half a line\r\n".to_string();
        let r = cri_taken(&mut line).unwrap();
        assert_eq!(
            (r.time.as_str(), r.stream, r.complete, r.content.as_str()),
            (
                "2026-12-03T10:00:00.5Z",
                Stream::Stderr,
                false,
                "half a line"
            )
        );
        assert!(line.is_empty(), "taken");
        for bad in [
            "not a record",
            "2026-12-03T10:00:00Z stdin F x",
            "2026 stdout F x",
        ] {
            let mut line = bad.to_string();
            assert!(cri_taken(&mut line).is_none());
            assert_eq!(line, bad, "left for the error message");
        }
    }

    #[test]
    fn docker_json_lines_parse_and_split_lines_join() {
        let a = container(
            &mut r#"{"log":"part one ","stream":"stdout","time":"2026-12-03T10:00:00.1Z"}"#
                .to_string(),
        )
        .unwrap();
        let b = container(
            &mut r#"{"log":"part two\n","stream":"stdout","time":"2026-12-03T10:00:00.2Z"}"#
                .to_string(),
        )
        .unwrap();
        assert!(!a.complete && b.complete);
        let mut j = Joiner::default();
        assert!(j.push(a).is_none());
        assert_eq!(j.push(b).unwrap().content, "part one part two");
        assert!(docker_json(r#"{"log":"x"}"#).is_none());
    }

    #[test]
    fn a_java_stack_trace_is_one_event() {
        // Lines starting with whitespace or "Caused by:" continue the event.
        let mut m = Multiline::new(
            Regex::new(r"^[[:space:]]+(at|\.{3})|^Caused by:").unwrap(),
            false,
            Match::After,
            500,
        );
        let input = [
            "Exception in thread \"main\" java.lang.IllegalStateException: boom",
            "    at com.example.App.run(App.java:10)",
            "    at com.example.App.main(App.java:4)",
            "Caused by: java.io.IOException: disk",
            "    ... 2 more",
            "next event",
        ];
        let mut events: Vec<String> = input.iter().filter_map(|l| m.push(l.to_string())).collect();
        events.extend(m.flush());
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].lines().count(), 5);
        assert!(events[0].starts_with("Exception"));
        assert_eq!(events[1], "next event");
    }

    #[test]
    fn negated_before_joins_until_a_line_ends_the_event() {
        // Lines not ending in `;` go on into the next line.
        let mut m = Multiline::new(Regex::new(r";$").unwrap(), true, Match::Before, 3);
        let mut events: Vec<String> = ["a", "b", "c;", "d;"]
            .iter()
            .filter_map(|l| m.push(l.to_string()))
            .collect();
        events.extend(m.flush());
        assert_eq!(events, ["a\nb\nc;", "d;"]);
    }

    #[test]
    fn kubernetes_names_come_from_the_path() {
        let id = "a".repeat(64);
        let p = pod_log(&format!(
            "/var/log/containers/web-7d9f_shop_nginx-sidecar-{id}.log"
        ))
        .unwrap();
        assert_eq!(p.pod_name, "web-7d9f");
        assert_eq!(p.namespace, "shop");
        assert_eq!(p.container_name, "nginx-sidecar");
        assert_eq!(p.container_id.as_deref(), Some(id.as_str()));
        let p =
            pod_log("/var/log/pods/shop_web-7d9f_0d1c2b3a-1111-2222-3333-444455556666/nginx/0.log")
                .unwrap();
        assert_eq!(p.namespace, "shop");
        assert_eq!(p.pod_name, "web-7d9f");
        assert_eq!(
            p.pod_uid.as_deref(),
            Some("0d1c2b3a-1111-2222-3333-444455556666")
        );
        assert_eq!(p.container_name, "nginx");
        let rotated = pod_log(
            "/var/log/pods/shop_web-7d9f_0d1c2b3a-1111-2222-3333-444455556666/nginx/0.log.20261203-101500",
        )
        .unwrap();
        assert_eq!(rotated, p, "a file kubelet rotated");
        assert!(pod_log("/var/log/syslog").is_none());
        assert!(pod_log("/var/log/containers/odd.log").is_none());
    }
}
