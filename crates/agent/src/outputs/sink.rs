//! The contract of a sink: it encodes and sends the lines it is given and
//! answers, per line, what became of each. It never acknowledges, retries,
//! waits or looks at leadership terms: the writer (`outputs::writer`)
//! alone settles every answer, the same way for every sink.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::pipeline::event::Meta;

/// Most events taken from the queue for one attempt.
pub(super) const MAX_BATCH: usize = 2048;
/// First wait after a failed attempt.
pub(super) const BACKOFF_START: Duration = Duration::from_millis(100);
/// Longest wait between attempts.
pub(super) const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// The lines of one attempt and their routing: what a sink reads, and
/// nothing it can settle.
#[derive(Debug, Default, Clone)]
pub(crate) struct Outgoing {
    lines: Vec<Vec<u8>>,
    /// The lines' routing, in the lines' order; empty while no line has
    /// one.
    metas: Vec<Option<Box<Meta>>>,
}

impl Outgoing {
    /// Lines without routing, for a sink's own tests.
    #[cfg(test)]
    pub(crate) fn of_lines(lines: Vec<Vec<u8>>) -> Outgoing {
        Outgoing {
            lines,
            metas: Vec::new(),
        }
    }

    /// The NDJSON lines, in order.
    pub(crate) fn lines(&self) -> &[Vec<u8>] {
        &self.lines
    }

    /// The routing of line `k` when its producer knew it: what a sink may
    /// use instead of parsing the line.
    pub(crate) fn meta(&self, k: usize) -> Option<&Meta> {
        self.metas.get(k).and_then(|m| m.as_deref())
    }

    pub(crate) fn len(&self) -> usize {
        self.lines.len()
    }

    /// Appends a line; routing is stored only once some line has it.
    pub(crate) fn push(&mut self, line: Vec<u8>, meta: Option<Box<Meta>>) {
        push_sparse(&mut self.metas, self.lines.len(), meta);
        self.lines.push(line);
    }

    /// Keeps the lines whose flag is true, in order.
    pub(crate) fn retain(&mut self, keep: &[bool]) {
        retain_flagged(&mut self.lines, keep);
        retain_flagged(&mut self.metas, keep);
    }
}

/// Appends `item` to a list kept parallel to `len` others but allocated
/// only once some item is present: `None`s fill in before the first.
pub(super) fn push_sparse<T>(items: &mut Vec<Option<T>>, len: usize, item: Option<T>) {
    if item.is_some() && items.len() < len {
        items.resize_with(len, || None);
    }
    if item.is_some() || !items.is_empty() {
        items.push(item);
    }
}

/// Keeps the items of `items` whose flag in `keep` is true (an item past
/// the flags is kept).
pub(crate) fn retain_flagged<T>(items: &mut Vec<T>, keep: &[bool]) {
    let mut k = 0;
    items.retain(|_| {
        let kept = keep.get(k).copied().unwrap_or(true);
        k += 1;
        kept
    });
}

/// What became of one line a sink was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Written, or stored by a receiver that judges each document.
    Delivered,
    /// The receiver already held it (the same `_id`): delivered, counted
    /// apart.
    Duplicate,
    /// Not known to be delivered: the writer sends it again.
    Retry,
    /// Refused for good; why, redacted and without the line's content.
    Drop(Arc<str>),
}

/// A sink's answer to one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answers {
    /// One per line given, in order; a line past the end counts as
    /// [`Answer::Retry`].
    pub(crate) lines: Vec<Answer>,
    /// Why lines were left to retry (redacted), for the log and `/status`.
    pub(crate) error: Option<String>,
    /// How long the receiver asked to wait (`Retry-After`); the writer
    /// waits at least its own backoff.
    pub(crate) retry_after: Option<Duration>,
}

impl Answers {
    /// Every one of `n` lines delivered.
    pub(crate) fn delivered(n: usize) -> Answers {
        Answers {
            lines: vec![Answer::Delivered; n],
            error: None,
            retry_after: None,
        }
    }

    /// The first `written` of `n` lines delivered, the rest left to retry
    /// because of `error`: a stream written in order that failed part way.
    pub(crate) fn written_then_failed(written: usize, n: usize, error: String) -> Answers {
        let mut lines = vec![Answer::Delivered; written.min(n)];
        lines.resize(n, Answer::Retry);
        Answers {
            lines,
            error: Some(error),
            retry_after: None,
        }
    }

    /// Line `k`'s answer.
    pub(crate) fn answer(&self, k: usize) -> &Answer {
        self.lines.get(k).unwrap_or(&Answer::Retry)
    }
}

/// Where an output's lines go. The writer awaits each attempt and gives up
/// on it at once when aborted; a network sink does its requests on the
/// runtime (no thread blocked waiting for an answer), and a sink whose
/// writes block (a file, standard output) runs them on tokio's blocking
/// threads through [`Blocking`].
pub(crate) trait Sink: Send + 'static {
    /// Sends `out` and answers for each of its lines.
    fn send(&mut self, out: Arc<Outgoing>) -> BoxFuture<'_, Answers>;
    /// Makes what was written durable (fsync for files).
    fn sync(&mut self) -> BoxFuture<'_, io::Result<()>>;
    /// What the sink writes to, for messages (a path or `stdout`).
    fn target(&self) -> String;
    /// Most lines handed to one [`Sink::send`].
    fn max_batch(&self) -> usize {
        MAX_BATCH
    }
    /// First and longest wait between attempts.
    fn backoff(&self) -> (Duration, Duration) {
        (BACKOFF_START, BACKOFF_MAX)
    }
    /// Makes this sink one of several lanes its writer runs at once, each
    /// taking its own batches from the queue (as Beats' output workers
    /// do), and returns the sinks of the other lanes: a network sink keeps
    /// its requests in flight without waiting for a whole batch. Only
    /// asked when nothing needs its writes in order (a memory queue). No
    /// other lane unless the sink says so.
    fn split_lanes(&mut self) -> Vec<Box<dyn Sink>> {
        Vec::new()
    }
}

/// A sink whose methods block: wrapped in [`Blocking`] to become a
/// [`Sink`].
pub(crate) trait BlockingSink: Send + 'static {
    /// As [`Sink::send`], blocking.
    fn send(&mut self, out: &Outgoing) -> Answers;
    /// As [`Sink::sync`], blocking.
    fn sync(&mut self) -> io::Result<()>;
    /// As [`Sink::target`].
    fn target(&self) -> String;
    /// As [`Sink::max_batch`].
    fn max_batch(&self) -> usize {
        MAX_BATCH
    }
}

/// Runs a [`BlockingSink`] on tokio's blocking threads, one call at a time.
pub(crate) struct Blocking<S> {
    /// `None` only while a call runs, or after a call was abandoned (the
    /// writer is gone then too).
    inner: Option<S>,
    target: String,
    max_batch: usize,
}

impl<S: BlockingSink> Blocking<S> {
    pub(crate) fn new(sink: S) -> Blocking<S> {
        Blocking {
            target: sink.target(),
            max_batch: sink.max_batch(),
            inner: Some(sink),
        }
    }

    /// Runs `call` on the sink on a blocking thread.
    async fn run<T: Send + 'static>(
        &mut self,
        call: impl FnOnce(&mut S) -> T + Send + 'static,
    ) -> io::Result<T> {
        let mut sink = self
            .inner
            .take()
            .ok_or_else(|| io::Error::other("the sink was lost by an abandoned write"))?;
        let joined = tokio::task::spawn_blocking(move || {
            let out = call(&mut sink);
            (sink, out)
        })
        .await;
        match joined {
            Ok((sink, out)) => {
                self.inner = Some(sink);
                Ok(out)
            }
            Err(e) => Err(io::Error::other(format!("a write panicked: {e}"))),
        }
    }
}

impl<S: BlockingSink> Sink for Blocking<S> {
    fn send(&mut self, out: Arc<Outgoing>) -> BoxFuture<'_, Answers> {
        Box::pin(async move {
            let n = out.len();
            self.run(move |s| s.send(&out))
                .await
                .unwrap_or_else(|e| Answers::written_then_failed(0, n, e.to_string()))
        })
    }

    fn sync(&mut self) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(async move { self.run(|s| s.sync()).await? })
    }

    fn target(&self) -> String {
        self.target.clone()
    }

    fn max_batch(&self) -> usize {
        self.max_batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_is_kept_beside_its_line_through_pushes_and_retains() {
        let meta = |id: &str| {
            Some(Box::new(Meta {
                index: "logs-a-default".into(),
                id: Some(id.into()),
                metadata: None,
            }))
        };
        let mut out = Outgoing::default();
        out.push(b"0\n".to_vec(), None);
        out.push(b"1\n".to_vec(), meta("one"));
        out.push(b"2\n".to_vec(), None);
        out.push(b"3\n".to_vec(), meta("three"));
        assert_eq!(out.meta(0), None);
        assert_eq!(out.meta(1).and_then(|m| m.id.as_deref()), Some("one"));
        out.retain(&[false, true, false]);
        assert_eq!(out.lines(), [b"1\n".to_vec(), b"3\n".to_vec()]);
        assert_eq!(out.meta(0).and_then(|m| m.id.as_deref()), Some("one"));
        assert_eq!(out.meta(1).and_then(|m| m.id.as_deref()), Some("three"));
    }

    #[test]
    fn a_line_past_the_answers_is_to_be_sent_again() {
        let a = Answers::written_then_failed(2, 4, "disk full".into());
        assert_eq!(
            a.lines,
            [
                Answer::Delivered,
                Answer::Delivered,
                Answer::Retry,
                Answer::Retry
            ]
        );
        assert_eq!(Answers::delivered(1).answer(5), &Answer::Retry);
        assert_eq!(
            Answers::written_then_failed(9, 2, String::new())
                .lines
                .len(),
            2
        );
    }
}
