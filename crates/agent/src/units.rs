//! The one reader of durations and byte sizes for the whole binary:
//! command-line flags and policy settings accept the same spellings and
//! give the same messages.

use std::time::Duration;

use leasehold_policy::Value;

/// Parses a duration such as `15s`, `500ms`, `1m30s` or `1.5s` (units
/// `ns`, `us`/`µs`, `ms`, `s`, `m`, `h`). Negative durations are refused.
pub fn parse_duration_text(text: &str) -> Result<Duration, String> {
    let bad =
        || format!("invalid duration {text:?}: use a number with a unit, e.g. 15s, 500ms, 1m30s");
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    if rest.starts_with('-') {
        return Err(format!(
            "invalid duration {text:?}: durations must not be negative"
        ));
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let value: f64 = rest[..num_len].parse().map_err(|_| bad())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| bad())
}

/// A duration setting: a positive number of seconds, or text as
/// [`parse_duration_text`] reads it.
pub fn parse_duration(v: &Value) -> Result<Duration, String> {
    match v {
        Value::Int(i) if *i > 0 => Ok(Duration::from_secs(*i as u64)),
        Value::Float(f) if *f > 0.0 && f.is_finite() => {
            Duration::try_from_secs_f64(*f).map_err(|e| e.to_string())
        }
        Value::Int(_) | Value::Float(_) => {
            Err("must be a positive duration such as `25s`".to_string())
        }
        Value::Str(s) => parse_duration_text(s),
        other => Err(format!(
            "must be a duration such as `25s`, found {}",
            other.type_name()
        )),
    }
}

/// A byte size: an integer, or a number with a unit (`KB`, `MiB`, `GB`…,
/// decimal or binary, any case).
pub fn parse_size(v: &Value) -> Option<u64> {
    match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        Value::Str(s) => {
            let s = s.trim();
            let split = s
                .find(|c: char| !c.is_ascii_digit() && c != '.')
                .unwrap_or(s.len());
            let number: f64 = s[..split].parse().ok()?;
            let scale: f64 = match s[split..].trim().to_ascii_lowercase().as_str() {
                "" | "b" => 1.0,
                "kb" => 1e3,
                "mb" => 1e6,
                "gb" => 1e9,
                "tb" => 1e12,
                "kib" => 1024.0,
                "mib" => 1024.0 * 1024.0,
                "gib" => 1024.0 * 1024.0 * 1024.0,
                "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
                _ => return None,
            };
            let bytes = number * scale;
            (0.0..1.8e19).contains(&bytes).then_some(bytes as u64)
        }
        _ => None,
    }
}

/// `n` bytes as people write them, in the largest binary unit that
/// divides them (`64 MiB`, `2 KiB`, `1536 bytes`): the other way round of
/// [`parse_size`].
pub fn size_text(n: u64) -> String {
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if n >= 1 << shift && n.is_multiple_of(1 << shift) {
            return format!("{} {unit}", n >> shift);
        }
    }
    format!("{n} bytes")
}

/// `d` as people write it (`1h`, `1m30s`, `500ms`): the other way round of
/// [`parse_duration_text`].
pub fn duration_text(d: Duration) -> String {
    if d.subsec_millis() != 0 || d.is_zero() {
        return format!("{}ms", d.as_millis());
    }
    let s = d.as_secs();
    let mut out = String::new();
    for (unit, n) in [("h", s / 3600), ("m", s / 60 % 60), ("s", s % 60)] {
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_written_back_as_they_are_read() {
        for text in ["1h", "1m30s", "500ms", "2h0m5s", "0ms"] {
            let d = parse_duration_text(text).unwrap();
            assert_eq!(parse_duration_text(&duration_text(d)), Ok(d), "{text}");
        }
        assert_eq!(duration_text(Duration::from_secs(3600)), "1h");
        assert_eq!(duration_text(Duration::from_secs(90)), "1m30s");
    }

    #[test]
    fn durations_from_flags_and_settings_read_alike() {
        for (text, want) in [
            ("15s", Duration::from_secs(15)),
            ("500ms", Duration::from_millis(500)),
            ("1m30s", Duration::from_secs(90)),
            ("1.5s", Duration::from_millis(1500)),
            ("2h", Duration::from_secs(7200)),
            ("250us", Duration::from_micros(250)),
        ] {
            assert_eq!(parse_duration_text(text), Ok(want), "{text}");
            assert_eq!(parse_duration(&Value::Str(text.into())), Ok(want), "{text}");
        }
        assert_eq!(parse_duration(&Value::Int(25)), Ok(Duration::from_secs(25)));
        for bad in ["", "s", "15", "15x", "-1s", "1s-"] {
            assert!(parse_duration_text(bad).is_err(), "{bad}");
        }
        assert!(parse_duration(&Value::Int(0)).is_err());
        assert!(parse_duration(&Value::Bool(true)).is_err());
    }

    #[test]
    fn sizes_take_decimal_and_binary_units() {
        let s = |t: &str| parse_size(&Value::Str(t.into()));
        assert_eq!(s("512MiB"), Some(512 << 20));
        assert_eq!(s("10GB"), Some(10_000_000_000));
        assert_eq!(s("1.5kib"), Some(1536));
        assert_eq!(s("42"), Some(42));
        assert_eq!(parse_size(&Value::Int(7)), Some(7));
        assert_eq!(s("12 parsecs"), None);
        for n in [64 << 20, 2048, 1 << 30, 1536, 42] {
            assert_eq!(s(&size_text(n).replace(" bytes", "")), Some(n), "{n}");
        }
        assert_eq!(size_text(64 << 20), "64 MiB");
        assert_eq!(size_text(1536), "1536 bytes");
        assert_eq!(size_text(2048), "2 KiB");
        assert_eq!(size_text(1 << 30), "1 GiB");
        assert_eq!(parse_size(&Value::Int(-1)), None);
    }
}
