//! Sensitive paths (credentials, keys): calls that touch them always ask.

/// Private keys; each is also sensitive with a `.pub` suffix because the pair is usually stored together.
const KEY_FILE_NAMES: &[&str] = &[
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    "ssh_host_rsa_key",
    "ssh_host_ecdsa_key",
    "ssh_host_ed25519_key",
];

// `.envrc` is direnv's file: it is sourced into the shell and in practice holds the same
// exported secrets as `.env`, so it is treated the same way.
const SECRET_FILE_NAMES: &[&str] = &[
    "authorized_keys",
    "known_hosts",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    "credentials",
    ".env",
    ".envrc",
];

const SECRET_NAME_PREFIXES: &[&str] = &[".env."];

const SECRET_EXTENSIONS: &[&str] = &["pem", "key", "p12", "pfx", "cer", "kdbx"];

// `.docker` is here because `config.json` in it holds registry auth tokens.
const SECRET_DIRS: &[&str] = &[".ssh", ".gnupg", ".aws", ".kube", ".docker"];

/// True for paths that must always ask (credentials, keys).
pub fn is_sensitive_path(path: &str) -> bool {
    let segments: Vec<&str> = path
        .trim()
        .split(['/', '\\'])
        .map(windows_visible_name)
        .filter(|segment| !segment.is_empty() && *segment != ".")
        .collect();
    // `:` splits git's `REV:path` and NTFS streams (`id_rsa:$DATA` opens `id_rsa`), so every
    // colon-separated part is judged on its own; a false alarm only costs a question.
    let in_secret_dir = segments
        .iter()
        .flat_map(|s| s.split(':'))
        .any(|part| SECRET_DIRS.iter().any(|dir| part.eq_ignore_ascii_case(dir)));
    // A repository's config and hooks name programs git runs, even for read-only commands.
    let git_control = segments.windows(2).any(|pair| {
        pair[0].eq_ignore_ascii_case(".git")
            && (pair[1].eq_ignore_ascii_case("config") || pair[1].eq_ignore_ascii_case("hooks"))
    });
    in_secret_dir
        || git_control
        || segments
            .last()
            .is_some_and(|base| base.split(':').any(is_secret_name))
}

/// Windows ignores trailing dots and spaces in names, so `id_rsa.` opens `id_rsa` there.
fn windows_visible_name(segment: &str) -> &str {
    if segment == "." || segment == ".." {
        segment
    } else {
        segment.trim_end_matches(['.', ' '])
    }
}

fn is_secret_name(name: &str) -> bool {
    // Compared case-insensitively because macOS and Windows file systems are.
    let lower = name.to_ascii_lowercase();
    let stem = lower.strip_suffix(".pub").unwrap_or(&lower);
    KEY_FILE_NAMES.contains(&stem)
        || SECRET_FILE_NAMES.contains(&lower.as_str())
        || SECRET_NAME_PREFIXES
            .iter()
            .any(|prefix| lower.starts_with(prefix))
        || lower
            .rsplit_once('.')
            .is_some_and(|(_, ext)| SECRET_EXTENSIONS.contains(&ext))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn flagged<'a>(paths: &[&'a str]) -> Vec<&'a str> {
        paths
            .iter()
            .copied()
            .filter(|path| is_sensitive_path(path))
            .collect()
    }

    #[test]
    fn ssh_keys_and_their_public_halves_are_sensitive() {
        let paths = [
            "id_rsa",
            "~/.config/id_rsa.pub",
            "keys/id_dsa",
            "id_ecdsa.pub",
            "backup/id_ed25519",
            "/etc/ssh/ssh_host_rsa_key",
            "etc/ssh_host_ecdsa_key.pub",
            "ssh_host_ed25519_key",
        ];
        assert_eq!(flagged(&paths), paths.to_vec());
    }

    #[test]
    fn credential_file_names_are_sensitive() {
        let paths = [
            "authorized_keys",
            "known_hosts",
            "/home/u/.netrc",
            ".git-credentials",
            "web/.npmrc",
            ".pypirc",
            "creds/credentials",
            ".env",
            "app/.env.production",
            ".envrc",
        ];
        assert_eq!(flagged(&paths), paths.to_vec());
    }

    #[test]
    fn secret_extensions_are_sensitive_in_any_case() {
        let paths = [
            "tls/server.pem",
            "server.KEY",
            "cert.P12",
            "a.pfx",
            "ca.Cer",
            "vault.kdbx",
        ];
        assert_eq!(flagged(&paths), paths.to_vec());
    }

    #[test]
    fn anything_under_a_secret_directory_is_sensitive() {
        let paths = [
            "~/.ssh/config",
            "/home/u/.gnupg/pubring.kbx",
            ".aws/config",
            "/root/.kube/config",
            "~/.docker/config.json",
            "~/.ssh",
        ];
        assert_eq!(flagged(&paths), paths.to_vec());
    }

    #[test]
    fn separators_trailing_slashes_and_dot_segments_do_not_hide_secrets() {
        let paths = [
            r"C:\Users\u\.ssh\id_rsa",
            r"proj\.env",
            "./.env",
            "~/.ssh/",
            "./keys/./id_rsa",
            " .env ",
            "id_rsa.",
            "id_rsa:$DATA",
            "HEAD:config/.env",
        ];
        assert_eq!(flagged(&paths), paths.to_vec());
    }

    #[test]
    fn ordinary_files_are_not_sensitive() {
        let paths = [
            "src/key_handling.rs",
            "environment.md",
            ".environment",
            "src/env.rs",
            "docs/pem.md",
            "Cargo.toml",
            "keys/README",
            "ssh/notes.txt",
            "credentials.rs",
            "",
            "/",
        ];
        assert_eq!(flagged(&paths), Vec::<&str>::new());
    }

    #[test]
    fn a_repositorys_config_and_hooks_are_sensitive() {
        assert!(is_sensitive_path(".git/config"));
        assert!(is_sensitive_path("sub/.git/hooks/pre-commit"));
        assert!(is_sensitive_path("fix/evil.git/../.GIT/Config"));
        assert!(!is_sensitive_path(".git/HEAD"));
        assert!(!is_sensitive_path("docs/config"));
    }
}
