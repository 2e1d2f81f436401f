//! The typed events of a round (spec §11), each stamped with milliseconds since the round began.

use std::sync::{Arc, Mutex};

use dispatch_store::Todo;
use serde::Serialize;
use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::redact::Redactor;
use crate::status::Status;

/// One event: the fields of its kind plus `at_ms`, in one flat JSON object.
#[derive(Clone, Debug, Serialize)]
pub struct Event {
    #[serde(flatten)]
    pub kind: EventKind,
    /// Milliseconds since the round began (monotonic).
    pub at_ms: f64,
}

impl dispatch_store::EventJson for Event {
    /// The same JSON as `Serialize`, written without `#[serde(flatten)]`, which routes every
    /// field through serde's generic map machinery at several times the cost.
    fn to_json(&self) -> String {
        let mut text = serde_json::to_string(&self.kind).unwrap_or_else(|_| "{}".to_string());
        text.pop(); // the kind's closing brace
        if !text.ends_with('{') {
            text.push(',');
        }
        text.push_str("\"at_ms\":");
        text.push_str(&serde_json::to_string(&self.at_ms).unwrap_or_else(|_| "0".to_string()));
        text.push('}');
        text
    }

    fn for_each_text<'a>(&'a self, each: &mut dyn FnMut(&'a str)) {
        match &self.kind {
            EventKind::ToolCall { tool_args, .. } => each(tool_args),
            EventKind::ToolResult {
                tool_args, result, ..
            } => {
                each(tool_args);
                each(result);
            }
            EventKind::ToolProgress { text, .. } | EventKind::ToolCallText { text, .. } => {
                each(text);
            }
            EventKind::ToolSkipped {
                tool_args, text, ..
            }
            | EventKind::ToolConfirm {
                tool_args, text, ..
            } => {
                each(tool_args);
                each(text);
            }
            _ => {}
        }
    }
}

/// What happened.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type")]
pub enum EventKind {
    ToolCall {
        tool_id: Arc<str>,
        tool_name: Arc<str>,
        tool_args: Arc<str>,
    },
    ToolCallStart {
        tool_id: Arc<str>,
        tool_name: Arc<str>,
    },
    ToolProgress {
        tool_id: Arc<str>,
        tool_name: Arc<str>,
        text: String,
    },
    ToolCallText {
        tool_id: Arc<str>,
        tool_name: Arc<str>,
        text: String,
    },
    ToolCallEnd {
        tool_id: Arc<str>,
        tool_name: Arc<str>,
    },
    ToolResult {
        tool_id: Arc<str>,
        tool_name: Arc<str>,
        tool_args: Arc<str>,
        status: Status,
        result: String,
    },
    ToolSkipped {
        tool_id: Arc<str>,
        tool_name: Arc<str>,
        tool_args: Arc<str>,
        text: String,
    },
    ToolConfirm {
        tool_id: Arc<str>,
        tool_name: Arc<str>,
        tool_args: Arc<str>,
        /// Why the call needs approval.
        text: String,
        /// The rule "remember" would write.
        remember_rule: String,
    },
    TodoUpdate {
        todos: Vec<Todo>,
    },
    Pending {
        task_hash: String,
        pending_session: String,
        text: String,
    },
    ClientToolCall {
        client_tool_calls: Vec<serde_json::Value>,
    },
    Canceled {
        text: String,
    },
    Error {
        text: String,
    },
    /// The store works in a degraded way (the shared tier is unreachable and the local store
    /// serves the round, DESIGN §7); sent once per outage.
    StoreDegraded {
        text: String,
    },
    Done,
    /// The round's last event: what follows in a session's events log belongs to later
    /// rounds. Lets a reader of the log (the daemon's replay, a UI) tell rounds apart.
    RoundCommitted {
        run: String,
        round: u64,
    },
}

impl EventKind {
    /// Replace secret values in every text the event carries.
    fn redact(&mut self, r: &Redactor) {
        let arc = |text: &mut Arc<str>| {
            if let std::borrow::Cow::Owned(clean) = r.redact(text) {
                *text = Arc::from(clean);
            }
        };
        match self {
            EventKind::ToolCall { tool_args, .. } => arc(tool_args),
            EventKind::ToolProgress { text, .. }
            | EventKind::ToolCallText { text, .. }
            | EventKind::Canceled { text }
            | EventKind::Error { text }
            | EventKind::StoreDegraded { text }
            | EventKind::Pending { text, .. } => r.redact_in_place(text),
            EventKind::ToolResult {
                tool_args, result, ..
            } => {
                arc(tool_args);
                r.redact_in_place(result);
            }
            EventKind::ToolSkipped {
                tool_args, text, ..
            } => {
                arc(tool_args);
                r.redact_in_place(text);
            }
            EventKind::ToolConfirm {
                tool_args,
                text,
                remember_rule,
                ..
            } => {
                arc(tool_args);
                r.redact_in_place(text);
                r.redact_in_place(remember_rule);
            }
            EventKind::ClientToolCall { client_tool_calls } => {
                for call in client_tool_calls {
                    if let Some(serde_json::Value::String(args)) = call.get_mut("arguments") {
                        r.redact_in_place(args);
                    }
                }
            }
            EventKind::ToolCallStart { .. }
            | EventKind::ToolCallEnd { .. }
            | EventKind::TodoUpdate { .. }
            | EventKind::RoundCommitted { .. }
            | EventKind::Done => {}
        }
    }
}

/// Where a round's events go live, as they happen (a CLI watcher, the daemon's event stream).
/// Called in emission order, under the log's lock: it must not block.
pub trait EventSink: Send + Sync {
    fn send(&self, event: &Arc<Event>);
}

impl EventSink for broadcast::Sender<Arc<Event>> {
    fn send(&self, event: &Arc<Event>) {
        // No subscriber is not an error.
        let _ = broadcast::Sender::send(self, event.clone());
    }
}

/// Collects a round's events and forwards them to live subscribers.
pub struct EventLog {
    start: Instant,
    /// Secret values never leave in an event.
    redactor: Redactor,
    events: Mutex<Vec<Arc<Event>>>,
    live: Option<Arc<dyn EventSink>>,
}

impl EventLog {
    pub fn new(live: Option<Arc<dyn EventSink>>) -> Self {
        Self::with_redactor(live, Redactor::default())
    }

    pub fn with_redactor(live: Option<Arc<dyn EventSink>>, redactor: Redactor) -> Self {
        EventLog {
            start: Instant::now(),
            redactor,
            events: Mutex::new(Vec::new()),
            live,
        }
    }

    pub fn emit(&self, mut kind: EventKind) {
        if !self.redactor.is_empty() {
            kind.redact(&self.redactor);
        }
        // Stamped, stored and sent under one lock, so the log, the live stream and the
        // timestamps agree on the order.
        let Ok(mut events) = self.events.lock() else {
            return;
        };
        let event = Arc::new(Event {
            kind,
            at_ms: self.now_ms(),
        });
        if let Some(live) = &self.live {
            live.send(&event);
        }
        events.push(event);
    }

    /// Milliseconds since the round began, to the microsecond: finer digits would only be
    /// clock noise, and every event stores this number.
    pub fn now_ms(&self) -> f64 {
        let micros = u32::try_from(self.start.elapsed().as_micros()).unwrap_or(u32::MAX);
        f64::from(micros) / 1000.0
    }

    pub(crate) fn elapsed_nanos(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    pub(crate) fn start(&self) -> Instant {
        self.start
    }

    /// The events so far, leaving the log empty.
    pub fn take(&self) -> Vec<Arc<Event>> {
        self.events
            .lock()
            .map(|mut e| std::mem::take(&mut *e))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dispatch_store::EventJson;

    #[test]
    fn to_json_writes_what_serialize_writes() {
        let id: Arc<str> = Arc::from("c1");
        let kinds = vec![
            EventKind::ToolCall {
                tool_id: id.clone(),
                tool_name: Arc::from("t"),
                tool_args: Arc::from(r#"{"a":"x\"y"}"#),
            },
            EventKind::ToolResult {
                tool_id: id.clone(),
                tool_name: Arc::from("t"),
                tool_args: Arc::from("{}"),
                status: Status::Deduped,
                result: "line\nline".into(),
            },
            EventKind::TodoUpdate { todos: Vec::new() },
            EventKind::Done,
        ];
        for kind in kinds {
            for at_ms in [0.0, 1.5, 12_345.678_9, 1e-7] {
                let event = Event {
                    kind: kind.clone(),
                    at_ms,
                };
                let fast: serde_json::Value = serde_json::from_str(&event.to_json()).unwrap();
                assert_eq!(fast, serde_json::to_value(&event).unwrap());
            }
        }
    }
}
