//! `tooldispatch secret set|list|remove` against a real SQLite store.

use pretty_assertions::assert_eq;

use super::support::*;

fn secret(td: &Td, args: &[&str], stdin: &str) -> std::process::Output {
    td.bare()
        .arg("secret")
        .args(args)
        .arg("--store")
        .arg(format!("sqlite:{}", td.store_path().display()))
        .write_stdin(stdin)
        .output()
        .unwrap()
}

async fn stored(td: &Td, name: &str) -> Option<String> {
    let store = dispatch_store::open(&format!("sqlite:{}", td.store_path().display())).unwrap();
    store.secret_get(name).await.unwrap()
}

#[tokio::test]
async fn set_reads_the_value_from_stdin_list_shows_names_only_and_remove_forgets() {
    let td = Td::new();
    let set = secret(&td, &["set", "OPENAI_API_KEY"], "sk-test-123\n");
    assert_eq!(set.status.code(), Some(0), "{set:?}");
    assert_eq!(String::from_utf8_lossy(&set.stdout), "");
    assert!(
        String::from_utf8_lossy(&set.stderr).contains("{{secret:OPENAI_API_KEY}}"),
        "{set:?}"
    );
    // The line break that ends the piped value is not part of it; a CRLF neither.
    assert_eq!(
        stored(&td, "OPENAI_API_KEY").await.as_deref(),
        Some("sk-test-123")
    );
    secret(&td, &["set", "BOT.TOKEN"], "a b\r\n");
    assert_eq!(stored(&td, "BOT.TOKEN").await.as_deref(), Some("a b"));

    let list = secret(&td, &["list"], "");
    assert_eq!(
        String::from_utf8_lossy(&list.stdout),
        "BOT.TOKEN\nOPENAI_API_KEY\n"
    );
    let json = secret(&td, &["list", "--json"], "");
    assert_eq!(
        String::from_utf8_lossy(&json.stdout).trim(),
        r#"["BOT.TOKEN","OPENAI_API_KEY"]"#
    );
    let listed = format!("{list:?}{json:?}");
    assert!(!listed.contains("sk-test-123"), "a value was printed");

    let removed = secret(&td, &["remove", "BOT.TOKEN"], "");
    assert_eq!(removed.status.code(), Some(0), "{removed:?}");
    assert_eq!(stored(&td, "BOT.TOKEN").await, None);
    let again = secret(&td, &["remove", "BOT.TOKEN"], "");
    assert_eq!(again.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("no secret named BOT.TOKEN"),
        "{again:?}"
    );
}

#[test]
fn a_bad_name_or_an_empty_value_is_bad_input() {
    let td = Td::new();
    for (args, stdin, says) in [
        (&["set", "has space"][..], "v", "invalid secret name"),
        (&["set", "EMPTY"][..], "\n", "no value for EMPTY"),
        (&["remove", "a:b"][..], "", "invalid secret name"),
    ] {
        let out = secret(&td, args, stdin);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(says),
            "{args:?}: {out:?}"
        );
    }
}

/// At a terminal the value is typed at a prompt with echo off: it is stored, and the terminal
/// never shows it.
#[tokio::test]
async fn at_a_terminal_the_value_is_typed_hidden() {
    let td = Td::new();
    let store = format!("sqlite:{}", td.store_path().display());
    let mut terminal = Terminal::start(&td, &["secret", "set", "TYPED", "--store", &store]);
    terminal.answer("typing is hidden", 1, "hunter2\n");
    let (ok, shown) = terminal.finish();
    assert!(ok, "{shown}");
    assert!(
        !shown.contains("hunter2"),
        "the terminal showed the value: {shown}"
    );
    assert!(shown.contains("stored secret TYPED"), "{shown}");
    assert_eq!(stored(&td, "TYPED").await.as_deref(), Some("hunter2"));
}
