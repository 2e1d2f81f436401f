//! What both halves' tests share: where the registry packages are, and whether they must be there.

use std::path::PathBuf;

/// The repository's `e2e/node_modules/.bin`, where `npm ci` puts the npm MCP servers.
pub fn npm_bin(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../e2e/node_modules/.bin")
        .join(name)
}

/// The MCP packages are missing: fail when `TOOLDISPATCH_REQUIRE_MCP=1` (CI), else say so and
/// let the caller skip.
pub fn missing(what: &str) -> bool {
    let reason =
        format!("{what} is not installed (npm ci in e2e/; pip install the packages .ci/run names)");
    dispatch_testkit::skip(dispatch_testkit::Need::Mcp, &reason);
    true
}
