//! TTLs: a whole number of minutes, hours or days, from 1 minute to 7 days (`90m`, `24h`,
//! `7d`), the same rule the CRD enforces on the API server.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// The shortest and longest TTL a preview may have.
pub const MIN: Duration = Duration::from_secs(60);
pub const MAX: Duration = Duration::from_secs(7 * 24 * 3600);

/// A parsed TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ttl(Duration);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TtlError {
    #[error("ttl {0:?} is not a whole number of minutes, hours or days (use e.g. 90m, 24h, 7d)")]
    Format(String),
    #[error("ttl {0:?} is outside the allowed range: between 1m and 7d")]
    Range(String),
}

impl Ttl {
    pub fn from_duration(d: Duration) -> Result<Ttl, TtlError> {
        if d < MIN || d > MAX {
            return Err(TtlError::Range(Ttl(d).to_string()));
        }
        Ok(Ttl(d))
    }

    pub fn duration(&self) -> Duration {
        self.0
    }
}

impl FromStr for Ttl {
    type Err = TtlError;

    fn from_str(s: &str) -> Result<Ttl, TtlError> {
        let fmt_err = || TtlError::Format(s.to_string());
        let unit = s.chars().last().ok_or_else(fmt_err)?;
        let digits = &s[..s.len() - unit.len_utf8()];
        if digits.is_empty()
            || digits.len() > 6
            || !digits.bytes().all(|b| b.is_ascii_digit())
            || digits.starts_with('0')
        {
            return Err(fmt_err());
        }
        let n: u64 = digits.parse().map_err(|_| fmt_err())?;
        let secs = match unit {
            'm' => n * 60,
            'h' => n * 3600,
            'd' => n * 86400,
            _ => return Err(fmt_err()),
        };
        let d = Duration::from_secs(secs);
        if d < MIN || d > MAX {
            return Err(TtlError::Range(s.to_string()));
        }
        Ok(Ttl(d))
    }
}

impl fmt::Display for Ttl {
    /// The shortest exact form: `7d`, `36h`, `90m`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0.as_secs();
        if s.is_multiple_of(86400) {
            write!(f, "{}d", s / 86400)
        } else if s.is_multiple_of(3600) {
            write!(f, "{}h", s / 3600)
        } else {
            write!(f, "{}m", s / 60)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms_and_bounds() {
        assert_eq!("90m".parse::<Ttl>().unwrap().duration(), Duration::from_secs(5400));
        assert_eq!("24h".parse::<Ttl>().unwrap().duration(), Duration::from_secs(86400));
        assert_eq!("7d".parse::<Ttl>().unwrap().to_string(), "7d");
        assert_eq!("1m".parse::<Ttl>().unwrap().to_string(), "1m");
        assert_eq!("10080m".parse::<Ttl>().unwrap().to_string(), "7d");
        assert!(matches!("30s".parse::<Ttl>(), Err(TtlError::Format(_))));
        assert!(matches!("8d".parse::<Ttl>(), Err(TtlError::Range(_))));
        assert!(matches!("169h".parse::<Ttl>(), Err(TtlError::Range(_))));
        for bad in ["", "d", "0m", "01h", "1.5h", "1 h", "-1h", "1H", "1w", "9999999m"] {
            assert!(bad.parse::<Ttl>().is_err(), "{bad:?}");
        }
        assert_eq!(
            "30s".parse::<Ttl>().unwrap_err().to_string(),
            "ttl \"30s\" is not a whole number of minutes, hours or days (use e.g. 90m, 24h, 7d)"
        );
    }

    proptest::proptest! {
        #[test]
        fn never_panics_and_round_trips(s in ".{0,12}") {
            if let Ok(t) = s.parse::<Ttl>() {
                proptest::prop_assert_eq!(t.to_string().parse::<Ttl>().unwrap(), t);
            }
        }
    }
}
