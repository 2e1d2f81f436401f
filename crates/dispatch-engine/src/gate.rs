//! The confirm gate: whether a call may run, must be asked about, or is refused
//! (spec §6 order, DESIGN §3.11 and §4.4), and the `Confirmer` that answers the asking.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::rules::{Rule, RuleCall, RuleKind, Rules, shown_path};
use crate::sensitive::is_sensitive_path;
use crate::spec::{Gate, ToolSpec};
use crate::subject::{Access, Subject};

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
    /// The session the round works for, when not `session` (a subagent leg's parent session).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_session: Option<String>,
}

impl ConfirmRequest {
    /// The call belongs to `session`, or works for it (a subagent leg of `session`).
    pub fn concerns(&self, session: &str) -> bool {
        self.session == session || self.parent_session.as_deref() == Some(session)
    }
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
    /// The work directory, to show paths in rules relative to it.
    pub workdir: PathBuf,
    /// Paths no call may touch without asking, even under "allow for this turn": the data
    /// directory, the store and its key, the work directory's `.tooldispatch/` (resolved).
    pub protected: Vec<PathBuf>,
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
    /// Decide from what the call touches (its [`Subject`]), in order: deny rule → run
    /// allow-all → interactive → sensitive or protected path → a stored secret sent without an
    /// allow rule → turn allow-all → destroys → always-ask (shell line, network) → ask rule →
    /// environment not named by an allow rule → reads → allow rule → ask.
    pub fn evaluate(
        &self,
        spec: &ToolSpec,
        subject: &Subject,
        secrets: &[String],
        args: &Value,
        raw: &str,
        permission: Permission,
    ) -> Verdict {
        let name = spec.name.as_str();
        // Most work directories have no rules: skip building the match texts then.
        let call = if self.rules.rules().is_empty() {
            RuleCall::default()
        } else {
            RuleCall::new(subject, &self.workdir, args, raw)
        };
        if let Some(rule) = self.rules.find(RuleKind::Deny, name, &call) {
            return Verdict::Deny { rule: rule.clone() };
        }
        if permission.run_allow_all || spec.gate == Gate::Interactive {
            return Verdict::Run;
        }
        if let Some(path) = subject
            .paths
            .iter()
            .find(|p| is_sensitive_path(&p.to_string_lossy()))
        {
            return Verdict::Ask {
                why: format!(
                    "{name} touches the sensitive path {} (keys and credentials always ask)",
                    shown_path(path, &self.workdir)
                ),
            };
        }
        if let Some(path) = subject
            .paths
            .iter()
            .find(|p| self.protected.iter().any(|guarded| p.starts_with(guarded)))
        {
            return Verdict::Ask {
                why: format!(
                    "{name} touches {}, which holds tooldispatch's own rules, store or keys (always asks)",
                    shown_path(path, &self.workdir)
                ),
            };
        }
        // A stored secret leaves only where the user said it may go: an allow rule for this
        // call (`allow http_request(https://api.github.com/**)`) or their approval now. Else
        // `{{secret:NAME}}` in a GET to any host would hand the secret to whoever runs it.
        if let Some(secret) = secrets.first()
            && self.rules.find(RuleKind::Allow, name, &call).is_none()
        {
            let target = match subject.urls.first() {
                Some(url) => shown_target(url),
                None => name.to_string(),
            };
            return Verdict::Ask {
                why: format!(
                    "{name} sends the stored secret {secret} to {target} (a secret goes only where a rule in .tooldispatch/rules or the user allows)"
                ),
            };
        }
        if permission.turn_allow_all {
            return Verdict::Run;
        }
        if subject.access == Access::Destroys {
            return Verdict::Ask {
                why: subject
                    .why
                    .clone()
                    .unwrap_or_else(|| format!("{name} removes or overwrites files (always asks)")),
            };
        }
        if let Some(why) = &subject.always_ask {
            return Verdict::Ask { why: why.clone() };
        }
        if let Some(rule) = self.rules.find(RuleKind::Ask, name, &call) {
            return Verdict::Ask {
                why: format!("the rule `{}` asks for it", rule.text),
            };
        }
        // Variables such as LD_PRELOAD or GIT_CONFIG_* make a program run other code, and
        // passing one through is a decision for the user: only a rule that names them allows.
        if !subject.env.is_empty() {
            return match self.rules.find(RuleKind::Allow, name, &call) {
                Some(_) => Verdict::Run,
                None => Verdict::Ask {
                    why: format!(
                        "{name} sets or passes the environment variables {}, which can change what the program runs (an allow rule must name them: `allow {name}(…) env({})`)",
                        subject.env.join(", "),
                        subject.env.join(" ")
                    ),
                },
            };
        }
        if subject.access == Access::Reads {
            return Verdict::Run;
        }
        if self.rules.find(RuleKind::Allow, name, &call).is_some() {
            return Verdict::Run;
        }
        Verdict::Ask {
            why: subject.why.clone().unwrap_or_else(|| {
                format!(
                    "{name} can change things and no rule in .tooldispatch/rules allows this call"
                )
            }),
        }
    }
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
