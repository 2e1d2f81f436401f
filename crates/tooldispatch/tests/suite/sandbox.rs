//! `tooldispatch sandbox` and `tooldispatch bench sandbox`.

use serde_json::Value;

use super::support::*;

#[test]
fn sandbox_prints_the_mechanism_limits_and_hidden_paths() {
    let td = Td::new();
    let output = td
        .bare()
        .args(["sandbox", "--workdir"])
        .arg(td.workdir())
        .arg("--store")
        .arg(format!("sqlite:{}", td.store_path().display()))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.starts_with("sandbox: "), "{text}");
    assert!(text.contains("limits: file size 1 GiB"), "{text}");
    assert!(text.contains("hidden paths"), "{text}");
    let key = format!("{}.key", td.store_path().display());
    assert!(text.contains(&key), "{text}");
    assert!(
        text.contains(&td.workdir().join(".tooldispatch").display().to_string()),
        "{text}"
    );
    if sandbox_present() {
        assert!(
            text.starts_with("sandbox: available — bubblewrap"),
            "{text}"
        );
    }

    let config = td.file("config.toml", "[sandbox]\nmode = \"off\"\n");
    let output = td
        .bare()
        .args(["sandbox", "--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.starts_with("sandbox: off"), "{text}");
}

#[test]
fn bench_sandbox_prints_medians_and_ratios() {
    if !sandbox_present() {
        return;
    }
    let td = Td::new();
    let output = td
        .bare()
        .args(["bench", "sandbox", "--reps", "3"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(line["bench"], "sandbox");
    for key in [
        "plain_us_median",
        "read_only_us_median",
        "workspace_us_median",
        "read_only_ratio",
        "workspace_ratio",
    ] {
        assert!(line[key].as_f64().is_some_and(|v| v > 0.0), "{key}: {line}");
    }
}
