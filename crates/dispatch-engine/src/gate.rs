//! The confirm gate: whether a call may run, must be asked about, or is refused
//! (spec §6 order, DESIGN §3.11 and §4.4), and the `Confirmer` that answers the asking.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::rules::{Rule, RuleKind, Rules, rule_subject};
use crate::sensitive::{ReadOnlyCommands, is_read_only_command, is_sensitive_path, path_args};
use crate::spec::{Gate, ToolSpec};

/// How long a confirmation may wait for an answer before the call is declined.
pub const CONFIRM_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// A question to the user about one call.
#[derive(Clone, Debug, Serialize)]
pub struct ConfirmRequest {
    pub session: String,
    pub run: String,
    pub tool_id: String,
    pub tool_name: String,
    pub tool_args: Arc<str>,
    /// Why this call needs approval, in words the user can judge.
    pub why: String,
    /// The rule that approving with "remember" writes to `.tooldispatch/rules`.
    pub remember_rule: String,
}

/// The user's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfirmReply {
    pub approve: bool,
    #[serde(default)]
    pub reason: Option<String>,
    /// Write the generalised allow rule so the same kind of call is not asked again.
    #[serde(default)]
    pub remember: bool,
    /// Approve every further call of this run (sensitive paths still ask).
    #[serde(default)]
    pub allow_turn: bool,
}

/// One question for the user: an item of ask_user's `questions`, or store_secret's prompt.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Question {
    pub question: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Choices to offer; the answer may still be free text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub multi_select: bool,
    /// Read without echo, and never shown or stored as typed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub secret: bool,
}

/// Whoever answers confirmations: a terminal, an HTTP client, a policy.
#[async_trait]
pub trait Confirmer: Send + Sync {
    async fn confirm(&self, request: &ConfirmRequest) -> ConfirmReply;
    /// Ask the user these questions now, one answer per question in order; `None` when no
    /// one answered (then ask_user and store_secret park the run instead, or fail).
    async fn ask(&self, _questions: &[Question]) -> Option<Vec<String>> {
        None
    }
    /// Someone can answer questions right now, so ask_user runs inline instead of parking the run.
    fn interactive(&self) -> bool {
        false
    }
    /// Someone (or a policy) would answer this request; when false the call is declined without
    /// asking. An HTTP daemon answers only for sessions a client is watching.
    fn available(&self, _request: &ConfirmRequest) -> bool {
        true
    }
    /// Why no one could approve, when `available` says so; the model and the user read it.
    fn unavailable_reason(&self) -> &str {
        HEADLESS_REASON
    }
}

/// Nobody is attached: decline with a reason the model can act on.
pub struct Headless;

/// The reason a headless decline gives.
pub const HEADLESS_REASON: &str = "no one is available to approve it (the dispatcher runs without a confirmer; the user can allow such calls with a rule in .tooldispatch/rules or --approve)";

#[async_trait]
impl Confirmer for Headless {
    async fn confirm(&self, _request: &ConfirmRequest) -> ConfirmReply {
        ConfirmReply {
            approve: false,
            reason: Some(HEADLESS_REASON.into()),
            ..ConfirmReply::default()
        }
    }
    fn available(&self, _request: &ConfirmRequest) -> bool {
        false
    }
}

/// Approve everything that asks (`--approve all`). Deny rules still refuse.
pub struct ApproveAll;

#[async_trait]
impl Confirmer for ApproveAll {
    async fn confirm(&self, _request: &ConfirmRequest) -> ConfirmReply {
        ConfirmReply {
            approve: true,
            ..ConfirmReply::default()
        }
    }
}

/// The gate's decision about one call.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    Run,
    Ask { why: String },
    Deny { rule: Rule },
}

/// What the gate consults besides the call.
#[derive(Clone, Debug, Default)]
pub struct GatePolicy {
    pub rules: Rules,
    pub read_only_commands: ReadOnlyCommands,
}

/// A `mode` of list, read or search runs without asking (seed §6), but only when the tool's
/// schema offers that mode: a tool that does not know `mode` would ignore it and do its usual,
/// possibly destructive, work.
fn reading_mode(spec: &ToolSpec, mode: &str) -> bool {
    matches!(mode, "list" | "read" | "search")
        && spec
            .parameters
            .pointer("/properties/mode/enum")
            .and_then(Value::as_array)
            .is_some_and(|modes| modes.iter().any(|m| m.as_str() == Some(mode)))
}

/// Flags of the run that bypass asking.
#[derive(Clone, Copy, Debug, Default)]
pub struct Permission {
    /// The whole run is allowed (`allow_all`): only deny rules still refuse.
    pub run_allow_all: bool,
    /// The user approved "allow for this turn": only sensitive paths still ask.
    pub turn_allow_all: bool,
}

impl GatePolicy {
    /// Decide, in order: deny rule → run allow-all → interactive → sensitive path → a stored
    /// secret sent without an allow rule → turn allow-all → destructive → `shell: true` → ask rule → read-only → list/read/search mode →
    /// GET → read-only command (without `env`/`pass_env`) → allow rule → ask.
    pub fn evaluate(
        &self,
        spec: &ToolSpec,
        args: &Value,
        raw: &str,
        permission: Permission,
    ) -> Verdict {
        let name = spec.name.as_str();
        // Most work directories have no rules: skip building the match text then.
        let subject = if self.rules.rules().is_empty() {
            String::new()
        } else {
            rule_subject(args, raw)
        };
        if let Some(rule) = self.rules.find(RuleKind::Deny, name, &subject) {
            return Verdict::Deny { rule: rule.clone() };
        }
        if permission.run_allow_all || spec.gate == Gate::Interactive {
            return Verdict::Run;
        }
        if let Some(path) = path_args(args).into_iter().find(|p| is_sensitive_path(p)) {
            return Verdict::Ask {
                why: format!(
                    "{name} touches the sensitive path {path} (keys and credentials always ask)"
                ),
            };
        }
        // A stored secret leaves only where the user said it may go: an allow rule for this
        // call (`allow http_request(https://api.github.com/**)`) or their approval now. Else
        // `{{secret:NAME}}` in a GET to any host would hand the secret to whoever runs it.
        if let Some(secret) = secret_reference(raw)
            && self.rules.find(RuleKind::Allow, name, &subject).is_none()
        {
            let target = args
                .get("url")
                .and_then(Value::as_str)
                .map_or_else(|| name.to_string(), shown_target);
            return Verdict::Ask {
                why: format!(
                    "{name} sends the stored secret {secret} to {target} (a secret goes only where a rule in .tooldispatch/rules or the user allows)"
                ),
            };
        }
        if permission.turn_allow_all {
            return Verdict::Run;
        }
        let mode = args.get("mode").and_then(Value::as_str).map(str::trim);
        if spec.gate == Gate::Destructive || matches!(mode, Some("remove" | "restore")) {
            return Verdict::Ask {
                why: format!("{name} removes or overwrites files (always asks)"),
            };
        }
        // A shell command line cannot be judged by its words (`ls; rm -rf x`), so no read-only
        // list or allow rule lets it through.
        if args.get("shell").and_then(Value::as_bool) == Some(true) {
            return Verdict::Ask {
                why: format!("{name} runs a shell command line (always asks)"),
            };
        }
        if let Some(rule) = self.rules.find(RuleKind::Ask, name, &subject) {
            return Verdict::Ask {
                why: format!("the rule `{}` asks for it", rule.text),
            };
        }
        let allowed_by_kind = match spec.gate {
            Gate::ReadOnly | Gate::Interactive => true,
            Gate::AskUnlessGet => match args.get("method").and_then(Value::as_str) {
                None => true,
                Some(m) => m.trim().is_empty() || m.trim().eq_ignore_ascii_case("get"),
            },
            Gate::AskUnlessReadOnlyCommand => {
                let argv: Vec<String> = args
                    .get("argv")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                let network = args
                    .get("network")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                // Variables such as LD_PRELOAD or GIT_EXTERNAL_DIFF make a listed command run
                // other code, and passing a secret through is a decision for the user.
                let sets_env = ["env", "pass_env"].iter().any(|key| match args.get(*key) {
                    None | Some(Value::Null) => false,
                    Some(Value::Object(map)) => !map.is_empty(),
                    Some(Value::Array(items)) => !items.is_empty(),
                    Some(_) => true,
                });
                let cwd = args.get("cwd").and_then(Value::as_str);
                !sets_env && is_read_only_command(&argv, network, cwd, &self.read_only_commands)
            }
            Gate::AskWith(keys) => keys
                .iter()
                .all(|key| matches!(args.get(*key), None | Some(Value::Null))),
            Gate::Ask | Gate::Destructive => false,
        };
        if allowed_by_kind || mode.is_some_and(|m| reading_mode(spec, m)) {
            return Verdict::Run;
        }
        if self.rules.find(RuleKind::Allow, name, &subject).is_some() {
            return Verdict::Run;
        }
        Verdict::Ask {
            why: format!(
                "{name} can change things and no rule in .tooldispatch/rules allows this call"
            ),
        }
    }
}

/// The first `{{secret:NAME}}` the arguments use, as `NAME`.
fn secret_reference(raw: &str) -> Option<&str> {
    let start = raw.find("{{secret:")? + "{{secret:".len();
    let len = raw[start..].find("}}")?;
    Some(raw[start..start + len].trim())
}

/// Where a URL goes, for a prompt: its scheme and host (the path may be long and is in the
/// arguments shown beside it).
fn shown_target(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let host = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    let scheme = url.split_once("://").map_or("", |(s, _)| s);
    if scheme.is_empty() {
        host.to_string()
    } else {
        format!("{scheme}://{host}")
    }
}
