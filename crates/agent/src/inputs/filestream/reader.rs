//! Reads one file from its cursor to its end and keeps following it: whole
//! lines through the parsers into events, each acknowledged back to the
//! cursor. It notices truncation (the file is shorter than what was read:
//! start over at 0), removal and renaming (read to the end, then close
//! when configured), and inactivity (close; the scanner opens the file
//! again once it grows). A line without its newline yet is held back, not
//! split; a line longer than `message_max_bytes` is cut and flagged.

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::identity::{FINGERPRINT_BYTES, FileId, Fingerprint};
use super::parsers;
use super::pipeline::{Message, Pipeline};
use super::registry::Cursor;
use super::settings::StreamSettings;
use crate::pipeline::ack::Ack;
use crate::pipeline::publisher::{EventSink, Refused, push_pair, reserved_payload_key};

/// Bytes read at once, at most: large enough that the hand-over to a
/// blocking thread is paid once per few hundred lines.
const CHUNK: usize = 256 * 1024;

/// How much to read from `file` at `at`: what it holds past `at`, up to
/// [`CHUNK`]. A small file gets a small buffer and a file read to its end
/// none, so a thousand files followed at once do not each take a whole
/// chunk at every poll (the blocking threads' allocator arenas keep what
/// they once held). Anything but a regular file (its size says nothing)
/// gets a whole chunk.
fn read_size(file: &std::fs::File, at: u64) -> usize {
    match file.metadata() {
        Ok(m) if m.is_file() => {
            usize::try_from(m.len().saturating_sub(at)).map_or(CHUNK, |left| left.min(CHUNK))
        }
        _ => CHUNK,
    }
}

/// Why a reader stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// The input is stopping.
    Cancelled,
    /// No new line for `close.on_state_change.inactive`.
    Inactive,
    /// Removed and read to its end.
    Removed,
    /// Renamed and read to its end (`close.on_state_change.renamed`).
    Renamed,
    /// The path now names another file than the one found.
    Replaced,
    /// The output refused an event (the input is stopping).
    Refused,
    /// Read to its end after the input was asked to finish.
    Finished,
}

/// One file to read.
pub struct Reader {
    pub settings: Arc<StreamSettings>,
    pub path: String,
    pub id: FileId,
    pub cursor: Arc<Cursor>,
    pub sink: EventSink,
    pub cancel: CancellationToken,
    /// Fired: nothing else will read this file; read it to its end,
    /// hand over what is held (a last line without its newline, a
    /// multiline event), then close.
    pub finish: CancellationToken,
    pub metrics: super::registry::StreamMetrics,
}

/// Counts an open file for as long as it lives.
struct OpenFile(prometheus_client::metrics::gauge::Gauge);

impl OpenFile {
    fn new(g: &prometheus_client::metrics::gauge::Gauge) -> OpenFile {
        g.inc();
        OpenFile(g.clone())
    }
}

impl Drop for OpenFile {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// What the reader keeps while following a file.
struct Follow {
    file: Arc<File>,
    /// Next byte to read.
    offset: u64,
    /// The current line's bytes so far, and the offset of its first byte.
    line: Vec<u8>,
    line_start: u64,
    /// The line outgrew `message_max_bytes`: the rest is skipped.
    cut: bool,
    pipeline: Pipeline,
    /// The file's own pairs, serialized once.
    own: FilePairs,
    /// The last read's buffer, kept while the file has more to read (a
    /// file read to its end keeps none).
    spare: Vec<u8>,
}

/// What every document of a file carries, serialized once:
/// `,"log":{"file":{…}` (left open for the offset and flags), and the
/// Kubernetes, `fields` and `tags` pairs.
struct FilePairs {
    log_file: Vec<u8>,
    constant: Vec<u8>,
    /// Each key of `constant` and where its pair is in it.
    constant_keys: ConstantKeys,
}

/// The keys of a serialized run of `,"key":value` pairs and their bytes.
type ConstantKeys = Vec<(String, std::ops::Range<usize>)>;

impl Reader {
    /// Reads until closed; `Err` is an I/O failure, with the path.
    pub async fn run(self) -> Result<Closed, String> {
        let path = self.path.clone();
        let opened = tokio::task::spawn_blocking(move || {
            let f = File::open(&path)?;
            let meta = f.metadata()?;
            let canonical = std::fs::canonicalize(&path).ok();
            Ok::<_, std::io::Error>((f, FileId::of(&meta), canonical))
        })
        .await
        .map_err(|e| e.to_string())?;
        let (file, id, canonical) = match opened {
            Ok(o) => o,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Closed::Replaced),
            Err(e) => return Err(format!("cannot open {}: {e}", self.path)),
        };
        if id != self.id {
            return Ok(Closed::Replaced);
        }
        let _open = OpenFile::new(&self.metrics.files_open);
        let offset = self.cursor.lock().resume;
        let (constant, constant_keys) = self.constant_fields(canonical.as_deref());
        let mut f = Follow {
            file: Arc::new(file),
            offset,
            line: Vec::new(),
            line_start: offset,
            cut: false,
            pipeline: Pipeline::new(&self.settings.parsers),
            own: FilePairs {
                log_file: log_file(&self.path, id),
                constant,
                constant_keys,
            },
            spare: Vec::new(),
        };
        tracing::debug!(path = %self.path, offset, "reading file");
        let mut backoff = self.settings.backoff_init;
        let mut last_data = Instant::now();
        // After a pause the file may have been truncated and written past
        // the old offset: its first bytes tell.
        let mut after_pause = false;
        loop {
            if self.cancel.is_cancelled() {
                return Ok(Closed::Cancelled);
            }
            let file = Arc::clone(&f.file);
            let at = f.offset;
            let expect = after_pause.then(|| self.cursor.lock().fingerprint);
            let mut buf = std::mem::take(&mut f.spare);
            let (buf, want, read, rewritten) = tokio::task::spawn_blocking(move || {
                let rewritten = expect.is_some_and(|fp| !fp.matches(&file).unwrap_or(true));
                let want = read_size(&file, at);
                if buf.len() < want {
                    buf.resize(want, 0);
                }
                let r = if want == 0 {
                    Ok(0)
                } else {
                    file.read_at(&mut buf[..want], at)
                };
                (buf, want, r, rewritten)
            })
            .await
            .map_err(|e| e.to_string())?;
            after_pause = false;
            if rewritten {
                tracing::info!(path = %self.path, read = f.offset, "file truncated and written again while idle; reading it again from its start");
                self.start_over(&mut f);
                continue;
            }
            let n = read.map_err(|e| format!("cannot read {}: {e}", self.path))?;
            if n > 0 {
                self.metrics.bytes_read.inc_by(n as u64);
                if let Some(closed) = self.consume(&mut f, &buf[..n]).await {
                    return Ok(closed);
                }
                // More is likely where a whole chunk was there to read.
                if n == want && want == CHUNK {
                    f.spare = buf;
                }
                backoff = self.settings.backoff_init;
                last_data = Instant::now();
                continue;
            }
            drop(buf);
            let due = f.pipeline.flush_due(Instant::now());
            if let Some(closed) = self.emit_all(&f, due).await {
                return Ok(closed);
            }
            if self.finish.is_cancelled() {
                if let Some(c) = self.hand_over(&mut f).await {
                    return Ok(c);
                }
                return Ok(Closed::Finished);
            }
            if let Some(closed) = self.at_end(&mut f, last_data)? {
                if matches!(closed, Closed::Removed | Closed::Renamed) {
                    // Nothing more will come: hand over what is held.
                    if let Some(c) = self.hand_over(&mut f).await {
                        return Ok(c);
                    }
                }
                return Ok(closed);
            }
            tokio::select! {
                biased;
                () = self.cancel.cancelled() => return Ok(Closed::Cancelled),
                // Read what was written meanwhile, then finish.
                () = self.finish.cancelled() => {}
                () = tokio::time::sleep(backoff) => {}
            }
            after_pause = true;
            backoff = (backoff * 2).min(self.settings.backoff_max);
        }
    }

    /// At the end of what is written: truncated, gone, idle, or none.
    fn at_end(&self, f: &mut Follow, last_data: Instant) -> Result<Option<Closed>, String> {
        let meta = f
            .file
            .metadata()
            .map_err(|e| format!("cannot stat {}: {e}", self.path))?;
        if meta.len() < f.offset {
            tracing::info!(path = %self.path, size = meta.len(), read = f.offset, "file truncated; reading it again from its start");
            self.start_over(f);
            return Ok(None);
        }
        self.refresh_fingerprint(f, meta.len());
        if meta.nlink() == 0 && self.settings.close_removed {
            return Ok(Some(Closed::Removed));
        }
        if self.settings.close_renamed {
            let same = std::fs::metadata(&self.path).is_ok_and(|m| FileId::of(&m) == self.id);
            if !same {
                return Ok(Some(Closed::Renamed));
            }
        }
        if last_data.elapsed() >= self.settings.inactive {
            return Ok(Some(Closed::Inactive));
        }
        Ok(None)
    }

    /// Reads the file again from 0: what was read and what is in flight
    /// described bytes that are gone.
    fn start_over(&self, f: &mut Follow) {
        f.offset = 0;
        f.line.clear();
        f.line_start = 0;
        f.cut = false;
        f.pipeline = Pipeline::new(&self.settings.parsers);
        let mut c = self.cursor.lock();
        c.start_over();
        c.fingerprint = Fingerprint::of_bytes(&[]);
        drop(c);
        self.cursor.touch();
    }

    /// Extends a short fingerprint as the file grows, up to its full length.
    fn refresh_fingerprint(&self, f: &Follow, size: u64) {
        let have = self.cursor.lock().fingerprint.len;
        if have >= FINGERPRINT_BYTES || size <= have {
            return;
        }
        if let Ok(fp) = Fingerprint::longest(&f.file, size) {
            self.cursor.lock().fingerprint = fp;
            self.cursor.touch();
        }
    }

    /// Splits `bytes` into lines and emits what they complete.
    async fn consume(&self, f: &mut Follow, bytes: &[u8]) -> Option<Closed> {
        let mut rest = bytes;
        let max = self.settings.max_bytes;
        while !rest.is_empty() {
            let (part, newline) = match memchr::memchr(b'\n', rest) {
                Some(i) => (&rest[..i], true),
                None => (rest, false),
            };
            let room = max.saturating_sub(f.line.len());
            if part.len() > room {
                f.line.extend_from_slice(&part[..room]);
                f.cut = true;
            } else if !f.cut {
                f.line.extend_from_slice(part);
            }
            let used = part.len() + usize::from(newline);
            f.offset += used as u64;
            rest = &rest[used..];
            if newline {
                let msgs = self.complete_line(f);
                if let Some(c) = self.emit_all(f, msgs).await {
                    return Some(c);
                }
            }
        }
        None
    }

    /// The line just ended at `f.offset`, through the parsers.
    fn complete_line(&self, f: &mut Follow) -> Vec<Message> {
        if f.line.last() == Some(&b'\r') {
            f.line.pop();
        }
        let text = match String::from_utf8(std::mem::take(&mut f.line)) {
            Ok(t) => t,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        };
        let mut m = Message::line(text, f.line_start, f.offset);
        if std::mem::take(&mut f.cut) {
            m.flags.push("truncated");
        }
        f.line_start = f.offset;
        f.pipeline.push(m, Instant::now())
    }

    /// Everything held back, and a last line without its newline.
    async fn hand_over(&self, f: &mut Follow) -> Option<Closed> {
        let mut msgs = Vec::new();
        if !f.line.is_empty() {
            msgs = self.complete_line(f);
        }
        msgs.extend(f.pipeline.finish(Instant::now()));
        self.emit_all(f, msgs).await
    }

    async fn emit_all(&self, f: &Follow, msgs: Vec<Message>) -> Option<Closed> {
        for m in msgs {
            let at = m.time.as_deref().and_then(parse_time);
            let mut line = self.sink.begin_fields(at, pairs_hint(&f.own, &m));
            push_document_pairs(line.pairs(), &f.own, &m, self.overwrites_keys());
            let seq = {
                let mut c = self.cursor.lock();
                c.window.push(m.end)
            };
            let ack = Ack::new(Arc::clone(&self.cursor) as _, seq);
            match self.sink.emit_begun(line, Some(ack)).await {
                Ok(()) => self.cursor.lock().resume = m.end,
                Err(Refused::Stopped | Refused::TermEnded | Refused::OutputClosed) => {
                    self.cursor.lock().window.unpush(seq);
                    return Some(Closed::Refused);
                }
            }
        }
        None
    }

    /// Whether `ndjson`'s decoded keys replace the reader's own.
    fn overwrites_keys(&self) -> bool {
        self.settings
            .parsers
            .iter()
            .any(|p| matches!(p, super::pipeline::ParserSpec::Ndjson(n) if n.overwrite_keys))
    }

    /// `kubernetes`/`container` from the path (unless the `kubernetes`
    /// provider adds its fuller ones), `fields`, `tags`.
    fn constant_fields(&self, canonical: Option<&std::path::Path>) -> (Vec<u8>, ConstantKeys) {
        let s = &self.settings;
        let mut doc = Map::new();
        if s.reads_containers() && !self.sink.adds("kubernetes") {
            let named = parsers::pod_log(&self.path);
            let target = canonical.and_then(|c| parsers::pod_log(&c.to_string_lossy()));
            if let Some(p) = named.clone().or_else(|| target.clone()) {
                let uid = p
                    .pod_uid
                    .clone()
                    .or_else(|| target.as_ref().and_then(|t| t.pod_uid.clone()));
                let mut pod = json!({"name": p.pod_name});
                if let Some(u) = uid {
                    pod["uid"] = json!(u);
                }
                doc.insert(
                    "kubernetes".into(),
                    json!({"namespace": p.namespace, "pod": pod, "container": {"name": p.container_name}}),
                );
                if let Some(id) = p.container_id {
                    doc.insert("container".into(), json!({"id": id}));
                }
            }
        }
        if !s.fields.is_empty() {
            if s.fields_under_root {
                for (k, v) in &s.fields {
                    doc.insert(k.clone(), v.clone());
                }
            } else {
                doc.insert("fields".into(), Value::Object(s.fields.clone()));
            }
        }
        if !s.tags.is_empty() {
            doc.insert("tags".into(), json!(s.tags));
        }
        constant_pairs(doc)
    }
}

/// `doc` as `,"key":value` pairs and where each key's pair is, without the
/// keys each line sets (`message`, `log`, `stream`, `error`) and those no
/// payload sets.
fn constant_pairs(doc: Map<String, Value>) -> (Vec<u8>, ConstantKeys) {
    let mut out = Vec::new();
    let mut keys = Vec::new();
    for (k, v) in doc {
        if reserved_payload_key(&k) || ["message", "log", "stream", "error"].contains(&k.as_str()) {
            continue;
        }
        let start = out.len();
        push_pair(&mut out, &k, &v);
        keys.push((k, start..out.len()));
    }
    (out, keys)
}

/// [`push_document_pairs`] into a new buffer.
#[cfg(test)]
fn document_pairs(f: &FilePairs, m: &Message, overwrite: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(pairs_hint(f, m));
    push_document_pairs(&mut out, f, m, overwrite);
    out
}

/// About how many bytes [`push_document_pairs`] writes for `m`.
fn pairs_hint(f: &FilePairs, m: &Message) -> usize {
    m.text.len()
        + f.log_file.len()
        + f.constant.len()
        + 96
        + m.decoded.as_ref().map_or(0, |d| d.len() * 32)
}

/// The document's pairs for message `m`, appended to `out`: the
/// reader's own fields (`message`, `log`, `stream`, `error` and the
/// constant ones) and the keys `ndjson` decoded, written as they are,
/// none twice. Where both have a key the reader's wins, unless
/// `overwrite_keys` (as in Filebeat); a decoded line without
/// `message_key` has no own `message`, its decoded one if any.
fn push_document_pairs(out: &mut Vec<u8>, f: &FilePairs, m: &Message, overwrite: bool) {
    let decoded = m.decoded.as_ref();
    let overwrite = overwrite && decoded.is_some();
    let theirs = |k: &str| overwrite && decoded.is_some_and(|d| d.contains_key(k));
    let own_message = decoded.is_none() || !m.text.is_empty();
    if own_message && !theirs("message") {
        out.extend_from_slice(b",\"message\":");
        crate::pipeline::json_text::push_str(out, &m.text);
    }
    if !theirs("log") {
        out.extend_from_slice(&f.log_file);
        out.extend_from_slice(b",\"offset\":");
        crate::pipeline::json_text::push_u64(out, m.start);
        if !m.flags.is_empty() {
            out.extend_from_slice(b",\"flags\":");
            let _ = serde_json::to_writer(&mut *out, &m.flags);
        }
        out.push(b'}');
    }
    if let Some(s) = m.stream
        && !theirs("stream")
    {
        out.extend_from_slice(b",\"stream\":\"");
        out.extend_from_slice(s.as_str().as_bytes());
        out.push(b'"');
    }
    if let Some(e) = &m.error
        && !theirs("error")
    {
        out.extend_from_slice(b",\"error\":{\"message\":");
        let _ = serde_json::to_writer(&mut *out, e);
        out.push(b'}');
    }
    if f.constant_keys.iter().any(|(k, _)| theirs(k)) {
        for (k, at) in &f.constant_keys {
            if !theirs(k) {
                out.extend_from_slice(&f.constant[at.clone()]);
            }
        }
    } else {
        out.extend_from_slice(&f.constant);
    }
    for (k, v) in decoded.into_iter().flatten() {
        let ours = match k.as_str() {
            "message" => own_message,
            "log" => true,
            "stream" => m.stream.is_some(),
            "error" => m.error.is_some(),
            _ => f.constant_keys.iter().any(|(c, _)| c == k),
        };
        if reserved_payload_key(k) || (ours && !overwrite) {
            continue;
        }
        push_pair(out, k, v);
    }
}

/// `,"log":{"file":{"path":…,"device_id":…,"inode":…}` (left open for
/// the offset and flags).
fn log_file(path: &str, id: FileId) -> Vec<u8> {
    let mut out = b",\"log\":{\"file\":".to_vec();
    let file = json!({
        "path": path,
        "device_id": id.device.to_string(),
        "inode": id.inode.to_string(),
    });
    let _ = serde_json::to_writer(&mut out, &file);
    out
}

/// A container runtime's record time as microseconds since the epoch.
fn parse_time(t: &str) -> Option<i64> {
    crate::pipeline::event::parse_rfc3339_us(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A document's pairs as (key, value) in their order, a key written
    /// twice kept twice.
    fn pairs_of(pairs: &[u8]) -> Vec<(String, Value)> {
        struct Pairs(Vec<(String, Value)>);
        impl<'de> serde::Deserialize<'de> for Pairs {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Pairs, D::Error> {
                struct V;
                impl<'de> serde::de::Visitor<'de> for V {
                    type Value = Pairs;
                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str("an object")
                    }
                    fn visit_map<A: serde::de::MapAccess<'de>>(
                        self,
                        mut a: A,
                    ) -> Result<Pairs, A::Error> {
                        let mut out = Vec::new();
                        while let Some(kv) = a.next_entry()? {
                            out.push(kv);
                        }
                        Ok(Pairs(out))
                    }
                }
                d.deserialize_map(V)
            }
        }
        let mut doc = b"{".to_vec();
        doc.extend_from_slice(pairs.get(1..).unwrap_or_default());
        doc.push(b'}');
        serde_json::from_slice::<Pairs>(&doc).unwrap().0
    }

    /// A file's own pairs with the `constant` fields.
    fn file_pairs(constant: Map<String, Value>) -> FilePairs {
        let (constant, constant_keys) = constant_pairs(constant);
        FilePairs {
            log_file: log_file(
                "/var/log/a.log",
                FileId {
                    device: 1,
                    inode: 2,
                },
            ),
            constant,
            constant_keys,
        }
    }

    /// The document of `m` as a map (a key written twice: its last value).
    fn document(f: &FilePairs, m: &Message, overwrite: bool) -> Map<String, Value> {
        pairs_of(&document_pairs(f, m, overwrite))
            .into_iter()
            .collect()
    }

    /// Filebeat's merge, as a map: the reader's own fields, the decoded
    /// keys added where the reader has none (all of them with
    /// `overwrite_keys`), then the keys no payload sets left out.
    fn merged(f: &FilePairs, m: &Message, overwrite: bool) -> Map<String, Value> {
        let plain = Message {
            decoded: None,
            ..m.clone()
        };
        let mut doc = document(f, &plain, false);
        if m.decoded.is_some() && m.text.is_empty() {
            doc.remove("message");
        }
        for (k, v) in m.decoded.clone().unwrap_or_default() {
            if overwrite || !doc.contains_key(&k) {
                doc.insert(k, v);
            }
        }
        doc.retain(|k, _| !reserved_payload_key(k));
        doc
    }

    fn key() -> impl Strategy<Value = String> {
        prop::sample::select(vec![
            "message",
            "log",
            "stream",
            "error",
            "kubernetes",
            "tags",
            "fields",
            "@timestamp",
            "data_stream",
            "@metadata",
            "agent",
            "a",
            "b",
        ])
        .prop_map(str::to_string)
    }

    fn object() -> impl Strategy<Value = Map<String, Value>> {
        prop::collection::btree_map(key(), any::<i32>().prop_map(Value::from), 0..6)
            .prop_map(|m| m.into_iter().collect())
    }

    proptest! {
        /// Whatever keys a decoded line and the file's constant fields
        /// share with the reader's own, the document holds each key once,
        /// with the value Filebeat's merge gives it.
        #[test]
        fn decoded_keys_merge_as_filebeat_merges_them_and_none_twice(
            decoded in prop::option::of(object()),
            constant in object(),
            text in prop::sample::select(vec!["", "a line"]),
            stream in prop::option::of(prop::sample::select(vec![parsers::Stream::Stdout, parsers::Stream::Stderr])),
            error in prop::option::of(Just("cannot decode".to_string())),
            truncated in any::<bool>(),
            overwrite in any::<bool>(),
        ) {
            let f = file_pairs(constant);
            let mut m = Message::line(text.to_string(), 7, 20);
            m.decoded = decoded;
            m.stream = stream;
            m.error = error;
            if truncated {
                m.flags.push("truncated");
            }
            let pairs = pairs_of(&document_pairs(&f, &m, overwrite));
            let mut keys: Vec<&String> = pairs.iter().map(|(k, _)| k).collect();
            keys.sort();
            let before = keys.len();
            keys.dedup();
            prop_assert_eq!(before, keys.len(), "a key written twice: {:?}", pairs);
            let got: Map<String, Value> = pairs.into_iter().collect();
            prop_assert_eq!(got, merged(&f, &m, overwrite));
        }
    }

    #[test]
    fn with_overwrite_keys_a_decoded_key_replaces_the_readers_own() {
        let f = file_pairs(serde_json::from_str(r#"{"tags":["file"]}"#).unwrap());
        let mut m = Message::line("text".into(), 0, 5);
        m.decoded =
            Some(serde_json::from_str(r#"{"message":"decoded","tags":["line"],"x":1}"#).unwrap());
        let keep = document(&f, &m, false);
        assert_eq!(
            (keep["message"].clone(), keep["tags"].clone()),
            (json!("text"), json!(["file"]))
        );
        let replace = document(&f, &m, true);
        assert_eq!(
            (replace["message"].clone(), replace["tags"].clone()),
            (json!("decoded"), json!(["line"]))
        );
        assert_eq!(
            (keep["x"].clone(), replace["x"].clone()),
            (json!(1), json!(1))
        );
        assert_eq!(replace["log"]["offset"], json!(0));
    }

    #[test]
    fn a_read_takes_what_the_file_holds_up_to_a_chunk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        std::fs::write(&path, vec![b'x'; 10_000]).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        assert_eq!(read_size(&f, 0), 10_000);
        assert_eq!(read_size(&f, 9_000), 1_000);
        assert_eq!(read_size(&f, 10_000), 0, "read to its end: no buffer");
        assert_eq!(read_size(&f, 20_000), 0, "truncated below the offset");
        std::fs::write(&path, vec![b'x'; 3 * CHUNK]).unwrap();
        assert_eq!(read_size(&f, 0), CHUNK);
        // A device's size says nothing: a whole chunk.
        let null = std::fs::File::open("/dev/null").unwrap();
        assert_eq!(read_size(&null, 0), CHUNK);
    }

    #[test]
    fn record_times_keep_microseconds() {
        assert_eq!(
            parse_time("2026-12-03T10:00:00.123456789Z"),
            Some(1_796_292_000_123_456)
        );
        assert_eq!(parse_time("yesterday"), None);
    }

    #[test]
    fn the_file_part_of_log_is_left_open_for_the_offset() {
        let s = log_file(
            "/var/log/a \"b\".log",
            FileId {
                device: 3,
                inode: 9,
            },
        );
        let mut doc = String::from_utf8(s).unwrap();
        doc.push_str(",\"offset\":5}");
        let v: Value = serde_json::from_str(&format!("{{{}}}", &doc[1..])).unwrap();
        assert_eq!(v["log"]["file"]["path"], "/var/log/a \"b\".log");
        assert_eq!(v["log"]["file"]["inode"], "9");
        assert_eq!(v["log"]["offset"], 5);
    }
}
