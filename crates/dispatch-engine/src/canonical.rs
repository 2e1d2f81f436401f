//! The dedupe key: `name|canonical args` (RFC 8785), hashed with blake3.

use serde_json::Value;

/// The dedupe key of a call. Arguments that are a JSON object are canonicalised, so key order,
/// whitespace and number spelling (`1` vs `1.0`) do not matter; anything else is keyed by its
/// trimmed raw text.
pub fn dedupe_key(name: &str, parsed: Option<&Value>, raw: &str) -> String {
    let mut hasher = blake3::Hasher::new();
    hasher.update(name.as_bytes());
    hasher.update(b"|");
    match parsed.filter(|v| v.is_object()).map(canonical_json) {
        Some(Ok(canonical)) => hasher.update(canonical.as_bytes()),
        _ => hasher.update(raw.trim().as_bytes()),
    };
    hasher.finalize().to_hex().to_string()
}

/// RFC 8785 canonical JSON of a parsed value.
pub fn canonical_json(value: &Value) -> Result<String, String> {
    serde_json_canonicalizer::to_string(value).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_ignores_key_order_whitespace_and_number_spelling() {
        let a: Value = serde_json::from_str(r#"{"b": 1, "a": [1, 2]}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":[1,2],"b":1.0}"#).unwrap();
        assert_eq!(dedupe_key("t", Some(&a), ""), dedupe_key("t", Some(&b), ""));
    }

    #[test]
    fn key_depends_on_the_tool_name() {
        let a = json!({"x": 1});
        assert_ne!(dedupe_key("t", Some(&a), ""), dedupe_key("u", Some(&a), ""));
    }

    #[test]
    fn non_object_args_are_keyed_by_trimmed_raw_text() {
        assert_eq!(
            dedupe_key("t", None, "  not json "),
            dedupe_key("t", None, "not json")
        );
        let arr = json!([1]);
        assert_eq!(
            dedupe_key("t", Some(&arr), "[1]"),
            dedupe_key("t", None, " [1]")
        );
    }
}
