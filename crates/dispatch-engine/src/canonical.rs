//! The dedupe key: a blake3 hash of `name|canonical args`.
//!
//! The canonical form is the one RFC 8785 defines — object keys sorted, no whitespace, numbers
//! compared by value so `1` and `1.0` agree — but it is fed to the hasher as a walk over the
//! parsed value instead of being written out as text first: producing the RFC 8785 text cost
//! about 8,000 instructions per call, more than the rest of pass 1 together. Strings are
//! length-prefixed, so no two different values feed the same bytes.

use blake3::Hasher;
use serde_json::Value;

/// The dedupe key of a call. Arguments that are a JSON object are keyed by their canonical
/// form, so key order, whitespace and number spelling do not matter; anything else is keyed by
/// its trimmed raw text.
pub fn dedupe_key(name: &str, parsed: Option<&Value>, raw: &str) -> String {
    let mut hasher = Hasher::new();
    hasher.update(name.as_bytes());
    hasher.update(b"|");
    match parsed.filter(|v| v.is_object()) {
        Some(value) => feed(&mut hasher, value),
        None => {
            hasher.update(b"r");
            hasher.update(raw.trim().as_bytes());
        }
    }
    hasher.finalize().to_hex().to_string()
}

fn feed(hasher: &mut Hasher, value: &Value) {
    match value {
        Value::Null => {
            hasher.update(b"n");
        }
        Value::Bool(b) => {
            hasher.update(if *b { b"t" } else { b"f" });
        }
        Value::Number(n) => feed_number(hasher, n),
        Value::String(s) => feed_str(hasher, s),
        Value::Array(items) => {
            hasher.update(b"[");
            hasher.update(&(items.len() as u64).to_le_bytes());
            for item in items {
                feed(hasher, item);
            }
        }
        Value::Object(map) => {
            // serde_json's map is ordered by key (the workspace never enables preserve_order).
            hasher.update(b"{");
            hasher.update(&(map.len() as u64).to_le_bytes());
            for (key, item) in map {
                feed_str(hasher, key);
                feed(hasher, item);
            }
        }
    }
}

fn feed_str(hasher: &mut Hasher, s: &str) {
    hasher.update(b"s");
    hasher.update(&(s.len() as u64).to_le_bytes());
    hasher.update(s.as_bytes());
}

/// Integers and integral floats hash alike (`1` == `1.0`, `-0.0` == `0`); other floats by value.
fn feed_number(hasher: &mut Hasher, n: &serde_json::Number) {
    let integer = n
        .as_i64()
        .map(i128::from)
        .or_else(|| n.as_u64().map(i128::from))
        .or_else(|| {
            let f = n.as_f64()?;
            (f.fract() == 0.0 && f.abs() < 9.0e18).then_some(f as i128)
        });
    match integer {
        Some(i) => {
            hasher.update(b"i");
            hasher.update(&i.to_le_bytes());
        }
        None => {
            hasher.update(b"d");
            hasher.update(&n.as_f64().unwrap_or(f64::NAN).to_bits().to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(text: &str) -> String {
        let v: Value = serde_json::from_str(text).unwrap();
        dedupe_key("t", Some(&v), text)
    }

    #[test]
    fn key_ignores_key_order_whitespace_and_number_spelling() {
        assert_eq!(
            key(r#"{"b": 1, "a": [1, 2]}"#),
            key(r#"{"a":[1,2],"b":1.0}"#)
        );
        assert_eq!(key(r#"{"a": -0.0}"#), key(r#"{"a":0}"#));
    }

    #[test]
    fn key_tells_apart_values_that_print_alike_in_pieces() {
        assert_ne!(key(r#"{"a": "bc"}"#), key(r#"{"ab": "c"}"#));
        assert_ne!(key(r#"{"a": [1, [2]]}"#), key(r#"{"a": [[1], 2]}"#));
        assert_ne!(key(r#"{"a": "1"}"#), key(r#"{"a": 1}"#));
        assert_ne!(key(r#"{"a": 1.5}"#), key(r#"{"a": 1}"#));
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
