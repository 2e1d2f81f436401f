//! Pass 3, serial and strictly in call order (spec §1.6): build each result's text (failure
//! wording, `next:` hint, "no data", shaping, images), update the dedupe map with state-aware
//! invalidation (DESIGN §4.2), elide bulky arguments, and emit a `ToolResult` for every slot.

use std::collections::HashSet;
use std::path::PathBuf;

use dispatch_store::{DedupeEntry, TranscriptEntry, TranscriptMessage, Validity};
use serde_json::{Value, json};

use crate::canonical::DedupeKey;
use dispatch_store::{ErrorClass, ErrorRecord, classify};

/// Records offered with one failure (seed §8).
const RELATED_ERRORS: usize = 3;

/// `related_errors: [...]`: what was recorded about this tool failing this way, newest first.
fn related_errors_line(records: &[ErrorRecord]) -> String {
    let items: Vec<Value> = records
        .iter()
        .map(|r| {
            json!({
                "id": r.id.get(..8).unwrap_or(&r.id),
                "symptom": r.symptom,
                "cause": r.cause,
                "action": r.action,
                "outcome": r.outcome,
            })
        })
        .collect();
    format!("related_errors: {}", Value::Array(items))
}
use crate::events::EventKind;
use crate::hints::next_hint;
use crate::round::{RoundCx, normalised};
use crate::shaping::{safe_component, shape, spill_dir};
use crate::slot::{Slot, SlotResult, SlotState};
use crate::spec::Effect;
use crate::status::Status;
use crate::wire::RawCall;

impl RoundCx<'_> {
    pub(crate) fn commit(&mut self, calls: &[RawCall], slots: &mut [Slot]) -> Vec<SlotResult> {
        let mut results: Vec<SlotResult> = Vec::with_capacity(slots.len());
        // Index of each slot's result, for calls that share an earlier call's result.
        let mut result_of: Vec<Option<usize>> = vec![None; slots.len()];
        let mut images_all: Vec<String> = Vec::new();
        let mut put_keys: Vec<DedupeKey> = Vec::with_capacity(slots.len());
        self.dedupe.reserve(slots.len());
        // Batches in which a mutating call succeeded: what its siblings saw may be from before
        // or after the change, so their results are not remembered.
        let written_batches: HashSet<usize> = slots
            .iter()
            .filter_map(|slot| match &slot.state {
                SlotState::Executed(e) if e.outcome.is_ok() && slot.effect == Effect::Mutates => {
                    e.batch
                }
                _ => None,
            })
            .collect();
        for (i, slot) in slots.iter_mut().enumerate() {
            let state = std::mem::replace(&mut slot.state, SlotState::Parked);
            let mut failed_dedupe = false;
            let (status, content, images, in_tools, times) = match state {
                SlotState::Parked | SlotState::Ready { .. } => continue,
                SlotState::Running => {
                    // Its task ended without handing back a result: say so rather than drop it.
                    let text = format!(
                        "tool={} failed: the call stopped without a result; call it again if you still need it",
                        slot.name
                    );
                    if slot.effect == Effect::Mutates {
                        self.invalidate(&[]);
                    }
                    (Status::Failed, text, Vec::new(), true, None)
                }
                SlotState::Client => (Status::Client, String::new(), Vec::new(), false, None),
                SlotState::Settled {
                    status,
                    mut text,
                    images,
                } => {
                    // Pre-flight messages may quote the arguments.
                    self.redactor.redact_in_place(&mut text);
                    (status, text, images, true, None)
                }
                SlotState::Deduped {
                    mut text,
                    images,
                    is_error,
                } => {
                    // Remembered before a secret was stored, perhaps.
                    self.redactor.redact_in_place(&mut text);
                    failed_dedupe = is_error;
                    // The text the model read the first time, byte for byte: the map keeps the
                    // body, and the executed arm below put `[name] ` before it.
                    (
                        Status::Deduped,
                        prefixed(&slot.name, &text),
                        images,
                        false,
                        None,
                    )
                }
                SlotState::SameAs(first) => {
                    let Some(r) = result_of.get(first).copied().flatten().map(|j| &results[j])
                    else {
                        continue;
                    };
                    failed_dedupe = r.is_error;
                    (
                        Status::Deduped,
                        r.content.clone(),
                        r.images.clone(),
                        false,
                        None,
                    )
                }
                SlotState::Executed(exec) => {
                    let (status, mut body, images) = self.executed_text(i, slot, &exec.outcome);
                    self.redactor.redact_in_place(&mut body);
                    let images_ref = images.clone();
                    let spec = self.registry.get(&slot.name).map(|t| t.spec());
                    let mutates = slot.effect == Effect::Mutates;
                    let remember = spec.is_some_and(|s| s.dedupe);
                    match &exec.outcome {
                        Ok(output) if mutates => {
                            let paths = output.paths.clone();
                            self.invalidate(&paths);
                        }
                        // Stopped part-way: it may have changed anything before it stopped.
                        Err(f) if mutates && f.interrupted => self.invalidate(&[]),
                        _ => {}
                    }
                    // An interrupted call (timeout, panic) is worth trying again, not replaying.
                    let interrupted = exec.outcome.as_ref().is_err_and(|f| f.interrupted);
                    let overlapped_a_write =
                        !mutates && exec.batch.is_some_and(|b| written_batches.contains(&b));
                    if let Some(key) = slot
                        .key
                        .filter(|_| remember && !interrupted && !overlapped_a_write)
                    {
                        let entry = DedupeEntry {
                            key: key.to_hex(),
                            tool: String::from(&*slot.name),
                            result: body.clone(),
                            images: images_ref,
                            validity: self
                                .validity_of(slot, exec.outcome.as_ref().ok().map(|o| &o.paths)),
                            is_error: status.is_error(),
                        };
                        self.dedupe.insert(key, entry);
                        put_keys.push(key);
                    }
                    if exec.outcome.is_ok() {
                        self.elide_arguments(i, slot, calls);
                    }
                    (
                        status,
                        prefixed(&slot.name, &body),
                        images,
                        true,
                        Some((exec.started_ms, exec.ended_ms)),
                    )
                }
            };
            self.emit(EventKind::ToolResult {
                tool_id: slot.id.clone(),
                tool_name: slot.name.clone(),
                tool_args: slot.args_raw.clone(),
                status,
                result: content.clone(),
            });
            if status != Status::Client {
                self.record.transcript.push(TranscriptEntry {
                    run: self.req.run.clone(),
                    round: self.record.round,
                    in_tools,
                    message: TranscriptMessage::Tool {
                        tool_call_id: String::from(&*slot.id),
                        name: String::from(&*slot.name),
                        content: content.clone(),
                    },
                });
            }
            images_all.extend(images.iter().cloned());
            result_of[i] = Some(results.len());
            results.push(SlotResult {
                tool_call_id: String::from(&*slot.id),
                id_origin: calls.get(i).map(|c| c.id_origin).unwrap_or_default(),
                name: String::from(&*slot.name),
                // Only a wrapped or untidy call was called by another name: no copy for the rest.
                called_as: calls
                    .get(i)
                    .map(|c| c.name.as_str())
                    .filter(|called| *called != &*slot.name)
                    .map(str::to_string),
                status,
                is_error: status.is_error() || failed_dedupe,
                content,
                images,
                started_ms: times.map(|t| t.0),
                ended_ms: times.map(|t| t.1),
            });
        }
        if !images_all.is_empty() {
            self.record.transcript.push(TranscriptEntry {
                run: self.req.run.clone(),
                round: self.record.round,
                in_tools: false,
                message: TranscriptMessage::User { images: images_all },
            });
        }
        // The round's copy of the map ends here, so its new entries move into the record.
        // Entries put and then dropped within this round are only dropped.
        let puts: Vec<DedupeEntry> = put_keys
            .iter()
            .filter_map(|k| self.dedupe.remove(k))
            .collect();
        // A key dropped earlier in the round and put again later is only put.
        let put_now: HashSet<&str> = puts.iter().map(|e| e.key.as_str()).collect();
        self.record
            .dedupe_drop
            .retain(|k| !put_now.contains(k.as_str()));
        self.record.dedupe_put = puts;
        self.record.write_epoch = self.run.write_epoch;
        results
    }

    /// The result text without the `[name] ` prefix, its status and its images.
    fn executed_text(
        &mut self,
        index: usize,
        slot: &Slot,
        outcome: &Result<crate::tool::ToolOutput, crate::slot::Failure>,
    ) -> (Status, String, Vec<String>) {
        let budget = self.engine.config.result_budget;
        let spill = self.spill_path(slot);
        match outcome {
            Ok(output) => {
                for name in &output.marks {
                    self.mark(name);
                }
                if let Some(todos) = &output.todos {
                    self.session.todos = todos.clone();
                    self.todos = Some(todos.clone());
                }
                if let Some(put) = &output.cache_put {
                    let mut put = put.clone();
                    self.redactor.redact_in_place(&mut put.value);
                    self.cache_puts.push(put);
                }
                // Redacted before shaping: the spill file keeps the full text on disk.
                let text = shape(
                    &self.redactor.redact(output.text.trim()),
                    budget,
                    spill.as_deref(),
                    self.engine.config.spill_quota,
                );
                let body = if !output.images.is_empty() {
                    let n = output.images.len();
                    if text.is_empty() {
                        format!("{n} image(s) loaded")
                    } else {
                        format!("{n} image(s) loaded {text}")
                    }
                } else if text.is_empty() || text == "no data" {
                    // What was learned the last time this tool found nothing, if anything.
                    match self.related.get(&index) {
                        Some(related) => format!("no data\n{related}"),
                        None => "no data".to_string(),
                    }
                } else {
                    text
                };
                (Status::Ok, body, output.images.clone())
            }
            Err(failure) => {
                if failure.fatal && self.fatal.is_none() {
                    self.fatal = Some(format!(
                        "tool {} failed fatally: {}",
                        slot.name, failure.message
                    ));
                }
                let message = shape(
                    &self.redactor.redact(failure.message.trim()),
                    budget,
                    spill.as_deref(),
                    self.engine.config.spill_quota,
                );
                let hint = next_hint(
                    &slot.name,
                    &failure.message,
                    failure.credential.as_ref().map(|k| k.as_deref()),
                );
                let related = self
                    .related
                    .get(&index)
                    .map(|r| format!("\n{r}"))
                    .unwrap_or_default();
                (
                    failure.status,
                    format!("tool={} failed: {message}{related}\n{hint}", slot.name),
                    Vec::new(),
                )
            }
        }
    }

    /// Look up error memory for every executed failure and "no data" success (seed §8), so the
    /// commit itself stays synchronous. A lookup that fails only loses the hint.
    pub(crate) async fn recall_errors(&mut self, slots: &[Slot]) {
        let Some(memory) = self.engine.error_memory.clone() else {
            return;
        };
        for (i, slot) in slots.iter().enumerate() {
            let SlotState::Executed(exec) = &slot.state else {
                continue;
            };
            let class = match &exec.outcome {
                Err(failure) => classify(&failure.message),
                Ok(output)
                    if matches!(output.text.trim(), "" | "no data") && output.images.is_empty() =>
                {
                    ErrorClass::NoResult
                }
                Ok(_) => continue,
            };
            match memory
                .error_related(&slot.name, class, RELATED_ERRORS)
                .await
            {
                Ok(records) if !records.is_empty() => {
                    self.related.insert(i, related_errors_line(&records));
                }
                Ok(_) => {}
                Err(e) => self.emit(EventKind::Error {
                    text: format!(
                        "error memory unavailable, no related_errors for {}: {e}",
                        slot.name
                    ),
                }),
            }
        }
    }

    /// `sessions/<session>/results/<run>-r<round>-<call>.txt` (each id made safe by
    /// [`safe_component`]): a positional call id (`call_1`) is overwritten neither by the next
    /// round nor by the next run.
    fn spill_path(&self, slot: &Slot) -> Option<PathBuf> {
        let dir = self.engine.data_dir.as_ref()?;
        Some(spill_dir(dir, &self.req.session).join(format!(
            "{}-r{}-{}.txt",
            safe_component(&self.req.run),
            self.record.round,
            safe_component(&slot.id)
        )))
    }

    fn validity_of(&self, slot: &Slot, paths: Option<&Vec<PathBuf>>) -> Validity {
        match slot.effect {
            Effect::Pure => Validity::Always,
            // A read that reported no file (it failed, or the file is missing) can be made
            // stale by any write, including the one that creates the file.
            Effect::ReadsPaths => match paths.filter(|p| !p.is_empty()) {
                Some(p) => Validity::Paths {
                    paths: p.iter().map(|p| p.display().to_string()).collect(),
                },
                None => Validity::Epoch {
                    epoch: self.run.write_epoch,
                },
            },
            Effect::Observes | Effect::Mutates => Validity::Epoch {
                epoch: self.run.write_epoch,
            },
        }
    }

    /// A mutating call committed: bump the write epoch and drop what it may have made stale.
    /// A call that reports no paths may have touched anything.
    ///
    /// The round holds only the entries its calls looked up and stored; the store learns the
    /// touched paths with the commit and leaves out what they made stale at its next load.
    pub(crate) fn invalidate(&mut self, touched: &[PathBuf]) {
        self.run.write_epoch += 1;
        let touched: HashSet<String> = touched.iter().map(|p| p.display().to_string()).collect();
        if touched.is_empty() {
            self.record.touched_all = true;
        } else {
            self.record.touched_paths.extend(touched.iter().cloned());
        }
        let epoch = self.run.write_epoch;
        let stale: Vec<DedupeKey> = self
            .dedupe
            .iter()
            .filter(|(_, e)| match &e.validity {
                Validity::Always => false,
                Validity::Epoch { epoch: e } => *e != epoch,
                Validity::Paths { paths } => {
                    touched.is_empty() || paths.iter().any(|p| touched.contains(p))
                }
            })
            .map(|(key, _)| *key)
            .collect();
        for key in stale {
            if let Some(entry) = self.dedupe.remove(&key) {
                self.record.dedupe_drop.push(entry.key);
            }
        }
    }

    /// Drop bulky arguments (file contents, patch targets) from the stored assistant message.
    fn elide_arguments(&mut self, index: usize, slot: &Slot, calls: &[RawCall]) {
        let Some(keys) = self
            .registry
            .get(&slot.name)
            .map(|t| t.spec().elide_args)
            .filter(|k| !k.is_empty())
        else {
            return;
        };
        let Some(raw) = calls.get(index).map(|c| c.arguments.trim()) else {
            return;
        };
        let Ok(mut args) = serde_json::from_str::<Value>(raw) else {
            return;
        };
        let wrapped = calls
            .get(index)
            .is_some_and(|c| normalised(&c.name) == crate::deferred::RUN_TOOL);
        let target = if wrapped {
            args.get_mut("args")
        } else {
            Some(&mut args)
        };
        let Some(Value::Object(map)) = target else {
            return;
        };
        let mut wrote_bytes = 0;
        let mut edits = 0;
        for key in keys {
            match map.remove(*key) {
                Some(Value::String(s)) => wrote_bytes += s.len(),
                Some(Value::Array(a)) => edits += a.len(),
                Some(other) => wrote_bytes += other.to_string().len(),
                None => {}
            }
        }
        map.insert("wrote_bytes".into(), json!(wrote_bytes));
        if edits > 0 {
            map.insert("edits".into(), json!(edits));
        }
        if let Some(TranscriptEntry {
            message: TranscriptMessage::Assistant { tool_calls },
            ..
        }) = self.record.transcript.first_mut()
            && let Some(call) = tool_calls.get_mut(index)
        {
            call.arguments = self.redactor.redact(&args.to_string()).into_owned();
        }
    }
}

/// A result as the model reads it: `[name] ` and the body (executed calls and their dedupe hits).
fn prefixed(name: &str, body: &str) -> String {
    let mut content = String::with_capacity(name.len() + 3 + body.len());
    content.push('[');
    content.push_str(name);
    content.push_str("] ");
    content.push_str(body);
    content
}
