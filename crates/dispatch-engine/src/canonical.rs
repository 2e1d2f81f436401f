//! The dedupe key: a blake3 hash of `name|canonical args`.
//!
//! The canonical form is the one RFC 8785 defines — object keys sorted, no whitespace, numbers
//! compared by value so `1` and `1.0` agree — but it is fed to the hasher as a walk over the
//! parsed value instead of being written out as text first: producing the RFC 8785 text cost
//! about 8,000 instructions per call, more than the rest of pass 1 together. Strings are
//! length-prefixed, so no two different values feed the same bytes.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

use serde_json::Value;

/// The dedupe key of a call: 32 bytes of blake3, shown as hex where it leaves the engine.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct DedupeKey([u8; 32]);

impl DedupeKey {
    pub fn to_hex(&self) -> String {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut hex = String::with_capacity(64);
        for b in self.0 {
            hex.push(char::from(DIGITS[usize::from(b >> 4)]));
            hex.push(char::from(DIGITS[usize::from(b & 0x0f)]));
        }
        hex
    }

    pub fn from_hex(hex: &str) -> Option<Self> {
        if hex.len() != 64 || !hex.is_ascii() {
            return None;
        }
        let mut bytes = [0u8; 32];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(DedupeKey(bytes))
    }
}

impl Hash for DedupeKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Already uniformly random: eight of its bytes are a good hash as they are.
        let mut first = [0u8; 8];
        first.copy_from_slice(&self.0[..8]);
        state.write_u64(u64::from_le_bytes(first));
    }
}

/// Passes a `DedupeKey`'s own bytes through instead of hashing them again with SipHash.
#[derive(Default)]
pub struct PrehashedHasher(u64);

impl Hasher for PrehashedHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only reached for types other than DedupeKey; keep it correct, if slow.
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A map keyed by dedupe key.
pub type KeyMap<V> = HashMap<DedupeKey, V, BuildHasherDefault<PrehashedHasher>>;

/// The dedupe key of a call. Arguments that are a JSON object are keyed by their canonical
/// form, so key order, whitespace and number spelling do not matter; anything else is keyed by
/// its trimmed raw text.
pub fn dedupe_key(name: &str, parsed: Option<&Value>, raw: &str) -> DedupeKey {
    let mut buf = Vec::with_capacity(128);
    buf.extend_from_slice(name.as_bytes());
    buf.push(b'|');
    match parsed.filter(|v| v.is_object()) {
        Some(value) => feed(&mut buf, value),
        None => {
            buf.push(b'r');
            buf.extend_from_slice(raw.trim().as_bytes());
        }
    }
    DedupeKey(*blake3::hash(&buf).as_bytes())
}

fn feed(buf: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => buf.push(b'n'),
        Value::Bool(b) => buf.push(if *b { b't' } else { b'f' }),
        Value::Number(n) => feed_number(buf, n),
        Value::String(s) => feed_str(buf, s),
        Value::Array(items) => {
            buf.push(b'[');
            buf.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                feed(buf, item);
            }
        }
        Value::Object(map) => {
            // serde_json's map is ordered by key (the workspace never enables preserve_order).
            buf.push(b'{');
            buf.extend_from_slice(&(map.len() as u64).to_le_bytes());
            for (key, item) in map {
                feed_str(buf, key);
                feed(buf, item);
            }
        }
    }
}

fn feed_str(buf: &mut Vec<u8>, s: &str) {
    buf.push(b's');
    buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
    buf.extend_from_slice(s.as_bytes());
}

/// Integers and integral floats feed alike (`1` == `1.0`, `-0.0` == `0`); other floats by value.
fn feed_number(buf: &mut Vec<u8>, n: &serde_json::Number) {
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
            buf.push(b'i');
            buf.extend_from_slice(&i.to_le_bytes());
        }
        None => {
            buf.push(b'd');
            buf.extend_from_slice(&n.as_f64().unwrap_or(f64::NAN).to_bits().to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(text: &str) -> DedupeKey {
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
    fn hex_round_trips() {
        let k = key(r#"{"a": 1}"#);
        assert_eq!(DedupeKey::from_hex(&k.to_hex()), Some(k));
        assert_eq!(DedupeKey::from_hex("zz"), None);
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
