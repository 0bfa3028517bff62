//! Go time layouts (`2006-01-02T15:04:05Z07:00`, `Jan _2 15:04:05`, …), the
//! format of the `timestamp` processor's `layouts`, parsed the way Go's
//! `time.ParseInLocation` parses: the layout is cut into Go's reference-time
//! elements and literal text, the input is read element by element, and
//! jiff builds the instant in the right zone.
//!
//! Go accepts a fractional second right after the seconds even when the
//! layout has none, lets a space in the layout match any run of spaces, and
//! reads month and day names without regard to case; so does this parser.

use jiff::civil::Date;
use jiff::tz::{Offset, TimeZone};
use jiff::{SignedDuration, Timestamp};

/// One element of Go's reference time `Mon Jan 2 15:04:05 MST 2006`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Elem {
    LongMonth,
    Month,
    NumMonth,
    ZeroMonth,
    LongWeekDay,
    WeekDay,
    Day,
    UnderDay,
    ZeroDay,
    UnderYearDay,
    ZeroYearDay,
    Hour,
    Hour12,
    ZeroHour12,
    Minute,
    ZeroMinute,
    Second,
    ZeroSecond,
    LongYear,
    Year,
    UpperPm,
    LowerPm,
    ZoneName,
    Iso8601Tz,
    Iso8601SecondsTz,
    Iso8601ShortTz,
    Iso8601ColonTz,
    Iso8601ColonSecondsTz,
    NumTz,
    NumSecondsTz,
    NumShortTz,
    NumColonTz,
    NumColonSecondsTz,
    /// `.000` (or `,000`): exactly this many digits.
    Frac0(usize),
    /// `.999` (or `,999`): optional, any number of digits.
    Frac9(usize),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Item {
    Lit(String),
    Elem(Elem),
}

/// A parsed Go layout.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    source: String,
    items: Vec<Item>,
}

const LONG_MONTHS: &[&str] = &[
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const SHORT_MONTHS: &[&str] = &[
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];
const LONG_DAYS: &[&str] = &[
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const SHORT_DAYS: &[&str] = &["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];

fn starts_lower(b: &[u8]) -> bool {
    b.first().is_some_and(u8::is_ascii_lowercase)
}

fn digit_at(b: &[u8], i: usize) -> bool {
    b.get(i).is_some_and(u8::is_ascii_digit)
}

/// The next element of `layout`: (start, element, end), as Go's
/// `nextStdChunk` finds it.
fn next_elem(l: &[u8]) -> Option<(usize, Elem, usize)> {
    let has = |i: usize, s: &str| l[i..].starts_with(s.as_bytes());
    for i in 0..l.len() {
        match l[i] {
            b'J' if has(i, "Jan") => {
                if has(i, "January") {
                    return Some((i, Elem::LongMonth, i + 7));
                }
                if !starts_lower(&l[i + 3..]) {
                    return Some((i, Elem::Month, i + 3));
                }
            }
            b'M' => {
                if has(i, "Mon") {
                    if has(i, "Monday") {
                        return Some((i, Elem::LongWeekDay, i + 6));
                    }
                    if !starts_lower(&l[i + 3..]) {
                        return Some((i, Elem::WeekDay, i + 3));
                    }
                }
                if has(i, "MST") {
                    return Some((i, Elem::ZoneName, i + 3));
                }
            }
            b'0' => {
                if let Some(c @ b'1'..=b'6') = l.get(i + 1) {
                    let e = [
                        Elem::ZeroMonth,
                        Elem::ZeroDay,
                        Elem::ZeroHour12,
                        Elem::ZeroMinute,
                        Elem::ZeroSecond,
                        Elem::Year,
                    ][usize::from(c - b'1')];
                    return Some((i, e, i + 2));
                }
                if has(i, "002") {
                    return Some((i, Elem::ZeroYearDay, i + 3));
                }
            }
            b'1' => {
                if l.get(i + 1) == Some(&b'5') {
                    return Some((i, Elem::Hour, i + 2));
                }
                return Some((i, Elem::NumMonth, i + 1));
            }
            b'2' => {
                if has(i, "2006") {
                    return Some((i, Elem::LongYear, i + 4));
                }
                return Some((i, Elem::Day, i + 1));
            }
            b'_' => {
                if l.get(i + 1) == Some(&b'2') {
                    // `_2006` is a literal `_` and the year.
                    if has(i + 1, "2006") {
                        return Some((i + 1, Elem::LongYear, i + 5));
                    }
                    return Some((i, Elem::UnderDay, i + 2));
                }
                if has(i, "__2") {
                    return Some((i, Elem::UnderYearDay, i + 3));
                }
            }
            b'3' => return Some((i, Elem::Hour12, i + 1)),
            b'4' => return Some((i, Elem::Minute, i + 1)),
            b'5' => return Some((i, Elem::Second, i + 1)),
            b'P' if l.get(i + 1) == Some(&b'M') => return Some((i, Elem::UpperPm, i + 2)),
            b'p' if l.get(i + 1) == Some(&b'm') => return Some((i, Elem::LowerPm, i + 2)),
            b'-' => {
                for (s, e) in [
                    ("-070000", Elem::NumSecondsTz),
                    ("-07:00:00", Elem::NumColonSecondsTz),
                    ("-0700", Elem::NumTz),
                    ("-07:00", Elem::NumColonTz),
                    ("-07", Elem::NumShortTz),
                ] {
                    if has(i, s) {
                        return Some((i, e, i + s.len()));
                    }
                }
            }
            b'Z' => {
                for (s, e) in [
                    ("Z070000", Elem::Iso8601SecondsTz),
                    ("Z07:00:00", Elem::Iso8601ColonSecondsTz),
                    ("Z0700", Elem::Iso8601Tz),
                    ("Z07:00", Elem::Iso8601ColonTz),
                    ("Z07", Elem::Iso8601ShortTz),
                ] {
                    if has(i, s) {
                        return Some((i, e, i + s.len()));
                    }
                }
            }
            b'.' | b',' => {
                if let Some(&ch @ (b'0' | b'9')) = l.get(i + 1) {
                    let mut j = i + 1;
                    while l.get(j) == Some(&ch) {
                        j += 1;
                    }
                    // Only a run of one repeated digit that ends here.
                    if !digit_at(l, j) {
                        let n = j - (i + 1);
                        let e = if ch == b'0' {
                            Elem::Frac0(n)
                        } else {
                            Elem::Frac9(n)
                        };
                        return Some((i, e, j));
                    }
                }
            }
            _ => {}
        }
    }
    None
}

/// Why an input does not fit a layout.
type Fail = String;

fn bad(what: &str) -> Fail {
    format!("cannot parse {what}")
}

/// Reads one or two digits (exactly two when `fixed`).
fn getnum(v: &[u8], fixed: bool) -> Option<(i32, &[u8])> {
    if !digit_at(v, 0) {
        return None;
    }
    if !digit_at(v, 1) {
        if fixed {
            return None;
        }
        return Some((i32::from(v[0] - b'0'), &v[1..]));
    }
    Some((
        i32::from(v[0] - b'0') * 10 + i32::from(v[1] - b'0'),
        &v[2..],
    ))
}

/// Reads one to three digits (exactly three when `fixed`).
fn getnum3(v: &[u8], fixed: bool) -> Option<(i32, &[u8])> {
    let n = v.iter().take(3).take_while(|b| b.is_ascii_digit()).count();
    if n == 0 || (fixed && n != 3) {
        return None;
    }
    let value = v[..n]
        .iter()
        .fold(0i32, |acc, b| acc * 10 + i32::from(b - b'0'));
    Some((value, &v[n..]))
}

/// The index in `tab` of the name `v` starts with (ASCII case ignored).
fn lookup<'a>(tab: &[&str], v: &'a [u8]) -> Option<(usize, &'a [u8])> {
    tab.iter().enumerate().find_map(|(i, name)| {
        let n = name.len();
        (v.len() >= n && v[..n].eq_ignore_ascii_case(name.as_bytes())).then(|| (i, &v[n..]))
    })
}

/// A literal of the layout: a space matches any run of spaces (even none,
/// but not another character).
fn skip<'a>(mut v: &'a [u8], mut lit: &[u8]) -> Option<&'a [u8]> {
    while let Some(&c) = lit.first() {
        if c == b' ' {
            if v.first().is_some_and(|&x| x != b' ') {
                return None;
            }
            lit = trim_spaces(lit);
            v = trim_spaces(v);
            continue;
        }
        if v.first() != Some(&c) {
            return None;
        }
        lit = &lit[1..];
        v = &v[1..];
    }
    Some(v)
}

fn trim_spaces(b: &[u8]) -> &[u8] {
    let n = b.iter().take_while(|&&c| c == b' ').count();
    &b[n..]
}

/// `.123` or `,123` of `nbytes` bytes (separator included) as nanoseconds;
/// digits past the ninth are read and dropped.
fn nanos(v: &[u8], nbytes: usize) -> Option<i32> {
    if !matches!(v.first(), Some(b'.' | b',')) || nbytes < 2 || v.len() < nbytes {
        return None;
    }
    let digits = &v[1..nbytes];
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut ns: i32 = 0;
    for i in 0..9 {
        ns = ns * 10 + digits.get(i).map_or(0, |d| i32::from(d - b'0'));
    }
    Some(ns)
}

/// A zone abbreviation at the start of `v` (Go's `parseTimeZone`): its length.
fn zone_name_len(v: &[u8]) -> Option<usize> {
    if v.len() < 3 {
        return None;
    }
    if v.starts_with(b"ChST") || v.starts_with(b"MeST") {
        return Some(4);
    }
    if v.starts_with(b"GMT") {
        return Some(3 + signed_hours_len(&v[3..]));
    }
    if v[0] == b'+' || v[0] == b'-' {
        let n = signed_hours_len(v);
        return (n > 0).then_some(n);
    }
    let upper = v
        .iter()
        .take(6)
        .take_while(|c| c.is_ascii_uppercase())
        .count();
    match upper {
        3 => Some(3),
        4 if v[3] == b'T' || v.starts_with(b"WITA") => Some(4),
        5 if v[4] == b'T' => Some(5),
        _ => None,
    }
}

/// `+7`, `-03`, … (sign and up to two digits of hours, at most 23).
fn signed_hours_len(v: &[u8]) -> usize {
    if !matches!(v.first(), Some(b'+' | b'-')) {
        return 0;
    }
    let n = v[1..]
        .iter()
        .take(2)
        .take_while(|b| b.is_ascii_digit())
        .count();
    if n == 0 {
        return 0;
    }
    let h = v[1..=n]
        .iter()
        .fold(0u32, |acc, b| acc * 10 + u32::from(b - b'0'));
    if h > 23 { 0 } else { 1 + n }
}

fn signed_hours(s: &str) -> Option<i32> {
    let (sign, digits) = match s.as_bytes().first()? {
        b'+' => (1, &s[1..]),
        b'-' => (-1, &s[1..]),
        _ => return None,
    };
    digits.parse::<i32>().ok().map(|h| sign * h * 3600)
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Zone {
    Layout,
    Utc,
    Offset(i32),
    Name(String),
}

fn is_leap(y: i32) -> bool {
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

fn days_in(month: i32, year: i32) -> i32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

impl Layout {
    /// Cuts a Go layout into elements and literals. A layout with no element
    /// of the reference time can match no time: it is refused.
    pub fn parse(layout: &str) -> Result<Layout, String> {
        let mut items = Vec::new();
        let mut rest = layout;
        while let Some((start, elem, end)) = next_elem(rest.as_bytes()) {
            if start > 0 {
                items.push(Item::Lit(rest[..start].to_owned()));
            }
            items.push(Item::Elem(elem));
            rest = &rest[end..];
        }
        if !rest.is_empty() {
            items.push(Item::Lit(rest.to_owned()));
        }
        if !items.iter().any(|i| matches!(i, Item::Elem(_))) {
            return Err(format!(
                "layout `{layout}` has no element of Go's reference time \
                 `Mon Jan 2 15:04:05 MST 2006`; layouts are written with that time, \
                 e.g. `2006-01-02T15:04:05Z07:00` or `Jan _2 15:04:05` \
                 (not `%Y-%m-%d` or `yyyy-MM-dd`), or are `UNIX` / `UNIX_MS`"
            ));
        }
        Ok(Layout {
            source: layout.to_owned(),
            items,
        })
    }

    /// Parses `input`; a time without a zone is in `loc`, a layout without a
    /// year gets the current year in `loc` (taken from `now`).
    pub fn parse_time(
        &self,
        input: &str,
        loc: &TimeZone,
        now: Timestamp,
    ) -> Result<Timestamp, Fail> {
        let fail = |why: &str| format!("`{input}` does not match layout `{}`: {why}", self.source);
        let mut v = input.as_bytes();
        let mut year: Option<i32> = None;
        let mut month: Option<i32> = None;
        let mut day: Option<i32> = None;
        let mut yday: Option<i32> = None;
        let (mut hour, mut min, mut sec, mut nsec) = (0i32, 0i32, 0i32, 0i32);
        let mut pm: Option<bool> = None;
        let mut zone = Zone::Layout;

        for (idx, item) in self.items.iter().enumerate() {
            let elem = match item {
                Item::Lit(lit) => {
                    v = skip(v, lit.as_bytes())
                        .ok_or_else(|| fail(&format!("expected `{lit}`")))?;
                    continue;
                }
                Item::Elem(e) => *e,
            };
            match elem {
                Elem::LongYear => {
                    if v.len() < 4 || !v[..4].iter().all(u8::is_ascii_digit) {
                        return Err(fail(&bad("the year")));
                    }
                    year = Some(v[..4].iter().fold(0, |a, b| a * 10 + i32::from(b - b'0')));
                    v = &v[4..];
                }
                Elem::Year => {
                    let (y, rest) = getnum(v, true).ok_or_else(|| fail(&bad("the year")))?;
                    year = Some(if y >= 69 { y + 1900 } else { y + 2000 });
                    v = rest;
                }
                Elem::LongMonth | Elem::Month => {
                    let tab = if elem == Elem::LongMonth {
                        LONG_MONTHS
                    } else {
                        SHORT_MONTHS
                    };
                    let (i, rest) = lookup(tab, v).ok_or_else(|| fail(&bad("the month")))?;
                    month = Some(i as i32 + 1);
                    v = rest;
                }
                Elem::NumMonth | Elem::ZeroMonth => {
                    let (m, rest) = getnum(v, elem == Elem::ZeroMonth)
                        .ok_or_else(|| fail(&bad("the month")))?;
                    if !(1..=12).contains(&m) {
                        return Err(fail("month out of range"));
                    }
                    month = Some(m);
                    v = rest;
                }
                Elem::LongWeekDay | Elem::WeekDay => {
                    let tab = if elem == Elem::LongWeekDay {
                        LONG_DAYS
                    } else {
                        SHORT_DAYS
                    };
                    let (_, rest) =
                        lookup(tab, v).ok_or_else(|| fail(&bad("the day of the week")))?;
                    v = rest;
                }
                Elem::Day | Elem::UnderDay | Elem::ZeroDay => {
                    if elem == Elem::UnderDay && v.first() == Some(&b' ') {
                        v = &v[1..];
                    }
                    let (d, rest) =
                        getnum(v, elem == Elem::ZeroDay).ok_or_else(|| fail(&bad("the day")))?;
                    day = Some(d);
                    v = rest;
                }
                Elem::UnderYearDay | Elem::ZeroYearDay => {
                    for _ in 0..2 {
                        if elem == Elem::UnderYearDay && v.first() == Some(&b' ') {
                            v = &v[1..];
                        }
                    }
                    let (d, rest) = getnum3(v, elem == Elem::ZeroYearDay)
                        .ok_or_else(|| fail(&bad("the day of the year")))?;
                    yday = Some(d);
                    v = rest;
                }
                Elem::Hour => {
                    let (h, rest) = getnum(v, false).ok_or_else(|| fail(&bad("the hour")))?;
                    if h >= 24 {
                        return Err(fail("hour out of range"));
                    }
                    hour = h;
                    v = rest;
                }
                Elem::Hour12 | Elem::ZeroHour12 => {
                    let (h, rest) = getnum(v, elem == Elem::ZeroHour12)
                        .ok_or_else(|| fail(&bad("the hour")))?;
                    if h > 12 {
                        return Err(fail("hour out of range"));
                    }
                    hour = h;
                    v = rest;
                }
                Elem::Minute | Elem::ZeroMinute => {
                    let (m, rest) = getnum(v, elem == Elem::ZeroMinute)
                        .ok_or_else(|| fail(&bad("the minute")))?;
                    if m >= 60 {
                        return Err(fail("minute out of range"));
                    }
                    min = m;
                    v = rest;
                }
                Elem::Second | Elem::ZeroSecond => {
                    let (s, rest) = getnum(v, elem == Elem::ZeroSecond)
                        .ok_or_else(|| fail(&bad("the second")))?;
                    if s >= 60 {
                        return Err(fail("second out of range"));
                    }
                    sec = s;
                    v = rest;
                    // A fraction the layout does not show is read anyway,
                    // unless the layout's next element is the fraction.
                    let next_is_frac = self.items[idx + 1..].iter().find_map(|i| match i {
                        Item::Elem(e) => Some(matches!(e, Elem::Frac0(_) | Elem::Frac9(_))),
                        Item::Lit(_) => None,
                    }) == Some(true);
                    if !next_is_frac
                        && v.len() >= 2
                        && matches!(v[0], b'.' | b',')
                        && digit_at(v, 1)
                    {
                        let n = 1 + v[1..].iter().take_while(|b| b.is_ascii_digit()).count();
                        nsec = nanos(v, n).ok_or_else(|| fail(&bad("the fraction of a second")))?;
                        v = &v[n..];
                    }
                }
                Elem::Frac0(n) => {
                    let len = 1 + n;
                    nsec = nanos(v, len).ok_or_else(|| fail(&bad("the fraction of a second")))?;
                    v = &v[len..];
                }
                Elem::Frac9(_) => {
                    if v.len() < 2 || !matches!(v[0], b'.' | b',') || !digit_at(v, 1) {
                        continue; // The fraction is optional.
                    }
                    let n = 1 + v[1..].iter().take_while(|b| b.is_ascii_digit()).count();
                    nsec = nanos(v, n).ok_or_else(|| fail(&bad("the fraction of a second")))?;
                    v = &v[n..];
                }
                Elem::UpperPm | Elem::LowerPm => {
                    let (am, p) = if elem == Elem::UpperPm {
                        (b"AM", b"PM")
                    } else {
                        (b"am", b"pm")
                    };
                    if v.starts_with(p) {
                        pm = Some(true);
                    } else if v.starts_with(am) {
                        pm = Some(false);
                    } else {
                        return Err(fail(&bad("AM/PM")));
                    }
                    v = &v[2..];
                }
                Elem::ZoneName => {
                    if v.starts_with(b"UTC") {
                        zone = Zone::Utc;
                        v = &v[3..];
                        continue;
                    }
                    let n = zone_name_len(v).ok_or_else(|| fail(&bad("the time zone")))?;
                    zone = Zone::Name(String::from_utf8_lossy(&v[..n]).into_owned());
                    v = &v[n..];
                }
                _ => {
                    let (z, rest) =
                        numeric_zone(elem, v).ok_or_else(|| fail(&bad("the time zone offset")))?;
                    zone = z;
                    v = rest;
                }
            }
        }
        if !v.is_empty() {
            return Err(fail(&format!(
                "extra text `{}`",
                String::from_utf8_lossy(v)
            )));
        }

        let year = match year {
            Some(y) => y,
            None => i32::from(now.to_zoned(loc.clone()).year()),
        };
        let (mut month_v, mut day_v) = (month.unwrap_or(1), day.unwrap_or(1));
        if let Some(yd) = yday {
            let total = if is_leap(year) { 366 } else { 365 };
            if !(1..=total).contains(&yd) {
                return Err(fail("day of the year out of range"));
            }
            let (mut m, mut d) = (1, yd);
            while d > days_in(m, year) {
                d -= days_in(m, year);
                m += 1;
            }
            if month.is_some_and(|x| x != m) || day.is_some_and(|x| x != d) {
                return Err(fail("day of the year does not match the month and day"));
            }
            (month_v, day_v) = (m, d);
        }
        if day_v < 1 || day_v > days_in(month_v, year) {
            return Err(fail("day out of range"));
        }
        match pm {
            Some(true) if hour < 12 => hour += 12,
            Some(false) if hour == 12 => hour = 0,
            _ => {}
        }
        let date = i16::try_from(year)
            .ok()
            .and_then(|y| Date::new(y, month_v as i8, day_v as i8).ok())
            .ok_or_else(|| fail("date out of range"))?;
        let dt = date.at(hour as i8, min as i8, sec as i8, nsec);
        let ts = match zone {
            Zone::Utc => Offset::UTC.to_timestamp(dt),
            Zone::Offset(secs) => Offset::from_seconds(secs).and_then(|o| o.to_timestamp(dt)),
            Zone::Name(name) => {
                let secs = abbreviation_offset(&name, dt, loc);
                Offset::from_seconds(secs).and_then(|o| o.to_timestamp(dt))
            }
            Zone::Layout => loc.to_ambiguous_timestamp(dt).compatible(),
        };
        ts.map_err(|e| fail(&e.to_string()))
    }

    /// The layout as written.
    pub fn source(&self) -> &str {
        &self.source
    }
}

/// A numeric zone element (`Z07:00`, `-0700`, …) at the start of `v`.
fn numeric_zone(elem: Elem, v: &[u8]) -> Option<(Zone, &[u8])> {
    let iso = matches!(
        elem,
        Elem::Iso8601Tz | Elem::Iso8601ShortTz | Elem::Iso8601ColonTz
    );
    if iso && v.first() == Some(&b'Z') {
        return Some((Zone::Utc, &v[1..]));
    }
    let (sign, hh, mm, ss, rest): (u8, &[u8], &[u8], &[u8], &[u8]) = match elem {
        Elem::Iso8601ColonTz | Elem::NumColonTz => {
            if v.len() < 6 || v[3] != b':' {
                return None;
            }
            (v[0], &v[1..3], &v[4..6], b"00", &v[6..])
        }
        Elem::NumShortTz | Elem::Iso8601ShortTz => {
            if v.len() < 3 {
                return None;
            }
            (v[0], &v[1..3], b"00", b"00", &v[3..])
        }
        Elem::Iso8601ColonSecondsTz | Elem::NumColonSecondsTz => {
            if v.len() < 9 || v[3] != b':' || v[6] != b':' {
                return None;
            }
            (v[0], &v[1..3], &v[4..6], &v[7..9], &v[9..])
        }
        Elem::Iso8601SecondsTz | Elem::NumSecondsTz => {
            if v.len() < 7 {
                return None;
            }
            (v[0], &v[1..3], &v[3..5], &v[5..7], &v[7..])
        }
        _ => {
            if v.len() < 5 {
                return None;
            }
            (v[0], &v[1..3], &v[3..5], b"00", &v[5..])
        }
    };
    let (h, _) = getnum(hh, true)?;
    let (m, _) = getnum(mm, true)?;
    let (s, _) = getnum(ss, true)?;
    if h > 24 || m > 60 || s > 60 {
        return None;
    }
    let secs = (h * 60 + m) * 60 + s;
    let secs = match sign {
        b'+' => secs,
        b'-' => -secs,
        _ => return None,
    };
    Some((Zone::Offset(secs), rest))
}

/// The offset a zone abbreviation stands for: `GMT+3` and `+03` as written;
/// a name `loc` uses (at that time, or in the other half of the year, like
/// `EST` in July for New York) as `loc` defines it; any other name is UTC,
/// as in Go.
fn abbreviation_offset(name: &str, dt: jiff::civil::DateTime, loc: &TimeZone) -> i32 {
    if let Some(rest) = name.strip_prefix("GMT") {
        return signed_hours(rest).unwrap_or(0);
    }
    if let Some(secs) = signed_hours(name) {
        return secs;
    }
    let Ok(at) = loc.to_ambiguous_timestamp(dt).compatible() else {
        return 0;
    };
    let half_year = SignedDuration::from_hours(24 * 182);
    for probe in [
        Some(at),
        at.checked_sub(half_year).ok(),
        at.checked_add(half_year).ok(),
    ]
    .into_iter()
    .flatten()
    {
        let info = loc.to_offset_info(probe);
        if info.abbreviation() == name {
            return info.offset().seconds();
        }
    }
    0
}

/// `@timestamp` as Beats accepts it from decoded JSON: RFC 3339, or
/// ISO 8601 with milliseconds and a `+hhmm` offset.
pub(crate) fn parse_event_timestamp(s: &str) -> Option<Timestamp> {
    use std::sync::LazyLock;
    static LAYOUTS: LazyLock<Vec<Layout>> = LazyLock::new(|| {
        ["2006-01-02T15:04:05Z07:00", "2006-01-02T15:04:05.000Z0700"]
            .iter()
            .filter_map(|l| Layout::parse(l).ok())
            .collect()
    });
    LAYOUTS
        .iter()
        .find_map(|l| l.parse_time(s, &TimeZone::UTC, Timestamp::UNIX_EPOCH).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timefmt::format_utc_micros;

    fn parse(layout: &str, input: &str, loc: &TimeZone) -> Result<String, String> {
        let l = Layout::parse(layout)?;
        let now = Timestamp::from_second(1_782_000_000).unwrap(); // 2026-06-21
        l.parse_time(input, loc, now).map(format_utc_micros)
    }

    fn utc(layout: &str, input: &str) -> Result<String, String> {
        parse(layout, input, &TimeZone::UTC)
    }

    // 2015-03-07T11:06:39Z in Go's standard layouts, as Beats' tests use it.
    #[test]
    fn go_standard_layouts() {
        let want = "2015-03-07T11:06:39.000000Z";
        for (layout, input) in [
            ("Mon Jan _2 15:04:05 2006", "Sat Mar  7 11:06:39 2015"), // ANSIC
            (
                "2006-01-02T15:04:05.999999999Z07:00",
                "2015-03-07T11:06:39Z",
            ), // RFC3339Nano
            ("2006-01-02T15:04:05Z07:00", "2015-03-07T11:06:39Z"),    // RFC3339
            ("2006-01-02T15:04:05Z07:00", "2015-03-07T12:06:39+01:00"),
            (
                "Mon, 02 Jan 2006 15:04:05 -0700",
                "Sat, 07 Mar 2015 06:06:39 -0500",
            ), // RFC1123Z
            ("02 Jan 06 15:04 -0700", "07 Mar 15 11:06 +0000"), // RFC822Z (no seconds)
            (
                "Mon Jan 02 15:04:05 -0700 2006",
                "Sat Mar 07 11:06:39 +0000 2015",
            ), // RubyDate
            ("2006-01-02 15:04:05", "2015-03-07 11:06:39"),     // DateTime
            ("01/02/2006 03:04:05PM", "03/07/2015 11:06:39AM"),
            (
                "Monday, 02-Jan-06 15:04:05 MST",
                "Saturday, 07-Mar-15 11:06:39 UTC",
            ), // RFC850
        ] {
            let got = utc(layout, input).unwrap();
            let expect = if layout.starts_with("02 Jan 06 15:04") {
                "2015-03-07T11:06:00.000000Z"
            } else {
                want
            };
            assert_eq!(got, expect, "{layout} / {input}");
        }
    }

    #[test]
    fn elastic_doc_layouts() {
        // The `timestamp` processor's documented example.
        assert_eq!(
            utc("2006-01-02T15:04:05Z", "2019-06-22T16:33:51Z").unwrap(),
            "2019-06-22T16:33:51.000000Z"
        );
        assert_eq!(
            utc("2006-01-02T15:04:05.999Z", "2019-11-18T04:59:51.123Z").unwrap(),
            "2019-11-18T04:59:51.123000Z"
        );
    }

    #[test]
    fn fractions() {
        // Read after the seconds even when the layout has none.
        assert_eq!(
            utc("2006-01-02 15:04:05", "2015-03-07 11:06:39.1234567").unwrap(),
            "2015-03-07T11:06:39.123456Z"
        );
        // `.000` needs exactly that many digits; `,` works too.
        assert_eq!(
            utc("15:04:05.000 2006-01-02", "11:06:39,002 2015-03-07").unwrap(),
            "2015-03-07T11:06:39.002000Z"
        );
        assert!(utc("15:04:05.000 2006-01-02", "11:06:39.02 2015-03-07").is_err());
        // `.999` is optional.
        assert_eq!(
            utc("2006-01-02T15:04:05.999Z07:00", "2015-03-07T11:06:39+00:00").unwrap(),
            "2015-03-07T11:06:39.000000Z"
        );
    }

    #[test]
    fn no_year_takes_the_current_year() {
        // Go's StampMilli, as in Beats' TestParseNoYear.
        assert_eq!(
            utc("Jan _2 15:04:05.000", "Mar  7 11:06:39.002").unwrap(),
            "2026-03-07T11:06:39.002000Z"
        );
        assert_eq!(
            utc("Jan _2 15:04:05", "Dec 25 01:02:03").unwrap(),
            "2026-12-25T01:02:03.000000Z"
        );
    }

    #[test]
    fn zones_from_layout_and_location() {
        let plus2 = Offset::from_seconds(7200).unwrap().to_time_zone();
        // No zone in the input: the location's.
        assert_eq!(
            parse("2006-01-02 15:04:05", "2015-03-07 11:06:39", &plus2).unwrap(),
            "2015-03-07T09:06:39.000000Z"
        );
        // A zone in the input wins.
        assert_eq!(
            parse(
                "2006-01-02 15:04:05 -07:00",
                "2015-03-07 11:06:39 -01:00",
                &plus2
            )
            .unwrap(),
            "2015-03-07T12:06:39.000000Z"
        );
        assert_eq!(
            parse(
                "2006-01-02 15:04:05 MST",
                "2015-03-07 11:06:39 GMT+3",
                &plus2
            )
            .unwrap(),
            "2015-03-07T08:06:39.000000Z"
        );
        // An unknown abbreviation is UTC, as in Go.
        assert_eq!(
            parse("2006-01-02 15:04:05 MST", "2015-03-07 11:06:39 XYZ", &plus2).unwrap(),
            "2015-03-07T11:06:39.000000Z"
        );
        assert_eq!(
            utc("2006-01-02T15:04:05Z0700", "2015-03-07T11:06:39-0130").unwrap(),
            "2015-03-07T12:36:39.000000Z"
        );
        assert_eq!(
            utc("2006-01-02T15:04:05Z07", "2015-03-07T11:06:39+02").unwrap(),
            "2015-03-07T09:06:39.000000Z"
        );
    }

    #[test]
    fn abbreviation_of_the_location() {
        let Some(ny) = crate::tz::load_named("America/New_York") else {
            return; // No zoneinfo files on this machine.
        };
        assert_eq!(
            parse("2006-01-02 15:04:05 MST", "2015-07-07 11:06:39 EDT", &ny).unwrap(),
            "2015-07-07T15:06:39.000000Z"
        );
        // EST in July: New York's standard offset still applies.
        assert_eq!(
            parse("2006-01-02 15:04:05 MST", "2015-07-07 11:06:39 EST", &ny).unwrap(),
            "2015-07-07T16:06:39.000000Z"
        );
    }

    #[test]
    fn other_elements() {
        assert_eq!(
            utc("2006 002 15h04", "2015 066 11h06").unwrap(),
            "2015-03-07T11:06:00.000000Z"
        );
        assert_eq!(
            utc("January 2, 2006 3:04pm", "march 7, 2015 11:06pm").unwrap(),
            "2015-03-07T23:06:00.000000Z"
        );
        assert_eq!(
            utc("1/2/06 3:04 PM", "3/7/15 12:06 AM").unwrap(),
            "2015-03-07T00:06:00.000000Z"
        );
        assert_eq!(
            utc("_2 Jan 2006", " 7 Mar 2015").unwrap(),
            "2015-03-07T00:00:00.000000Z"
        );
    }

    #[test]
    fn mismatches_fail() {
        assert!(utc("2006-01-02", "2015-02-30").is_err()); // day out of range
        assert!(utc("2006-01-02", "2015-13-01").is_err());
        assert!(utc("2006-01-02", "2015-03-07 extra").is_err());
        assert!(utc("15:04:05", "24:00:00").is_err());
        assert!(utc("2006-01-02T15:04:05Z07:00", "2015-03-07T11:06:39").is_err());
        assert!(utc("Jan 2 2006", "Mxr 7 2015").is_err());
        // Beats' TestBuiltInTest: a bad layout does not parse its sample.
        assert!(utc("2006-01-89T15:04:05Z07:00", "2015-03-07T11:06:39Z").is_err());
    }

    proptest::proptest! {
        #[test]
        fn parsing_never_panics(
            pieces in proptest::collection::vec(proptest::sample::select(vec![
                "2006", "06", "01", "1", "Jan", "January", "Mon", "Monday", "02", "2", "_2",
                "002", "__2", "15", "3", "03", "04", "4", "05", "5", "PM", "pm", "MST",
                "Z07:00", "-0700", "-07", "Z070000", "-07:00:00", ".000", ",999", " ", "-",
                ":", "T", "é",
            ]), 1..10),
            input in "[0-9 :.,+TZ_A-Za-zé-]{0,32}",
        ) {
            let layout: String = pieces.concat();
            if let Ok(l) = Layout::parse(&layout) {
                let _ = l.parse_time(&input, &TimeZone::UTC, Timestamp::UNIX_EPOCH);
            }
        }
    }

    #[test]
    fn layouts_without_reference_elements_are_refused() {
        for l in ["%Y-%m-%d", "yyyy-MM-dd HH:mm:ss", "dd/MM/yyyy", ""] {
            let e = Layout::parse(l).unwrap_err();
            assert!(e.contains("reference time"), "{l}: {e}");
        }
    }

    #[test]
    fn event_timestamps_from_json() {
        let ts = parse_event_timestamp("2016-04-05T18:47:18.444Z").unwrap();
        assert_eq!(format_utc_micros(ts), "2016-04-05T18:47:18.444000Z");
        let ts = parse_event_timestamp("2016-04-05T18:47:18.444+0100").unwrap();
        assert_eq!(format_utc_micros(ts), "2016-04-05T17:47:18.444000Z");
        assert!(parse_event_timestamp("not a time").is_none());
    }
}
