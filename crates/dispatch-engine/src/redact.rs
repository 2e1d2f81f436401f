//! Secret redaction (DESIGN §3.17): a stored secret's value never reaches a result, an event,
//! the transcript, the dedupe map or the cache; it reads `[secret:NAME]` instead.
//!
//! # What is hidden
//!
//! For each secret of at least [`MIN_SECRET_LEN`] bytes: the value itself; its hex (lower and
//! upper case, bare or with a space between bytes); its base64 on its own (standard and
//! URL-safe alphabet, padded and unpadded); its base64 inside a longer base64 text, at each of
//! the three offsets it can sit at (below); its percent-encoding (upper- and lower-case hex
//! digits); and its JSON string escaping. All forms of all secrets go into one Aho-Corasick
//! automaton (leftmost-longest, so a secret that contains another is replaced whole), rebuilt
//! only when the set of secrets changes: a scan costs one pass over the text however many
//! secrets and forms there are.
//!
//! # Base64 inside a longer text
//!
//! Base64 writes each 3 bytes as 4 characters of 6 bits. A secret inside a longer encoded
//! text (`Authorization: Basic base64("user:" + secret)`) starts at byte 0, 1 or 2 of a 3-byte
//! group, and only at byte 0 with nothing after it does its encoding equal `base64(secret)`.
//! Count bits from the start of the secret's first group: at offset `k` the secret's `n` bytes
//! hold bits `[8k, 8(k+n))`, and character `j` holds bits `[6j, 6j+6)`. A character depends on
//! the secret alone when all its bits do, that is for `ceil(8k/6) <= j < floor(8(k+n)/6)`:
//! that run of characters (the *fragment*) is the same whatever bytes surround the secret, so
//! it can be matched as a fixed string. It is computed by encoding the secret behind `k` zero
//! bytes and cutting out that run. The character just before the fragment (offsets 1 and 2)
//! holds the secret's first 4 or 2 bits as its low bits, and the character just after it (when
//! `8(k+n)` is not a multiple of 6) holds its last 2 or 4 bits as its high bits; the rest of
//! each comes from the neighbours. A match takes such an edge character along when its
//! secret bits agree, so what is left beside the placeholder is bits of the neighbours (and
//! at most the 4 secret bits of an edge character that a neighbouring match already took).
//!
//! # Minimum lengths
//!
//! Values shorter than [`MIN_SECRET_LEN`] (4 bytes) are not hidden at all: "abc" or "123" would
//! be replaced all over ordinary text. A fragment is shorter than the secret's full encoding
//! and carries fewer of its bits, so it must be at least [`MIN_FRAGMENT_LEN`] characters: 6
//! characters carry 36 bits, more than the 32 bits of the shortest value we hide, so no
//! fragment is likelier to turn up in unrelated text than a shortest secret itself (a given
//! 6-character run of random base64 at a given place: 1 in 2^36). From 5 bytes up every
//! fragment is long enough; a 4-byte secret is found in base64 only where its encoding stands
//! on its own.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, PoisonError, RwLock};

use aho_corasick::{AhoCorasick, MatchKind};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use dispatch_store::{Secrets, StoreError, StoreResult};

use crate::ToolError;

/// Values shorter than this are not scanned for: they would match ordinary text everywhere.
pub const MIN_SECRET_LEN: usize = 4;

/// The shortest base64 fragment of a secret that is matched: as many characters as it takes
/// to carry more bits than a [`MIN_SECRET_LEN`]-byte value (6 characters, 36 bits).
pub const MIN_FRAGMENT_LEN: usize = (MIN_SECRET_LEN * 8).div_ceil(6);

/// Replaces secret values in text. Empty (no secrets) costs nothing. Clones share one matcher,
/// so a secret stored during a round (store_secret) is hidden from then on by every clone.
#[derive(Clone, Default)]
pub struct Redactor {
    matcher: Arc<RwLock<Arc<Matcher>>>,
}

/// The secrets and the automaton built from them; replaced whole when a secret is added, so a
/// scan holds no lock.
#[derive(Default)]
struct Matcher {
    /// Name → value: what the next rebuild starts from.
    secrets: BTreeMap<String, String>,
    /// Every form of every secret; `None` when there is nothing to find.
    automaton: Option<AhoCorasick>,
    /// What each of the automaton's patterns stands for, by pattern id.
    patterns: Vec<Pattern>,
}

struct Pattern {
    /// `[secret:NAME]`.
    placeholder: Arc<str>,
    edges: Edges,
}

/// The secret's bits in the base64 characters just outside a fragment: `(bits, value)`.
#[derive(Clone, Copy, Default)]
struct Edges {
    /// The character before holds the secret's first `bits` bits as its low bits.
    before: Option<(u32, u8)>,
    /// The character after holds the secret's last `bits` bits as its high bits.
    after: Option<(u32, u8)>,
}

impl Edges {
    fn before_matches(&self, c: u8) -> bool {
        self.before
            .is_some_and(|(bits, value)| sextet(c).is_some_and(|v| v & low_mask(bits) == value))
    }

    fn after_matches(&self, c: u8) -> bool {
        self.after
            .is_some_and(|(bits, value)| sextet(c).is_some_and(|v| v >> (6 - bits) == value))
    }
}

fn low_mask(bits: u32) -> u8 {
    (1u8 << bits) - 1
}

/// The 6-bit value of a base64 character, in either alphabet.
fn sextet(c: u8) -> Option<u8> {
    match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' | b'-' => Some(62),
        b'/' | b'_' => Some(63),
        _ => None,
    }
}

impl std::fmt::Debug for Redactor {
    // Never print the values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let matcher = self.current();
        f.debug_struct("Redactor")
            .field("secrets", &matcher.secrets.len())
            .field("forms", &matcher.patterns.len())
            .finish()
    }
}

impl Redactor {
    /// A redactor for these `(name, value)` pairs.
    pub fn new(secrets: Vec<(String, String)>) -> StoreResult<Self> {
        let matcher = Matcher::build(secrets.into_iter().collect())?;
        Ok(Redactor {
            matcher: Arc::new(RwLock::new(Arc::new(matcher))),
        })
    }

    /// A redactor for every secret the store holds (decrypts each one).
    pub async fn load(store: &dyn Secrets) -> StoreResult<Self> {
        let mut secrets = Vec::new();
        for name in store.secret_names().await? {
            if let Some(value) = store.secret_get(&name).await? {
                secrets.push((name, value));
            }
        }
        Redactor::new(secrets)
    }

    /// Hide `value` as `[secret:NAME]` from now on, in every clone of this redactor.
    pub fn add(&self, name: String, value: String) -> StoreResult<()> {
        let mut current = self.matcher.write().unwrap_or_else(PoisonError::into_inner);
        let mut secrets = current.secrets.clone();
        secrets.insert(name, value);
        *current = Arc::new(Matcher::build(secrets)?);
        Ok(())
    }

    fn current(&self) -> Arc<Matcher> {
        self.matcher
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn is_empty(&self) -> bool {
        self.current().automaton.is_none()
    }

    /// `text` with every secret value (and encoded form) replaced by `[secret:NAME]`.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let matcher = self.current();
        let Some(automaton) = &matcher.automaton else {
            return Cow::Borrowed(text);
        };
        let mut found = automaton.find_iter(text).peekable();
        if found.peek().is_none() {
            return Cow::Borrowed(text);
        }
        let bytes = text.as_bytes();
        let mut out = String::with_capacity(text.len());
        // Bytes of `text` already written to `out` or replaced.
        let mut done = 0;
        while let Some(hit) = found.next() {
            let (mut start, mut end) = (hit.start(), hit.end());
            let pattern = matcher.patterns.get(hit.pattern().as_usize());
            let placeholder = pattern.map_or("[secret]", |p| &p.placeholder);
            if let Some(edges) = pattern.map(|p| p.edges) {
                // Edge characters are ASCII, so the cut stays on a char boundary; neither
                // takes a byte another match has taken or is about to take.
                let before = start.checked_sub(1).filter(|&b| b >= done);
                if before.is_some_and(|b| bytes.get(b).is_some_and(|&c| edges.before_matches(c))) {
                    start -= 1;
                }
                let next = found.peek().map_or(text.len(), |n| n.start());
                if end < next && bytes.get(end).is_some_and(|&c| edges.after_matches(c)) {
                    end += 1;
                }
            }
            out.push_str(text.get(done..start).unwrap_or_default());
            out.push_str(placeholder);
            done = end;
        }
        out.push_str(text.get(done..).unwrap_or_default());
        Cow::Owned(out)
    }

    /// Redact a string in place.
    pub fn redact_in_place(&self, text: &mut String) {
        if let Cow::Owned(clean) = self.redact(text) {
            *text = clean;
        }
    }
}

impl Matcher {
    fn build(secrets: BTreeMap<String, String>) -> StoreResult<Matcher> {
        let mut seen = HashSet::new();
        let mut strings = Vec::new();
        let mut patterns = Vec::new();
        for (name, value) in &secrets {
            if value.len() < MIN_SECRET_LEN {
                continue;
            }
            let placeholder: Arc<str> = Arc::from(format!("[secret:{name}]"));
            for (form, edges) in forms(value) {
                // The first secret to claim a form keeps it (two names, one value).
                if seen.insert(form.clone()) {
                    strings.push(form);
                    patterns.push(Pattern {
                        placeholder: placeholder.clone(),
                        edges,
                    });
                }
            }
        }
        let automaton = if strings.is_empty() {
            None
        } else {
            // Fail closed: without the automaton no secret could be kept out.
            let built = AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostLongest)
                .build(&strings)
                .map_err(|e| {
                    StoreError::Backend(format!("cannot build the secret redactor: {e}"))
                })?;
            Some(built)
        };
        Ok(Matcher {
            secrets,
            automaton,
            patterns,
        })
    }
}

/// The forms `value` takes when something encodes it, with the edges of base64 fragments.
fn forms(value: &str) -> Vec<(String, Edges)> {
    let bytes = value.as_bytes();
    let whole = |form: String| (form, Edges::default());
    let hex_lower: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let hex_upper: Vec<String> = bytes.iter().map(|b| format!("{b:02X}")).collect();
    let json = serde_json::to_string(value).unwrap_or_default();
    let mut forms = vec![
        whole(value.to_string()),
        whole(hex_lower.concat()),
        whole(hex_upper.concat()),
        whole(hex_lower.join(" ")),
        whole(hex_upper.join(" ")),
        whole(STANDARD.encode(bytes)),
        whole(STANDARD_NO_PAD.encode(bytes)),
        whole(URL_SAFE.encode(bytes)),
        whole(URL_SAFE_NO_PAD.encode(bytes)),
        whole(percent_encoded(bytes, false)),
        whole(percent_encoded(bytes, true)),
        whole(
            json.get(1..json.len().saturating_sub(1))
                .unwrap_or_default()
                .to_string(),
        ),
    ];
    for url_safe in [false, true] {
        for offset in 0..3 {
            let (fragment, edges) = base64_fragment(bytes, offset, url_safe);
            if fragment.len() >= MIN_FRAGMENT_LEN {
                forms.push((fragment, edges));
            }
        }
    }
    forms.retain(|(form, _)| !form.is_empty());
    forms
}

/// RFC 3986 percent-encoding: unreserved characters stay, every other byte is `%XX`.
fn percent_encoded(bytes: &[u8], lower: bool) -> String {
    bytes
        .iter()
        .map(|&b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ if lower => format!("%{b:02x}"),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The base64 characters of `bytes` that do not depend on their neighbours when they start at
/// byte `offset` (0, 1 or 2) of a 3-byte group, and the secret's bits in the characters just
/// outside them (see the module docs).
fn base64_fragment(bytes: &[u8], offset: usize, url_safe: bool) -> (String, Edges) {
    let engine = if url_safe {
        &URL_SAFE_NO_PAD
    } else {
        &STANDARD_NO_PAD
    };
    let mut shifted = vec![0u8; offset];
    shifted.extend_from_slice(bytes);
    let encoded = engine.encode(&shifted);
    let (first_bit, end_bit) = (8 * offset, 8 * shifted.len());
    let (first, end) = (first_bit.div_ceil(6), end_bit / 6);
    let fragment = encoded.get(first..end).unwrap_or_default().to_string();
    // 0, 2 or 4 bits each; the casts cannot truncate.
    let before_bits = (6 * first - first_bit) as u32;
    let after_bits = (end_bit - 6 * end) as u32;
    let edges = Edges {
        before: bytes
            .first()
            .filter(|_| before_bits > 0)
            .map(|&b| (before_bits, b >> (8 - before_bits))),
        after: bytes
            .last()
            .filter(|_| after_bits > 0)
            .map(|&b| (after_bits, b & low_mask(after_bits))),
    };
    (fragment, edges)
}

/// One store's redactor, kept across rounds: built on first use and rebuilt only when the
/// store's secrets generation says a secret was stored or removed, by this process or another.
/// A round that changes nothing costs one generation read instead of decrypting every secret.
#[derive(Default)]
pub struct RedactorCache {
    built: tokio::sync::Mutex<Option<(u64, Redactor)>>,
}

impl std::fmt::Debug for RedactorCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedactorCache").finish_non_exhaustive()
    }
}

impl RedactorCache {
    /// The redactor for `store`'s current secrets. A secret a tool stores through it (see
    /// [`ToolSecrets::set`]) is hidden at once; the next call rebuilds from the store.
    pub async fn redactor(&self, store: &dyn Secrets) -> StoreResult<Redactor> {
        // Read before the values: a change after this read leaves a newer generation behind,
        // so values older than the generation kept with them are never reused. Read outside
        // the lock, so that rounds do not queue for it when nothing changed.
        let generation = store.secret_generation().await?;
        let mut built = self.built.lock().await;
        if let Some((seen, redactor)) = built.as_ref()
            && *seen == generation
        {
            return Ok(redactor.clone());
        }
        let redactor = Redactor::load(store).await?;
        *built = Some((generation, redactor.clone()));
        Ok(redactor)
    }
}

/// The store's secrets as a tool sees them: read one, expand `{{secret:NAME}}`, or store one
/// so that the rest of the round already hides its value.
#[derive(Clone)]
pub struct ToolSecrets {
    store: Arc<dyn Secrets>,
    redactor: Redactor,
}

/// How a secret is referenced in arguments that accept one: `{{secret:NAME}}`.
const PLACEHOLDER_OPEN: &str = "{{secret:";

impl ToolSecrets {
    pub fn new(store: Arc<dyn Secrets>, redactor: Redactor) -> Self {
        ToolSecrets { store, redactor }
    }

    pub async fn get(&self, name: &str) -> StoreResult<Option<String>> {
        self.store.secret_get(name).await
    }

    /// Store `value` under `name`; results and events of this round already hide it.
    pub async fn set(&self, name: &str, value: &str) -> StoreResult<()> {
        self.store.secret_set(name, value).await?;
        self.redactor.add(name.to_string(), value.to_string())
    }

    pub async fn names(&self) -> StoreResult<Vec<String>> {
        self.store.secret_names().await
    }

    /// `text` with each `{{secret:NAME}}` replaced by the stored value. A name with no value
    /// is a credential error, so the model is pointed to store_secret.
    pub async fn expand(&self, text: &str) -> Result<String, ToolError> {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = rest.find(PLACEHOLDER_OPEN) {
            out.push_str(&rest[..at]);
            let after = &rest[at + PLACEHOLDER_OPEN.len()..];
            let Some(end) = after.find("}}") else {
                out.push_str(&rest[at..]);
                return Ok(out);
            };
            let name = after[..end].trim();
            let value =
                self.store.secret_get(name).await.map_err(|e| {
                    ToolError::failed(format!("cannot read the secret {name}: {e}"))
                })?;
            let Some(value) = value else {
                return Err(ToolError::Credential {
                    key: Some(name.to_string()),
                    message: format!(
                        "no secret named {name} is stored, so {{{{secret:{name}}}}} cannot be filled in; ask the user to store it with store_secret(key=\"{name}\"), then retry"
                    ),
                });
            };
            out.push_str(&value);
            rest = &after[end + 2..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_become_their_names_longest_first() {
        let r = Redactor::new(vec![
            ("SHORT".into(), "abc".into()),
            ("TOKEN".into(), "sk-12345".into()),
            ("LONGER".into(), "sk-12345-extra".into()),
        ])
        .unwrap();
        assert_eq!(
            r.redact("a sk-12345-extra b sk-12345 c abc"),
            "a [secret:LONGER] b [secret:TOKEN] c abc"
        );
        assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)));
        // Counts only, never a value.
        let shown = format!("{r:?}");
        assert!(
            shown.starts_with("Redactor { secrets: 3, forms: "),
            "{shown}"
        );
        assert!(!shown.contains("sk-"), "{shown}");
    }

    #[tokio::test]
    async fn a_secret_stored_by_a_tool_is_hidden_by_every_clone_at_once() {
        let store = dispatch_store::open("memory:").unwrap();
        let redactor = Redactor::default();
        let seen_by_events = redactor.clone();
        let secrets = ToolSecrets::new(store.clone(), redactor);
        secrets.set("API_KEY", "k-0123456789").await.unwrap();
        assert_eq!(
            seen_by_events.redact("Bearer k-0123456789"),
            "Bearer [secret:API_KEY]"
        );
        assert_eq!(
            store.secret_get("API_KEY").await.unwrap().as_deref(),
            Some("k-0123456789")
        );
    }

    #[tokio::test]
    async fn placeholders_expand_to_stored_values_and_a_missing_one_names_store_secret() {
        let store = dispatch_store::open("memory:").unwrap();
        store.secret_set("GH", "ghp_value").await.unwrap();
        let secrets = ToolSecrets::new(store, Redactor::default());
        assert_eq!(
            secrets
                .expand("token {{secret:GH}} and {{ secret:GH }}, {{secret:unclosed")
                .await
                .unwrap(),
            "token ghp_value and {{ secret:GH }}, {{secret:unclosed"
        );
        assert_eq!(secrets.expand("plain").await.unwrap(), "plain");
        let err = secrets.expand("{{secret:NOPE}}").await.unwrap_err();
        match err {
            ToolError::Credential { key, message } => {
                assert_eq!(key.as_deref(), Some("NOPE"));
                assert_eq!(
                    message,
                    "no secret named NOPE is stored, so {{secret:NOPE}} cannot be filled in; ask the user to store it with store_secret(key=\"NOPE\"), then retry"
                );
            }
            other => panic!("not a credential error: {other:?}"),
        }
    }

    #[test]
    fn an_echoed_secret_is_hidden_in_its_encoded_forms_too() {
        let r = Redactor::new(vec![("K".into(), "a/b+c \"d\"".into())]).unwrap();
        for echoed in [
            "a/b+c \"d\"",
            "612f622b6320226422",
            "612F622B6320226422",
            "61 2f 62 2b 63 20 22 64 22",
            "61 2F 62 2B 63 20 22 64 22",
            "YS9iK2MgImQi",
            "YS9iK2MgImQi",
            "a%2Fb%2Bc%20%22d%22",
            "a%2fb%2bc%20%22d%22",
            "a/b+c \\\"d\\\"",
        ] {
            assert_eq!(r.redact(&format!("<{echoed}>")), "<[secret:K]>", "{echoed}");
        }
    }

    const GH: &str = "ghp_R3vi3wF1nd1ng0ffs3t";

    /// The security review's payloads: a token echoed as upper-case hex, and inside longer
    /// base64 texts where it starts at byte 2, 0 (with bytes after it) and 1 of a 3-byte group.
    /// Only the characters that carry none of its bits are left.
    #[test]
    fn regression_upper_case_hex_and_base64_at_an_offset_were_not_hidden() {
        let r = Redactor::new(vec![("GH".into(), GH.into())]).unwrap();
        for (echoed, hidden) in [
            // Upper-case hex (`xxd -u`, .NET's Convert.ToHexString).
            (
                "6768705F52337669337746316E64316E67306666733374",
                "[secret:GH]",
            ),
            // Basic base64("user:" + token): offset 2, the token ends the text.
            (
                "Authorization: Basic dXNlcjpnaHBfUjN2aTN3RjFuZDFuZzBmZnMzdA==",
                "Authorization: Basic dXNlcj[secret:GH]==",
            ),
            // URL-safe, unpadded base64 of {"k":"<token>","x":1}: offset 0, bytes after it.
            (
                "eyJrIjoiZ2hwX1Izdmkzd0YxbmQxbmcwZmZzM3QiLCJ4IjoxfQ",
                "eyJrIjoi[secret:GH]iLCJ4IjoxfQ",
            ),
            // base64("tok:" + token + "\n"): offset 1.
            (
                "dG9rOmdocF9SM3ZpM3dGMW5kMW5nMGZmczN0Cg==",
                "dG9rO[secret:GH]Cg==",
            ),
        ] {
            assert_eq!(r.redact(echoed), hidden, "{echoed}");
        }
    }

    /// A 4-byte value is still found whole in every form; only its base64 fragments inside a
    /// longer text are shorter than `MIN_FRAGMENT_LEN` and not looked for.
    #[test]
    fn a_shortest_secret_is_hidden_in_its_whole_forms() {
        let r = Redactor::new(vec![("PIN".into(), "w0rd".into())]).unwrap();
        for echoed in ["w0rd", "77307264", "77 30 72 64", "dzByZA==", "dzByZA"] {
            assert_eq!(
                r.redact(&format!("<{echoed}>")),
                "<[secret:PIN]>",
                "{echoed}"
            );
        }
        assert_eq!(MIN_FRAGMENT_LEN, 6);
        // From 5 bytes up every fragment is long enough.
        for offset in 0..3 {
            let (fragment, _) = base64_fragment(b"12345", offset, false);
            assert!(
                fragment.len() >= MIN_FRAGMENT_LEN,
                "offset {offset}: {fragment}"
            );
        }
    }

    /// Ordinary text, and encodings of other data, pass through untouched (and unallocated).
    #[test]
    fn unrelated_text_is_left_alone() {
        let r = Redactor::new(vec![
            ("GH".into(), GH.into()),
            ("AWS".into(), "AKIAIOSFODNN7EXAMPLE".into()),
            ("PASSWORD".into(), "correct horse battery".into()),
            ("SHORT".into(), "pass1".into()),
        ])
        .unwrap();
        for text in [
            "The quick brown fox jumps over the lazy dog; a password is not a passport.",
            r#"{"name":"tooldispatch","version":"0.1.0","dependencies":{"aho-corasick":"1"}}"#,
            "commit d35f116e6b8a4f0c2f0e9d1c7b3a5e4f6a8b9c0d",
            "Authorization: Basic dXNlcjpwYXNzd29yZA==",
            "aGVsbG8gd29ybGQsIHRoaXMgaXMgYmFzZTY0IG9mIHNvbWV0aGluZyBlbHNlIGVudGlyZWx5Lg==",
            "68656c6c6f20776f726c64 48454C4C4F",
            "https://example.com/search?q=rust%20aho-corasick&page=2",
            "",
        ] {
            assert!(matches!(r.redact(text), Cow::Borrowed(_)), "{text}");
        }
    }

    /// The characters of `encode(fill * offset + secret + fill * 3)` that are the same for the
    /// fills 0x00 and 0xFF: a character with any bit of the fill differs between the two, so
    /// this finds the part that depends on the secret alone by trying, not by the redactor's
    /// bit arithmetic.
    fn stable_run(secret: &[u8], offset: usize, encode: Encode) -> String {
        let with = |fill: u8| {
            let mut bytes = vec![fill; offset];
            bytes.extend_from_slice(secret);
            bytes.extend_from_slice(&[fill; 3]);
            encode(&bytes)
        };
        let (zeros, ones) = (with(0x00), with(0xff));
        zeros
            .chars()
            .zip(ones.chars())
            .skip_while(|(a, b)| a != b)
            .take_while(|(a, b)| a == b)
            .map(|(a, _)| a)
            .collect()
    }

    fn hex_lower(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn hex_upper(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02X}")).collect()
    }

    fn std_padded(bytes: &[u8]) -> String {
        STANDARD.encode(bytes)
    }

    fn std_unpadded(bytes: &[u8]) -> String {
        STANDARD_NO_PAD.encode(bytes)
    }

    fn url_padded(bytes: &[u8]) -> String {
        URL_SAFE.encode(bytes)
    }

    fn url_unpadded(bytes: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(bytes)
    }

    type Encode = fn(&[u8]) -> String;

    const ENCODINGS: [(&str, Encode); 6] = [
        ("hex", hex_lower),
        ("HEX", hex_upper),
        ("base64", std_padded),
        ("base64 unpadded", std_unpadded),
        ("base64url", url_padded),
        ("base64url unpadded", url_unpadded),
    ];

    fn secret_value() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        // From 5 bytes every fragment is matched (see the module docs on minimum lengths).
        prop_oneof!["[!-~]{5,40}", "\\PC{5,16}"]
    }

    proptest::proptest! {
        /// For any secret and any bytes around it, no encoding of `prefix + secret + suffix`
        /// keeps a recognisable encoding of the secret once redacted: not its hex in either
        /// case, and none of the runs of base64 characters (either alphabet, any of the three
        /// offsets) that depend on the secret alone.
        #[test]
        fn no_encoding_of_a_secret_survives_whatever_surrounds_it(
            secret in secret_value(),
            prefix in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..9),
            suffix in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..9),
            which in 0..ENCODINGS.len(),
        ) {
            let (label, encode) = ENCODINGS[which];
            let r = Redactor::new(vec![("K".into(), secret.clone())]).unwrap();
            let mut bytes = prefix.clone();
            bytes.extend_from_slice(secret.as_bytes());
            bytes.extend_from_slice(&suffix);
            let text = format!("got: {} (end)", encode(&bytes));
            let redacted = r.redact(&text);
            proptest::prop_assert!(redacted.contains("[secret:K]"), "{label}: {text} -> {redacted}");
            proptest::prop_assert!(redacted.starts_with("got: ") && redacted.ends_with(" (end)"));
            let secret = secret.as_bytes();
            let mut recognisable = vec![hex_lower(secret), hex_upper(secret)];
            for offset in 0..3 {
                recognisable.push(stable_run(secret, offset, std_unpadded));
                recognisable.push(stable_run(secret, offset, url_unpadded));
            }
            for form in recognisable {
                proptest::prop_assert!(
                    !redacted.contains(&form),
                    "{label}: {form} survives in {redacted}"
                );
            }
        }

        /// Text that holds no secret comes back as it was, without a copy.
        #[test]
        fn text_without_a_secret_is_not_touched(secret in secret_value(), text in "\\PC{0,200}") {
            proptest::prop_assume!(!text.contains(&secret));
            let r = Redactor::new(vec![("K".into(), secret)]).unwrap();
            proptest::prop_assert!(matches!(r.redact(&text), Cow::Borrowed(_)));
        }
    }

    /// Counts decryptions (`secret_get`) of the store it wraps.
    struct Counting {
        inner: Arc<dyn Secrets>,
        gets: std::sync::atomic::AtomicUsize,
    }

    impl Counting {
        fn gets(&self) -> usize {
            self.gets.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    #[async_trait::async_trait]
    impl Secrets for Counting {
        async fn secret_set(&self, name: &str, value: &str) -> StoreResult<()> {
            self.inner.secret_set(name, value).await
        }
        async fn secret_get(&self, name: &str) -> StoreResult<Option<String>> {
            self.gets.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.inner.secret_get(name).await
        }
        async fn secret_names(&self) -> StoreResult<Vec<String>> {
            self.inner.secret_names().await
        }
        async fn secret_delete(&self, name: &str) -> StoreResult<bool> {
            self.inner.secret_delete(name).await
        }
        async fn secret_generation(&self) -> StoreResult<u64> {
            self.inner.secret_generation().await
        }
    }

    /// Two handles on one SQLite file, as two processes would have: the cache decrypts
    /// nothing while nothing changes, and rebuilds when the other handle sets or removes one.
    #[tokio::test]
    async fn the_redactor_is_rebuilt_only_when_a_secret_changes_even_in_another_handle() {
        let dir = tempfile::TempDir::new().unwrap();
        let url = format!("sqlite:{}", dir.path().join("store.db").display());
        let ours = dispatch_store::open(&url).unwrap();
        let theirs = dispatch_store::open(&url).unwrap();
        ours.secret_set("GH", GH).await.unwrap();
        let counting = Counting {
            inner: ours,
            gets: Default::default(),
        };
        let cache = RedactorCache::default();

        let first = cache.redactor(&counting).await.unwrap();
        assert_eq!(counting.gets(), 1);
        assert_eq!(first.redact(GH), "[secret:GH]");
        for _ in 0..3 {
            cache.redactor(&counting).await.unwrap();
        }
        assert_eq!(counting.gets(), 1, "nothing changed, nothing decrypted");

        theirs.secret_set("OTHER", "other-value-42").await.unwrap();
        let second = cache.redactor(&counting).await.unwrap();
        assert_eq!(counting.gets(), 3, "both secrets decrypted once more");
        assert_eq!(second.redact("other-value-42"), "[secret:OTHER]");
        cache.redactor(&counting).await.unwrap();
        assert_eq!(counting.gets(), 3);

        theirs.secret_delete("OTHER").await.unwrap();
        let third = cache.redactor(&counting).await.unwrap();
        assert_eq!(counting.gets(), 4);
        assert_eq!(third.redact("other-value-42"), "other-value-42");
        assert_eq!(third.redact(GH), "[secret:GH]");
    }
}
