//! Detection, stopping, the process limit under a real fork bomb, and cleanup.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dispatch_sandbox::{Availability, Level, Limits, Mode, Sandbox};

use super::fixture::{Fixture, processes_with, run, sandbox, which};

#[test]
fn off_mode_is_off_and_refuses_to_wrap() {
    let off = Sandbox::detect(Mode::Off);
    assert_eq!(off.availability(), &Availability::Off);
    assert!(!off.available());
    let f = Fixture::new();
    let err = off
        .wrap(
            &f.policy(Level::ReadOnly),
            &which("true").unwrap(),
            &[],
            &f.work,
        )
        .unwrap_err();
    assert!(err.to_string().contains("mode = \"off\""), "{err}");
}

#[test]
fn detection_names_the_mechanism_and_its_limits() {
    let Some(sandbox) = sandbox() else { return };
    let Availability::Available { mechanism, details } = sandbox.availability() else {
        unreachable!()
    };
    assert!(mechanism.starts_with("bubblewrap (/"), "{mechanism}");
    assert!(
        details.iter().any(|d| d.contains("process limit")),
        "{details:?}"
    );
    let f = Fixture::new();
    let text = sandbox.describe(&f.policy(Level::Workspace));
    assert!(text.contains("sandbox: available"), "{text}");
    assert!(
        text.contains(&f.home.join(".ssh").display().to_string()),
        "{text}"
    );
    assert!(text.contains("(missing)"), "{text}");
}

#[test]
fn stopping_the_group_stops_everything_inside() {
    let Some(sandbox) = sandbox() else { return };
    let f = Fixture::new();
    let policy = f.policy(Level::Workspace);
    let marker = format!("301.{}", std::process::id());
    let script =
        format!("sleep {marker} & sleep {marker} & setsid sleep {marker} & sleep {marker}");
    let wrapped = sandbox
        .wrap(
            &policy,
            &which("sh").unwrap(),
            &["-c".into(), script.into()],
            &f.work,
        )
        .unwrap();
    let mut child = Command::new(&wrapped.program)
        .args(&wrapped.args)
        .process_group(0)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while processes_with(&format!("sleep {marker}")).len() < 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(processes_with(&format!("sleep {marker}")).len() >= 4);
    // What process.rs's Group does: SIGTERM to the group of the outer process.
    let pgid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process_group(pgid, rustix::process::Signal::TERM).unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !processes_with(&format!("sleep {marker}")).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        processes_with(&format!("sleep {marker}")),
        Vec::<i32>::new()
    );
    let dir = wrapped.cgroup.as_ref().map(|g| g.dir().to_path_buf());
    drop(wrapped);
    if let Some(dir) = dir {
        let deadline = Instant::now() + Duration::from_secs(5);
        while dir.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!dir.exists(), "cgroup {} left behind", dir.display());
    }
}

#[test]
fn a_timeout_kill_leaves_nothing_running() {
    let Some(sandbox) = sandbox() else { return };
    let f = Fixture::new();
    let marker = format!("302.{}", std::process::id());
    let outcome = run(
        sandbox,
        &f.policy(Level::ReadOnly),
        &[
            "sh".into(),
            "-c".into(),
            format!("sleep {marker} & sleep {marker}"),
        ],
        &[],
        None,
        Duration::from_millis(500),
    );
    assert!(outcome.timed_out);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !processes_with(&format!("sleep {marker}")).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        processes_with(&format!("sleep {marker}")),
        Vec::<i32>::new()
    );
}

/// Bounded first: if the limit did not hold, this one still ends by itself. Only then the real
/// (unbounded) bomb, under a short timeout.
#[test]
fn fork_bombs_are_contained_and_the_machine_stays_usable() {
    let Some(sandbox) = sandbox() else { return };
    if !sandbox.limits_processes() {
        dispatch_testkit::skipped("no process limit on this machine");
        return;
    }
    let limits = Limits {
        processes: 64,
        ..Limits::default()
    };
    let f = Fixture::new();
    let mut policy = f.policy(Level::Workspace);
    policy.limits = limits;
    let marker = format!("303.{}", std::process::id());
    let bounded = run(
        sandbox,
        &policy,
        &[
            "sh".into(),
            "-c".into(),
            format!("i=0; while [ $i -lt 2000 ]; do sleep {marker} & i=$((i+1)); done; wait"),
        ],
        &[],
        None,
        Duration::from_secs(60),
    );
    assert!(!bounded.timed_out, "{bounded:#?}");
    let note = bounded.note.clone().unwrap_or_default();
    assert!(note.contains("limit of 64 processes"), "{bounded:#?}");
    assert!(processes_with(&format!("sleep {marker}")).is_empty());

    let bomb_marker = format!("bomb-{}", std::process::id());
    let started = Instant::now();
    let unbounded = run(
        sandbox,
        &policy,
        &[
            "sh".into(),
            "-c".into(),
            format!("b() {{ b | b & }}; b; exec sleep 3 # {bomb_marker}"),
        ],
        &[],
        None,
        Duration::from_secs(5),
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{unbounded:#?}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !processes_with(&bomb_marker).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(processes_with(&bomb_marker), Vec::<i32>::new());
    // The machine still starts processes.
    assert!(
        Command::new(which("true").unwrap())
            .status()
            .unwrap()
            .success()
    );
}
