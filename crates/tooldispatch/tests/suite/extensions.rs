//! Script and ext tools from the command line: a person installs a draft, the next round runs
//! it, `tools --check` lists every definition and refuses the bad ones, `ext` installs, lists
//! and removes an extension.

use serde_json::{Value, json};

use super::support::{Td, openai, run_tool, sandbox_present, select};

fn write(path: &std::path::Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

const COUNT: &str =
    "import json, sys\nprint(json.dumps({'words': len(json.load(sys.stdin)['text'].split())}))\n";

#[test]
fn an_installed_draft_runs_in_the_next_round_and_tools_check_lists_it() {
    if !sandbox_present() {
        return;
    }
    let td = Td::new();
    let draft = td.workdir().join("drafts/count");
    write(
        &draft.join("tool.json"),
        &json!({
            "name": "count", "description": "count the words of a text", "read_only": true,
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        })
        .to_string(),
    );
    write(&draft.join("script.py"), COUNT);
    let out = td
        .bare()
        .args(["tools", "install"])
        .arg(&draft)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("installed script_count"));
    // Installing again needs --replace.
    let out = td
        .bare()
        .args(["tools", "install"])
        .arg(&draft)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--replace"));

    td.round("s", "r1", &[], &select("c0", "script_count"));
    let results = td.round(
        "s",
        "r2",
        &[],
        &openai(&[(
            "c1",
            "run_tool",
            run_tool("script_count", json!({"text": "a b c d"})),
        )]),
    );
    assert_eq!(results[0]["content"], "[script_count] {\n  \"words\": 4\n}");

    let out = td.cmd(&["tools", "--check"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout.contains("ok      script_count (user tool in "),
        "{stdout}"
    );

    // A broken definition: refused with file, field and reason; exit 2; rounds go on.
    let tools = td.data_dir().join("no-config/tooldispatch/tools");
    write(
        &tools.join("broken/tool.json"),
        r#"{"name": "broken", "parameters": {"type": "object"}}"#,
    );
    write(&tools.join("broken/script.sh"), "echo\n");
    let out = td.cmd(&["tools", "--check"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    assert!(
        stdout.contains("broken/tool.json: description: missing or empty"),
        "{stdout}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 tool definition(s) refused"));
    let output = td
        .cmd(&["round", "--session", "s", "--run", "r3"])
        .write_stdin(openai(&[(
            "c1",
            "run_tool",
            run_tool("script_count", json!({"text": "x"})),
        )]))
        .output()
        .unwrap();
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("see `tooldispatch tools --check`"));
    let results: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(results[0]["content"], "[script_count] {\n  \"words\": 1\n}");
}

#[test]
fn ext_installs_lists_and_removes_an_extension() {
    let td = Td::new();
    let source = td.workdir().join("weather");
    write(
        &source.join("extension.json"),
        r#"{"version": "0.3", "description": "forecasts"}"#,
    );
    write(
        &source.join("forecast/tool.json"),
        &json!({
            "name": "forecast", "description": "the forecast for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            "endpoint": {"url": "https://api.example.com/v1/{city}"},
            "auth": {"type": "query", "param": "key", "secret": "WEATHER_KEY"},
        })
        .to_string(),
    );
    let out = td
        .bare()
        .args(["ext", "install"])
        .arg(&source)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("installed the extension weather"));
    let out = td.bare().args(["ext", "list", "--json"]).output().unwrap();
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed[0]["name"], "weather");
    assert_eq!(listed[0]["version"], "0.3");
    assert_eq!(listed[0]["tools"], json!(["ext_forecast"]));
    // Offered to the model like any deferred tool.
    let out = td.round("s", "r", &[], &select("c", "ext_forecast"));
    assert!(
        out[0]["content"]
            .as_str()
            .unwrap()
            .contains("the forecast for a city"),
        "{out}"
    );
    let out = td
        .bare()
        .args(["ext", "remove", "weather"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let out = td
        .bare()
        .args(["ext", "remove", "weather"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no extension \"weather\" is installed"));
    let out = td.bare().args(["ext", "list"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("no extensions are installed"));
}

#[test]
fn tools_needs_a_session_or_check() {
    let td = Td::new();
    let out = td.cmd(&["tools"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--session"),
        "{out:?}"
    );
}

#[test]
fn tools_check_lists_client_tools_and_refuses_bad_ones() {
    let td = Td::new();
    let file = td.file(
        "clients.json",
        &json!([
            {"name": "lookup", "description": "look a thing up", "parameters": {"type": "object"}},
            {"name": "a.b", "description": "dotted"},
            {"name": "find_tools", "description": "shadows the built-in"},
        ])
        .to_string(),
    );
    let file = file.display().to_string();
    let out = td
        .cmd(&["tools", "--check", "--client-tools", &file])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    assert!(stdout.contains("ok      lookup (client tool)"), "{stdout}");
    assert!(
        stdout.contains("refused client tool \"a.b\" (#1), field name"),
        "{stdout}"
    );
    assert!(
        stdout.contains("refused client tool \"find_tools\" (#2), field name"),
        "{stdout}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("2 tool definition(s) refused"));
}
