//! `resource.Quantity` from k8s.io/apimachinery/pkg/api/resource (quantity.go, suffix.go,
//! amount.go): parsing with upstream's hand-written parser and error messages, exact
//! comparison, `Value()`/`MilliValue()`, `RoundUp`, and the canonical string the real server
//! writes back (`0.5` is stored and returned as `500m`, `1024Mi` as `1Gi`).
//!
//! The workspace's one quantity parser: devcluster (the API server's validation, defaulting,
//! quota and LimitRange admission) and the Vesper operator (its flags, a preview's resources,
//! the quota it sizes) both use it, so what one accepts the other does, and a value the operator
//! writes is already in the spelling the server stores (see [`Quantity::resource_list_form`]).
//!
//! Representation: `unscaled * 10^scale` in an `i128`, normalised (no trailing zeros in
//! `unscaled`). As upstream, parsed values are rounded away from zero to a multiple of 10^-9,
//! and BinarySI / DecimalExponent values are capped at 2^63-1 in magnitude. Deliberate
//! differences: a value with more than 38 significant digits keeps its 38 most significant ones
//! (upstream keeps arbitrary precision), and a DecimalSI value above 999E is written in
//! exponent form (upstream drops the suffix and prints a wrong number).

use std::cmp::Ordering;
use std::fmt;

/// The text of `resource.ErrFormatWrong`.
pub const ERR_FORMAT_WRONG: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
/// The text of `resource.ErrSuffix`.
pub const ERR_SUFFIX: &str = "unable to parse quantity's suffix";
/// The text of `resource.ErrNumeric`.
pub const ERR_NUMERIC: &str = "unable to parse numeric part of quantity";

/// Why a string is not a quantity: upstream's three errors, with upstream's messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// `resource.ErrFormatWrong`: not `<signed number><suffix>` at all.
    FormatWrong,
    /// `resource.ErrSuffix`: a suffix that is none of `n u m k M G T P E Ki Mi Gi Ti Pi Ei e<n>`.
    Suffix,
    /// `resource.ErrNumeric`.
    Numeric,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ParseError::FormatWrong => ERR_FORMAT_WRONG,
            ParseError::Suffix => ERR_SUFFIX,
            ParseError::Numeric => ERR_NUMERIC,
        })
    }
}

impl std::error::Error for ParseError {}

/// How a quantity is written (`resource.Format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `e.g., 12e6`
    DecimalExponent,
    /// `e.g., 12Mi (12 * 2^20)`
    BinarySI,
    /// `e.g., 12M (12 * 10^6)`
    DecimalSI,
}

/// A parsed quantity.
#[derive(Debug, Clone)]
pub struct Quantity {
    unscaled: i128,
    scale: i32,
    format: Format,
    /// The input, kept when upstream keeps it as the string form (canonical input).
    cached: Option<String>,
}

const NANO: i32 = -9;
const MAX_DIGITS: usize = 38;
const MAX_ALLOWED: i128 = i64::MAX as i128;

fn pow10(n: u32) -> Option<i128> {
    10i128.checked_pow(n)
}

fn digit_count(mut v: i128) -> i32 {
    v = v.abs();
    let mut n = 0;
    while v > 0 {
        v /= 10;
        n += 1;
    }
    n
}

/// `parseQuantityString`: sign, numerator, denominator and suffix, exactly as upstream splits them.
struct Parts<'a> {
    positive: bool,
    num: &'a str,
    denom: &'a str,
    suffix: &'a str,
}

fn parse_quantity_string(s: &str) -> Result<Parts<'_>, ParseError> {
    let b = s.as_bytes();
    let end = b.len();
    let mut positive = true;
    let mut pos = 0;
    match b.first() {
        Some(b'-') => {
            positive = false;
            pos += 1;
        }
        Some(b'+') => pos += 1,
        _ => {}
    }
    // strip leading zeros
    while pos < end && b.get(pos) == Some(&b'0') {
        pos += 1;
    }
    if pos >= end {
        return Ok(Parts { positive, num: "0", denom: "", suffix: "" });
    }
    let num_start = pos;
    while pos < end && b.get(pos).is_some_and(u8::is_ascii_digit) {
        pos += 1;
    }
    let mut num = s.get(num_start..pos).unwrap_or("");
    if pos >= end {
        return Ok(Parts { positive, num, denom: "", suffix: "" });
    }
    if num.is_empty() {
        num = "0";
    }
    let mut denom = "";
    if b.get(pos) == Some(&b'.') {
        pos += 1;
        let d_start = pos;
        while pos < end && b.get(pos).is_some_and(u8::is_ascii_digit) {
            pos += 1;
        }
        denom = s.get(d_start..pos).unwrap_or("");
        if pos >= end {
            return Ok(Parts { positive, num, denom, suffix: "" });
        }
    }
    let suffix_start = pos;
    while pos < end && b.get(pos).is_some_and(|c| b"eEinumkKMGTP".contains(c)) {
        pos += 1;
    }
    if pos < end && matches!(b.get(pos), Some(b'-' | b'+')) {
        pos += 1;
    }
    while pos < end && b.get(pos).is_some_and(u8::is_ascii_digit) {
        pos += 1;
    }
    if pos < end {
        return Err(ParseError::FormatWrong);
    }
    Ok(Parts { positive, num, denom, suffix: s.get(suffix_start..).unwrap_or("") })
}

/// `quantitySuffixer.interpret`: (base, exponent, format).
fn interpret_suffix(suffix: &str) -> Option<(u32, i32, Format)> {
    let bin = match suffix {
        "Ki" => Some(10),
        "Mi" => Some(20),
        "Gi" => Some(30),
        "Ti" => Some(40),
        "Pi" => Some(50),
        "Ei" => Some(60),
        _ => None,
    };
    if let Some(e) = bin {
        return Some((2, e, Format::BinarySI));
    }
    let dec = match suffix {
        "n" => Some(-9),
        "u" => Some(-6),
        "m" => Some(-3),
        "" => Some(0),
        "k" => Some(3),
        "M" => Some(6),
        "G" => Some(9),
        "T" => Some(12),
        "P" => Some(15),
        "E" => Some(18),
        _ => None,
    };
    if let Some(e) = dec {
        return Some((10, e, Format::DecimalSI));
    }
    if suffix.len() > 1 && (suffix.starts_with('e') || suffix.starts_with('E')) {
        // Go: strconv.ParseInt(suffix[1:], 10, 64), then int32(...) (wrapping).
        let parsed: i64 = suffix.get(1..)?.parse().ok()?;
        return Some((10, parsed as i32, Format::DecimalExponent));
    }
    None
}

/// Round `digits * 10^scale` (digits: ASCII decimal, no sign) away from zero to a multiple of
/// 10^-9 and keep at most 38 significant digits; returns (unscaled magnitude, scale).
fn digits_to_amount(digits: &str, mut scale: i64) -> (i128, i64) {
    let digits = digits.trim_start_matches('0');
    let mut keep = digits.len();
    if scale < i64::from(NANO) {
        let cut = usize::try_from(i64::from(NANO) - scale).unwrap_or(usize::MAX);
        keep = digits.len().saturating_sub(cut);
        scale = i64::from(NANO);
    }
    if keep > MAX_DIGITS {
        scale += (keep - MAX_DIGITS) as i64;
        keep = MAX_DIGITS;
    }
    let (head, tail) = digits.split_at(keep.min(digits.len()));
    let mut v: i128 = 0;
    for c in head.bytes() {
        v = v * 10 + i128::from(c - b'0');
    }
    if tail.bytes().any(|c| c != b'0') {
        v += 1;
    }
    (v, scale)
}

impl Quantity {
    fn new(unscaled: i128, scale: i64, format: Format) -> Quantity {
        let mut q = Quantity { unscaled, scale: 0, format, cached: None };
        let mut scale = scale;
        while q.unscaled != 0 && q.unscaled % 10 == 0 {
            q.unscaled /= 10;
            scale += 1;
        }
        if q.unscaled == 0 {
            scale = 0;
        }
        q.scale = i32::try_from(scale).unwrap_or(if scale < 0 { NANO } else { i32::MAX });
        q
    }

    /// Zero, formatted DecimalSI.
    pub fn zero() -> Quantity {
        Quantity { unscaled: 0, scale: 0, format: Format::DecimalSI, cached: None }
    }

    /// An integer quantity.
    pub fn from_i64(v: i64, format: Format) -> Quantity {
        Quantity::new(i128::from(v), 0, format)
    }

    /// A quantity of `v` thousandths (`NewMilliQuantity`).
    pub fn from_milli(v: i64, format: Format) -> Quantity {
        Quantity::new(i128::from(v), -3, format)
    }

    pub fn format(&self) -> Format {
        self.format
    }

    pub fn is_zero(&self) -> bool {
        self.unscaled == 0
    }

    /// -1, 0 or 1.
    pub fn sign(&self) -> i32 {
        match self.unscaled.cmp(&0) {
            Ordering::Less => -1,
            Ordering::Equal => 0,
            Ordering::Greater => 1,
        }
    }

    /// The value at `scale` (10^scale units), rounded away from zero, saturated to i64
    /// (`ScaledValue`).
    pub fn scaled_value(&self, scale: i32) -> i64 {
        let v = if self.scale >= scale {
            let shift = u32::try_from(i64::from(self.scale) - i64::from(scale)).unwrap_or(u32::MAX);
            pow10(shift).and_then(|p| self.unscaled.checked_mul(p)).unwrap_or(if self.unscaled < 0 {
                i128::MIN
            } else {
                i128::MAX
            })
        } else {
            let shift = u32::try_from(i64::from(scale) - i64::from(self.scale)).unwrap_or(u32::MAX);
            match pow10(shift) {
                Some(p) => {
                    let (q, r) = (self.unscaled / p, self.unscaled % p);
                    if r > 0 {
                        q + 1
                    } else if r < 0 {
                        q - 1
                    } else {
                        q
                    }
                }
                None => self.unscaled.signum(),
            }
        };
        i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
    }

    /// `Value()`: whole units, rounded away from zero (`100m` → 1).
    pub fn value(&self) -> i64 {
        self.scaled_value(0)
    }

    /// `MilliValue()`: thousandths, rounded away from zero.
    pub fn milli_value(&self) -> i64 {
        self.scaled_value(-3)
    }

    /// `RoundUp(scale)`: round away from zero to a multiple of 10^scale; true when exact.
    pub fn round_up(&mut self, scale: i32) -> bool {
        if self.scale >= scale {
            return true;
        }
        self.cached = None;
        let shift = u32::try_from(i64::from(scale) - i64::from(self.scale)).unwrap_or(u32::MAX);
        let (v, exact) = match pow10(shift) {
            Some(p) => {
                let (q, r) = (self.unscaled / p, self.unscaled % p);
                (q + r.signum(), r == 0)
            }
            None => (self.unscaled.signum(), self.unscaled == 0),
        };
        let rounded = Quantity::new(v, i64::from(scale), self.format);
        self.unscaled = rounded.unscaled;
        self.scale = rounded.scale;
        exact
    }

    fn align(a: &Quantity, b: &Quantity) -> Option<(i128, i128, i64)> {
        let s = i64::from(a.scale.min(b.scale));
        let pa = pow10(u32::try_from(i64::from(a.scale) - s).ok()?)?;
        let pb = pow10(u32::try_from(i64::from(b.scale) - s).ok()?)?;
        Some((a.unscaled.checked_mul(pa)?, b.unscaled.checked_mul(pb)?, s))
    }

    /// `Add`: exact when representable, otherwise saturating.
    pub fn add(&self, other: &Quantity) -> Quantity {
        match Quantity::align(self, other).and_then(|(a, b, s)| a.checked_add(b).map(|v| (v, s))) {
            Some((v, s)) => Quantity::new(v, s, self.format),
            // The operands differ wildly in magnitude: keep the larger one.
            None => {
                if self.cmp_abs(other) == Ordering::Less {
                    Quantity { cached: None, format: self.format, ..other.clone() }
                } else {
                    Quantity { cached: None, ..self.clone() }
                }
            }
        }
    }

    /// `Sub`.
    pub fn sub(&self, other: &Quantity) -> Quantity {
        self.add(&other.neg())
    }

    /// `Neg`.
    pub fn neg(&self) -> Quantity {
        Quantity { unscaled: -self.unscaled, scale: self.scale, format: self.format, cached: None }
    }

    /// `self * n`, exact, capped (as upstream caps a parsed value) at 2^63-1 units in magnitude.
    pub fn mul(&self, n: i64) -> Quantity {
        let max = Quantity::new(MAX_ALLOWED, 0, self.format);
        let negative = (self.unscaled < 0) != (n < 0);
        match self.unscaled.checked_mul(i128::from(n)) {
            Some(v) => {
                let q = Quantity::new(v, i64::from(self.scale), self.format);
                if q.abs() > max { if negative { max.neg() } else { max } } else { q }
            }
            None => {
                if negative {
                    max.neg()
                } else {
                    max
                }
            }
        }
    }

    /// Whether the quantity is below zero.
    pub fn is_negative(&self) -> bool {
        self.unscaled < 0
    }

    /// The string the API server stores for this quantity in a `ResourceList` (container
    /// resources, `ResourceQuota.spec.hard`, LimitRange items): `SetDefaults_ResourceList`
    /// rounds it up to a multiple of 1m, then it is written canonically (`0.1m` is stored as
    /// `1m`, `1.5Gi` as `1536Mi`, `1000m` as `1`). A controller that writes this spelling finds
    /// the stored object equal to what it wrote.
    pub fn resource_list_form(&self) -> String {
        let mut q = self.clone();
        q.round_up(-3);
        q.to_canonical()
    }

    fn cmp_abs(&self, other: &Quantity) -> Ordering {
        self.abs().cmp(&other.abs())
    }

    fn abs(&self) -> Quantity {
        Quantity { unscaled: self.unscaled.abs(), scale: self.scale, format: self.format, cached: None }
    }

    /// The string the real server writes: the input when upstream keeps it, otherwise
    /// `CanonicalizeBytes` (`500m`, `1Gi`, `1e3`).
    pub fn to_canonical(&self) -> String {
        if let Some(s) = &self.cached {
            return s.clone();
        }
        if self.unscaled == 0 {
            return "0".to_string();
        }
        let mut format = self.format;
        if format == Format::BinarySI {
            let small = self.cmp(&Quantity::from_i64(-1024, Format::DecimalSI)) == Ordering::Greater
                && self.cmp(&Quantity::from_i64(1024, Format::DecimalSI)) == Ordering::Less;
            if small || self.scale < 0 {
                format = Format::DecimalSI;
            }
        }
        if format == Format::BinarySI {
            // AsCanonicalBase1024Bytes: an integer, factors of 1024 moved into the suffix.
            let mut v = pow10(u32::try_from(self.scale).unwrap_or(u32::MAX))
                .and_then(|p| self.unscaled.checked_mul(p))
                .unwrap_or(self.unscaled);
            let mut exp = 0;
            while v % 1024 == 0 && exp < 6 {
                v /= 1024;
                exp += 1;
            }
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"].get(exp).copied().unwrap_or("");
            return format!("{v}{suffix}");
        }
        // AsCanonicalBytes: exponent a multiple of 3 (rounding down), mantissa scaled up.
        let mut m = self.unscaled;
        let mut e = i64::from(self.scale);
        while e.rem_euclid(3) != 0 {
            m = m.saturating_mul(10);
            e -= 1;
        }
        if format == Format::DecimalSI {
            let suffix = match e {
                -9 => Some("n"),
                -6 => Some("u"),
                -3 => Some("m"),
                0 => Some(""),
                3 => Some("k"),
                6 => Some("M"),
                9 => Some("G"),
                12 => Some("T"),
                15 => Some("P"),
                18 => Some("E"),
                _ => None,
            };
            if let Some(s) = suffix {
                return format!("{m}{s}");
            }
        }
        if e == 0 { format!("{m}") } else { format!("{m}e{e}") }
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    /// `Cmp`: by value, whatever the format.
    fn cmp(&self, other: &Self) -> Ordering {
        let (sa, sb) = (self.unscaled.signum(), other.unscaled.signum());
        if sa != sb || sa == 0 {
            return sa.cmp(&sb);
        }
        // Same sign, both non-zero: compare magnitudes by order of magnitude first.
        let (ma, mb) = (
            i64::from(digit_count(self.unscaled)) + i64::from(self.scale),
            i64::from(digit_count(other.unscaled)) + i64::from(other.scale),
        );
        let mag = if ma != mb {
            ma.cmp(&mb)
        } else {
            match Quantity::align(self, other) {
                Some((a, b, _)) => a.abs().cmp(&b.abs()),
                None => Ordering::Equal,
            }
        };
        if sa < 0 { mag.reverse() } else { mag }
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_canonical())
    }
}

impl std::str::FromStr for Quantity {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_quantity(s)
    }
}

/// `resource.ParseQuantity`. The error displays as upstream's message (`quantities must match
/// the regular expression ...`, `unable to parse quantity's suffix`).
pub fn parse_quantity(s: &str) -> Result<Quantity, ParseError> {
    if s.is_empty() {
        return Err(ParseError::FormatWrong);
    }
    if s == "0" {
        return Ok(Quantity { cached: Some("0".into()), ..Quantity::zero() });
    }
    let parts = parse_quantity_string(s)?;
    let (base, exponent, format) = interpret_suffix(parts.suffix).ok_or(ParseError::Suffix)?;
    let digits = format!("{}{}", parts.num, parts.denom);
    let denom_len = parts.denom.len() as i64;

    let mut q = if base == 10 {
        let (v, scale) = digits_to_amount(&digits, i64::from(exponent) - denom_len);
        let mut q = Quantity::new(v, scale, format);
        if format == Format::DecimalExponent && q.cmp(&Quantity::from_i64(i64::MAX, format)) == Ordering::Greater {
            q = Quantity::new(MAX_ALLOWED, 0, format);
        }
        q
    } else {
        // value = digits * 2^exponent * 10^-len(denom)
        let (v, scale) = digits_to_amount(&digits, 0);
        let shift = u32::try_from(exponent).unwrap_or(0);
        let mul = 1i128.checked_shl(shift).and_then(|m| v.checked_mul(m));
        match mul {
            Some(total) => {
                let (v, scale) = digits_to_amount(&total.to_string(), scale - denom_len);
                let q = Quantity::new(v, scale, format);
                if q.cmp(&Quantity::from_i64(i64::MAX, format)) == Ordering::Greater {
                    Quantity::new(MAX_ALLOWED, 0, format)
                } else {
                    q
                }
            }
            None => Quantity::new(MAX_ALLOWED, 0, format),
        }
    };
    if !parts.positive {
        q.unscaled = -q.unscaled;
    }
    if keeps_input(&parts, base, exponent, format) {
        q.cached = Some(s.to_string());
    }
    Ok(q)
}

/// Whether upstream's fast path keeps the input as the quantity's string (`s: str`).
fn keeps_input(parts: &Parts<'_>, base: u32, exponent: i32, format: Format) -> bool {
    let (num, denom) = (parts.num, parts.denom);
    let ndigits = (num.len() + denom.len()) as i64;
    let (precision, scale) = if base == 10 {
        (18 - ndigits, i64::from(exponent) - denom.len() as i64)
    } else if exponent >= 0 && denom.is_empty() {
        let p = 15 - num.len() as i64 - ((exponent as f32) * 3.0 / 10.0) as i64 - 1;
        (p, 0)
    } else {
        (-1, 0)
    };
    if precision < 0 || scale < i64::from(NANO) {
        return false;
    }
    let shifted = format!("{num}{denom}");
    let Ok(value) = shifted.parse::<i64>() else { return false };
    let mantissa: i64 = if base == 2 { 1i64.checked_shl(exponent as u32).unwrap_or(0) } else { 1 };
    if value.checked_mul(mantissa).is_none() {
        return false;
    }
    match format {
        Format::BinarySI => exponent % 10 == 0 && (value & 0x07) != 0,
        _ => scale % 3 == 0 && !shifted.ends_with("000") && !shifted.starts_with('0'),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn canon(s: &str) -> String {
        parse_quantity(s).map(|q| q.to_canonical()).unwrap_or_else(|e| format!("ERR {e}"))
    }

    #[test]
    fn parses_and_canonicalizes_like_upstream() {
        for (input, want) in [
            ("0", "0"),
            ("0.5", "500m"),
            ("500m", "500m"),
            ("1", "1"),
            ("1.0", "1"),
            ("1000m", "1"),
            ("1024Mi", "1Gi"),
            ("1Gi", "1Gi"),
            ("1.5Gi", "1536Mi"),
            ("100Mi", "100Mi"),
            ("0.5Gi", "512Mi"),
            ("512", "512"),
            ("1k", "1k"),
            ("1000", "1k"),
            ("1e3", "1e3"),
            ("1E", "1E"),
            ("100u", "100u"),
            ("0.1m", "100u"),
            ("1n", "1n"),
            ("0.1n", "1n"),
            ("-1", "-1"),
            ("-0.5", "-500m"),
            ("+1", "+1"),
            ("2Ki", "2Ki"),
            ("8Ki", "8Ki"),
            ("10Ki", "10Ki"),
            ("1.", "1."),
            ("Gi", "0"),
            ("-", "0"),
            ("12e6", "12e6"),
            ("1Ei", "1Ei"),
        ] {
            assert_eq!(canon(input), want, "input {input}");
        }
    }

    #[test]
    fn errors_have_upstream_messages() {
        for bad in ["", "abc", "1x", "1Gix", "1.5.5", "1 Gi", " 1"] {
            assert_eq!(parse_quantity(bad).err(), Some(ParseError::FormatWrong), "{bad:?}");
            assert_eq!(parse_quantity(bad).err().map(|e| e.to_string()).as_deref(), Some(ERR_FORMAT_WRONG));
        }
        for bad in ["1GG", "1K", "1i", "1e", "1ki"] {
            assert_eq!(parse_quantity(bad).err(), Some(ParseError::Suffix), "{bad:?}");
            assert_eq!(parse_quantity(bad).err().map(|e| e.to_string()).as_deref(), Some(ERR_SUFFIX));
        }
    }

    #[test]
    fn values_and_comparison() {
        let q = |s: &str| parse_quantity(s).unwrap_or_else(|_| Quantity::zero());
        assert_eq!(q("100m").value(), 1);
        assert_eq!(q("100m").milli_value(), 100);
        assert_eq!(q("1Gi").value(), 1 << 30);
        assert_eq!(q("-0.1").value(), -1);
        assert_eq!(q("1.5").milli_value(), 1500);
        assert!(q("1Gi") > q("1G"));
        assert!(q("500m") < q("1"));
        assert_eq!(q("1000m"), q("1"));
        assert_eq!(q("1Ki"), q("1024"));
        assert!(q("-2") < q("-1"));
        assert_eq!(q("1").add(&q("500m")).to_canonical(), "1500m");
        assert_eq!(q("1").sub(&q("2")).to_canonical(), "-1");
        let mut r = q("100u");
        assert!(!r.round_up(-3));
        assert_eq!(r.to_canonical(), "1m");
        let mut r = q("2");
        assert!(r.round_up(-3));
        assert_eq!(r.to_canonical(), "2");
        // caps
        assert_eq!(q("1e100").value(), i64::MAX);
        assert_eq!(q("16Ei").value(), i64::MAX);
    }

    #[test]
    fn the_forms_a_float_parser_got_wrong_are_exact() {
        let q = |s: &str| parse_quantity(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(q("1e3").value(), 1000);
        assert_eq!(q("1e3").to_canonical(), "1e3");
        assert_eq!(q("2Pi").value(), 2 << 50);
        assert_eq!(q("2Pi").to_canonical(), "2Pi");
        assert_eq!(q("100u").milli_value(), 1);
        assert_eq!(q("100u").scaled_value(-6), 100);
        assert_eq!(q("100u").resource_list_form(), "1m");
        assert_eq!(q("1.5Gi").value(), 1536 << 20);
        assert_eq!(q("1.5Gi").to_canonical(), "1536Mi");
        assert_eq!(q("500m").milli_value(), 500);
        assert_eq!(q("500m").value(), 1);
        // No float rounding: 0.1 + 0.2 is exactly 300m.
        assert_eq!(q("0.1").add(&q("0.2")), q("300m"));
        assert_eq!("1e3".parse::<Quantity>(), Ok(q("1k")));
    }

    #[test]
    fn multiplication_is_exact_and_saturates() {
        let q = |s: &str| parse_quantity(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(q("500m").mul(5).to_canonical(), "2500m");
        assert_eq!(q("512Mi").mul(5).to_canonical(), "2560Mi");
        assert_eq!(q("1Gi").mul(3).to_canonical(), "3Gi");
        assert_eq!(q("100m").mul(10).to_canonical(), "1");
        assert_eq!(q("1").mul(0).to_canonical(), "0");
        // Capped at 2^63-1 units, as a parsed value is; never wrapped (also beyond i128).
        assert_eq!(q("8Ei").mul(i64::MAX).value(), i64::MAX);
        assert_eq!(q("-8Ei").mul(i64::MAX).value(), -i64::MAX);
        assert_eq!(q("8Ei").mul(i64::MAX).mul(i64::MAX).value(), i64::MAX);
        assert_eq!(q("8Ei").mul(i64::MAX).mul(i64::MIN).value(), -i64::MAX);
        assert!(q("-1").is_negative() && !q("0").is_negative());
    }

    #[test]
    fn garbage_is_refused_with_upstreams_messages() {
        for bad in ["lots", "1.5.5", "2 Gi", "1Gb", "--1", "0x10", "1e", "Mi1"] {
            let e = parse_quantity(bad).err().unwrap_or_else(|| panic!("{bad:?} was accepted"));
            let text = e.to_string();
            assert!(text == ERR_FORMAT_WRONG || text == ERR_SUFFIX, "{bad:?}: {text}");
        }
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in "\\PC{0,40}") {
            if let Ok(q) = parse_quantity(&s) {
                let _ = q.to_canonical();
                let _ = q.value();
                let _ = q.milli_value();
                let _ = q.add(&q);
            }
        }

        #[test]
        fn quantity_like_strings_never_panic(s in "[+-]?[0-9.]{0,45}([eEinumkKMGTP]{0,3}[-+]?[0-9]{0,12})") {
            if let Ok(q) = parse_quantity(&s) {
                let c = q.to_canonical();
                let again = parse_quantity(&c);
                prop_assert!(again.is_ok(), "{} -> {}", s, c);
            }
        }

        #[test]
        fn canonical_roundtrips_integers(v in -1_000_000_000i64..1_000_000_000, m in 0usize..4) {
            let suffix = ["", "m", "k", "Mi"][m];
            let s = format!("{v}{suffix}");
            let q = parse_quantity(&s).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let back = parse_quantity(&q.to_canonical()).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(q, back);
        }
    }
}
