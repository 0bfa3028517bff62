//! Elastic's event processors (`processors:` of an input or a stream) and
//! their `when` conditions, applied to one event as a JSON object. Pure:
//! no I/O, no clock except where a processor reads the local time zone.
//!
//! The syntax and the semantics are Beats' (Elastic Agent runs Beats), so a
//! standalone policy's processors do here what they do there:
//!
//! ```
//! use leasehold_processors::{Processors, Verdict};
//! use serde_json::json;
//!
//! let parsed = Processors::parse(&json!([
//!     {"drop_event": {"when": {"equals": {"kubernetes.namespace": "kube-system"}}}},
//!     {"add_fields": {"target": "project", "fields": {"name": "myproject"}}},
//! ])).unwrap();
//! let mut event = json!({"message": "hi", "kubernetes": {"namespace": "default"}});
//! let event = event.as_object_mut().unwrap();
//! assert_eq!(parsed.processors.apply(event), Verdict::Keep);
//! assert_eq!(event["project"]["name"], "myproject");
//! ```
//!
//! Processors: `add_fields`, `add_labels`, `add_tags`, `add_locale`,
//! `copy_fields`, `decode_json_fields`, `dissect`, `drop_event`,
//! `drop_fields`, `include_fields`, `rename`, `script` (JavaScript, Beats'
//! Event API), `timestamp`, and Elastic's `if`/`then`/`else`. `add_host_metadata` and `add_kubernetes_metadata` are
//! accepted and do nothing: the agent stamps those fields on every event
//! itself. Any other processor is skipped with a warning, so Elastic
//! policies load.
//!
//! Reading a policy does some I/O: `timezone: America/New_York` reads the
//! system's zoneinfo file and `add_locale` reads the local zone (`TZ`,
//! `/etc/localtime`), once, when parsing.

use std::sync::Arc;

use serde_json::{Map, Value};

mod actions;
mod conditions;
mod dissect;
mod network;
mod path;
mod settings;
mod timefmt;
mod timelayout;
mod tz;

use actions::{Action, Built, Flow};
use conditions::Condition;
use settings::{Diag, Settings, kind};

/// An ordered list of processors, ready to run on events. Cheap to clone
/// (the processors are shared).
#[derive(Clone, Default)]
pub struct Processors {
    steps: Vec<Step>,
}

#[derive(Clone)]
struct Step {
    /// Where the processor is in the policy, e.g. `processors.2.rename`.
    path: String,
    when: Option<Condition>,
    kind: StepKind,
}

#[derive(Clone)]
enum StepKind {
    Action(Arc<dyn Action>),
    /// Elastic's `if: <condition>, then: [...], else: [...]`.
    Branch(Arc<Branch>),
}

struct Branch {
    condition: Condition,
    then: Processors,
    otherwise: Option<Processors>,
}

impl std::fmt::Debug for Processors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.steps.iter().map(|s| &s.path))
            .finish()
    }
}

/// The processors of a policy and what did not stop it from loading.
#[derive(Debug, Clone)]
pub struct Parsed {
    /// The processors to run, in order (unavailable ones left out).
    pub processors: Processors,
    /// Things the policy asks for that leasehold does not do (a processor it
    /// lacks, an ignored setting), each naming where it is.
    pub warnings: Vec<String>,
}

/// What the processors decided for an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Send it on.
    Keep,
    /// A `drop_event` ran: the event is not sent.
    Drop,
}

/// A setting that makes the processors unusable, and where it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ParseError {
    /// Dotted path of the offending value, e.g. `processors.2.rename.fields.0.from`.
    pub path: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

/// A processor failing on one event, e.g. `rename` finding its target taken.
/// Like Beats, the event goes on to the next processor; the failed processor
/// leaves the event as it documents (often unchanged, sometimes with
/// `error.message` or a `log.flags` entry). Beats logs these at debug level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunError {
    /// Which processor, e.g. `processors.2.rename`.
    pub processor: String,
    /// What went wrong, in Beats' words where Beats has some.
    pub message: String,
}

impl Processors {
    /// Parses the value of a `processors:` key: a list of single-key maps
    /// (`- add_fields: {target: x, fields: {a: 1}}`), each optionally with
    /// `when:`. `null` is no processors. Every malformed setting is
    /// reported, not just the first; a processor leasehold lacks is a
    /// warning, not an error, so that Elastic policies load.
    pub fn parse(v: &Value) -> Result<Parsed, Vec<ParseError>> {
        Self::parse_with(v, Diag::default())
    }

    /// [`Processors::parse`] for processors an untrusted party wrote (a
    /// Pod's hints): a `script` among them is skipped with a warning, so no
    /// Pod runs code inside the agent.
    pub fn parse_confined(v: &Value) -> Result<Parsed, Vec<ParseError>> {
        Self::parse_with(
            v,
            Diag {
                confined: true,
                ..Diag::default()
            },
        )
    }

    fn parse_with(v: &Value, mut d: Diag) -> Result<Parsed, Vec<ParseError>> {
        // Beats' configuration loader reads `a.b: x` as `a: {b: x}`.
        let v = settings::expand_dots(v, "processors", &mut d);
        let processors = parse_list(&v, "processors", &mut d);
        if d.errors.is_empty() {
            Ok(Parsed {
                processors,
                warnings: d.warnings,
            })
        } else {
            Err(d.errors)
        }
    }

    /// Whether no processor would touch an event (none given, or only ones
    /// that do nothing here), so callers can skip [`Processors::apply`].
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Whether a processor takes long on an event (a `script` whose call
    /// once took more than 20 ms, up to its `timeout`), so the caller should
    /// run [`Processors::apply`] on a thread that may block rather than on
    /// an async worker. Asked before each event: it turns true once a
    /// script is seen slow.
    pub fn blocks(&self) -> bool {
        self.steps.iter().any(|s| match &s.kind {
            StepKind::Action(a) => a.blocks(),
            StepKind::Branch(b) => {
                b.then.blocks() || b.otherwise.as_ref().is_some_and(Processors::blocks)
            }
        })
    }

    /// Runs every processor in order; returns Verdict::Drop when an event is
    /// dropped (the processors after the dropping one do not run). A
    /// processor that fails on the event does not stop the others.
    pub fn apply(&self, event: &mut Map<String, Value>) -> Verdict {
        self.apply_reporting(event, &mut |_| {})
    }

    /// [`Processors::apply`], handing each processor failure to `report`
    /// (to log it) instead of dropping it silently.
    pub fn apply_reporting(
        &self,
        event: &mut Map<String, Value>,
        report: &mut dyn FnMut(RunError),
    ) -> Verdict {
        for step in &self.steps {
            if step.when.as_ref().is_some_and(|c| !c.check(event)) {
                continue;
            }
            match &step.kind {
                StepKind::Action(action) => match action.run(event) {
                    Ok(Flow::Continue) => {}
                    Ok(Flow::Drop) => return Verdict::Drop,
                    Err(message) => report(RunError {
                        processor: step.path.clone(),
                        message,
                    }),
                },
                StepKind::Branch(branch) => {
                    let chosen = if branch.condition.check(event) {
                        Some(&branch.then)
                    } else {
                        branch.otherwise.as_ref()
                    };
                    if let Some(list) = chosen
                        && list.apply_reporting(event, report) == Verdict::Drop
                    {
                        return Verdict::Drop;
                    }
                }
            }
        }
        Verdict::Keep
    }
}

/// A list of processors; a single processor map is a list of one (Elastic
/// allows it under `then`/`else`).
fn parse_list(v: &Value, path: &str, d: &mut Diag) -> Processors {
    let mut steps = Vec::new();
    match v {
        Value::Null => {}
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                if let Some(step) = parse_entry(item, &format!("{path}.{i}"), d) {
                    steps.push(step);
                }
            }
        }
        Value::Object(_) => {
            if let Some(step) = parse_entry(v, path, d) {
                steps.push(step);
            }
        }
        other => d.error(
            path,
            format!(
                "expected a list of processors (`- add_fields: {{…}}` items), found {}",
                kind(other)
            ),
        ),
    }
    Processors { steps }
}

fn parse_entry(item: &Value, path: &str, d: &mut Diag) -> Option<Step> {
    let Value::Object(map) = item else {
        d.error(
            path,
            format!(
                "a processor is a map with one key, its name, e.g. `- add_tags: {{tags: [web]}}`; found {}",
                kind(item)
            ),
        );
        return None;
    };
    if map.contains_key("if") {
        return parse_branch(map, path, d);
    }
    let mut keys = map.keys();
    let (Some(name), None) = (keys.next(), keys.next()) else {
        let names: Vec<&str> = map.keys().map(String::as_str).collect();
        d.error(
            path,
            if names.is_empty() {
                "empty processor; give its name and settings, e.g. `- add_tags: {tags: [web]}`"
                    .to_owned()
            } else {
                format!(
                    "one list item holds {} processors ({}); put each in its own `- ` item",
                    names.len(),
                    names.join(", ")
                )
            },
        );
        return None;
    };
    let here = format!("{path}.{name}");
    static EMPTY: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);
    let settings_map = match &map[name] {
        Value::Null => &*EMPTY,
        Value::Object(m) => m,
        other => {
            d.error(
                here,
                format!("the settings of `{name}` are a map, found {}", kind(other)),
            );
            return None;
        }
    };
    // The condition and the settings are both checked, to report all errors.
    let when = match settings_map.get("when") {
        None | Some(Value::Null) => Ok(None),
        Some(c) => Condition::parse(c, &format!("{here}.when"), d)
            .map(Some)
            .ok_or(()),
    };
    let s = Settings {
        path: &here,
        map: settings_map,
    };
    let built = actions::build(name, s, d);
    let when = when.ok()?;
    match built {
        Built::Action(action) => Some(Step {
            path: here,
            when,
            kind: StepKind::Action(action),
        }),
        Built::Nothing => None,
        Built::Unavailable => {
            let spelling = if actions::is_elastic_processor(name) {
                ""
            } else {
                " (nor is it one of Elastic's processors: check the spelling)"
            };
            d.warn(format!(
                "{path}: processor `{name}` is not available in leasehold{spelling}; \
                 events pass unprocessed by it"
            ));
            None
        }
    }
}

fn parse_branch(map: &Map<String, Value>, path: &str, d: &mut Diag) -> Option<Step> {
    for key in map.keys() {
        if !matches!(key.as_str(), "if" | "then" | "else") {
            d.error(
                format!("{path}.{key}"),
                format!("an `if` processor has only `if`, `then` and `else`, not `{key}`"),
            );
        }
    }
    let condition = Condition::parse(&map["if"], &format!("{path}.if"), d);
    let then = match map.get("then") {
        None | Some(Value::Null) => {
            d.error(
                format!("{path}.then"),
                "`then` is required: the processors to run when `if` holds",
            );
            None
        }
        Some(v) => Some(parse_list(v, &format!("{path}.then"), d)),
    };
    let otherwise = match map.get("else") {
        None | Some(Value::Null) => None,
        Some(v) => Some(parse_list(v, &format!("{path}.else"), d)),
    };
    Some(Step {
        path: format!("{path}.if"),
        when: None,
        kind: StepKind::Branch(Arc::new(Branch {
            condition: condition?,
            then: then?,
            otherwise,
        })),
    })
}
