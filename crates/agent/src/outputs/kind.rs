//! What an output type is to the rest of the outputs: its name, keys and
//! settings reader ([`OutputType`]), and the settings it read, which open
//! its sink ([`SinkSettings`], held as an [`OutputKind`]).

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::sync::Arc;

use leasehold_policy::Value;

use super::sink::Sink;
use crate::settings::Problem;

/// An output's flattened keys (`queue.mem.events`, `hosts`, …).
pub(crate) type Keys = BTreeMap<String, Value>;

/// Settings accepted but not acted on as written, as (key, why).
pub(crate) type Notes = Vec<(&'static str, String)>;

/// One type of output: its name and keys, and how its settings are read.
pub(crate) struct OutputType {
    /// Its `type` in the policy.
    pub(crate) name: &'static str,
    /// Its own keys, beside those every output has (`type`, `queue.*`).
    pub(crate) keys: &'static [&'static str],
    /// Reads its settings from the output's flattened keys, recording
    /// each problem with its path (the first argument is `outputs.NAME`).
    pub(crate) parse: fn(&str, &Keys, &mut Vec<Problem>) -> OutputKind,
    /// Settings accepted but not acted on as written, as (key, why).
    pub(crate) notes: fn(&Keys) -> Notes,
}

/// [`OutputType::notes`] of a type that has none.
pub(crate) fn no_notes(_keys: &Keys) -> Notes {
    Vec::new()
}

/// The read settings of one output of some type: they open its sink.
pub(crate) trait SinkSettings: fmt::Debug + Send + Sync + Any {
    /// Its `type` in the policy.
    fn type_name(&self) -> &'static str;
    /// Opens the sink; the error says what cannot be used.
    fn open(&self) -> io::Result<Box<dyn Sink>>;
    /// The queue size these settings impose (an Elastic preset does),
    /// else `configured`.
    fn queue_events(&self, configured: usize) -> usize {
        configured
    }
    /// Whether `other` is the same type with the same settings.
    fn same_as(&self, other: &dyn SinkSettings) -> bool;
}

/// [`SinkSettings::same_as`] for a type that can be compared.
pub(crate) fn same<T: PartialEq + 'static>(this: &T, other: &dyn SinkSettings) -> bool {
    (other as &dyn Any).downcast_ref::<T>() == Some(this)
}

/// An output's type and its type's settings.
#[derive(Clone)]
pub struct OutputKind(Arc<dyn SinkSettings>);

impl OutputKind {
    pub(crate) fn new(settings: impl SinkSettings) -> OutputKind {
        OutputKind(Arc::new(settings))
    }

    /// The `type` this kind is written as.
    pub fn type_name(&self) -> &'static str {
        self.0.type_name()
    }

    /// The settings, when they are of type `T`.
    pub fn get<T: 'static>(&self) -> Option<&T> {
        (self.0.as_ref() as &dyn Any).downcast_ref::<T>()
    }

    pub(crate) fn open(&self) -> io::Result<Box<dyn Sink>> {
        self.0.open()
    }

    pub(crate) fn queue_events(&self, configured: usize) -> usize {
        self.0.queue_events(configured)
    }
}

impl PartialEq for OutputKind {
    fn eq(&self, other: &OutputKind) -> bool {
        self.0.same_as(other.0.as_ref())
    }
}

impl Eq for OutputKind {}

impl fmt::Debug for OutputKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
