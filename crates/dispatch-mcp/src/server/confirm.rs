//! Confirmations and ask_user for an MCP client: asked through `elicitation/create` when the
//! client declared the capability, else left to whoever answers without MCP (the headless
//! rule for `tooldispatch mcp`, the daemon's hub for `/mcp`).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use dispatch_engine::{ConfirmReply, ConfirmRequest, Confirmer, Question};
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::service::{ElicitationMode, Peer, RoleServer};
use serde_json::{Value, json};

/// Why a call that needs approval is declined when the MCP client cannot be asked.
pub const NO_ELICITATION_REASON: &str = "no one is available to approve it (this MCP client does not support elicitation, so tooldispatch cannot ask the user; the user can allow such calls with a rule in .tooldispatch/rules, or start `tooldispatch mcp` with --approve all)";

/// The headless rule with a reason that names what an MCP user can change.
pub struct NoElicitation;

#[async_trait]
impl Confirmer for NoElicitation {
    async fn confirm(&self, _request: &ConfirmRequest) -> ConfirmReply {
        ConfirmReply {
            approve: false,
            reason: Some(NO_ELICITATION_REASON.into()),
            ..ConfirmReply::default()
        }
    }
    fn available(&self, _request: &ConfirmRequest) -> bool {
        false
    }
    fn unavailable_reason(&self) -> &str {
        NO_ELICITATION_REASON
    }
}

/// Asks one MCP client's user through elicitation; `fallback` answers when the client has not
/// connected yet or did not declare elicitation.
pub struct Elicitation {
    /// Filled once the client has initialized (the engine is built before anyone connects).
    peer: Mutex<Option<Peer<RoleServer>>>,
    fallback: Arc<dyn Confirmer>,
}

impl Elicitation {
    pub fn new(fallback: Arc<dyn Confirmer>) -> Arc<Self> {
        Arc::new(Elicitation {
            peer: Mutex::new(None),
            fallback,
        })
    }

    /// The client to ask from now on (kept only when it declared form elicitation).
    pub fn connect(&self, peer: &Peer<RoleServer>) {
        let can_elicit = peer
            .supported_elicitation_modes()
            .contains(&ElicitationMode::Form);
        if let Ok(mut slot) = self.peer.lock() {
            *slot = can_elicit.then(|| peer.clone());
        }
    }

    /// The client, when it can be asked.
    fn peer(&self) -> Option<Peer<RoleServer>> {
        self.peer.lock().ok().and_then(|p| p.clone())
    }

    pub fn can_elicit(&self) -> bool {
        self.peer().is_some()
    }
}

/// The form a confirmation shows: no fields, the client's accept and decline buttons are the
/// answer. (An MCP client has no turn we can see, so there is no "allow for this turn".)
fn empty_form() -> Option<ElicitationSchema> {
    serde_json::from_value(json!({"type": "object", "properties": {}})).ok()
}

/// The message a confirmation shows the user: the call, its arguments and why it asks.
fn confirm_message(request: &ConfirmRequest) -> String {
    let mut args = request.tool_args.to_string();
    // Elicitation UIs show short text; the full arguments are in the client's tool call view.
    if args.len() > 2000 {
        let cut = (0..=2000)
            .rev()
            .find(|i| args.is_char_boundary(*i))
            .unwrap_or(0);
        args.truncate(cut);
        args.push_str(" …");
    }
    format!(
        "Allow {} to run?\n\nWhy it asks: {}\n\nArguments: {}",
        request.tool_name, request.why, args
    )
}

/// One string field per question, in order (`answer_1`, `answer_2`, …).
fn question_form(questions: &[Question]) -> Option<ElicitationSchema> {
    let mut properties = serde_json::Map::new();
    let mut required = Vec::new();
    for (i, q) in questions.iter().enumerate() {
        let key = format!("answer_{}", i + 1);
        let mut description = q.detail.clone().unwrap_or_default();
        if !q.options.is_empty() {
            if !description.is_empty() {
                description.push_str(" — ");
            }
            description.push_str(&format!("options: {}", q.options.join(", ")));
        }
        let mut field = json!({"type": "string", "title": q.question});
        if !description.is_empty() {
            field["description"] = Value::String(description);
        }
        properties.insert(key.clone(), field);
        required.push(Value::String(key));
    }
    serde_json::from_value(
        json!({"type": "object", "properties": properties, "required": required}),
    )
    .ok()
}

#[async_trait]
impl Confirmer for Elicitation {
    async fn confirm(&self, request: &ConfirmRequest) -> ConfirmReply {
        let (Some(peer), Some(form)) = (self.peer(), empty_form()) else {
            return self.fallback.confirm(request).await;
        };
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: confirm_message(request),
            requested_schema: form,
        };
        // The engine bounds the wait (its confirmation timeout) and drops this future when
        // the call is cancelled, which cancels the request to the client too.
        match peer.create_elicitation(params).await {
            Ok(result) if result.action == ElicitationAction::Accept => ConfirmReply {
                approve: true,
                ..ConfirmReply::default()
            },
            // Declined needs no reason: the engine says the user declined.
            Ok(result) => ConfirmReply {
                approve: false,
                reason: (result.action == ElicitationAction::Cancel)
                    .then(|| "they dismissed the approval request without answering".into()),
                ..ConfirmReply::default()
            },
            Err(e) => ConfirmReply {
                approve: false,
                reason: Some(format!("the MCP client could not ask the user ({e})")),
                ..ConfirmReply::default()
            },
        }
    }

    async fn ask(&self, questions: &[Question]) -> Option<Vec<String>> {
        // The MCP specification forbids asking for sensitive values through a form
        // elicitation: store_secret's value must come from the user's own terminal.
        if questions.is_empty() || questions.iter().any(|q| q.secret) {
            return self.fallback.ask(questions).await;
        }
        let Some(peer) = self.peer() else {
            return self.fallback.ask(questions).await;
        };
        let form = question_form(questions)?;
        let message = if questions.len() == 1 {
            questions[0].question.clone()
        } else {
            "The assistant has some questions for you.".to_string()
        };
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message,
            requested_schema: form,
        };
        let result = peer.create_elicitation(params).await.ok()?;
        if result.action != ElicitationAction::Accept {
            return None;
        }
        let content = result.content.unwrap_or(Value::Null);
        Some(
            (1..=questions.len())
                .map(|i| match content.get(format!("answer_{i}")) {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Null) | None => String::new(),
                    Some(other) => other.to_string(),
                })
                .collect(),
        )
    }

    fn interactive(&self) -> bool {
        self.can_elicit() || self.fallback.interactive()
    }

    fn available(&self, request: &ConfirmRequest) -> bool {
        self.can_elicit() || self.fallback.available(request)
    }

    fn unavailable_reason(&self) -> &str {
        self.fallback.unavailable_reason()
    }
}
