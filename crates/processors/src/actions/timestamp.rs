//! `timestamp`: parse a time field into `@timestamp` (or `target_field`).

use jiff::Timestamp;
use jiff::tz::TimeZone;
use serde_json::Value;

use super::{Action, Event, Flow};
use crate::path::{self, PathError};
use crate::settings::{Diag, Settings};
use crate::timefmt::format_utc_micros;
use crate::timelayout::Layout;

#[derive(Debug)]
enum Parser {
    /// Seconds since the epoch, a number or numeric text.
    Unix,
    /// Milliseconds since the epoch.
    UnixMs,
    Go(Layout),
}

/// Tries each layout in order; the first that parses wins. The result is
/// written in UTC as `2026-12-03T07:31:48.123456Z`.
#[derive(Debug)]
pub(crate) struct TimestampProc {
    field: String,
    target: String,
    parsers: Vec<Parser>,
    zone: TimeZone,
    ignore_missing: bool,
    ignore_failure: bool,
}

/// `field` and `layouts` (required), `timezone` (UTC), `target_field`
/// (`@timestamp`), `ignore_missing`, `ignore_failure` (false), `test` (times
/// that must parse when the policy loads), `id`.
pub(crate) fn build(s: Settings<'_>, d: &mut Diag) -> Option<TimestampProc> {
    s.check_keys(
        d,
        "timestamp",
        &[
            "field",
            "target_field",
            "layouts",
            "timezone",
            "ignore_missing",
            "ignore_failure",
            "test",
            "id",
        ],
        false,
    );
    let zone = match s.string(d, "timezone") {
        None => TimeZone::UTC,
        Some(name) => match crate::tz::parse_timezone(&name) {
            Ok(z) => z,
            Err(e) => {
                d.error(s.at("timezone"), e);
                TimeZone::UTC
            }
        },
    };
    let layouts = s.required_string_list(d, "layouts", "['2006-01-02T15:04:05Z07:00']");
    let mut parsers = Vec::new();
    for (i, layout) in layouts.iter().flatten().enumerate() {
        match layout.as_str() {
            "UNIX" => parsers.push(Parser::Unix),
            "UNIX_MS" => parsers.push(Parser::UnixMs),
            l => match Layout::parse(l) {
                Ok(layout) => parsers.push(Parser::Go(layout)),
                Err(e) => d.error(format!("{}.{i}", s.at("layouts")), e),
            },
        }
    }
    if layouts.as_ref().is_some_and(Vec::is_empty) {
        d.error(
            s.at("layouts"),
            "give at least one layout, e.g. `['2006-01-02T15:04:05Z07:00']`",
        );
    }
    let p = TimestampProc {
        field: s.required_string(d, "field", "start_time")?,
        target: s
            .string(d, "target_field")
            .unwrap_or_else(|| "@timestamp".to_owned()),
        parsers,
        zone,
        ignore_missing: s.bool(d, "ignore_missing", false),
        ignore_failure: s.bool(d, "ignore_failure", false),
    };
    layouts.as_ref()?;
    for (i, sample) in s.string_list(d, "test").into_iter().flatten().enumerate() {
        if let Err(e) = p.parse(&Value::String(sample.clone()), Timestamp::now()) {
            d.error(
                format!("{}.{i}", s.at("test")),
                format!("test timestamp `{sample}` does not parse with any layout: {e}"),
            );
        }
    }
    Some(p)
}

impl TimestampProc {
    fn parse(&self, v: &Value, now: Timestamp) -> Result<Timestamp, String> {
        let mut causes = Vec::new();
        for p in &self.parsers {
            let result = match p {
                Parser::Unix => epoch(v, 1_000_000_000),
                Parser::UnixMs => epoch(v, 1_000_000),
                Parser::Go(layout) => match v {
                    Value::String(s) => layout.parse_time(s, &self.zone, now),
                    other => Err(format!(
                        "layout `{}` reads text, found {}",
                        layout.source(),
                        crate::settings::kind(other)
                    )),
                },
            };
            match result {
                Ok(t) => return Ok(t),
                Err(e) => causes.push(e),
            }
        }
        Err(format!(
            "failed parsing time field {}: {}",
            self.field,
            causes.join("; ")
        ))
    }
}

/// Seconds (`unit` = 1e9 ns) or milliseconds (1e6) since the epoch, from an
/// integer, a float, or their text, as Beats' `UNIX` and `UNIX_MS` read them.
fn epoch(v: &Value, unit: i128) -> Result<Timestamp, String> {
    let not_number = || "could not parse time field as int or float".to_owned();
    let int = match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse::<i64>().ok(),
        _ => None,
    };
    let nanos = match int {
        Some(i) => i128::from(i) * unit,
        None => {
            let f = match v {
                Value::Number(n) => n.as_f64(),
                Value::String(s) => s.parse::<f64>().ok(),
                _ => None,
            }
            .filter(|f| f.is_finite())
            .ok_or_else(not_number)?;
            (f * unit as f64) as i128
        }
    };
    Timestamp::from_nanosecond(nanos).map_err(|e| e.to_string())
}

impl Action for TimestampProc {
    fn run(&self, event: &mut Event) -> Result<Flow, String> {
        let value = match path::get(event, &self.field) {
            Ok(v) => v,
            Err(PathError::Missing) if self.ignore_missing || self.ignore_failure => {
                return Ok(Flow::Continue);
            }
            Err(_) if self.ignore_failure => return Ok(Flow::Continue),
            Err(e) => return Err(format!("failed to get time field {}: {e}", self.field)),
        };
        let ts = match self.parse(value, Timestamp::now()) {
            Ok(ts) => ts,
            Err(_) if self.ignore_failure => return Ok(Flow::Continue),
            Err(e) => return Err(e),
        };
        match path::insert(event, &self.target, Value::String(format_utc_micros(ts))) {
            Ok(_) => Ok(Flow::Continue),
            Err(_) if self.ignore_failure => Ok(Flow::Continue),
            Err(e) => Err(format!("cannot write {}: {e}", self.target)),
        }
    }
}
