//! Malformed and malicious arguments for run_command and background_command: each gets a clear
//! refusal, and nothing outside the temp directories changes. The calls are approved (ApproveAll),
//! so every refusal here is the schema's or the tool's own, not the confirm gate's.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use dispatch_engine::{ApproveAll, Status};
use pretty_assertions::assert_eq;
use serde_json::{Map, Value, json};

use crate::test_support::*;

struct Case {
    name: &'static str,
    tool: &'static str,
    args: Value,
    status: Status,
    says: &'static str,
}

fn case(
    name: &'static str,
    tool: &'static str,
    args: Value,
    status: Status,
    says: &'static str,
) -> Case {
    Case {
        name,
        tool,
        args,
        status,
        says,
    }
}

/// Every file and directory under `dir`, relative.
fn tree(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            out.insert(path.strip_prefix(dir).unwrap().display().to_string());
            if path.is_dir() && !path.is_symlink() {
                stack.push(path);
            }
        }
    }
    out
}

#[tokio::test]
async fn hostile_arguments_are_refused_clearly_and_touch_nothing_outside() {
    let h = Harness::with_confirmer(Arc::new(ApproveAll));
    h.select("s", "run_command,background_command").await;
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("canary.txt"), "keep").unwrap();
    let out_dir = outside.path().canonicalize().unwrap();
    let pwned = |n: u32| out_dir.join(format!("pwned{n}")).display().to_string();
    let root = h.root();
    std::os::unix::fs::symlink(&out_dir, root.join("link-out")).unwrap();
    std::fs::write(root.join("a-file"), "").unwrap();
    std::fs::create_dir(root.join(".tooldispatch")).unwrap();
    let workdir_before = tree(&root);

    let many_env: Map<String, Value> = (0..65).map(|i| (format!("V{i}"), json!("x"))).collect();
    let cases = vec![
        // argv
        case(
            "empty argv",
            "run_command",
            json!({"argv": []}),
            Status::Invalid,
            "less than 1 item",
        ),
        case(
            "no argv",
            "run_command",
            json!({"cwd": "."}),
            Status::Invalid,
            "missing required field(s) argv",
        ),
        case(
            "argv as a string",
            "run_command",
            json!({"argv": format!("touch {}", pwned(1))}),
            Status::Invalid,
            "not of type \"array\"",
        ),
        case(
            "argv of numbers",
            "run_command",
            json!({"argv": [1, 2]}),
            Status::Invalid,
            "not of type \"string\"",
        ),
        case(
            "empty program",
            "run_command",
            json!({"argv": ["", pwned(2)]}),
            Status::Failed,
            "argv[0] is empty",
        ),
        case(
            "NUL in the program",
            "run_command",
            json!({"argv": ["touch\u{0}", pwned(3)]}),
            Status::Failed,
            "argv[0] contains a NUL byte",
        ),
        case(
            "NUL in an argument",
            "run_command",
            json!({"argv": ["touch", format!("{}\u{0}x", pwned(4))]}),
            Status::Failed,
            "argv[1] contains a NUL byte",
        ),
        case(
            "300 arguments",
            "run_command",
            json!({"argv": vec!["touch"; 300]}),
            Status::Failed,
            "argv has 300 items, over the limit of 256",
        ),
        case(
            "a 40 KB argument",
            "run_command",
            json!({"argv": ["touch", "x".repeat(40_000)]}),
            Status::Failed,
            "argv[1] is 40000 bytes, over the limit of 32768",
        ),
        case(
            "300 KB of arguments",
            "run_command",
            json!({"argv": std::iter::once("touch".to_string()).chain((0..10).map(|_| "y".repeat(30_000))).collect::<Vec<_>>()}),
            Status::Failed,
            "over the limit of 262144",
        ),
        case(
            "a shell line as argv[0]",
            "run_command",
            json!({"argv": [format!("touch {}", pwned(5))]}),
            Status::Failed,
            "contains spaces, but no shell splits it",
        ),
        case(
            "leading space in the program",
            "run_command",
            json!({"argv": [" touch", pwned(6)]}),
            Status::Failed,
            "contains spaces",
        ),
        // cwd
        case(
            "cwd ..",
            "run_command",
            json!({"argv": ["touch", "pwned7"], "cwd": "../"}),
            Status::Failed,
            "outside the work directory",
        ),
        case(
            "absolute cwd outside",
            "run_command",
            json!({"argv": ["touch", "pwned8"], "cwd": out_dir.display().to_string()}),
            Status::Failed,
            "outside the work directory",
        ),
        case(
            "cwd through a symlink out",
            "run_command",
            json!({"argv": ["touch", "pwned9"], "cwd": "link-out"}),
            Status::Failed,
            "outside the work directory",
        ),
        case(
            "cwd ~",
            "run_command",
            json!({"argv": ["touch", "pwned10"], "cwd": "~"}),
            Status::Failed,
            "`~` is not expanded",
        ),
        case(
            "cwd is a file",
            "run_command",
            json!({"argv": ["touch", "pwned11"], "cwd": "a-file"}),
            Status::Failed,
            "is a file, not a directory",
        ),
        case(
            "cwd on the denied list",
            "run_command",
            json!({"argv": ["touch", "rules"], "cwd": ".tooldispatch"}),
            Status::Failed,
            "denied list",
        ),
        case(
            "cwd with NUL",
            "run_command",
            json!({"argv": ["touch", "pwned12"], "cwd": "a\u{0}b"}),
            Status::Failed,
            "NUL byte",
        ),
        case(
            "a 5000-byte cwd",
            "run_command",
            json!({"argv": ["touch", "pwned13"], "cwd": "d/".repeat(2500)}),
            Status::Failed,
            "over the limit of 4096",
        ),
        case(
            "cwd as a number",
            "run_command",
            json!({"argv": ["ls"], "cwd": 7}),
            Status::Invalid,
            "/cwd: 7 is not of type",
        ),
        // shell
        case(
            "shell with a list",
            "run_command",
            json!({"argv": ["touch", pwned(14)], "shell": true}),
            Status::Failed,
            "argv must be exactly one string",
        ),
        case(
            "shell with an empty line",
            "run_command",
            json!({"argv": ["  "], "shell": true}),
            Status::Failed,
            "shell command line is empty",
        ),
        case(
            "shell as a string",
            "run_command",
            json!({"argv": [format!("touch {}", pwned(15))], "shell": "yes"}),
            Status::Invalid,
            "/shell: \"yes\" is not of type",
        ),
        // env
        case(
            "env name with a dash",
            "run_command",
            json!({"argv": ["touch", pwned(16)], "env": {"BAD-NAME": "x"}}),
            Status::Failed,
            "env name \"BAD-NAME\" is not a valid variable name",
        ),
        case(
            "env name with a digit first",
            "run_command",
            json!({"argv": ["touch", pwned(17)], "env": {"1X": "x"}}),
            Status::Failed,
            "not a valid variable name",
        ),
        case(
            "empty env name",
            "run_command",
            json!({"argv": ["touch", pwned(18)], "env": {"": "x"}}),
            Status::Failed,
            "not a valid variable name",
        ),
        case(
            "env name with =",
            "run_command",
            json!({"argv": ["touch", pwned(19)], "env": {"A=B": "x"}}),
            Status::Failed,
            "not a valid variable name",
        ),
        case(
            "NUL in an env value",
            "run_command",
            json!({"argv": ["touch", pwned(20)], "env": {"X": "a\u{0}b"}}),
            Status::Failed,
            "env X contains a NUL byte",
        ),
        case(
            "65 env variables",
            "run_command",
            json!({"argv": ["touch", pwned(21)], "env": many_env}),
            Status::Failed,
            "env has 65 variables, over the limit of 64",
        ),
        case(
            "a 40 KB env value",
            "run_command",
            json!({"argv": ["touch", pwned(22)], "env": {"X": "v".repeat(40_000)}}),
            Status::Failed,
            "env X is 40000 bytes",
        ),
        case(
            "env as a list",
            "run_command",
            json!({"argv": ["touch", pwned(23)], "env": ["X=1"]}),
            Status::Invalid,
            "/env: [\"X=1\"] is not of type",
        ),
        case(
            "env value not a string",
            "run_command",
            json!({"argv": ["touch", pwned(24)], "env": {"X": 1}}),
            Status::Invalid,
            "not of type \"string\"",
        ),
        case(
            "pass every secret",
            "run_command",
            json!({"argv": ["touch", pwned(25)], "pass_env": ["*"]}),
            Status::Failed,
            "pass_env entry \"*\"",
        ),
        // timeouts and stdin
        case(
            "negative timeout",
            "run_command",
            json!({"argv": ["touch", pwned(26)], "timeout": -5}),
            Status::Invalid,
            "less than the minimum of 1",
        ),
        case(
            "zero timeout",
            "run_command",
            json!({"argv": ["touch", pwned(27)], "timeout": 0}),
            Status::Invalid,
            "less than the minimum of 1",
        ),
        case(
            "huge timeout",
            "run_command",
            json!({"argv": ["touch", pwned(28)], "timeout": 1_000_000_000_000u64}),
            Status::Invalid,
            "greater than the maximum of 1800",
        ),
        case(
            "fractional timeout",
            "run_command",
            json!({"argv": ["touch", pwned(29)], "timeout": 1.5}),
            Status::Invalid,
            "/timeout",
        ),
        case(
            "timeout as a string",
            "run_command",
            json!({"argv": ["touch", pwned(30)], "timeout": "10"}),
            Status::Invalid,
            "/timeout: \"10\" is not of type",
        ),
        case(
            "huge idle timeout",
            "run_command",
            json!({"argv": ["touch", pwned(31)], "idle_timeout": 99_999}),
            Status::Invalid,
            "greater than the maximum of 1800",
        ),
        case(
            "2 MB of stdin",
            "run_command",
            json!({"argv": ["touch", pwned(32)], "stdin": "s".repeat(2_000_000)}),
            Status::Failed,
            "stdin is 2000000 bytes, over the limit of 1048576",
        ),
        case(
            "an unknown field",
            "run_command",
            json!({"argv": ["touch", pwned(33)], "privileged": true}),
            Status::Invalid,
            "privileged",
        ),
        case(
            "arguments not an object",
            "run_command",
            json!(["touch", pwned(34)]),
            Status::Invalid,
            "arguments",
        ),
        // background_command
        case(
            "no mode",
            "background_command",
            json!({"argv": ["touch", pwned(35)]}),
            Status::Invalid,
            "missing required field(s) mode",
        ),
        case(
            "unknown mode",
            "background_command",
            json!({"mode": "destroy", "argv": ["touch", pwned(36)]}),
            Status::Invalid,
            "/mode",
        ),
        case(
            "start without argv",
            "background_command",
            json!({"mode": "start"}),
            Status::Failed,
            "mode=start needs argv",
        ),
        case(
            "start with an empty argv",
            "background_command",
            json!({"mode": "start", "argv": []}),
            Status::Failed,
            "argv is empty",
        ),
        case(
            "start with a cwd outside",
            "background_command",
            json!({"mode": "start", "argv": ["touch", "pwned37"], "cwd": "link-out"}),
            Status::Failed,
            "outside the work directory",
        ),
        case(
            "start with a shell list",
            "background_command",
            json!({"mode": "start", "argv": ["touch", pwned(38)], "shell": true}),
            Status::Failed,
            "exactly one string",
        ),
        case(
            "start with bad env",
            "background_command",
            json!({"mode": "start", "argv": ["touch", pwned(39)], "env": {"$X": "1"}}),
            Status::Failed,
            "not a valid variable name",
        ),
        case(
            "read without a job id",
            "background_command",
            json!({"mode": "read"}),
            Status::Failed,
            "mode=read needs job_id",
        ),
        case(
            "read an unknown job",
            "background_command",
            json!({"mode": "read", "job_id": "job-999999"}),
            Status::Failed,
            "no job \"job-999999\" in this session (this session has no jobs)",
        ),
        case(
            "a path as job id",
            "background_command",
            json!({"mode": "read", "job_id": "../../etc/passwd"}),
            Status::Failed,
            "no job \"../../etc/passwd\"",
        ),
        case(
            "a huge job id",
            "background_command",
            json!({"mode": "stop", "job_id": "j".repeat(10_000)}),
            Status::Failed,
            "job_id must be the id start returned",
        ),
        case(
            "stop an unknown job",
            "background_command",
            json!({"mode": "stop", "job_id": "job-0"}),
            Status::Failed,
            "no job \"job-0\"",
        ),
        case(
            "a command smuggled into a read",
            "background_command",
            json!({"mode": "read", "job_id": "job-1", "argv": ["touch", pwned(40)]}),
            Status::Failed,
            "argv is only used with mode=start, not mode=read",
        ),
        case(
            "a command smuggled into a list",
            "background_command",
            json!({"mode": "list", "argv": ["touch", pwned(41)]}),
            Status::Failed,
            "argv is only used with mode=start",
        ),
        case(
            "offset on start",
            "background_command",
            json!({"mode": "start", "argv": ["touch", pwned(42)], "offset": 3}),
            Status::Failed,
            "offset is only used with mode=read",
        ),
        case(
            "negative offset",
            "background_command",
            json!({"mode": "read", "job_id": "job-1", "offset": -1}),
            Status::Invalid,
            "/offset",
        ),
        case(
            "a long wait",
            "background_command",
            json!({"mode": "read", "job_id": "job-1", "wait": 1000}),
            Status::Invalid,
            "greater than the maximum of 60",
        ),
    ];
    assert!(cases.len() >= 25);

    let mut failures = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let out = h
            .round(
                "s",
                &format!("run-{i}"),
                vec![run_tool("c", c.tool, c.args.clone())],
            )
            .await;
        let r = &out.results[0];
        if r.status != c.status || !r.content.contains(c.says) {
            failures.push(format!(
                "{}: got {:?}: {}",
                c.name,
                r.status,
                &r.content[..r.content.len().min(400)]
            ));
        }
        // Every refusal tells the model something, and no result is huge.
        assert!(
            r.content.len() < 4000,
            "{}: {} bytes",
            c.name,
            r.content.len()
        );
    }
    assert_eq!(failures, Vec::<String>::new());
    assert_eq!(tree(&out_dir), BTreeSet::from(["canary.txt".to_string()]));
    assert_eq!(
        std::fs::read_to_string(out_dir.join("canary.txt")).unwrap(),
        "keep"
    );
    assert_eq!(tree(&root), workdir_before);
}
