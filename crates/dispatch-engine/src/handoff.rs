//! Spec §1.1, with pass 1's argument checks: a reply that calls a client tool is the caller's
//! to run. Each client call (direct, or wrapped in run_tool) is parsed and validated against
//! the client tool's compiled schema, with the messages any tool's call gets.
//!
//! - At least one client call is valid: the reply is handed back. The valid client calls
//!   go to the caller (status `client`), the invalid ones are answered `invalid`, and nothing
//!   else in the reply runs (`not_run`).
//! - No client call is valid: nothing is handed back. The invalid client calls are answered
//!   `invalid` and the reply's other calls go through pass 1 and run as usual, so one bad
//!   client call does not cost the model the rest of its reply.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::deferred::RUN_TOOL;
use crate::events::EventKind;
use crate::preflight::split_run_tool;
use crate::round::{RoundCx, normalise_name};
use crate::slot::{Slot, SlotState};
use crate::spec::Effect;
use crate::status::Status;
use crate::wire::RawCall;

/// What a reply's client calls make of it.
pub(crate) enum ClientCalls {
    /// A valid client call: every call's slot, the reply goes back to the caller.
    HandedBack(Vec<Slot>),
    /// No valid client call: the slots of the invalid ones by call index (`None` for every
    /// other call, which pass 1 checks; an empty list when the reply has no client call).
    Checked(Vec<Option<Slot>>),
}

/// A call of a client tool, once unwrapped.
struct ClientCall {
    name: String,
    args_raw: String,
    parsed: Option<Value>,
}

impl RoundCx<'_> {
    /// Find the reply's client calls and check their arguments (see the module's rule).
    pub(crate) fn client_calls(&self, calls: &[RawCall]) -> ClientCalls {
        let clients = &self.req.client_tools;
        if clients.is_empty() {
            return ClientCalls::Checked(Vec::new());
        }
        let is_client = |name: &str| clients.contains(name) && !self.exclude.contains(name);
        let client_of = |call: &RawCall| -> Option<ClientCall> {
            let name = normalise_name(&call.name);
            if name == RUN_TOOL {
                // A malformed run_tool is not a client call: pass 1 explains it.
                let (inner, args_raw, parsed) = split_run_tool(call.arguments.trim()).ok()?;
                return is_client(&inner).then_some(ClientCall {
                    name: inner,
                    args_raw,
                    parsed,
                });
            }
            if !is_client(&name) {
                return None;
            }
            let args_raw = call.arguments.trim().to_string();
            let parsed = serde_json::from_str(&args_raw).ok();
            Some(ClientCall {
                name,
                args_raw,
                parsed,
            })
        };
        // Per call: not a client call, or a client call with its check's verdict.
        let checked: Vec<Option<(ClientCall, Result<(), String>)>> = calls
            .iter()
            .map(|call| {
                let mut client = client_of(call)?;
                let verdict = match clients.schema(&client.name) {
                    Some(schema) => schema
                        .check_args(&client.name, client.parsed.take(), &client.args_raw)
                        .map(drop),
                    None => Ok(()),
                };
                Some((client, verdict))
            })
            .collect();
        let first_valid = checked
            .iter()
            .flatten()
            .find(|(_, verdict)| verdict.is_ok())
            .map(|(c, _)| c.name.clone());
        let mut handed = Vec::new();
        let mut slots = Vec::with_capacity(calls.len());
        for (call, client) in calls.iter().zip(checked) {
            let id: Arc<str> = Arc::from(call.id.as_str());
            let slot = match (client, &first_valid) {
                (Some((client, Err(reason))), _) => {
                    let name: Arc<str> = Arc::from(client.name);
                    let args_raw: Arc<str> = Arc::from(client.args_raw);
                    self.emit(EventKind::ToolCall {
                        tool_id: id.clone(),
                        tool_name: name.clone(),
                        tool_args: args_raw.clone(),
                    });
                    Some(Slot {
                        state: SlotState::Settled {
                            status: Status::Invalid,
                            text: format!("tool={name} failed: {reason}"),
                            images: Vec::new(),
                        },
                        id,
                        name,
                        args_raw,
                        key: None,
                        effect: Effect::Observes,
                    })
                }
                (Some((client, Ok(()))), _) => {
                    handed.push(
                        json!({"id": &*id, "name": client.name, "arguments": client.args_raw}),
                    );
                    Some(Slot {
                        id,
                        name: Arc::from(client.name),
                        args_raw: Arc::from(client.args_raw),
                        key: None,
                        state: SlotState::Client,
                        effect: Effect::Observes,
                    })
                }
                (None, Some(first_client)) => {
                    let name = normalise_name(&call.name);
                    Some(Slot {
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
                    })
                }
                (None, None) => None,
            };
            slots.push(slot);
        }
        if first_valid.is_none() {
            return ClientCalls::Checked(slots);
        }
        self.emit(EventKind::ClientToolCall {
            client_tool_calls: handed,
        });
        ClientCalls::HandedBack(slots.into_iter().flatten().collect())
    }
}
