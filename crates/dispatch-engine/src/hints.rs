//! The `next:` line that ends every executed failure (DESIGN §3.5): what the model should do now.

/// The `next:` line for an executed failure of `tool` with this error text.
/// `credential` is `Some` when the tool itself said a credential is missing or was rejected.
pub fn next_hint(tool: &str, error: &str, credential: Option<Option<&str>>) -> String {
    let credential = match credential {
        Some(key) => Some(key.or_else(|| secret_name(error))),
        None if credential_error(error) => Some(secret_name(error)),
        None => None,
    };
    match credential {
        Some(Some(key)) => format!(
            "next: store_secret(key=\"{key}\") — the call needs a credential that is missing or was rejected; store it, then retry"
        ),
        Some(None) => "next: store_secret(key=\"<NAME>\") with the name of the credential this call needs (missing or rejected), then retry".to_string(),
        None => format!(
            "next: once a different fix works, call write_error(tool_name=\"{tool}\", keywords=[...], symptom=..., action=..., outcome=\"resolved\") so the next run finds it"
        ),
    }
}

/// Whether an error text points to a missing or rejected credential. A file-system
/// "permission denied" is not one: it needs a different path, not a secret.
pub fn credential_error(error: &str) -> bool {
    let e = error.to_lowercase();
    let http_rejected = ["401", "403"].iter().any(|code| {
        e.match_indices(code).any(|(i, _)| {
            let before = e[..i].chars().next_back();
            let after = e[i + 3..].chars().next();
            !before.is_some_and(|c| c.is_ascii_digit())
                && !after.is_some_and(|c| c.is_ascii_digit())
        }) && (e.contains("status")
            || e.contains("http")
            || e.contains("unauthorized")
            || e.contains("forbidden"))
    });
    let named = [
        "unauthorized",
        "invalid api key",
        "incorrect api key",
        "api key is missing",
        "missing api key",
        "no api key",
        "api key not",
        "invalid token",
        "token expired",
        "expired token",
        "authentication failed",
        "authentication required",
        "invalid credentials",
        "missing credentials",
        "missing secret",
        "secret not found",
        "no secret",
    ]
    .iter()
    .any(|p| e.contains(p));
    http_rejected
        || named
        || (secret_name(error).is_some() && (e.contains("missing") || e.contains("not set")))
}

/// An UPPER_SNAKE name that looks like a secret (`GITHUB_TOKEN`, `OPENAI_API_KEY`).
pub fn secret_name(error: &str) -> Option<&str> {
    error
        .split(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
        .find(|w| {
            w.len() >= 4
                && w.contains('_')
                && w.starts_with(|c: char| c.is_ascii_uppercase())
                && ["KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL"]
                    .iter()
                    .any(|s| w.contains(s))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_401_points_to_store_secret() {
        assert!(
            next_hint(
                "http_request",
                "upstream answered status 401 Unauthorized",
                None
            )
            .starts_with("next: store_secret(key=\"<NAME>\")")
        );
    }

    #[test]
    fn named_missing_key_is_put_in_the_hint() {
        assert_eq!(
            next_hint("search_web", "BRAVE_API_KEY is not set", None),
            "next: store_secret(key=\"BRAVE_API_KEY\") — the call needs a credential that is missing or was rejected; store it, then retry"
        );
    }

    #[test]
    fn filesystem_permission_denied_is_not_a_credential_error() {
        let hint = next_hint(
            "edit_file",
            "open /etc/shadow: Permission denied (os error 13)",
            None,
        );
        assert!(
            hint.starts_with(
                "next: once a different fix works, call write_error(tool_name=\"edit_file\""
            ),
            "{hint}"
        );
        assert!(!credential_error(
            "access denied: path outside the work directory"
        ));
    }

    #[test]
    fn a_number_containing_401_is_not_a_status() {
        assert!(!credential_error("read 14012 bytes, status ok"));
    }

    #[test]
    fn tool_declared_credential_wins() {
        assert!(
            next_hint("x", "nope", Some(Some("GH_TOKEN")))
                .starts_with("next: store_secret(key=\"GH_TOKEN\")")
        );
    }
}
