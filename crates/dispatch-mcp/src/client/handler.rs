//! What a connected MCP server may send us: progress and list-changed notifications, and
//! requests for the user (elicitation), the work directory (roots) or a model (sampling).
//!
//! Calls to one server run one at a time (MCP tools are serial), so whatever arrives while a
//! call runs belongs to that call: its progress becomes the call's `ToolProgress` events and
//! its questions go to whoever answers for the call's session.

use std::sync::{Arc, Mutex};

use super::clip;
use dispatch_engine::{Confirmer, Progress, Question};
use rmcp::ClientHandler;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ErrorData, Implementation,
    ProgressNotificationParam, ProtocolVersion,
};
use rmcp::service::{NotificationContext, RequestContext, RoleClient};
use serde_json::{Map, Value, json};
use tokio::sync::Notify;

/// Progress events kept per call: a server that floods notifications must not flood the
/// session's event log and store.
const MAX_PROGRESS_EVENTS: usize = 500;
/// Least time between two progress events of one call (later ones in between are dropped;
/// the call is alive either way).
const PROGRESS_GAP: std::time::Duration = std::time::Duration::from_millis(20);
/// Questions a server may put to the user during one call.
const MAX_ELICITATIONS: usize = 5;
/// Fields of one form put to the user.
const MAX_FIELDS: usize = 10;

/// The call running on a server now, if any.
#[derive(Clone)]
pub(crate) struct CurrentCall {
    pub progress: Progress,
    pub user: Arc<dyn Confirmer>,
    pub seen: Arc<Mutex<Seen>>,
}

/// What a call has received so far.
#[derive(Default)]
pub(crate) struct Seen {
    progress_events: usize,
    last_progress: Option<std::time::Instant>,
    elicitations: usize,
}

impl CurrentCall {
    pub fn new(progress: Progress, user: Arc<dyn Confirmer>) -> Self {
        CurrentCall {
            progress,
            user,
            seen: Arc::default(),
        }
    }

    /// Whether this progress notification becomes an event (at most one per
    /// `PROGRESS_GAP`, `MAX_PROGRESS_EVENTS` in all; the last one says the rest is dropped).
    fn take_progress(&self) -> Option<bool> {
        let mut seen = self.seen.lock().ok()?;
        let now = std::time::Instant::now();
        if seen.progress_events >= MAX_PROGRESS_EVENTS
            || seen
                .last_progress
                .is_some_and(|last| now.duration_since(last) < PROGRESS_GAP)
        {
            return None;
        }
        seen.progress_events += 1;
        seen.last_progress = Some(now);
        Some(seen.progress_events == MAX_PROGRESS_EVENTS)
    }

    /// Keep the call from timing out for want of progress until the returned guard drops
    /// (while the user answers the server's questions).
    fn keep_alive(&self) -> KeepAlive {
        let progress = self.progress.clone();
        KeepAlive(tokio::spawn(async move {
            loop {
                progress.touch();
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
        }))
    }

    fn take_elicitation(&self) -> bool {
        let Ok(mut seen) = self.seen.lock() else {
            return false;
        };
        seen.elicitations += 1;
        seen.elicitations <= MAX_ELICITATIONS
    }
}

/// Stops touching a call's progress when dropped.
struct KeepAlive(tokio::task::JoinHandle<()>);

impl Drop for KeepAlive {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Shared between a server's connection and the handler of its messages.
#[derive(Default)]
pub(crate) struct Shared {
    pub current: Mutex<Option<CurrentCall>>,
    /// The server said its tool list changed.
    pub list_changed: Notify,
}

impl Shared {
    fn current(&self) -> Option<CurrentCall> {
        self.current.lock().ok().and_then(|c| c.clone())
    }
}

pub(crate) struct Handler {
    pub shared: Arc<Shared>,
    /// The server's name, so the user knows who asks.
    pub server: String,
    /// The work directory, offered as the one root.
    pub root_uri: String,
    /// Opening with `initialize` alone: offer the newest revision that has it.
    pub legacy: bool,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        // Built from JSON: the spec's shape, whatever fields the SDK's structs grow.
        let capabilities: ClientCapabilities = serde_json::from_value(
            json!({"roots": {"listChanged": false}, "elicitation": {"form": {}}}),
        )
        .unwrap_or_default();
        let mut config = ClientConfig::new(
            capabilities,
            Implementation::new("tooldispatch", env!("CARGO_PKG_VERSION")),
        );
        if self.legacy {
            config.protocol_version = ProtocolVersion::LATEST_WITH_INITIALIZE;
        }
        config
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let Some(call) = self.shared.current() else {
            return;
        };
        let Some(last) = call.take_progress() else {
            // Not shown, but the call is alive.
            call.progress.touch();
            return;
        };
        let amount = match params.total {
            Some(total) => format!("{}/{}", number(params.progress), number(total)),
            None => number(params.progress),
        };
        let mut line = match params.message.filter(|m| !m.trim().is_empty()) {
            Some(message) => format!("progress {amount}: {}\n", clip(&message, 500)),
            None => format!("progress {amount}\n"),
        };
        if last {
            line.push_str("(further progress of this call is not shown)\n");
        }
        call.progress.emit(line);
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.shared.list_changed.notify_one();
    }

    // Roots (and sampling) are deprecated in the newest revision but still asked for by
    // servers on older ones. Sampling keeps the SDK's answer, "method not found": tooldispatch
    // has no model of its own to lend.
    #[allow(deprecated)]
    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ListRootsResult, ErrorData> {
        serde_json::from_value(json!({"roots": [{"uri": self.root_uri, "name": "work directory"}]}))
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let request = serde_json::to_value(&request).unwrap_or(Value::Null);
        let reply = match self.shared.current() {
            Some(call) => elicit(&call, &self.server, &request).await,
            None => decline(),
        };
        serde_json::from_value(reply).map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }
}

/// `3` rather than `3.0`, `0.5` as it is.
fn number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

fn decline() -> Value {
    json!({"action": "decline"})
}

/// Ask the call's user the server's questions: one per field of the requested form, typed
/// back as the form's schema says. Declined when no one can answer now (headless), when the
/// user gives no answer, or for URL elicitation (tooldispatch opens no browser).
async fn elicit(call: &CurrentCall, server: &str, request: &Value) -> Value {
    let message = request
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("(no message)");
    let message = clip(message, 500);
    let message = message.as_str();
    if !call.take_elicitation() {
        call.progress.emit(format!(
            "the server asked the user again ({message}); declined: a server may ask at most {MAX_ELICITATIONS} questions per call\n"
        ));
        return decline();
    }
    if request.get("mode").and_then(Value::as_str) == Some("url") {
        call.progress.emit(format!(
            "the server asked the user to open a URL ({message}); declined: tooldispatch does not open URLs for servers\n"
        ));
        return decline();
    }
    if !call.user.interactive() {
        call.progress.emit(format!(
            "the server asked the user: {message}; declined: no one is available to answer\n"
        ));
        return decline();
    }
    let schema = request
        .get("requestedSchema")
        .cloned()
        .unwrap_or(Value::Null);
    let properties: Vec<(String, Value)> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    if properties.len() > MAX_FIELDS {
        call.progress.emit(format!(
            "the server asked the user to fill in {} fields; declined: at most {MAX_FIELDS} are put to the user\n",
            properties.len()
        ));
        return decline();
    }
    // The user must see who asks and where the answer goes: a server's form could pose as
    // tooldispatch or the assistant asking for a credential.
    let message = format!("The MCP server {server} asks: {message}");
    let message = message.as_str();
    // Waiting on the user is not the call going quiet.
    let _alive = call.keep_alive();
    let questions: Vec<Question> = if properties.is_empty() {
        vec![Question {
            question: message.to_string(),
            options: vec!["accept".into(), "decline".into()],
            ..Question::default()
        }]
    } else {
        properties
            .iter()
            .map(|(name, field)| field_question(message, name, field))
            .collect()
    };
    let Some(answers) = call.user.ask(&questions).await else {
        return decline();
    };
    if properties.is_empty() {
        let yes = answers.first().is_some_and(|a| {
            matches!(
                a.trim().to_lowercase().as_str(),
                "accept" | "yes" | "y" | "ok"
            )
        });
        return if yes {
            json!({"action": "accept", "content": {}})
        } else {
            decline()
        };
    }
    let mut content = Map::new();
    for ((name, field), answer) in properties.iter().zip(answers) {
        if let Some(value) = typed(field, &answer) {
            content.insert(name.clone(), value);
        }
    }
    json!({"action": "accept", "content": content})
}

fn field_question(message: &str, name: &str, field: &Value) -> Question {
    let title = clip(
        field.get("title").and_then(Value::as_str).unwrap_or(name),
        100,
    );
    let mut detail = clip(
        field
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or(""),
        500,
    );
    let kind = field
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("string");
    let options: Vec<String> = match field.get("enum").and_then(Value::as_array) {
        Some(values) => values
            .iter()
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
            .collect(),
        None if kind == "boolean" => vec!["true".into(), "false".into()],
        None => Vec::new(),
    };
    if kind == "number" || kind == "integer" {
        if !detail.is_empty() {
            detail.push(' ');
        }
        detail.push_str(&format!("(a {kind})"));
    }
    if !detail.is_empty() {
        detail.push(' ');
    }
    detail.push_str("(the answer goes to that MCP server)");
    Question {
        question: format!("{message} — {title}"),
        detail: Some(detail),
        options,
        ..Question::default()
    }
}

/// An answer typed as its field asks; an empty answer leaves an optional field out.
fn typed(field: &Value, answer: &str) -> Option<Value> {
    let answer = answer.trim();
    if answer.is_empty() {
        return None;
    }
    match field
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("string")
    {
        "boolean" => Some(Value::Bool(matches!(
            answer.to_lowercase().as_str(),
            "true" | "yes" | "y" | "1"
        ))),
        "integer" => answer.parse::<i64>().ok().map(Value::from),
        "number" => answer
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number),
        _ => Some(Value::String(answer.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_typed_as_the_form_asks() {
        assert_eq!(typed(&json!({"type": "boolean"}), "Yes"), Some(json!(true)));
        assert_eq!(typed(&json!({"type": "integer"}), "42"), Some(json!(42)));
        assert_eq!(typed(&json!({"type": "integer"}), "4.2"), None);
        assert_eq!(typed(&json!({"type": "number"}), "4.5"), Some(json!(4.5)));
        assert_eq!(
            typed(&json!({"type": "string"}), " blue "),
            Some(json!("blue"))
        );
        assert_eq!(typed(&json!({"type": "string"}), "  "), None);
    }

    #[test]
    fn progress_numbers_read_naturally() {
        assert_eq!(number(3.0), "3");
        assert_eq!(number(0.5), "0.5");
    }
}
