//! What a session id and a run id may be. Both name rows, keys and directories (a session's
//! spill folder), so the daemon and the CLI accept exactly the same ones.

/// Why `id` cannot be a session id, or `None`: 1–128 characters of `A–Z a–z 0–9 . _ : -`,
/// and not `.` or `..`.
pub fn session_id_problem(id: &str) -> Option<&'static str> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
        && id != "."
        && id != "..";
    (!ok).then_some("a session id is 1–128 characters of A–Z, a–z, 0–9, '.', '_', ':' and '-' (not '.' or '..')")
}

/// Why `id` cannot be a run id, or `None`: 1–128 characters without control characters.
pub fn run_id_problem(id: &str) -> Option<&'static str> {
    let ok = !id.is_empty() && id.len() <= 128 && !id.chars().any(char::is_control);
    (!ok).then_some("a run id is 1–128 characters without control characters")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_short_and_plain() {
        for good in ["s", "demo-1", "a.b_c:d", &"x".repeat(128)] {
            assert_eq!(session_id_problem(good), None, "{good}");
            assert_eq!(run_id_problem(good), None, "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            "a b",
            "é",
            &"x".repeat(129),
            "a\nb",
        ] {
            assert!(session_id_problem(bad).is_some(), "{bad:?}");
        }
        for bad in ["", "a\nb", "\u{7f}", &"x".repeat(129)] {
            assert!(run_id_problem(bad).is_some(), "{bad:?}");
        }
        assert_eq!(run_id_problem("turn 2 / ü"), None);
    }
}
