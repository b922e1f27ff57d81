//! Durations as people type them (`90s`, `5m`, `1h30m`) and ages as kubectl prints them.

use jiff::Timestamp;
use std::time::Duration;

/// `90s`, `5m`, `1h30m`, `2d`: numbers each followed by a unit `s`, `m`, `h` or `d`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let help = || format!("{s:?} is not a duration: use e.g. 90s, 5m, 1h30m, 2d");
    let (mut total, mut digits) = (0u64, String::new());
    for c in s.trim().chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86400,
            _ => return Err(help()),
        };
        let n: u64 = digits.parse().map_err(|_| help())?;
        total = n.checked_mul(unit).and_then(|v| total.checked_add(v)).ok_or_else(help)?;
        digits.clear();
    }
    if !digits.is_empty() || s.trim().is_empty() {
        return Err(help());
    }
    Ok(Duration::from_secs(total))
}

/// The shortest exact form of a duration, for messages: `5m`, `1h30m`, `45s`.
pub fn exact(d: Duration) -> String {
    let s = d.as_secs();
    let parts = [(s / 86400, "d"), (s % 86400 / 3600, "h"), (s % 3600 / 60, "m"), (s % 60, "s")];
    let text: String = parts.iter().filter(|(n, _)| *n > 0).map(|(n, u)| format!("{n}{u}")).collect();
    if text.is_empty() { "0s".into() } else { text }
}

/// An age as kubectl prints it (k8s.io/apimachinery `HumanDuration`, to the day).
pub fn age(d: Duration) -> String {
    let secs = d.as_secs();
    let (minutes, hours) = (secs / 60, secs / 3600);
    match secs {
        _ if secs < 120 => format!("{secs}s"),
        _ if minutes < 10 && !secs.is_multiple_of(60) => format!("{minutes}m{}s", secs % 60),
        _ if minutes < 180 => format!("{minutes}m"),
        _ if hours < 8 && !minutes.is_multiple_of(60) => format!("{hours}h{}m", minutes % 60),
        _ if hours < 48 => format!("{hours}h"),
        _ if hours < 24 * 8 && !hours.is_multiple_of(24) => format!("{}d{}h", hours / 24, hours % 24),
        _ => format!("{}d", hours / 24),
    }
}

/// The time from `then` to `now` (zero when `then` is in the future).
pub fn since(now: Timestamp, then: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(then)).unwrap_or(Duration::ZERO)
}

/// The age of something that happened at `then`, or `<unknown>`.
pub fn age_of(now: Timestamp, then: Option<Timestamp>) -> String {
    then.map(|t| age(since(now, t))).unwrap_or_else(|| "<unknown>".into())
}

/// A timestamp for people: `2026-05-01 14:03:00 UTC`.
pub fn moment(t: Timestamp) -> String {
    t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_durations() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        for bad in ["", "5", "m", "1x", "1h30", "-1m", "99999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
        assert_eq!(exact(Duration::from_secs(300)), "5m");
        assert_eq!(exact(Duration::from_secs(5400)), "1h30m");
        assert_eq!(exact(Duration::ZERO), "0s");
    }

    #[test]
    fn ages_read_like_kubectl() {
        let cases = [
            (59, "59s"),
            (330, "5m30s"),
            (600, "10m"),
            (150 * 60, "150m"),
            (5 * 3600 + 60, "5h1m"),
            (30 * 3600, "30h"),
            (3 * 86400 + 3600, "3d1h"),
            (30 * 86400, "30d"),
        ];
        for (secs, want) in cases {
            assert_eq!(age(Duration::from_secs(secs)), want, "{secs}s");
        }
    }
}
