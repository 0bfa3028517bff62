//! The processors themselves, and which name builds which.

use std::fmt;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::settings::{Diag, Settings};

mod add_fields;
mod add_locale;
mod add_tags;
mod decode_json;
mod dissect;
mod drop;
mod include_fields;
mod rename;
mod script;
mod timestamp;

/// One event, the whole document.
pub(crate) type Event = Map<String, Value>;

/// What the processors after this one do with the event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    Drop,
}

/// A processor. An `Err` is the processor failing on this event: like
/// Beats, the caller reports it and goes on with the next processor (the
/// processor itself decides what it leaves in the event).
pub(crate) trait Action: Send + Sync + fmt::Debug {
    fn run(&self, event: &mut Event) -> Result<Flow, String>;

    /// Whether a call may take long (up to a deadline) rather than
    /// microseconds, so callers run it off their async threads.
    fn blocks(&self) -> bool {
        false
    }
}

/// What a processor name and its settings give.
pub(crate) enum Built {
    Action(Arc<dyn Action>),
    /// Accepted, and nothing to do (metadata leasehold adds itself), or not
    /// built because of errors already reported.
    Nothing,
    /// A processor leasehold does not have.
    Unavailable,
}

/// Builds the processor `name`, reporting bad settings into `d`.
pub(crate) fn build(name: &str, s: Settings<'_>, d: &mut Diag) -> Built {
    if name == "script" && d.confined {
        d.warn(format!(
            "{}: processors that come with a Pod cannot run scripts; this `script` is skipped \
             (put it in the policy, where the operator wrote the inputs)",
            s.path
        ));
        return Built::Nothing;
    }
    let errors_before = d.errors.len();
    let built: Option<Arc<dyn Action>> = match name {
        "add_fields" => add_fields::add_fields(s, d).map(arc),
        "add_labels" => add_fields::add_labels(s, d).map(arc),
        "add_tags" => add_tags::build(s, d).map(arc),
        "drop_event" => drop::drop_event(s, d).map(arc),
        "drop_fields" => drop::drop_fields(s, d).map(arc),
        "include_fields" => include_fields::build(s, d).map(arc),
        "rename" => rename::build(s, d, rename::Mode::Rename).map(arc),
        "copy_fields" => rename::build(s, d, rename::Mode::Copy).map(arc),
        "decode_json_fields" => decode_json::build(s, d).map(arc),
        "add_locale" => add_locale::build(s, d).map(arc),
        "dissect" => dissect::build(s, d).map(arc),
        "timestamp" => timestamp::build(s, d).map(arc),
        "script" => script::build(s, d).map(arc),
        // The agent stamps `host.*` and `kubernetes.*` on every event itself,
        // so these two are accepted and do nothing here.
        "add_host_metadata" | "add_kubernetes_metadata" => return Built::Nothing,
        _ => return Built::Unavailable,
    };
    match built {
        Some(a) if d.errors.len() == errors_before => Built::Action(a),
        _ => Built::Nothing,
    }
}

fn arc<A: Action + 'static>(a: A) -> Arc<dyn Action> {
    Arc::new(a)
}

/// Whether `name` is one of Elastic's processors (that leasehold may lack),
/// to tell a missing feature from a misspelling.
pub(crate) fn is_elastic_processor(name: &str) -> bool {
    const ELASTIC: &[&str] = &[
        "add_cloud_metadata",
        "add_cloudfoundry_metadata",
        "add_docker_metadata",
        "add_fields",
        "add_formatted_index",
        "add_host_metadata",
        "add_id",
        "add_kubernetes_metadata",
        "add_labels",
        "add_locale",
        "add_network_direction",
        "add_nomad_metadata",
        "add_observer_metadata",
        "add_process_metadata",
        "add_session_metadata",
        "add_tags",
        "append",
        "cache",
        "community_id",
        "convert",
        "copy_fields",
        "decode_base64_field",
        "decode_cef",
        "decode_csv_fields",
        "decode_duration",
        "decode_json_fields",
        "decode_xml",
        "decode_xml_wineventlog",
        "decompress_gzip_field",
        "detect_mime_type",
        "dissect",
        "dns",
        "drop_event",
        "drop_fields",
        "extract_array",
        "fingerprint",
        "include_fields",
        "lowercase",
        "move_fields",
        "parse_aws_vpc_flow_log",
        "rate_limit",
        "registered_domain",
        "rename",
        "replace",
        "script",
        "syslog",
        "timestamp",
        "translate_ldap_attribute",
        "translate_sid",
        "truncate_fields",
        "uppercase",
        "urldecode",
    ];
    ELASTIC.contains(&name)
}
