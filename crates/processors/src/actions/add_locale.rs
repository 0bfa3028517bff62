//! `add_locale`: the machine's time zone as `event.timezone`.

use jiff::Timestamp;
use jiff::tz::TimeZone;
use serde_json::Value;

use super::{Action, Event, Flow};
use crate::path;
use crate::settings::{Diag, Settings};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// `+02:00`
    Offset,
    /// `CEST` (daylight saving time shows: `CET` in winter)
    Abbreviation,
}

/// Sets `event.timezone` to the local zone's offset or abbreviation at the
/// time the event is processed. The zone is read once, when the policy is
/// parsed (like Go reads `time.Local` once).
#[derive(Debug)]
pub(crate) struct AddLocale {
    format: Format,
    zone: TimeZone,
}

/// `format`: `offset` (default) or `abbreviation`, in any case.
pub(crate) fn build(s: Settings<'_>, d: &mut Diag) -> Option<AddLocale> {
    s.check_keys(d, "add_locale", &["format"], false);
    let format = match s.string(d, "format").map(|f| f.to_ascii_lowercase()) {
        None => Format::Offset,
        Some(f) if f == "offset" => Format::Offset,
        Some(f) if f == "abbreviation" => Format::Abbreviation,
        Some(f) => {
            d.error(
                s.at("format"),
                format!("`{f}` is not a format of add_locale; use `offset` or `abbreviation`"),
            );
            return None;
        }
    };
    Some(AddLocale::new(format, crate::tz::local()))
}

impl AddLocale {
    pub(crate) fn new(format: Format, zone: TimeZone) -> AddLocale {
        AddLocale { format, zone }
    }

    /// The value for `event.timezone` at `now`.
    pub(crate) fn value_at(&self, now: Timestamp) -> String {
        let info = self.zone.to_offset_info(now);
        match self.format {
            Format::Abbreviation => info.abbreviation().to_owned(),
            Format::Offset => {
                let secs = info.offset().seconds();
                let sign = if secs < 0 { '-' } else { '+' };
                let secs = secs.unsigned_abs();
                format!("{sign}{:02}:{:02}", secs / 3600, secs % 3600 / 60)
            }
        }
    }
}

impl Action for AddLocale {
    fn run(&self, event: &mut Event) -> Result<Flow, String> {
        let value = Value::String(self.value_at(Timestamp::now()));
        path::insert(event, "event.timezone", value)
            .map_err(|e| format!("cannot set event.timezone: {e}"))?;
        Ok(Flow::Continue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::tz::Offset;

    #[test]
    fn offsets_are_signed_hours_and_minutes() {
        let at = |secs: i32| {
            let zone = Offset::from_seconds(secs).unwrap().to_time_zone();
            AddLocale::new(Format::Offset, zone).value_at(Timestamp::UNIX_EPOCH)
        };
        assert_eq!(at(0), "+00:00");
        assert_eq!(at(3 * 3600), "+03:00");
        assert_eq!(at(-(4 * 3600 + 30 * 60)), "-04:30");
        assert_eq!(at(5 * 3600 + 45 * 60), "+05:45");
    }

    #[test]
    fn abbreviation_follows_daylight_saving_time() {
        let Some(paris) = crate::tz::load_named("Europe/Paris") else {
            return; // No zoneinfo files on this machine.
        };
        let p = AddLocale::new(Format::Abbreviation, paris);
        let winter = Timestamp::from_second(1_767_225_600).unwrap(); // 2026-01-01
        let summer = Timestamp::from_second(1_782_864_000).unwrap(); // 2026-07-01
        assert_eq!(p.value_at(winter), "CET");
        assert_eq!(p.value_at(summer), "CEST");
        let utc = AddLocale::new(Format::Abbreviation, TimeZone::UTC);
        assert_eq!(utc.value_at(winter), "UTC");
    }
}
