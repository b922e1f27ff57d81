//! Human-readable durations and ages, exactly as the apiserver prints them in `Table` rows
//! (k8s.io/apimachinery/pkg/util/duration, `HumanDuration` and `ShortHumanDuration`), and the
//! `AGE` column that `kubectl get` shows (`translateTimestampSince` /
//! `metatable.ConvertToHumanReadableDateType`).
//!
//! Go's `time.Duration` is a signed 64-bit count of nanoseconds; the functions here work on the
//! same representation (durations that do not fit are clamped, as Go's `time.Since` saturates),
//! and reproduce Go's float conversions (`d.Seconds()`, `d.Minutes()`, `d.Hours()`) operation for
//! operation, so the thresholds and rounding are the upstream ones.
//!
//! Timestamps are parsed with [`parse_rfc3339`], which accepts what Go's
//! `time.Parse(time.RFC3339, s)` accepts (the layout `metav1.Time` uses): `Z` or `±hh:mm` offsets,
//! optional fractional seconds (`.` or `,`, extra digits beyond nanoseconds ignored).

const SECOND: i64 = 1_000_000_000;
const MINUTE: i64 = 60 * SECOND;
const HOUR: i64 = 60 * MINUTE;

/// Unix seconds of Go's zero `time.Time` (0001-01-01T00:00:00Z): `IsZero()` timestamps print
/// as `<unknown>`.
const GO_ZERO_TIME_UNIX: i64 = -62_135_596_800;

/// `HumanDuration`: "5s" up to two minutes, then "4m12s", "45m", "3h20m", "20h", "2d5h", "45d",
/// "3y45d", "9y".
#[cfg(test)]
pub fn human_duration(d: std::time::Duration) -> String {
    human_duration_nanos(std_to_go(d))
}

/// `ShortHumanDuration`: a single unit, "59s", "59m", "23h", "364d", "2y".
#[cfg(test)]
pub fn short_human_duration(d: std::time::Duration) -> String {
    short_human_duration_nanos(std_to_go(d))
}

/// `HumanDuration` of a signed Go duration in nanoseconds. A negative duration of more than one
/// second (a timestamp in the future) prints `<invalid>`; up to one second behind prints `0s`.
pub fn human_duration_nanos(d: i64) -> String {
    let seconds = go_seconds(d) as i64;
    if seconds < -1 {
        return "<invalid>".to_string();
    } else if seconds < 0 {
        return "0s".to_string();
    } else if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = d / MINUTE;
    if minutes < 10 {
        let s = (d / SECOND) % 60;
        if s == 0 {
            return format!("{minutes}m");
        }
        return format!("{minutes}m{s}s");
    } else if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = d / HOUR;
    if hours < 8 {
        let m = (d / MINUTE) % 60;
        if m == 0 {
            return format!("{hours}h");
        }
        format!("{hours}h{m}m")
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        let h = hours % 24;
        if h == 0 {
            return format!("{}d", hours / 24);
        }
        format!("{}d{}h", hours / 24, h)
    } else if hours < 24 * 365 * 2 {
        format!("{}d", hours / 24)
    } else if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        if dy == 0 {
            return format!("{}y", hours / 24 / 365);
        }
        format!("{}y{}d", hours / 24 / 365, dy)
    } else {
        format!("{}y", hours / 24 / 365)
    }
}

/// `ShortHumanDuration` of a signed Go duration in nanoseconds.
#[cfg(test)]
pub fn short_human_duration_nanos(d: i64) -> String {
    let seconds = go_seconds(d) as i64;
    if seconds < -1 {
        return "<invalid>".to_string();
    } else if seconds < 0 {
        return "0s".to_string();
    } else if seconds < 60 {
        return format!("{seconds}s");
    }
    let minutes = go_minutes(d) as i64;
    if minutes < 60 {
        return format!("{minutes}m");
    }
    let hours = go_hours(d) as i64;
    if hours < 24 {
        return format!("{hours}h");
    } else if hours < 24 * 365 {
        return format!("{}d", hours / 24);
    }
    format!("{}y", (go_hours(d) / 24.0 / 365.0) as i64)
}

/// What `kubectl get` shows in the AGE column for an object created at `created_rfc3339`
/// (its `metadata.creationTimestamp`), seen at `now_unix_secs`. An unparsable timestamp and Go's
/// zero time both print `<unknown>`, like the apiserver's table printers.
#[cfg(test)]
pub fn age(created_rfc3339: &str, now_unix_secs: i64) -> String {
    match parse_rfc3339(created_rfc3339) {
        Some((secs, nanos)) => age_since(secs, nanos, now_unix_secs),
        None => "<unknown>".to_string(),
    }
}

/// `age` for an already-parsed timestamp. Shared with the `date` printer-column cells.
pub fn age_since(secs: i64, nanos: u32, now_unix_secs: i64) -> String {
    if secs == GO_ZERO_TIME_UNIX && nanos == 0 {
        return "<unknown>".to_string();
    }
    let created = i128::from(secs) * i128::from(SECOND) + i128::from(nanos);
    let now = i128::from(now_unix_secs) * i128::from(SECOND);
    human_duration_nanos(clamp_to_i64(now - created))
}

/// Parse a timestamp the way Go's `time.Parse(time.RFC3339, s)` does, returning Unix seconds and
/// nanoseconds. Accepts `2024-01-02T03:04:05Z`, `2024-01-02T03:04:05.123456Z`,
/// `2024-01-02T03:04:05+02:00`; rejects lowercase `t`/`z`, missing offsets, out-of-range fields
/// (month 13, February 30, hour 24, second 60) and trailing text. Like Go's lenient fallback
/// parser, a one-digit hour and `,` as fraction separator are accepted.
pub fn parse_rfc3339(s: &str) -> Option<(i64, u32)> {
    let b = s.as_bytes();
    let mut i = 0usize;
    let year = fixed_digits(b, &mut i, 4)?;
    expect(b, &mut i, b'-')?;
    let month = fixed_digits(b, &mut i, 2)?;
    expect(b, &mut i, b'-')?;
    let day = fixed_digits(b, &mut i, 2)?;
    expect(b, &mut i, b'T')?;
    // Go's layout uses "15" (not zero-padded) for the hour: one or two digits.
    let hour = {
        let first = digit_at(b, i)?;
        i += 1;
        match digit_at(b, i) {
            Some(second) => {
                i += 1;
                first * 10 + second
            }
            None => first,
        }
    };
    expect(b, &mut i, b':')?;
    let minute = fixed_digits(b, &mut i, 2)?;
    expect(b, &mut i, b':')?;
    let second = fixed_digits(b, &mut i, 2)?;

    let mut nanos: u32 = 0;
    if matches!(b.get(i), Some(b'.') | Some(b',')) && digit_at(b, i + 1).is_some() {
        i += 1;
        let mut count = 0u32;
        while let Some(d) = digit_at(b, i) {
            if count < 9 {
                nanos = nanos * 10 + d as u32;
                count += 1;
            }
            i += 1;
        }
        while count < 9 {
            nanos *= 10;
            count += 1;
        }
    }

    let offset_secs: i64 = match b.get(i..) {
        Some([b'Z']) => 0,
        Some([sign @ (b'+' | b'-'), h1, h2, b':', m1, m2]) => {
            let hh = two_digits(*h1, *h2)?;
            let mm = two_digits(*m1, *m2)?;
            if hh > 24 || mm > 60 {
                return None;
            }
            let off = hh * 3600 + mm * 60;
            if *sign == b'-' { -off } else { off }
        }
        _ => return None,
    };

    if !(1..=12).contains(&month) || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    if day < 1 || day > days_in_month(year, month) {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_secs;
    Some((secs, nanos))
}

#[cfg(test)]
fn std_to_go(d: std::time::Duration) -> i64 {
    clamp_to_i64(i128::try_from(d.as_nanos()).unwrap_or(i128::MAX))
}

fn clamp_to_i64(n: i128) -> i64 {
    if n > i128::from(i64::MAX) {
        i64::MAX
    } else if n < i128::from(i64::MIN) {
        i64::MIN
    } else {
        n as i64
    }
}

/// Go's `Duration.Seconds()`.
fn go_seconds(d: i64) -> f64 {
    let sec = d / SECOND;
    let nsec = d % SECOND;
    sec as f64 + nsec as f64 / 1e9
}

/// Go's `Duration.Minutes()`.
#[cfg(test)]
fn go_minutes(d: i64) -> f64 {
    let min = d / MINUTE;
    let nsec = d % MINUTE;
    min as f64 + nsec as f64 / (60.0 * 1e9)
}

/// Go's `Duration.Hours()`.
#[cfg(test)]
fn go_hours(d: i64) -> f64 {
    let hour = d / HOUR;
    let nsec = d % HOUR;
    hour as f64 + nsec as f64 / (60.0 * 60.0 * 1e9)
}

fn digit_at(b: &[u8], i: usize) -> Option<i64> {
    match b.get(i) {
        Some(c @ b'0'..=b'9') => Some(i64::from(c - b'0')),
        _ => None,
    }
}

fn fixed_digits(b: &[u8], i: &mut usize, n: usize) -> Option<i64> {
    let mut v = 0i64;
    for _ in 0..n {
        v = v * 10 + digit_at(b, *i)?;
        *i += 1;
    }
    Some(v)
}

fn two_digits(a: u8, b: u8) -> Option<i64> {
    if a.is_ascii_digit() && b.is_ascii_digit() { Some(i64::from(a - b'0') * 10 + i64::from(b - b'0')) } else { None }
}

fn expect(b: &[u8], i: &mut usize, c: u8) -> Option<()> {
    if b.get(*i) == Some(&c) {
        *i += 1;
        Some(())
    } else {
        None
    }
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(year) => 29,
        2 => 28,
        _ => 0,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = (if y >= 0 { y } else { y - 399 }) / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn human_duration_matches_upstream_table() {
        // Cases from k8s.io/apimachinery/pkg/util/duration/duration_test.go.
        let cases: &[(Duration, &str)] = &[
            (secs(1), "1s"),
            (secs(70), "70s"),
            (secs(190), "3m10s"),
            (secs(70 * 60), "70m"),
            (secs(47 * 60 * 60), "47h"),
            (secs(49 * 60 * 60), "2d1h"),
            (secs(8 * 24 * 60 * 60), "8d"),
            (secs(367 * 24 * 60 * 60), "367d"),
            (secs(365 * 2 * 24 * 60 * 60 + 24 * 60 * 60), "2y1d"),
            (secs(365 * 8 * 24 * 60 * 60 + 2 * 24 * 60 * 60), "8y"),
        ];
        for (d, want) in cases {
            assert_eq!(human_duration(*d), *want, "{d:?}");
        }
    }

    #[test]
    fn human_duration_thresholds() {
        let cases: &[(i64, &str)] = &[
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (121, "2m1s"),
            (599, "9m59s"),
            (600, "10m"),
            (179 * 60 + 59, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 60, "3h1m"),
            (7 * 3600 + 59 * 60 + 59, "7h59m"),
            (8 * 3600, "8h"),
            (47 * 3600 + 3599, "47h"),
            (48 * 3600, "2d"),
            (2 * 86400 + 5 * 3600, "2d5h"),
            (8 * 86400 - 1, "7d23h"),
            (8 * 86400, "8d"),
            (730 * 86400 - 1, "729d"),
            (730 * 86400, "2y"),
            (3 * 365 * 86400 + 45 * 86400, "3y45d"),
            (8 * 365 * 86400 - 1, "7y364d"),
            (8 * 365 * 86400, "8y"),
        ];
        for (s, want) in cases {
            assert_eq!(human_duration_nanos(s * SECOND), *want, "{s}s");
        }
        // Tolerated clock skew, then invalid.
        assert_eq!(human_duration_nanos(-SECOND), "0s");
        assert_eq!(human_duration_nanos(-SECOND - SECOND / 2), "0s");
        assert_eq!(human_duration_nanos(-2 * SECOND), "<invalid>");
        // Saturated Go duration: ~292 years.
        assert_eq!(human_duration(Duration::MAX), "292y");
    }

    #[test]
    fn short_human_duration_matches_upstream() {
        let cases: &[(i64, &str)] = &[
            (1, "1s"),
            (59, "59s"),
            (60, "1m"),
            (70, "1m"),
            (3599, "59m"),
            (3600, "1h"),
            (23 * 3600 + 3599, "23h"),
            (24 * 3600, "1d"),
            (364 * 86400, "364d"),
            (365 * 86400, "1y"),
            (3 * 365 * 86400 + 100 * 86400, "3y"),
        ];
        for (s, want) in cases {
            assert_eq!(short_human_duration(secs(*s as u64)), *want, "{s}s");
        }
        assert_eq!(short_human_duration_nanos(-5 * SECOND), "<invalid>");
        assert_eq!(short_human_duration_nanos(-SECOND), "0s");
    }

    #[test]
    fn parses_kubernetes_timestamps() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some((0, 0)));
        assert_eq!(parse_rfc3339("2024-01-02T03:04:05Z"), Some((1_704_164_645, 0)));
        assert_eq!(parse_rfc3339("2024-01-02T04:04:05+01:00"), Some((1_704_164_645, 0)));
        assert_eq!(parse_rfc3339("2024-01-01T22:04:05-05:00"), Some((1_704_164_645, 0)));
        assert_eq!(parse_rfc3339("2024-01-02T03:04:05.5Z"), Some((1_704_164_645, 500_000_000)));
        assert_eq!(parse_rfc3339("2024-01-02T03:04:05.123456789123Z"), Some((1_704_164_645, 123_456_789)));
        assert_eq!(parse_rfc3339("2024-02-29T00:00:00Z"), Some((1_709_164_800, 0)));
        assert_eq!(parse_rfc3339("0001-01-01T00:00:00Z"), Some((GO_ZERO_TIME_UNIX, 0)));
        assert_eq!(parse_rfc3339("2024-01-02T3:04:05Z"), Some((1_704_164_645, 0)));
        for bad in [
            "",
            "2024-01-02",
            "2024-01-02 03:04:05Z",
            "2024-01-02t03:04:05Z",
            "2024-01-02T03:04:05z",
            "2024-01-02T03:04:05",
            "2024-13-02T03:04:05Z",
            "2023-02-29T03:04:05Z",
            "2024-01-02T24:00:00Z",
            "2024-01-02T03:60:00Z",
            "2024-01-02T03:04:60Z",
            "2024-01-02T03:04:05+0100",
            "2024-01-02T03:04:05Zjunk",
            "2024-01-02T03:04:05.Z",
            "24-01-02T03:04:05Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn age_like_kubectl() {
        let created = "2024-01-02T03:04:05Z";
        let t = 1_704_164_645;
        assert_eq!(age(created, t), "0s");
        assert_eq!(age(created, t + 30), "30s");
        assert_eq!(age(created, t + 252), "4m12s");
        assert_eq!(age(created, t + 3 * 3600), "3h");
        assert_eq!(age(created, t + 2 * 86400 + 5 * 3600), "2d5h");
        assert_eq!(age(created, t - 1), "0s");
        assert_eq!(age(created, t - 10), "<invalid>");
        assert_eq!(age("", t), "<unknown>");
        assert_eq!(age("yesterday", t), "<unknown>");
        assert_eq!(age("0001-01-01T00:00:00Z", t), "<unknown>");
        // Fractional creation time: 0.5s before now counts as 0s, not -1s.
        assert_eq!(age("2024-01-02T03:04:05.5Z", t + 1), "0s");
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in ".*") {
            let _ = parse_rfc3339(&s);
            let _ = age(&s, 1_700_000_000);
        }

        #[test]
        fn timestamps_round_trip(secs in -62_135_596_800i64..253_402_300_799i64) {
            let days = secs.div_euclid(86_400);
            let rem = secs.rem_euclid(86_400);
            // civil_from_days, inverse of days_from_civil
            let z = days + 719_468;
            let era = (if z >= 0 { z } else { z - 146_096 }) / 146_097;
            let doe = z - era * 146_097;
            let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
            let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
            let mp = (5 * doy + 2) / 153;
            let d = doy - (153 * mp + 2) / 5 + 1;
            let m = if mp < 10 { mp + 3 } else { mp - 9 };
            let y = yoe + era * 400 + i64::from(m <= 2);
            let s = format!("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", y, m, d, rem / 3600, rem / 60 % 60, rem % 60);
            prop_assert_eq!(parse_rfc3339(&s), Some((secs, 0)));
        }

        #[test]
        fn durations_never_panic(n in any::<i64>()) {
            let _ = human_duration_nanos(n);
            let _ = short_human_duration_nanos(n);
        }
    }
}
