//! Durations as people type and read them: `90s`, `5m`, `1h30m`, `2d`; ages as kubectl prints
//! them; "expires in" with minute precision (`23h12m`).

use jiff::Timestamp;
use std::time::Duration;

/// `90s`, `5m`, `1h30m`, `2d`: numbers each followed by a unit `s`, `m`, `h` or `d`. The error
/// names the text and shows the forms accepted (clap prints it for a bad flag value).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let help = || format!("{s:?} is not a duration: use e.g. 90s, 5m, 1h30m, 2d");
    let s = s.trim();
    if s.is_empty() {
        return Err(help());
    }
    let mut total: u64 = 0;
    let mut digits = String::new();
    for c in s.chars() {
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
    if !digits.is_empty() {
        return Err(help());
    }
    Ok(Duration::from_secs(total))
}

/// The shortest exact form of a duration, for messages: `7d`, `1d2h`, `1h30m`, `45s`, `0s`.
pub fn exact(d: Duration) -> String {
    let s = d.as_secs();
    if s == 0 {
        return "0s".into();
    }
    let parts = [(s / 86400, "d"), (s % 86400 / 3600, "h"), (s % 3600 / 60, "m"), (s % 60, "s")];
    parts.iter().filter(|(n, _)| *n > 0).map(|(n, u)| format!("{n}{u}")).collect()
}

/// How long until a moment, minute precision: `1d5h`, `23h12m`, `45m`, `30s`.
pub fn until(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => match s % 3600 / 60 {
            0 => format!("{}h", s / 3600),
            m => format!("{}h{m}m", s / 3600),
        },
        _ => match s % 86400 / 3600 {
            0 => format!("{}d", s / 86400),
            h => format!("{}d{h}h", s / 86400),
        },
    }
}

/// An age as kubectl prints it (`HumanDuration` of k8s.io/apimachinery): `59s`, `5m30s`,
/// `150m`, `5h1m`, `30h`, `3d1h`, `30d`, `2y40d`, `9y`.
pub fn age(d: Duration) -> String {
    let secs = d.as_secs();
    if secs < 120 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        return match secs % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        return match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        return match hours % 24 {
            0 => format!("{}d", hours / 24),
            h => format!("{}d{h}h", hours / 24),
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    let days = hours / 24;
    match days % 365 {
        0 => format!("{}y", days / 365),
        d if hours < 24 * 365 * 8 => format!("{}y{d}d", days / 365),
        _ => format!("{}y", days / 365),
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
    fn parses_durations() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration(" 2d "), Ok(Duration::from_secs(172800)));
        for bad in ["", " ", "5", "m", "1x", "1h30", "-1m", "1.5h", "99999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_duration("soon"), Err("\"soon\" is not a duration: use e.g. 90s, 5m, 1h30m, 2d".into()));
    }

    #[test]
    fn prints_durations() {
        assert_eq!(exact(Duration::from_secs(7 * 86400)), "7d");
        assert_eq!(exact(Duration::from_secs(93600)), "1d2h");
        assert_eq!(exact(Duration::from_secs(300)), "5m");
        assert_eq!(exact(Duration::from_secs(5400)), "1h30m");
        assert_eq!(exact(Duration::ZERO), "0s");
        assert_eq!(until(Duration::from_secs(23 * 3600 + 12 * 60 + 59)), "23h12m");
        assert_eq!(until(Duration::from_secs(2 * 86400 + 3 * 3600)), "2d3h");
        assert_eq!(until(Duration::from_secs(3600)), "1h");
        assert_eq!(until(Duration::from_secs(45 * 60 + 3)), "45m");
        assert_eq!(until(Duration::from_secs(30)), "30s");
    }

    #[test]
    fn ages_read_like_kubectl() {
        let day = 86400;
        let cases = [
            (59, "59s"),
            (119, "119s"),
            (330, "5m30s"),
            (540, "9m"),
            (600, "10m"),
            (150 * 60, "150m"),
            (5 * 3600 + 60, "5h1m"),
            (6 * 3600, "6h"),
            (30 * 3600, "30h"),
            (3 * day + 3600, "3d1h"),
            (4 * day, "4d"),
            (30 * day, "30d"),
            (729 * day, "729d"),
            (2 * 365 * day + 40 * day, "2y40d"),
            (3 * 365 * day, "3y"),
            (9 * 365 * day + 40 * day, "9y"),
        ];
        for (secs, want) in cases {
            assert_eq!(age(Duration::from_secs(secs)), want, "{secs}s");
        }
    }

    #[test]
    fn ages_of_moments() {
        let now: Timestamp = "2026-01-02T00:00:00Z".parse().unwrap();
        let then: Timestamp = "2026-01-01T23:12:00Z".parse().unwrap();
        assert_eq!(age_of(now, Some(then)), "48m");
        assert_eq!(age_of(then, Some(now)), "0s", "a moment in the future is no age");
        assert_eq!(age_of(now, None), "<unknown>");
        assert_eq!(moment(then), "2026-01-01 23:12:00 UTC");
    }
}
