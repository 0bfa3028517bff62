//! Time zones as Beats names them: IANA names read from the system's
//! zoneinfo files (as Go does), fixed offsets such as `+0430`, and the
//! machine's local zone (`TZ`, else `/etc/localtime`).
//!
//! This is the only I/O of the crate, and it happens while parsing a policy,
//! never while processing events.

use jiff::tz::{Offset, TimeZone};

/// Where Go looks for zoneinfo files on Unix.
const ZONEINFO_DIRS: &[&str] = &[
    "/usr/share/zoneinfo/",
    "/usr/share/lib/zoneinfo/",
    "/usr/lib/locale/TZ/",
    "/etc/zoneinfo/",
];

/// A `timezone` setting: a fixed offset (`-07`, `-0700`, `-07:00`), `UTC`,
/// `Local`, or an IANA name such as `America/New_York`.
pub(crate) fn parse_timezone(s: &str) -> Result<TimeZone, String> {
    if let Some(offset) = parse_fixed_offset(s) {
        return Offset::from_seconds(offset)
            .map(Offset::to_time_zone)
            .map_err(|e| format!("time zone offset `{s}` is out of range: {e}"));
    }
    match s {
        "" | "UTC" => return Ok(TimeZone::UTC),
        "Local" => return Ok(local()),
        _ => {}
    }
    load_named(s).ok_or_else(|| {
        format!(
            "unknown time zone `{s}`; use an IANA name such as `America/New_York` \
             (from the system's zoneinfo files), `UTC`, `Local`, or an offset such as \
             `+0200`, `+02:00` or `+02`"
        )
    })
}

/// `[+-]hh`, `[+-]hhmm` or `[+-]hh:mm`, in seconds east of UTC.
fn parse_fixed_offset(s: &str) -> Option<i32> {
    let b = s.as_bytes();
    let sign = match b.first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let digits = |x: &[u8]| -> Option<i32> {
        if x.len() == 2 && x.iter().all(u8::is_ascii_digit) {
            Some(i32::from(x[0] - b'0') * 10 + i32::from(x[1] - b'0'))
        } else {
            None
        }
    };
    let (h, m) = match b.len() {
        3 => (digits(&b[1..3])?, 0),
        5 => (digits(&b[1..3])?, digits(&b[3..5])?),
        6 if b[3] == b':' => (digits(&b[1..3])?, digits(&b[4..6])?),
        _ => return None,
    };
    if h > 24 || m > 60 {
        return None;
    }
    Some(sign * (h * 3600 + m * 60))
}

/// An IANA zone from the zoneinfo files; `None` for an invalid name or a
/// missing file.
pub(crate) fn load_named(name: &str) -> Option<TimeZone> {
    if name.is_empty()
        || name.starts_with('/')
        || name.contains('\\')
        || name.split('/').any(|part| part == ".." || part.is_empty())
    {
        return None;
    }
    ZONEINFO_DIRS.iter().find_map(|dir| {
        let data = std::fs::read(format!("{dir}{name}")).ok()?;
        TimeZone::tzif(name, &data).ok()
    })
}

/// The machine's zone, as Go's `time.Local`: `TZ` when set (empty is UTC;
/// a name, a file path or a POSIX rule), else `/etc/localtime`, else UTC.
pub(crate) fn local() -> TimeZone {
    match std::env::var("TZ") {
        Ok(tz) => {
            let tz = tz.strip_prefix(':').unwrap_or(&tz);
            if tz.is_empty() || tz == "UTC" {
                return TimeZone::UTC;
            }
            if tz.starts_with('/') {
                return read_tzif(tz).unwrap_or(TimeZone::UTC);
            }
            load_named(tz)
                .or_else(|| TimeZone::posix(tz).ok())
                .unwrap_or(TimeZone::UTC)
        }
        Err(_) => read_tzif("/etc/localtime").unwrap_or(TimeZone::UTC),
    }
}

fn read_tzif(file: &str) -> Option<TimeZone> {
    let data = std::fs::read(file).ok()?;
    TimeZone::tzif("Local", &data).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offset_of(tz: &TimeZone) -> i32 {
        tz.to_offset(jiff::Timestamp::UNIX_EPOCH).seconds()
    }

    #[test]
    fn fixed_offsets_as_beats_accepts_them() {
        for (s, secs) in [
            ("+0000", 0),
            ("+0430", 16200),
            ("+03:00", 10800),
            ("+00:30", 1800),
            ("+04", 14400),
            ("-03:30", -12600),
            ("-00:30", -1800),
            ("-04", -14400),
        ] {
            assert_eq!(offset_of(&parse_timezone(s).unwrap()), secs, "{s}");
        }
        for bad in [
            "Z",
            "-400",
            "+4",
            "+04:0",
            "Equatorial/Kundu",
            "../etc/passwd",
        ] {
            assert!(parse_timezone(bad).is_err(), "{bad}");
        }
        assert_eq!(offset_of(&parse_timezone("UTC").unwrap()), 0);
    }

    #[test]
    fn iana_names_come_from_zoneinfo() {
        if !std::path::Path::new("/usr/share/zoneinfo/America/Panama").exists() {
            return; // No zoneinfo files on this machine.
        }
        let panama = parse_timezone("America/Panama").unwrap();
        assert_eq!(offset_of(&panama), -5 * 3600);
        let gmt2 = parse_timezone("Etc/GMT+2").unwrap();
        assert_eq!(offset_of(&gmt2), -2 * 3600);
    }
}
