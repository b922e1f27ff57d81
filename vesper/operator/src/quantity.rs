//! The little Quantity arithmetic the quota needs: CPU in millicores, memory in bytes, parsed
//! from the Kubernetes forms (`500m`, `2`, `128Mi`, `1G`) and printed canonically.

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0:?} is not a Kubernetes quantity (e.g. 500m, 2, 128Mi, 1Gi)")]
pub struct BadQuantity(pub String);

fn split(s: &str) -> (&str, &str) {
    let i = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    (&s[..i], &s[i..])
}

/// Milli-units of a quantity (`500m` -> 500, `2` -> 2000, `1k` -> 1_000_000).
pub fn milli(s: &str) -> Result<u128, BadQuantity> {
    let bad = || BadQuantity(s.to_string());
    let (num, suffix) = split(s.trim());
    let value: f64 = num.parse().map_err(|_| bad())?;
    let factor: f64 = match suffix {
        "m" => 1e-3,
        "" => 1.0,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(bad()),
    };
    let m = (value * factor * 1000.0).ceil();
    if !m.is_finite() || m < 0.0 {
        return Err(bad());
    }
    Ok(m as u128)
}

/// CPU: `<n>m`, or whole cores when exact.
pub fn cpu(millicores: u128) -> String {
    if millicores.is_multiple_of(1000) { (millicores / 1000).to_string() } else { format!("{millicores}m") }
}

/// Memory: the largest binary unit that divides it exactly.
pub fn memory(milli_bytes: u128) -> String {
    let bytes = milli_bytes.div_ceil(1000);
    for (unit, size) in [("Gi", 1u128 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)] {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{}{unit}", bytes / size);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        assert_eq!(milli("500m").unwrap(), 500);
        assert_eq!(milli("2").unwrap(), 2000);
        assert_eq!(milli("0.5").unwrap(), 500);
        assert_eq!(milli("128Mi").unwrap(), 128 * 1024 * 1024 * 1000);
        assert_eq!(cpu(1500), "1500m");
        assert_eq!(cpu(3000), "3");
        assert_eq!(memory(milli("512Mi").unwrap() * 3), "1536Mi");
        assert_eq!(memory(milli("1Gi").unwrap() * 2), "2Gi");
        assert!(milli("lots").is_err());
        assert!(milli("1Xi").is_err());
    }
}
