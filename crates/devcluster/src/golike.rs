//! Small pieces of Go behaviour devcluster must reproduce byte for byte (in patch results,
//! JSONPath output and error messages): how Go's `fmt`
//! prints decoded JSON values in error messages (`%v`, `%s`), how `encoding/json` encodes a
//! value (sorted keys, HTML-safe escapes, float formatting), how `reflect` names the types of
//! decoded JSON, and `sort.SliceStable`, whose exact algorithm decides the element order
//! strategic merge patch produces when its comparator is not a strict weak order.

use serde_json::{Map, Number, Value};

/// Go's `reflect.TypeOf(v).String()` for a value decoded by the apiserver (integers are decoded
/// as `int64`, other numbers as `float64`). `None` is the nil type.
pub(crate) fn go_type_name(v: &Value) -> Option<&'static str> {
    match v {
        Value::Null => None,
        Value::Bool(_) => Some("bool"),
        Value::Number(n) => Some(if is_go_int(n) { "int64" } else { "float64" }),
        Value::String(_) => Some("string"),
        Value::Array(_) => Some("[]interface {}"),
        Value::Object(_) => Some("map[string]interface {}"),
    }
}

/// True when the apiserver's decoder (sigs.k8s.io/json with PreserveInts) yields an `int64`.
pub(crate) fn is_go_int(n: &Number) -> bool {
    n.is_i64()
}

/// The JSON type word Go's decoder uses in `cannot unmarshal X into ...` errors.
pub(crate) fn json_type_word(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Go's `%v` of a decoded JSON value: `map[a:1 b:[x y]]` (keys sorted), `<nil>` for null.
pub(crate) fn go_v(v: &Value) -> String {
    let mut out = String::new();
    write_go_v(&mut out, v);
    out
}

fn write_go_v(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("<nil>"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&go_number_v(n)),
        Value::String(s) => out.push_str(s),
        Value::Array(a) => {
            out.push('[');
            for (i, item) in a.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                write_go_v(out, item);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push_str("map[");
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(k);
                out.push(':');
                if let Some(val) = m.get(k.as_str()) {
                    write_go_v(out, val);
                }
            }
            out.push(']');
        }
    }
}

/// Go's `%v` of a list of lists, as `fmt.Sprint(slices)` prints the variadic argument.
pub(crate) fn go_v_lists(lists: &[&[Value]]) -> String {
    let inner: Vec<String> = lists.iter().map(|l| go_v(&Value::Array(l.to_vec()))).collect();
    format!("[{}]", inner.join(" "))
}

/// Go's `%s` of a decoded JSON value (strings print raw, other scalars as `%!s(int64=5)`).
pub(crate) fn go_s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "%!s(<nil>)".to_string(),
        Value::Bool(b) => format!("%!s(bool={b})"),
        Value::Number(n) => {
            let ty = if is_go_int(n) { "int64" } else { "float64" };
            format!("%!s({ty}={})", go_number_v(n))
        }
        Value::Array(a) => {
            let parts: Vec<String> = a.iter().map(go_s).collect();
            format!("[{}]", parts.join(" "))
        }
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> =
                keys.iter().map(|k| format!("{k}:{}", m.get(k.as_str()).map(go_s).unwrap_or_default())).collect();
            format!("map[{}]", parts.join(" "))
        }
    }
}

/// `%v` of a number: integers in decimal, floats as `strconv.FormatFloat(f, 'g', -1, 64)`.
fn go_number_v(n: &Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        // Decoded by Go as float64 (does not fit int64).
        return go_float_g(u as f64);
    }
    go_float_g(n.as_f64().unwrap_or(0.0))
}

/// Go's `%v` of a float64 (`strconv.FormatFloat(f, 'g', -1, 64)`): shortest digits, exponent
/// form (`1e+06`, `1e-05`) when the decimal exponent is below -4 or at least 6.
pub(crate) fn go_float_g(f: f64) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    if !f.is_finite() {
        return if f.is_nan() {
            "NaN".into()
        } else if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    let (mantissa, exp) = split_exp(f);
    if !(-4..6).contains(&exp) { go_exp_form(&mantissa, exp, true) } else { format!("{f}") }
}

/// Splits Rust's shortest `{:e}` output (`1.5e-7`) into mantissa and exponent.
fn split_exp(f: f64) -> (String, i32) {
    let s = format!("{f:e}");
    match s.split_once('e') {
        Some((m, e)) => (m.to_string(), e.parse().unwrap_or(0)),
        None => (s, 0),
    }
}

/// `1.5e+06`: at least two exponent digits, except negative exponents when
/// `two_digit_negative` is false (`encoding/json` writes `1e-7`, `%g` writes `1e-07`).
fn go_exp_form(mantissa: &str, exp: i32, two_digit_negative: bool) -> String {
    let sign = if exp < 0 { '-' } else { '+' };
    let abs = exp.unsigned_abs();
    if exp < 0 && !two_digit_negative {
        format!("{mantissa}e{sign}{abs}")
    } else {
        format!("{mantissa}e{sign}{abs:02}")
    }
}

/// `encoding/json`'s float64 encoding: `%f`-style shortest digits, exponent form outside
/// [1e-6, 1e21) with `e-07` cleaned up to `e-7`.
pub(crate) fn go_json_float(f: f64) -> String {
    if !f.is_finite() {
        return "null".into();
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let (mantissa, exp) = split_exp(f);
        go_exp_form(&mantissa, exp, false)
    } else {
        format!("{f}")
    }
}

/// The bytes `encoding/json` (and jsoniter's standard-library-compatible config) writes for a
/// value: object keys sorted, `<`, `>`, `&`, U+2028 and U+2029 escaped.
pub(crate) fn go_json(v: &Value) -> String {
    let mut out = String::new();
    write_go_json(&mut out, v);
    out
}

fn write_go_json(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                out.push_str(&i.to_string());
            } else if let Some(u) = n.as_u64() {
                out.push_str(&u.to_string());
            } else {
                out.push_str(&go_json_float(n.as_f64().unwrap_or(0.0)));
            }
        }
        Value::String(s) => write_go_json_string(out, s),
        Value::Array(a) => {
            out.push('[');
            for (i, item) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json(out, item);
            }
            out.push(']');
        }
        Value::Object(m) => write_go_json_object(out, m),
    }
}

fn write_go_json_object(out: &mut String, m: &Map<String, Value>) {
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    out.push('{');
    for (i, k) in keys.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_go_json_string(out, k);
        out.push(':');
        if let Some(val) = m.get(k.as_str()) {
            write_go_json(out, val);
        }
    }
    out.push('}');
}

pub(crate) fn write_go_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Go's `==` on two decoded JSON values held in `interface{}`: same dynamic type and value.
/// (Comparing maps or slices panics in Go; such comparisons are reported as unequal here.)
pub(crate) fn go_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Number(x), Value::Number(y)) => {
            if is_go_int(x) != is_go_int(y) {
                return false;
            }
            match (x.as_i64(), y.as_i64()) {
                (Some(i), Some(j)) => i == j,
                _ => x.as_f64() == y.as_f64(),
            }
        }
        _ => false,
    }
}

/// Go's `sort.SliceStable`, algorithm for algorithm (insertion sort on blocks of 20, then
/// SymMerge), so that results agree with Go even when `less` is not a consistent ordering.
pub(crate) fn slice_stable<T>(data: &mut [T], less: &dyn Fn(&T, &T) -> bool) {
    let n = data.len();
    let mut block = 20usize;
    let (mut a, mut b) = (0usize, block);
    while b <= n {
        insertion_sort(data, a, b, less);
        a = b;
        b += block;
    }
    insertion_sort(data, a, n, less);
    while block < n {
        a = 0;
        b = 2 * block;
        while b <= n {
            sym_merge(data, a, a + block, b, less);
            a = b;
            b += 2 * block;
        }
        let m = a + block;
        if m < n {
            sym_merge(data, a, m, n, less);
        }
        block *= 2;
    }
}

fn lt<T>(data: &[T], i: usize, j: usize, less: &dyn Fn(&T, &T) -> bool) -> bool {
    match (data.get(i), data.get(j)) {
        (Some(x), Some(y)) => less(x, y),
        _ => false,
    }
}

fn insertion_sort<T>(data: &mut [T], a: usize, b: usize, less: &dyn Fn(&T, &T) -> bool) {
    let mut i = a + 1;
    while i < b {
        let mut j = i;
        while j > a && lt(data, j, j - 1, less) {
            data.swap(j, j - 1);
            j -= 1;
        }
        i += 1;
    }
}

fn sym_merge<T>(data: &mut [T], a: usize, m: usize, b: usize, less: &dyn Fn(&T, &T) -> bool) {
    if m - a == 1 {
        let (mut i, mut j) = (m, b);
        while i < j {
            let h = (i + j) / 2;
            if lt(data, h, a, less) {
                i = h + 1;
            } else {
                j = h;
            }
        }
        let mut k = a;
        while k + 1 < i {
            data.swap(k, k + 1);
            k += 1;
        }
        return;
    }
    if b - m == 1 {
        let (mut i, mut j) = (a, m);
        while i < j {
            let h = (i + j) / 2;
            if !lt(data, m, h, less) {
                i = h + 1;
            } else {
                j = h;
            }
        }
        let mut k = m;
        while k > i {
            data.swap(k, k - 1);
            k -= 1;
        }
        return;
    }
    let mid = (a + b) / 2;
    let n = mid + m;
    let (mut start, mut r) = if m > mid { (n - b, mid) } else { (a, m) };
    let p = n - 1;
    while start < r {
        let c = (start + r) / 2;
        if !lt(data, p - c, c, less) {
            start = c + 1;
        } else {
            r = c;
        }
    }
    let end = n - start;
    if start < m && m < end {
        rotate(data, start, m, end);
    }
    if a < start && start < mid {
        sym_merge(data, a, start, mid, less);
    }
    if mid < end && end < b {
        sym_merge(data, mid, end, b, less);
    }
}

fn rotate<T>(data: &mut [T], a: usize, m: usize, b: usize) {
    let mut i = m - a;
    let mut j = b - m;
    while i != j {
        if i > j {
            swap_range(data, m - i, m, j);
            i -= j;
        } else {
            swap_range(data, m - i, m + j - i, i);
            j -= i;
        }
    }
    swap_range(data, m - i, m, i);
}

fn swap_range<T>(data: &mut [T], a: usize, b: usize, n: usize) {
    for i in 0..n {
        data.swap(a + i, b + i);
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// Unix seconds of an RFC 3339 timestamp (`2024-01-02T03:04:05Z`, fractions and offsets
/// allowed), as `metav1.Time.Unix()` would give; `None` when it does not parse.
pub(crate) fn rfc3339_unix(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = s.get(from..from + len)?;
        if !part.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        part.parse().ok()
    };
    if b.len() < 20 || b.get(4) != Some(&b'-') || b.get(7) != Some(&b'-') || b.get(13) != Some(&b':') {
        return None;
    }
    if !matches!(b.get(10), Some(b'T' | b't' | b' ')) {
        return None;
    }
    let (y, mo, d, h, mi, sec) = (num(0, 4)?, num(5, 2)?, num(8, 2)?, num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    if b.get(i) == Some(&b'.') {
        i += 1;
        while b.get(i).is_some_and(|c| c.is_ascii_digit()) {
            i += 1;
        }
    }
    let offset = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(c @ (b'+' | b'-')) if i + 6 == b.len() && b.get(i + 3) == Some(&b':') => {
            let secs = num(i + 1, 2)? * 3600 + num(i + 4, 2)? * 60;
            if *c == b'+' { secs } else { -secs }
        }
        _ => return None,
    };
    Some(days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - offset)
}

/// `encoding/json`'s quoting of a string (HTML-safe escapes), as a string.
pub(crate) fn go_json_quote(s: &str) -> String {
    let mut out = String::new();
    write_go_json_string(&mut out, s);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prints_like_go_fmt() {
        assert_eq!(go_v(&json!({"name": "a", "$patch": "foo"})), "map[$patch:foo name:a]");
        assert_eq!(go_v(&json!([1, "x", null, true, 1.5])), "[1 x <nil> true 1.5]");
        assert_eq!(go_v(&json!(1000000.0)), "1e+06");
        assert_eq!(go_v(&json!(123456.0)), "123456");
        assert_eq!(go_v(&json!(0.00001)), "1e-05");
        assert_eq!(go_s(&json!(5)), "%!s(int64=5)");
        assert_eq!(go_s(&json!("merge")), "merge");
        assert_eq!(go_v_lists(&[&[json!("a"), json!("b")], &[json!(1)]]), "[[a b] [1]]");
    }

    #[test]
    fn encodes_like_encoding_json() {
        assert_eq!(go_json(&json!({"b": 1, "a": "<x&y>"})), r#"{"a":"\u003cx\u0026y\u003e","b":1}"#);
        assert_eq!(go_json(&json!(1.0)), "1");
        assert_eq!(go_json(&json!(1e21)), "1e+21");
        assert_eq!(go_json(&json!(1.5e-7)), "1.5e-7");
        assert_eq!(go_json(&json!("\u{1}")), r#""\u0001""#);
    }

    #[test]
    fn stable_sort_matches_go_for_inconsistent_less() {
        // Go's insertion sort with an always-true `less` reverses a short slice.
        let mut v = vec![1, 2, 3, 4];
        slice_stable(&mut v, &|_, _| true);
        assert_eq!(v, vec![4, 3, 2, 1]);
        let mut w: Vec<u32> = (0..50).rev().collect();
        slice_stable(&mut w, &|a, b| a < b);
        assert_eq!(w, (0..50).collect::<Vec<_>>());
    }

    #[test]
    fn parses_rfc3339() {
        assert_eq!(rfc3339_unix("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(rfc3339_unix("2001-02-03T04:05:06Z"), Some(981173106));
        assert_eq!(rfc3339_unix("2001-02-03T05:05:06+01:00"), Some(981173106));
        assert_eq!(rfc3339_unix("2001-02-03T04:05:06.123Z"), Some(981173106));
        assert_eq!(rfc3339_unix("yesterday"), None);
    }
}
