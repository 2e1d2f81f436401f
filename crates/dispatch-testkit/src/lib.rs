//! What tooldispatch's test suites share.
//!
//! Some tests need a service a fresh machine may lack: Redis, the OS sandbox (bubblewrap),
//! Chromium, the example clients' packages, the MCP servers and SDKs. Without it such a test
//! returns early, and `cargo test` would print `... ok` as if it had run. [`skip`] makes that
//! visible: it writes a `SKIPPED` line with the reason into the default test output, or fails
//! the test when CI requires the service (`TOOLDISPATCH_REQUIRE_<SERVICE>=1`, set by `.ci/run`).

use std::io::Write;

/// A service some tests need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Redis on 127.0.0.1:6379.
    Redis,
    /// The OS sandbox every command runs in (bubblewrap).
    Sandbox,
    /// Chromium and playwright-core (`e2e/`), for the console's browser test.
    Browser,
    /// The example clients' toolchains (Python `openai`, TypeScript in `e2e/`).
    Examples,
    /// The MCP servers and SDK clients (`e2e/`, pip).
    Mcp,
}

impl Need {
    /// The variable that turns a skip into a failure.
    pub fn required_by(self) -> &'static str {
        match self {
            Need::Redis => "TOOLDISPATCH_REQUIRE_REDIS",
            Need::Sandbox => "TOOLDISPATCH_REQUIRE_SANDBOX",
            Need::Browser => "TOOLDISPATCH_REQUIRE_BROWSER",
            Need::Examples => "TOOLDISPATCH_REQUIRE_EXAMPLES",
            Need::Mcp => "TOOLDISPATCH_REQUIRE_MCP",
        }
    }

    /// Whether this run requires the service (a skip would be a failure).
    pub fn is_required(self) -> bool {
        std::env::var(self.required_by()).as_deref() == Ok("1")
    }
}

/// The calling test cannot run, because of `reason`: panics when `need` is required, else
/// writes `SKIPPED <test>: <reason> …` to stderr so the person running the tests sees it, and
/// returns for the caller to return.
pub fn skip(need: Need, reason: &str) {
    let var = need.required_by();
    if need.is_required() {
        panic!("{reason}, and {var}=1 requires it");
    }
    skipped(&format!("{reason} (set {var}=1 to make this a failure)"));
}

/// Part of the calling test did not run on this machine, because of `reason` (a program that
/// is not installed, no process limit), and nothing requires it: says so visibly, like [`skip`].
pub fn skipped(reason: &str) {
    // The harness names each test's thread after the test.
    let current = std::thread::current();
    let test = current.name().filter(|n| *n != "main").unwrap_or("a test");
    // libtest captures what `print!`/`eprint!` write and hides it for a passing test; a write
    // to the stderr handle itself is not captured, so the line shows in the default output.
    let line = format!("SKIPPED {test}: {reason}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// Run by [`a_skip_shows_in_the_default_test_output`] in a child harness.
    #[test]
    #[ignore = "run in a child process by a_skip_shows_in_the_default_test_output"]
    fn a_test_that_skips() {
        skip(Need::Redis, "Redis is not reachable here");
    }

    fn child(require: bool) -> (bool, String) {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--ignored", "--exact", "tests::a_test_that_skips"]);
        cmd.env_remove("RUST_TEST_NOCAPTURE");
        if require {
            cmd.env("TOOLDISPATCH_REQUIRE_REDIS", "1");
        } else {
            cmd.env_remove("TOOLDISPATCH_REQUIRE_REDIS");
        }
        let out = cmd.output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    /// The harness's default output (output captured) shows the skip and its reason next to
    /// the test's `ok`; with the requirement set, the same test fails.
    #[test]
    fn a_skip_shows_in_the_default_test_output() {
        let (passed, text) = child(false);
        assert!(passed, "{text}");
        assert!(
            text.contains("test tests::a_test_that_skips ... ok"),
            "{text}"
        );
        assert!(
            text.contains(
                "SKIPPED tests::a_test_that_skips: Redis is not reachable here (set TOOLDISPATCH_REQUIRE_REDIS=1 to make this a failure)"
            ),
            "{text}"
        );
        let (passed, text) = child(true);
        assert!(!passed, "{text}");
        assert!(
            text.contains(
                "Redis is not reachable here, and TOOLDISPATCH_REQUIRE_REDIS=1 requires it"
            ),
            "{text}"
        );
    }

    #[test]
    fn every_need_is_required_by_its_own_variable() {
        let all = [
            Need::Redis,
            Need::Sandbox,
            Need::Browser,
            Need::Examples,
            Need::Mcp,
        ];
        let vars: std::collections::HashSet<_> = all.iter().map(|n| n.required_by()).collect();
        assert_eq!(vars.len(), all.len());
        assert!(vars.iter().all(|v| v.starts_with("TOOLDISPATCH_REQUIRE_")));
    }
}
