//! MCP servers from the config file through the CLI: `mcp list`, `tools`, `round`, secrets in
//! a server's env, and a server that cannot start.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::support::*;

/// The hand-written 2025-06-18 server of dispatch-mcp's tests (plain Python, no SDK).
fn raw_server() -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../dispatch-mcp/tests/servers/raw_2025_06_18.py")
        .canonicalize()
        .unwrap()
        .display()
        .to_string()
}

/// A config with the working server `old` (its env holds a stored secret) and `broken`.
fn config(td: &Td) -> String {
    let text = format!(
        "[mcp.servers.old]\ncommand = \"python3\"\nargs = [\"{}\"]\nenv = {{ API_TOKEN = \"{{{{secret:TOKEN}}}}\" }}\n\n[mcp.servers.broken]\ncommand = \"/nonexistent/mcp-server\"\n",
        raw_server()
    );
    td.file("config.toml", &text).display().to_string()
}

fn store_secret(td: &Td, name: &str, value: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = dispatch_store::open(&format!("sqlite:{}", td.store_path().display())).unwrap();
        store.secret_set(name, value).await.unwrap();
    });
}

#[test]
fn mcp_list_says_how_each_server_fared() {
    let td = Td::new();
    store_secret(&td, "TOKEN", "tok-5f1e2d3c4b5a");
    let config = config(&td);
    let output = td
        .cmd(&["mcp", "list", "--config", &config])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0]
            .starts_with("broken: failed (stdio, 0 tools): cannot start /nonexistent/mcp-server"),
        "{text}"
    );
    assert_eq!(lines[1], "old: ready (stdio, protocol 2025-06-18, 3 tools)");

    let json = stdout_json(
        &td.cmd(&["mcp", "list", "--json", "--config", &config])
            .output()
            .unwrap(),
    );
    assert_eq!(json[1]["name"], "old");
    assert_eq!(json[1]["state"], "ready");
    assert_eq!(json[1]["protocol_version"], "2025-06-18");
    assert_eq!(json[1]["tools"], 3);
    assert_eq!(json[0]["state"], "failed");

    // Without servers it says where to add one.
    let none = td.cmd(&["mcp", "list"]).output().unwrap();
    assert!(String::from_utf8_lossy(&none.stdout).contains("[mcp.servers.<name>]"));
}

#[test]
fn tools_and_rounds_use_the_servers_and_keep_their_secrets_out() {
    let td = Td::new();
    store_secret(&td, "TOKEN", "tok-5f1e2d3c4b5a");
    let config = config(&td);
    // tools: the server's tools in the turn context; the broken server in one stderr line.
    let output = td
        .cmd(&["tools", "--session", "s", "--config", &config])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let tools = stdout_json(&output);
    assert!(
        tools["turn_context"]
            .as_str()
            .unwrap()
            .contains("mcp__old__add"),
        "{tools}"
    );
    let broken: Vec<&str> = stderr.lines().filter(|l| l.contains("broken")).collect();
    assert_eq!(broken.len(), 1, "{stderr}");
    assert!(
        broken[0].starts_with("tooldispatch: MCP server broken: failed"),
        "{stderr}"
    );

    // A round: the schema first, then the call. Headless, an MCP tool is declined…
    td.round(
        "s",
        "r1",
        &["--config", &config],
        &select("c1", "mcp__old__add"),
    );
    let call = openai(&[(
        "c2",
        "run_tool",
        run_tool("mcp__old__add", json!({"a": 40, "b": 2})),
    )]);
    let declined = td.round("s", "r1", &["--config", &config], &call);
    assert!(
        declined[0]["content"]
            .as_str()
            .unwrap()
            .contains("MCP server old"),
        "{declined}"
    );
    // …and approved, it runs on the server.
    let added = td.round("s", "r2", &["--config", &config, "--approve", "all"], &call);
    assert_eq!(added[0]["content"], "[mcp__old__add] 42");

    // The server got the stored secret in its env; what it says back is redacted.
    td.round(
        "s",
        "r3",
        &["--config", &config],
        &select("c3", "mcp__old__env"),
    );
    let env = openai(&[(
        "c4",
        "run_tool",
        run_tool("mcp__old__env", json!({"name": "API_TOKEN"})),
    )]);
    let shown = td.round("s", "r3", &["--config", &config, "--approve", "all"], &env);
    assert_eq!(shown[0]["content"], "[mcp__old__env] [secret:TOKEN]");
    // Nothing of tooldispatch's own environment is passed on.
    let mut cmd = td.cmd(&[
        "round",
        "--session",
        "s",
        "--run",
        "r4",
        "--config",
        &config,
        "--approve",
        "all",
    ]);
    cmd.env("OPENAI_API_KEY", "sk-not-for-servers");
    let leaked = openai(&[(
        "c5",
        "run_tool",
        run_tool("mcp__old__env", json!({"name": "OPENAI_API_KEY"})),
    )]);
    let out: Value = stdout_json(&cmd.write_stdin(leaked).output().unwrap());
    assert_eq!(out[0]["content"], "[mcp__old__env] (not set)");
}

#[test]
fn a_missing_secret_stops_that_server_only() {
    let td = Td::new();
    let config = config(&td);
    let output = td
        .cmd(&["mcp", "list", "--config", &config])
        .output()
        .unwrap();
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("old: failed (stdio, 0 tools): [mcp.servers.old] needs the stored secret TOKEN, which is not set in this store (the store_secret tool stores one: the model calls it and the user types the value)"),
        "{text}"
    );
}

/// A server starts in the work directory only when the user trusts it (a cloned repository's
/// node_modules or python modules must not choose what runs); rules may name its tools.
#[test]
fn servers_start_in_the_work_directory_only_when_it_is_trusted() {
    let td = Td::new();
    store_secret(&td, "TOKEN", "tok-5f1e2d3c4b5a");
    let config = config(&td);
    let cwd = |td: &Td, run: &str| -> (String, String) {
        td.round(
            "s",
            run,
            &["--config", &config],
            &select("c1", "mcp__old__cwd"),
        );
        let call = openai(&[("c2", "run_tool", run_tool("mcp__old__cwd", json!({})))]);
        let output = td
            .cmd(&[
                "round",
                "--session",
                "s",
                "--run",
                run,
                "--config",
                &config,
                "--approve",
                "all",
            ])
            .write_stdin(call)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        let out = stdout_json(&output);
        let text = out[0]["content"]
            .as_str()
            .unwrap()
            .trim_start_matches("[mcp__old__cwd] ");
        (text.to_string(), stderr)
    };
    let (untrusted, _) = cwd(&td, "r1");
    assert!(untrusted.ends_with("tooldispatch/mcp-start"), "{untrusted}");
    // Trusted, with a rule naming an MCP tool: no lint says it names no tool.
    td.rules("allow mcp__old__*\n");
    let (trusted, stderr) = cwd(&td, "r2");
    assert_eq!(trusted, td.workdir().display().to_string());
    assert!(!stderr.contains("rules:"), "{stderr}");
}
