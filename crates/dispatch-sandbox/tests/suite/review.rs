//! The security review's findings against the sandbox, each with its payload.

use std::time::Duration;

use dispatch_sandbox::Level;

use super::fixture::{Fixture, run, sandbox};

fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| w.to_string()).collect()
}

/// A read-only mount does not stop connect(2) to a Unix socket: without the network, the
/// sockets under /run (databases, D-Bus, the name service) are not there at all.
#[test]
fn without_the_network_no_socket_under_run_is_reachable() {
    let Some(sandbox) = sandbox() else { return };
    let name = format!("/run/tooldispatch-test-{}.sock", std::process::id());
    let Ok(_listener) = std::os::unix::net::UnixListener::bind(&name) else {
        dispatch_testkit::skipped("cannot make a socket under /run as this user");
        return;
    };
    let f = Fixture::new();
    for level in [Level::ReadOnly, Level::Workspace] {
        let out = run(
            sandbox,
            &f.policy(level),
            &argv(&[
                "sh",
                "-c",
                &format!("test -e {name} && echo reachable || echo gone"),
            ]),
            &[],
            None,
            Duration::from_secs(30),
        );
        assert_eq!(out.stdout, "gone\n", "{level:?}: {out:#?}");
    }
    let mut networked = f.policy(Level::Workspace);
    networked.network = true;
    let out = run(
        sandbox,
        &networked,
        &argv(&[
            "sh",
            "-c",
            &format!("test -e {name} && echo reachable || echo gone"),
        ]),
        &[],
        None,
        Duration::from_secs(30),
    );
    assert_eq!(
        out.stdout, "reachable\n",
        "an approved network call keeps /run: {out:#?}"
    );
    let _ = std::fs::remove_file(&name);
}

/// A workspace command could create `.tooldispatch/rules` when the directory did not exist
/// yet, and so grant itself permissions in a trusted directory.
#[test]
fn a_missing_tooldispatch_dir_cannot_be_created_with_rules_in_it() {
    let Some(sandbox) = sandbox() else { return };
    let f = Fixture::new();
    std::fs::remove_dir_all(f.work.join(".tooldispatch")).unwrap();
    let out = run(
        sandbox,
        &f.policy(Level::Workspace),
        &argv(&[
            "sh",
            "-c",
            "mkdir -p .tooldispatch; echo 'allow run_command' > .tooldispatch/rules",
        ]),
        &[],
        None,
        Duration::from_secs(30),
    );
    assert_ne!(out.code(), Some(0), "{out:#?}");
    assert!(!f.work.join(".tooldispatch/rules").exists(), "{out:#?}");
}

/// A workspace command could plant `core.fsmonitor` or a hook in `.git`, which the user's
/// own git later runs outside any sandbox.
#[test]
fn git_config_and_hooks_stay_read_only_in_the_workspace() {
    let Some(sandbox) = sandbox() else { return };
    let f = Fixture::new();
    std::fs::create_dir_all(f.work.join(".git/hooks")).unwrap();
    std::fs::write(f.work.join(".git/config"), "[core]\n").unwrap();
    let out = run(
        sandbox,
        &f.policy(Level::Workspace),
        &argv(&[
            "sh",
            "-c",
            "echo '[core] fsmonitor = touch /tmp/x' >> .git/config; echo 'touch /tmp/x' > .git/hooks/pre-commit; echo ok > .git/HEAD_OK",
        ]),
        &[],
        None,
        Duration::from_secs(30),
    );
    assert_eq!(
        std::fs::read_to_string(f.work.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert!(!f.work.join(".git/hooks/pre-commit").exists(), "{out:#?}");
    // The rest of .git stays writable: commits, the index and refs work.
    assert!(f.work.join(".git/HEAD_OK").exists(), "{out:#?}");
}

/// A script tool's folder lives in tooldispatch's hidden config directory: shown read-only
/// at its own path inside the sandbox, it can be read and run there, but not changed, and
/// the rest of the hidden directory stays hidden.
#[test]
fn a_read_only_bind_shows_one_folder_of_a_hidden_directory_and_nothing_else() {
    let Some(sandbox) = sandbox() else { return };
    let f = Fixture::new();
    let tool = f.home.join(".config/tooldispatch/tools/count");
    std::fs::create_dir_all(&tool).unwrap();
    std::fs::write(tool.join("script.sh"), "echo counted\n").unwrap();
    for level in [Level::ReadOnly, Level::Workspace] {
        let mut policy = f.policy(level);
        policy
            .read_only_binds
            .push((tool.clone(), "/tmp/tooldispatch-tool".into()));
        let script = "sh /tmp/tooldispatch-tool/script.sh; \
             echo x > /tmp/tooldispatch-tool/script.sh && echo changed || echo kept; \
             cat \"$HOME/.config/tooldispatch/config.toml\" || echo config-hidden; \
             cat \"$0\" || echo tool-hidden-at-home";
        let out = run(
            sandbox,
            &policy,
            &argv(&[
                "sh",
                "-c",
                script,
                &tool.join("script.sh").display().to_string(),
            ]),
            &[],
            None,
            Duration::from_secs(30),
        );
        assert_eq!(
            out.stdout, "counted\nkept\nconfig-hidden\ntool-hidden-at-home\n",
            "{level:?}: {out:#?}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(tool.join("script.sh")).unwrap(),
        "echo counted\n"
    );
}
