//! `resource.Quantity`: the workspace's one exact implementation lives in the `k8s-quantity`
//! crate (crates/quantity: upstream's parser and error messages, exact comparison and
//! arithmetic, the canonical string the real server writes back). This module re-exports it
//! and adds what only an API server needs: reading a quantity from decoded JSON, with the error
//! as the message text a `Status` carries.

pub use k8s_quantity::{ERR_FORMAT_WRONG, Format, Quantity};

/// `resource.ParseQuantity`, the error as upstream's message (`quantities must match the
/// regular expression ...`, `unable to parse quantity's suffix`).
pub fn parse_quantity(s: &str) -> Result<Quantity, String> {
    k8s_quantity::parse_quantity(s).map_err(|e| e.to_string())
}

/// A quantity as JSON decoding reads it (`Quantity.UnmarshalJSON`): a string (trimmed of
/// white space) or a JSON number; `null` is `Ok(None)`. Anything else is a decode error.
pub fn parse_quantity_value(v: &serde_json::Value) -> Result<Option<Quantity>, String> {
    match v {
        serde_json::Value::Null => Ok(None),
        serde_json::Value::String(s) => parse_quantity(s.trim()).map(Some),
        serde_json::Value::Number(n) => parse_quantity(&n.to_string()).map(Some),
        _ => Err(ERR_FORMAT_WRONG.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_quantity::ERR_SUFFIX;
    use serde_json::json;

    #[test]
    fn json_values_decode_as_upstream() {
        let canon = |v: serde_json::Value| match parse_quantity_value(&v) {
            Ok(q) => q.map(|q| q.to_canonical()),
            Err(e) => Some(format!("ERR {e}")),
        };
        assert_eq!(canon(json!(null)), None);
        assert_eq!(canon(json!(" 0.5 ")).as_deref(), Some("500m"));
        assert_eq!(canon(json!(1024)).as_deref(), Some("1024"));
        assert_eq!(canon(json!(true)), Some(format!("ERR {ERR_FORMAT_WRONG}")));
        assert_eq!(canon(json!("1K")), Some(format!("ERR {ERR_SUFFIX}")));
    }
}
