//! The config file: `store` and `max_concurrent` from it, flags over it, mistakes refused.

use pretty_assertions::assert_eq;
use serde_json::json;

use super::support::*;

fn stats(td: &Td, extra: &[&str]) -> serde_json::Value {
    let mut cmd = td.bare();
    cmd.args(["store", "stats"]).args(extra);
    stdout_json(&cmd.output().unwrap())
}

/// `round` with only --workdir and these options (no --store).
fn round_with(td: &Td, extra: &[&str]) {
    let mut cmd = td.bare();
    cmd.args(["round", "--session", "s", "--workdir"])
        .arg(td.workdir())
        .args(extra)
        .write_stdin(select("c1", "calculate"));
    stdout_json(&cmd.output().unwrap());
}

#[test]
fn the_config_files_store_is_used_and_a_flag_wins_over_it() {
    let td = Td::new();
    let db = td.data_dir().join("from-config.db");
    let config = td.file(
        "config.toml",
        &format!("store = \"sqlite:{}\"\n", db.display()),
    );
    let config = config.to_str().unwrap();

    round_with(&td, &["--config", config]);
    assert!(db.is_file(), "the round used the config file's store");
    assert_eq!(stats(&td, &["--config", config])["sessions"], json!(1));

    // --store wins: the round lands in the test's store, not in the config file's.
    let other = format!("sqlite:{}", td.store_path().display());
    round_with(&td, &["--config", config, "--store", &other]);
    assert_eq!(stats(&td, &["--store", &other])["sessions"], json!(1));
    let mut again = td.bare();
    again
        .args(["round", "--session", "s2", "--workdir"])
        .arg(td.workdir());
    again
        .args(["--config", config, "--store", &other])
        .write_stdin(select("c1", "calculate"));
    stdout_json(&again.output().unwrap());
    assert_eq!(stats(&td, &["--config", config])["sessions"], json!(1));
}

#[test]
fn the_default_config_file_is_read_from_xdg_config_home() {
    let td = Td::new();
    let db = td.data_dir().join("default-config.db");
    // `bare()` points XDG_CONFIG_HOME at <data>/no-config; put a config file there.
    let dir = td.data_dir().join("no-config/tooldispatch");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.toml"),
        format!("store = \"sqlite:{}\"\n", db.display()),
    )
    .unwrap();
    round_with(&td, &[]);
    assert!(
        db.is_file(),
        "the round used the default config file's store"
    );
}

#[test]
fn a_mistake_in_the_config_file_is_bad_input_naming_file_key_and_line() {
    let td = Td::new();
    let config = td.file("config.toml", "max_concurrent = 2\nstroe = \"memory:\"\n");
    let out = td
        .cmd(&[
            "round",
            "--session",
            "s",
            "--config",
            config.to_str().unwrap(),
        ])
        .write_stdin(select("c1", "calculate"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("stroe"), "{stderr}");
    assert!(stderr.contains("line 2"), "{stderr}");
    assert!(stderr.contains(config.to_str().unwrap()), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");

    let missing = td.data_dir().join("nope.toml");
    let out = td
        .cmd(&[
            "round",
            "--session",
            "s",
            "--config",
            missing.to_str().unwrap(),
        ])
        .write_stdin(select("c1", "calculate"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read the config file"));
}

#[test]
fn read_only_commands_from_the_config_file_run_without_asking() {
    // Without a sandbox nothing runs without asking, so there is nothing to show.
    if !sandbox_present() {
        return;
    }
    let td = Td::new();
    let reply = |id: &str| {
        openai(&[(
            id,
            "run_tool",
            run_tool("run_command", json!({"argv": ["touch", "made-by-touch"]})),
        )])
    };
    td.round("s", "r1", &[], &select("c0", "run_command"));

    // Headless, `touch` is not read-only: declined, nothing made.
    let out = td.report("s", "r1", &[], &reply("c1"));
    assert_eq!(out["results"][0]["status"], "declined", "{out}");
    assert!(!td.workdir().join("made-by-touch").exists());

    // The user declares it read-only in the config file: it runs without a confirmer, in the
    // read-only sandbox, which holds the user to the word: the file is not made, and the
    // result says why and what to do.
    let config = td.file("config.toml", "[commands]\nread_only = [\"touch\"]\n");
    let out = td.report(
        "s",
        "r2",
        &["--config", config.to_str().unwrap()],
        &reply("c2"),
    );
    assert_eq!(out["results"][0]["status"], "ok", "{out}");
    assert!(!td.workdir().join("made-by-touch").exists());
    let content = out["results"][0]["content"].as_str().unwrap();
    assert!(
        content.contains("sandbox: blocked: the read-only sandbox allows no writes"),
        "{content}"
    );
}
