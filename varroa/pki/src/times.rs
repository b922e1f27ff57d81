//! Conversions between `SystemTime`, certificate times and RFC 3339 text.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use time::OffsetDateTime;
use x509_parser::time::ASN1Time;

use crate::PkiError;

/// A whole number of seconds since the epoch, as written in a certificate (sub-seconds dropped).
pub(crate) fn to_offset(field: &'static str, t: SystemTime) -> Result<OffsetDateTime, PkiError> {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map_err(|_| PkiError::InvalidTime { field, reason: "before 1970-01-01; fix: check the clock".into() })?
        .as_secs();
    i64::try_from(secs)
        .ok()
        .and_then(|s| OffsetDateTime::from_unix_timestamp(s).ok())
        .ok_or_else(|| PkiError::InvalidTime { field, reason: "after year 9999; fix: use a shorter validity".into() })
}

/// The `SystemTime` of an `OffsetDateTime` (whole seconds).
pub(crate) fn from_offset(t: OffsetDateTime) -> SystemTime {
    from_unix(t.unix_timestamp())
}

/// The `SystemTime` of a certificate time.
pub(crate) fn from_asn1(t: ASN1Time) -> SystemTime {
    from_unix(t.timestamp())
}

fn from_unix(secs: i64) -> SystemTime {
    if secs >= 0 {
        UNIX_EPOCH + Duration::from_secs(secs.unsigned_abs())
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_secs(secs.unsigned_abs())).unwrap_or(UNIX_EPOCH)
    }
}

/// `not_before = now - CLOCK_SKEW` and `not_after = now + validity`, checked.
pub(crate) fn window(now: SystemTime, validity: Duration) -> Result<(OffsetDateTime, OffsetDateTime), PkiError> {
    if validity.is_zero() {
        return Err(PkiError::InvalidTime {
            field: "validity",
            reason: "zero; fix: give a positive duration (e.g. 30 days)".into(),
        });
    }
    let start = now
        .checked_sub(crate::CLOCK_SKEW)
        .ok_or_else(|| PkiError::InvalidTime { field: "now", reason: "out of range; fix: check the clock".into() })?;
    let end = now.checked_add(validity).ok_or_else(|| PkiError::InvalidTime {
        field: "validity",
        reason: "too long; fix: use a shorter validity".into(),
    })?;
    Ok((to_offset("now", start)?, to_offset("validity", end)?))
}

/// RFC 3339 text (UTC, whole seconds) for messages.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let secs = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    };
    match OffsetDateTime::from_unix_timestamp(secs) {
        Ok(d) => format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            d.year(),
            u8::from(d.month()),
            d.day(),
            d.hour(),
            d.minute(),
            d.second()
        ),
        Err(_) => format!("{secs}s since 1970-01-01"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_utc() {
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_secs(86_400 + 3_661)), "1970-01-02T01:01:01Z");
    }

    #[test]
    fn window_rejects_zero_validity() {
        let err = window(SystemTime::now(), Duration::ZERO).unwrap_err();
        assert!(err.to_string().contains("validity"), "{err}");
    }
}
