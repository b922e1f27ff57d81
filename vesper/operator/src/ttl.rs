//! TTL: a preview expires at its creation time plus its TTL. The operator asks to be called back
//! then (and when the expiry warning is due) instead of polling; a changed TTL reconciles the
//! preview and sets a new delay.

use crate::error::Result;
use jiff::{SignedDuration, Timestamp};
use std::time::Duration;
use vesper_api::PreviewEnvironment;

/// When the preview expires.
pub fn expires_at(pe: &PreviewEnvironment) -> Result<Timestamp> {
    let ttl = pe.ttl()?;
    let created = pe.metadata.creation_timestamp.as_ref().map(|t| t.0).unwrap_or_else(Timestamp::now);
    let d = SignedDuration::try_from(ttl.duration()).unwrap_or(SignedDuration::MAX);
    Ok(created.checked_add(d).unwrap_or(Timestamp::MAX))
}

/// When to look at the preview again: at the expiry warning, else at expiry (plus a moment, so
/// the clock has passed it).
pub fn next_wakeup(now: Timestamp, expires_at: Timestamp, warning: Duration) -> Duration {
    let warn_at =
        expires_at.checked_sub(SignedDuration::try_from(warning).unwrap_or(SignedDuration::ZERO)).unwrap_or(expires_at);
    let target = if now < warn_at { warn_at } else { expires_at };
    let d = target.duration_since(now);
    let d = Duration::try_from(d).unwrap_or(Duration::ZERO);
    d + Duration::from_millis(200)
}

/// `45m`, `3h`, `2d5h` for messages.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => {
            format!("{}h{}", s / 3600, if s % 3600 >= 60 { format!("{}m", (s % 3600) / 60) } else { String::new() })
        }
        _ => format!(
            "{}d{}",
            s / 86400,
            if s % 86400 >= 3600 { format!("{}h", (s % 86400) / 3600) } else { String::new() }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wakes_up_for_the_warning_then_the_expiry() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let exp: Timestamp = "2026-01-01T02:00:00Z".parse().unwrap();
        let one_h = Duration::from_secs(3600);
        assert_eq!(next_wakeup(now, exp, one_h), Duration::from_secs(3600) + Duration::from_millis(200));
        let later: Timestamp = "2026-01-01T01:30:00Z".parse().unwrap();
        assert_eq!(next_wakeup(later, exp, one_h), Duration::from_secs(1800) + Duration::from_millis(200));
        assert_eq!(human(Duration::from_secs(2700)), "45m");
        assert_eq!(human(Duration::from_secs(90000)), "1d1h");
    }
}
