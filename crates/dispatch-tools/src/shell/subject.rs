//! What a command call touches ([`Subject`]), for run_command and background_command: the
//! argv, the files it names, the variables it sets, and whether it only reads.

use std::path::Path;

use dispatch_engine::subject::resolve_path;
use dispatch_engine::{Access, Subject};
use serde_json::Value;

use super::readonly::{ReadOnlyCommands, judge};

/// The parts of a command call that decide its subject, read leniently: the gate sees the
/// arguments before schema validation.
pub struct CommandCall<'a> {
    pub argv: Vec<&'a str>,
    pub cwd: Option<&'a str>,
    pub shell: bool,
    pub network: bool,
    pub env: Vec<String>,
    pub write_paths: Vec<&'a str>,
}

impl<'a> CommandCall<'a> {
    /// `None` when `args` is not an object with an argv of strings.
    pub fn from_args(args: &'a Value) -> Option<CommandCall<'a>> {
        let strings = |key: &str| -> Option<Vec<&'a str>> {
            match args.get(key) {
                None | Some(Value::Null) => Some(Vec::new()),
                Some(Value::Array(items)) => items.iter().map(Value::as_str).collect(),
                Some(_) => None,
            }
        };
        let argv = strings("argv")?;
        let mut env: Vec<String> = match args.get("env") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Object(map)) => map.keys().cloned().collect(),
            Some(_) => return None,
        };
        env.extend(strings("pass_env")?.into_iter().map(str::to_string));
        let flag = |key: &str| args.get(key).and_then(Value::as_bool).unwrap_or(false);
        Some(CommandCall {
            argv,
            cwd: args.get("cwd").and_then(Value::as_str),
            shell: flag("shell"),
            network: flag("network"),
            env,
            write_paths: strings("write_paths")?,
        })
    }

    /// The subject, and whether the command only reads (it then runs in the read-only
    /// sandbox). `sandbox_missing` is why no OS sandbox can hold a wrong judgement, if so.
    pub fn subject(
        &self,
        name: &str,
        workdir: &Path,
        extra: &ReadOnlyCommands,
        sandbox_missing: Option<&str>,
    ) -> (Subject, bool) {
        let cwd = match self.cwd.map(str::trim) {
            None | Some("") => workdir.to_path_buf(),
            Some(dir) => resolve_path(workdir, dir),
        };
        let argv: Vec<String> = self.argv.iter().map(|s| s.to_string()).collect();
        if !cwd.starts_with(workdir) {
            // The tool refuses a cwd outside the work directory before anything starts, with
            // a message the model can act on; asking the user first would only delay that.
            return (Subject::new(Access::Reads).argv(argv), false);
        }
        let judgement = if self.shell {
            Default::default()
        } else {
            judge(&argv, &cwd, workdir, extra)
        };
        let mut subject = Subject::new(Access::Changes)
            .argv(argv)
            .env(self.env.iter().cloned())
            .path(cwd.clone())
            .paths(judgement.paths)
            .paths(self.write_paths.iter().map(|p| resolve_path(workdir, p)));
        let mut read_only = judgement.read_only && self.write_paths.is_empty();
        if self.shell {
            subject = subject.always_ask(format!(
                "{name} runs a shell command line, which cannot be judged by its words (always asks)"
            ));
        } else if self.network {
            subject = subject.always_ask(format!(
                "{name} asks for network access (network: true always asks)"
            ));
            read_only = false;
        }
        if read_only {
            match sandbox_missing {
                None => subject.access = Access::Reads,
                Some(why) => {
                    subject = subject.why(format!(
                        "{name} only reads, but no OS sandbox is available here to hold it to that ({why}), so it asks"
                    ));
                }
            }
        }
        if !self.write_paths.is_empty() {
            subject = subject.why(format!(
                "{name} may write in the work directory and in {}",
                self.write_paths.join(", ")
            ));
        }
        (subject, read_only && sandbox_missing.is_none())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn subject(args: Value) -> (Subject, bool) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        CommandCall::from_args(&args).unwrap().subject(
            "run_command",
            &root,
            &ReadOnlyCommands::default(),
            None,
        )
    }

    #[test]
    fn env_shell_and_network_are_declared() {
        let (s, ro) = subject(
            json!({"argv": ["ls"], "env": {"GIT_CONFIG_COUNT": "1"}, "pass_env": ["TOKEN"]}),
        );
        assert_eq!(s.env, vec!["GIT_CONFIG_COUNT", "TOKEN"]);
        assert!(ro, "ls reads; the gate asks for the variables");
        let (s, ro) = subject(json!({"argv": ["ls"], "network": true}));
        assert!(s.always_ask.is_some() && !ro);
        let (s, ro) = subject(json!({"argv": ["ls"], "shell": true}));
        assert!(s.always_ask.is_some() && !ro);
    }

    #[test]
    fn no_sandbox_makes_reads_ask() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let args = json!({"argv": ["ls"]});
        let (s, ro) = CommandCall::from_args(&args).unwrap().subject(
            "run_command",
            &root,
            &ReadOnlyCommands::default(),
            Some("bubblewrap is not installed"),
        );
        assert_eq!(s.access, Access::Changes);
        assert!(!ro);
        assert!(s.why.unwrap().contains("bubblewrap is not installed"));
    }
}
