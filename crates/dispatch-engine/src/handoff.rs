//! Spec §1.1: a reply that calls a client tool is the caller's to run. It is handed back
//! whole, and nothing else in the reply runs.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::deferred::RUN_TOOL;
use crate::events::EventKind;
use crate::round::{RoundCx, normalise_name};
use crate::slot::{Slot, SlotState};
use crate::spec::Effect;
use crate::status::Status;
use crate::wire::RawCall;

impl RoundCx<'_> {
    /// Spec §1.1: a reply that calls any client tool is handed back whole; nothing runs.
    pub(crate) fn client_handoff(&mut self, calls: &[RawCall]) -> Option<Vec<Slot>> {
        if self.req.client_tools.is_empty() {
            return None;
        }
        let is_client = |name: &str| self.req.client_tools.iter().any(|c| c.name == name);
        // The client tool's name and arguments, also when the model wrapped it in run_tool.
        let client_of = |call: &RawCall| -> Option<(String, String)> {
            let name = normalise_name(&call.name);
            if is_client(&name) {
                return Some((name, call.arguments.trim().to_string()));
            }
            if name == RUN_TOOL {
                let outer = serde_json::from_str::<Value>(call.arguments.trim()).ok()?;
                let inner = normalise_name(outer.get("name")?.as_str()?);
                let args = match outer.get("args") {
                    None | Some(Value::Null) => "{}".to_string(),
                    Some(Value::String(s)) => s.clone(),
                    Some(v) => v.to_string(),
                };
                return is_client(&inner).then_some((inner, args));
            }
            None
        };
        let names: Vec<Option<(String, String)>> = calls.iter().map(client_of).collect();
        if names.iter().all(Option::is_none) {
            return None;
        }
        let first_client = names
            .iter()
            .flatten()
            .next()
            .map(|(n, _)| n.clone())
            .unwrap_or_default();
        let mut handed = Vec::new();
        let slots = calls
            .iter()
            .zip(names)
            .map(|(call, client)| {
                let id: Arc<str> = Arc::from(call.id.trim());
                match client {
                    Some((name, args)) => {
                        handed.push(json!({"id": call.id.trim(), "name": name, "arguments": args}));
                        Slot {
                            id,
                            name: Arc::from(name),
                            args_raw: Arc::from(args.as_str()),
                            key: None,
                            state: SlotState::Client,
                            effect: Effect::Observes,
                        }
                    }
                    None => {
                        let name = normalise_name(&call.name);
                        Slot {
                            id,
                            args_raw: Arc::from(call.arguments.trim()),
                            state: SlotState::Settled {
                                status: Status::NotRun,
                                text: format!(
                                    "tool={name} failed: not run — this reply also called the client tool {first_client}, which the caller runs itself, so nothing else in the reply was run. Call {name} again in your next reply if you still need it."
                                ),
                                images: Vec::new(),
                            },
                            name: Arc::from(name),
                            key: None,
                            effect: Effect::Observes,
                        }
                    }
                }
            })
            .collect();
        self.emit(EventKind::ClientToolCall {
            client_tool_calls: handed,
        });
        Some(slots)
    }
}
