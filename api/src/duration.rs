//! Go-style durations (`"10s"`, `"1m30s"`, `"250ms"`) as kubefed writes them in KubeFedConfig.

use std::time::Duration;

/// Parses a Go `time.Duration` string. Returns `None` for anything malformed or negative.
pub fn parse(s: &str) -> Option<Duration> {
    let s = s.trim();
    if s == "0" {
        return Some(Duration::ZERO);
    }
    if s.is_empty() || s.starts_with('-') {
        return None;
    }
    let s = s.strip_prefix('+').unwrap_or(s);
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return None;
        }
        let value: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += value * scale;
    }
    Some(Duration::from_secs_f64(total))
}

/// Formats a duration the way Go prints it for whole seconds and milliseconds (`"1m30s"`, `"500ms"`).
pub fn format(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".to_string();
    }
    if !ms.is_multiple_of(1000) && ms < 1000 {
        return format!("{ms}ms");
    }
    let secs = d.as_secs_f64();
    let h = (secs / 3600.0).floor() as u64;
    let m = ((secs - h as f64 * 3600.0) / 60.0).floor() as u64;
    let s = secs - h as f64 * 3600.0 - m as f64 * 60.0;
    let sec = if (s - s.round()).abs() < 1e-9 {
        format!("{}s", s.round() as u64)
    } else {
        format!("{s}s")
    };
    match (h, m) {
        (0, 0) => sec,
        (0, m) => format!("{m}m{sec}"),
        (h, m) => format!("{h}h{m}m{sec}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_like_go() {
        assert_eq!(parse("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse("1h0m0s"), Some(Duration::from_secs(3600)));
        assert_eq!(parse("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse("0"), Some(Duration::ZERO));
    }

    #[test]
    fn malformed_durations_are_rejected() {
        for bad in ["", "10", "s", "-1s", "10x", "1m-3s"] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn formatting_round_trips() {
        for d in [1, 10, 90, 3600, 3661] {
            let d = Duration::from_secs(d);
            assert_eq!(parse(&format(d)), Some(d));
        }
        assert_eq!(format(Duration::from_millis(500)), "500ms");
        assert_eq!(format(Duration::from_secs(90)), "1m30s");
    }
}
