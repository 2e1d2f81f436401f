//! Pass 1, serial and in call order (spec §1.3): unwrap run_tool (and unescape arguments a
//! model escaped twice, `escapes.rs`) → refuse a direct call outside the loaded set → dedupe →
//! schema before fetch → existence → confirm gate → JSON Schema.
//! The first check that fails settles the call with its message; it never runs.

use std::collections::{BTreeSet, HashSet};
use std::ops::ControlFlow;
use std::sync::Arc;

use serde_json::Value;
use serde_json::value::RawValue;

use crate::canonical::{DedupeKey, KeyMap, dedupe_key};
use crate::deferred::{Catalog, RUN_TOOL, removed_mode_hint, removed_tool_hint, select_output};
use crate::engine::Engine;
use crate::events::{EventKind, EventLog};
use crate::gate::{ConfirmRequest, Permission, Verdict};
use crate::registry::{Registered, Registry};
use crate::round::{RoundCx, RoundRequest, go_duration, normalise_name};
use crate::rules::remembered_rule;
use crate::slot::{Slot, SlotState};
use crate::spec::Effect;
use crate::status::Status;
use crate::subject::{Access, secret_references};
use crate::tool::{Exclude, Tool};
use crate::wire::RawCall;
use dispatch_store::{DedupeEntry, Validity};

const DECLINED_TAIL: &str = "Retrying it, or reissuing it with different arguments, produces the same prompt and the same refusal. Continue without it, or use ask_user to agree on another approach.";

/// What pass 1 carries from one call to the next.
#[derive(Default)]
struct Pass1 {
    /// Names whose schema this round already returned.
    schema_shown: HashSet<String>,
    /// Dedupe key → the first ready call with it and the mutating calls ready before it.
    ready_keys: KeyMap<(usize, usize)>,
    /// Ready calls so far that may change the world: remembered results may be stale after one.
    mutations_ahead: usize,
}

/// A call while pass 1 checks it: what the checks so far have made of it.
struct Candidate {
    id: Arc<str>,
    /// The name after trimming and `<|` cut; the inner name once run_tool is unwrapped.
    name: Arc<str>,
    /// The argument text; the inner arguments once run_tool is unwrapped.
    args_raw: Arc<str>,
    /// `args_raw` parsed, when it is JSON.
    parsed: Option<Value>,
    /// Called through `run_tool(name, args)`.
    wrapped: bool,
    /// Made by the dedupe check; every check after it settles the call under this key.
    key: Option<DedupeKey>,
}

impl Candidate {
    /// The call as the model made it; one without a name is settled at once.
    fn new(call: &RawCall) -> ControlFlow<Slot, Self> {
        let name = normalise_name(&call.name);
        let args_raw = call.arguments.trim();
        let wrapped = name == RUN_TOOL;
        // A wrapped call's outer arguments are read by the unwrap, which parses less.
        let parsed = if wrapped || name.is_empty() {
            None
        } else {
            serde_json::from_str(args_raw).ok()
        };
        let candidate = Candidate {
            // Kept as sent: the result answers this id byte for byte.
            id: Arc::from(call.id.as_str()),
            name: Arc::from(name),
            args_raw: Arc::from(args_raw),
            parsed,
            wrapped,
            key: None,
        };
        if candidate.name.is_empty() {
            return ControlFlow::Break(candidate.settle(
                Status::Invalid,
                "tool= failed: the call has no tool name; call a tool from your tools array by its exact name".to_string(),
            ));
        }
        ControlFlow::Continue(candidate)
    }

    /// The call decided by a check: it never runs, and the model reads `text`.
    fn settle(&self, status: Status, text: String) -> Slot {
        self.slot(SlotState::Settled {
            status,
            text,
            images: Vec::new(),
        })
    }

    fn slot(&self, state: SlotState) -> Slot {
        Slot {
            id: self.id.clone(),
            name: self.name.clone(),
            args_raw: self.args_raw.clone(),
            key: self.key,
            state,
            effect: Effect::Observes,
        }
    }

    fn call_event(&self) -> EventKind {
        EventKind::ToolCall {
            tool_id: self.id.clone(),
            tool_name: self.name.clone(),
            tool_args: self.args_raw.clone(),
        }
    }

    fn skipped_event(&self, text: String) -> EventKind {
        EventKind::ToolSkipped {
            tool_id: self.id.clone(),
            tool_name: self.name.clone(),
            tool_args: self.args_raw.clone(),
            text,
        }
    }
}

impl RoundCx<'_> {
    /// Pass 1 over this round's calls, in call order: a slot per call, settled or ready.
    /// `decided` holds, by call index, the slots already decided before pass 1 (invalid
    /// client calls); it may be shorter than `calls`.
    pub(crate) async fn preflight(
        &mut self,
        calls: &[RawCall],
        decided: Vec<Option<Slot>>,
    ) -> Vec<Slot> {
        let mut preflight = Preflight {
            engine: self.engine,
            registry: &self.registry,
            req: &self.req,
            log: &self.log,
            exclude: &self.exclude,
            remembered: &self.dedupe,
            call_keys: &self.call_keys,
            write_epoch: self.run.write_epoch,
            marked: &mut self.session.marked,
            newly_marked: &mut self.newly_marked,
            turn_allow_all: self.run.turn_allow_all,
        };
        let slots = preflight.check_all(calls, decided).await;
        if preflight.turn_allow_all {
            // The user allowed the rest of the turn: later rounds of the run skip the ask too.
            self.run.turn_allow_all = true;
            self.record.turn_allow_all = true;
        }
        slots
    }
}

/// What pass 1 reads from the round, and the little it may change: the tools whose schema
/// the model has now seen, and "allow for this turn" when the user grants it.
struct Preflight<'a> {
    engine: &'a Engine,
    /// The tools as they were when the round started.
    registry: &'a Registry,
    req: &'a RoundRequest,
    log: &'a EventLog,
    exclude: &'a Exclude,
    /// The results this run remembers, by dedupe key.
    remembered: &'a KeyMap<DedupeEntry>,
    /// Each call's dedupe key, by call index, made before the load (see `round_keys`).
    call_keys: &'a [Option<DedupeKey>],
    /// The run's write epoch: a remembered result of an older epoch may be stale.
    write_epoch: u64,
    /// The session's marked tools, and those this round marked.
    marked: &'a mut BTreeSet<String>,
    newly_marked: &'a mut BTreeSet<String>,
    /// "Allow for this turn": read by the gate, granted by a confirmation.
    turn_allow_all: bool,
}

impl<'a> Preflight<'a> {
    async fn check_all(&mut self, calls: &[RawCall], decided: Vec<Option<Slot>>) -> Vec<Slot> {
        let mut pass = Pass1 {
            ready_keys: KeyMap::with_capacity_and_hasher(calls.len(), Default::default()),
            ..Pass1::default()
        };
        let mut slots = Vec::with_capacity(calls.len());
        let mut decided = decided.into_iter();
        for (index, call) in calls.iter().enumerate() {
            if let Some(Some(slot)) = decided.next() {
                slots.push(slot);
                continue;
            }
            let slot = self.check(index, call, &mut pass).await;
            if let SlotState::Ready { .. } = &slot.state {
                if let Some(key) = slot.key {
                    pass.ready_keys.insert(key, (index, pass.mutations_ahead));
                }
                if slot.effect == Effect::Mutates {
                    pass.mutations_ahead += 1;
                }
            }
            slots.push(slot);
        }
        slots
    }

    /// One call through the seed's seven checks, in the seed's order (spec §1.3). The first
    /// check that decides the call settles it (or answers it from an earlier result); a call
    /// no check stops is ready to run.
    async fn check(&mut self, index: usize, call: &RawCall, pass: &mut Pass1) -> Slot {
        match self.check_steps(index, call, pass).await {
            ControlFlow::Continue(ready) => ready,
            ControlFlow::Break(decided) => decided,
        }
    }

    async fn check_steps(
        &mut self,
        index: usize,
        call: &RawCall,
        pass: &mut Pass1,
    ) -> ControlFlow<Slot, Slot> {
        // Each step lets the call through or decides it; `?` ends the checking with the
        // decided slot.
        let mut call = Candidate::new(call)?;
        // 1. Unwrap run_tool, then undo a model's double escaping (`escapes.rs`), so every
        //    later check reads the arguments the tool will get.
        self.unwrap_run_tool(&mut call)?;
        if let Some(args) = call.parsed.as_mut() {
            crate::escapes::unescape_args(args);
        }
        // 2. Refuse a direct call outside the loaded set.
        self.refuse_unloaded(&call)?;
        // 3. Dedupe: an earlier call of this round or run answers this one.
        self.dedupe(index, &mut call, pass)?;
        // 4. Schema before fetch.
        self.schema_before_fetch(&call, pass)?;
        // (A removed mode fails like a removed name, before anything else looks at the call.)
        self.refuse_removed_mode(&call)?;
        // 5. Existence.
        let entry = self.existence(&call)?;
        // 6. Confirm gate.
        self.confirm_gate(&call, &entry.tool).await?;
        // 7. JSON Schema validation.
        self.validate(call, entry)
    }

    /// Step 1: `run_tool(name, args)` becomes the inner call; a malformed one fails without
    /// events.
    fn unwrap_run_tool(&self, call: &mut Candidate) -> ControlFlow<Slot> {
        if !call.wrapped {
            return ControlFlow::Continue(());
        }
        match self.resolve_run_tool(&call.args_raw) {
            Ok((inner, inner_raw, inner_parsed)) => {
                call.name = Arc::from(inner);
                call.args_raw = Arc::from(inner_raw);
                call.parsed = inner_parsed;
                ControlFlow::Continue(())
            }
            Err((status, reason)) => {
                ControlFlow::Break(call.settle(status, format!("tool=run_tool failed: {reason}")))
            }
        }
    }

    /// Step 2: a direct call must be in the loaded set; a name in no set at all is left to
    /// the existence check.
    fn refuse_unloaded(&self, call: &Candidate) -> ControlFlow<Slot> {
        let name = &*call.name;
        if call.wrapped || self.catalog().is_loaded(name) {
            return ControlFlow::Continue(());
        }
        let text = if self.exclude.contains(name) {
            format!("tool={name} failed: {name} is not available in this session")
        } else if self.registry.contains(name) {
            format!(
                "tool={name} failed: {name} is not callable directly. Fetch its schema with find_tools, then call run_tool(name={name}, args=...)."
            )
        } else {
            return ControlFlow::Continue(());
        };
        self.emit(call.call_event());
        ControlFlow::Break(call.settle(Status::Refused, text))
    }

    /// Step 3: the same call earlier in this round shares its result, unless a call that may
    /// change the world runs between the two; one remembered from this run answers it while
    /// still valid. The key was made from the same name and arguments before the load.
    fn dedupe(&self, index: usize, call: &mut Candidate, pass: &Pass1) -> ControlFlow<Slot> {
        let key = match self.call_keys.get(index) {
            Some(Some(key)) => *key,
            _ => dedupe_key(&call.name, call.parsed.as_ref(), &call.args_raw),
        };
        call.key = Some(key);
        let dedupes = self
            .registry
            .get(&call.name)
            .is_none_or(|t| t.spec().dedupe);
        let same_as = pass
            .ready_keys
            .get(&key)
            .filter(|(_, mutations)| dedupes && *mutations == pass.mutations_ahead);
        if let Some(&(first, _)) = same_as {
            return ControlFlow::Break(call.slot(SlotState::SameAs(first)));
        }
        if let Some(entry) = self
            .remembered
            .get(&key)
            .filter(|e| dedupes && self.still_valid(e, pass.mutations_ahead > 0))
        {
            return ControlFlow::Break(call.slot(SlotState::Deduped {
                text: entry.result.clone(),
                images: entry.images.clone(),
                is_error: entry.is_error,
            }));
        }
        ControlFlow::Continue(())
    }

    /// Step 4: a tool whose schema the model has not seen answers with its schema instead of
    /// running (once per round; a second call of it gets the header alone).
    fn schema_before_fetch(&mut self, call: &Candidate, pass: &mut Pass1) -> ControlFlow<Slot> {
        let name = &*call.name;
        let shown = pass.schema_shown.contains(name);
        if self.req.schemas_shown || (!shown && !self.catalog().is_unmarked(name)) {
            return ControlFlow::Continue(());
        }
        let target = if call.wrapped {
            format!("run_tool(name={name})")
        } else {
            name.to_string()
        };
        let mut text = format!(
            "[{name}] tool schema below. Re-invoke {target} with the correct arguments — the previous call was made before its schema was fetched."
        );
        if !shown {
            let (schema, _) = select_output(self.registry, name, self.exclude);
            text.push('\n');
            text.push_str(&schema);
            pass.schema_shown.insert(name.to_string());
            self.mark(name);
        }
        ControlFlow::Break(call.settle(Status::NeedsSchema, text))
    }

    /// A mode the seed removed from a tool fails like a removed tool.
    fn refuse_removed_mode(&self, call: &Candidate) -> ControlFlow<Slot> {
        let Some(hint) = removed_mode_hint(&call.name, call.parsed.as_ref()) else {
            return ControlFlow::Continue(());
        };
        self.emit(call.call_event());
        let text = format!("tool={} failed: {hint}", call.name);
        ControlFlow::Break(call.settle(Status::Invalid, text))
    }

    /// Step 5: the tool must exist; the message suggests near names, each the way this
    /// provider can call it.
    fn existence(&self, call: &Candidate) -> ControlFlow<Slot, &'a Registered> {
        let registry: &'a Registry = self.registry;
        if let Some(entry) = registry.get(&call.name) {
            return ControlFlow::Continue(entry);
        }
        let name = &*call.name;
        let mut text = format!(
            "tool={name} failed: not exist: {name}. Look up available tools with find_tools."
        );
        if let Some(hint) = removed_tool_hint(name) {
            text.push(' ');
            text.push_str(hint);
            text.push('.');
        }
        let catalog = self.catalog();
        let suggestions: Vec<String> = registry
            .did_you_mean(name, self.exclude)
            .into_iter()
            .map(|s| {
                if call.wrapped || catalog.is_loaded(&s) {
                    s
                } else {
                    format!("run_tool(name={s})")
                }
            })
            .collect();
        if !suggestions.is_empty() {
            text.push_str(&format!(" Did you mean: {}?", suggestions.join(", ")));
        }
        self.emit(call.call_event());
        ControlFlow::Break(call.settle(Status::NotFound, text))
    }

    /// Step 6: the tool says what the call touches, and the gate decides from that alone:
    /// run, refuse by a rule, or ask the user.
    async fn confirm_gate(&mut self, call: &Candidate, tool: &Arc<dyn Tool>) -> ControlFlow<Slot> {
        let name = &*call.name;
        let null = Value::Null;
        let args_view = call.parsed.as_ref().unwrap_or(&null);
        let mut subject = tool.subject(args_view, &self.engine.workdir);
        // Not yet approved in this session: a call that only reads asks all the same.
        let ask_once = subject
            .ask_once
            .clone()
            .filter(|key| !self.engine.approved_once(&self.req.session, key));
        if ask_once.is_some() && subject.access == Access::Reads {
            subject.access = Access::Changes;
        }
        let secrets = secret_references(args_view);
        let permission = Permission {
            run_allow_all: self.req.allow_all,
            turn_allow_all: self.turn_allow_all,
        };
        let verdict = match self.engine.policy.lock() {
            Ok(policy) => policy.evaluate(
                tool.spec(),
                &subject,
                &secrets,
                args_view,
                &call.args_raw,
                permission,
            ),
            Err(_) => Verdict::Ask {
                why: "the rules could not be read".into(),
            },
        };
        match verdict {
            Verdict::Run => ControlFlow::Continue(()),
            Verdict::Deny { rule } => {
                let text = format!(
                    "tool={name} failed: refused by the rule `{}` (line {} of .tooldispatch/rules). Do not retry it; continue without it, or use ask_user if the user should change the rule.",
                    rule.text, rule.line
                );
                self.emit(call.skipped_event(format!("refused by rule `{}`", rule.text)));
                ControlFlow::Break(call.settle(Status::Refused, text))
            }
            Verdict::Ask { why } => {
                let request = ConfirmRequest {
                    session: self.req.session.clone(),
                    run: self.req.run.clone(),
                    tool_id: call.id.to_string(),
                    tool_name: name.to_string(),
                    tool_args: call.args_raw.clone(),
                    remember_rule: remembered_rule(
                        name,
                        &subject,
                        &self.engine.workdir,
                        args_view,
                        &call.args_raw,
                    ),
                    why,
                    parent_session: self.req.parent_session.clone(),
                };
                match self.confirm(&request).await {
                    None => {
                        if let Some(key) = ask_once {
                            self.engine.approve_once(&self.req.session, key);
                        }
                        ControlFlow::Continue(())
                    }
                    Some((skipped, text)) => {
                        self.emit(call.skipped_event(skipped));
                        ControlFlow::Break(call.settle(Status::Declined, text))
                    }
                }
            }
        }
    }

    /// Step 7: the arguments must match the tool's JSON Schema; a call that does is ready.
    fn validate(&self, mut call: Candidate, entry: &Registered) -> ControlFlow<Slot, Slot> {
        match entry.check_args(call.parsed.take(), &call.args_raw) {
            Ok(args) => {
                let tool = entry.tool.clone();
                let effect = tool.effect(&args);
                let mut ready = call.slot(SlotState::Ready { tool, args });
                ready.effect = effect;
                ControlFlow::Continue(ready)
            }
            Err(reason) => {
                self.emit(call.call_event());
                let text = format!("tool={} failed: {reason}", call.name);
                ControlFlow::Break(call.settle(Status::Invalid, text))
            }
        }
    }

    fn catalog(&self) -> Catalog<'_> {
        Catalog {
            registry: self.registry,
            provider: self.req.provider,
            exclude: self.exclude,
            client_tools: self.req.client_tools.declarations(),
            marked: self.marked,
        }
    }

    /// The model has now seen `name`'s schema.
    fn mark(&mut self, name: &str) {
        if self.marked.insert(name.to_string()) {
            self.newly_marked.insert(name.to_string());
        }
    }

    fn emit(&self, kind: EventKind) {
        self.log.emit(kind);
    }

    /// `run_tool(name, args)` → the inner call, or why it cannot be unwrapped.
    #[allow(clippy::type_complexity)]
    fn resolve_run_tool(
        &self,
        raw: &str,
    ) -> Result<(String, String, Option<Value>), (Status, String)> {
        let (inner, args, parsed) = split_run_tool(raw)?;
        if self.exclude.contains(&inner) {
            return Err((
                Status::Refused,
                format!("{inner} is not available in this session"),
            ));
        }
        if !self.registry.contains(&inner) {
            let mut reason = format!("not exist: {inner}; look it up with find_tools");
            if let Some(hint) = removed_tool_hint(&inner) {
                reason.push_str(&format!(" ({hint})"));
            }
            let suggestions = self.registry.did_you_mean(&inner, self.exclude);
            if !suggestions.is_empty() {
                reason.push_str(&format!(". Did you mean: {}?", suggestions.join(", ")));
            }
            return Err((Status::NotFound, reason));
        }
        Ok((inner, args, parsed))
    }

    fn still_valid(&self, entry: &DedupeEntry, mutation_ahead: bool) -> bool {
        match &entry.validity {
            Validity::Always => true,
            Validity::Paths { .. } => !mutation_ahead,
            Validity::Epoch { epoch } => !mutation_ahead && *epoch == self.write_epoch,
        }
    }

    /// Ask the confirmer. `None` means approved; otherwise the skip text and the model's message.
    async fn confirm(&mut self, request: &ConfirmRequest) -> Option<(String, String)> {
        let confirmer = &self.engine.confirmer;
        if !confirmer.available(request) {
            let reason = confirmer.unavailable_reason();
            return Some((
                reason.to_string(),
                format!(
                    "Not run: this call needs the user's approval ({}), and {reason}. Continue without it, or use ask_user to agree on another approach.",
                    request.why
                ),
            ));
        }
        self.emit(EventKind::ToolConfirm {
            tool_id: Arc::from(request.tool_id.as_str()),
            tool_name: Arc::from(request.tool_name.as_str()),
            tool_args: request.tool_args.clone(),
            text: request.why.clone(),
            remember_rule: request.remember_rule.clone(),
        });
        let limit = self.engine.config.confirm_timeout;
        let cancel = self.req.cancel.clone();
        let answer = tokio::select! {
            answer = tokio::time::timeout(limit, confirmer.confirm(request)) => answer,
            _ = cancel.cancelled() => {
                return Some((
                    "the round was cancelled".to_string(),
                    "Not run: the round was cancelled while this call waited for approval.".to_string(),
                ));
            }
        };
        let reply = match answer {
            Ok(reply) => reply,
            Err(_) => {
                let text = format!("no answer within {}", go_duration(limit));
                return Some((
                    text.clone(),
                    format!("Not run: the confirmation got {text}. {DECLINED_TAIL}"),
                ));
            }
        };
        if !reply.approve {
            let reason = reply
                .reason
                .as_deref()
                .map(str::trim)
                .filter(|r| !r.is_empty());
            return Some(match reason {
                Some(r) => (
                    r.to_string(),
                    format!("The user declined this call: {r}. {DECLINED_TAIL}"),
                ),
                None => (
                    "declined".to_string(),
                    format!("The user declined this call. {DECLINED_TAIL}"),
                ),
            });
        }
        if reply.remember {
            let written = match self.engine.policy.lock() {
                Ok(mut policy) => policy.rules.remember(&request.remember_rule).map(|_| ()),
                Err(_) => Ok(()),
            };
            if let Err(e) = written {
                self.emit(EventKind::Error {
                    text: format!(
                        "could not remember the rule `{}`: {e}",
                        request.remember_rule
                    ),
                });
            }
        }
        if reply.allow_turn {
            self.turn_allow_all = true;
        }
        None
    }
}

/// `run_tool(name, args)` → the inner name, its raw arguments and their parse, or why the
/// outer call is malformed; whether the inner tool may run is checked by `unwrap_run_tool`.
#[allow(clippy::type_complexity)]
pub(crate) fn split_run_tool(
    raw: &str,
) -> Result<(String, String, Option<Value>), (Status, String)> {
    // `args` stays raw text here and is parsed once below: parsing it into the outer
    // object and printing it again cost more than the rest of the unwrap.
    #[derive(serde::Deserialize, Default)]
    struct Wrapped<'a> {
        #[serde(default)]
        name: Value,
        #[serde(default, borrow)]
        args: Option<&'a RawValue>,
    }
    let outer: Wrapped<'_> = if raw.is_empty() {
        Wrapped::default()
    } else {
        serde_json::from_str(raw).map_err(|e| (Status::Invalid, format!("json Unmarshal: {e}")))?
    };
    let inner = match &outer.name {
        Value::String(name) => normalise_name(name),
        Value::Null => String::new(),
        _ => {
            return Err((
                Status::Invalid,
                "name must be a string: the exact name of the tool to run".into(),
            ));
        }
    };
    if inner.is_empty() {
        return Err((Status::Invalid, "name is required".into()));
    }
    if inner == RUN_TOOL {
        return Err((Status::Invalid, "run_tool cannot run itself".into()));
    }
    let Some(args) = outer.args else {
        return Ok((
            inner,
            "{}".to_string(),
            Some(Value::Object(Default::default())),
        ));
    };
    let text = args.get().trim();
    let parsed: Option<Value> = serde_json::from_str(text).ok();
    match parsed {
        // Some models send the inner arguments as a JSON string.
        Some(Value::String(s)) => match serde_json::from_str::<Value>(&s) {
            Ok(v @ Value::Object(_)) => Ok((inner, s.trim().to_string(), Some(v))),
            _ => Ok((inner, text.to_string(), Some(Value::String(s)))),
        },
        Some(Value::Null) => Ok((
            inner,
            "{}".to_string(),
            Some(Value::Object(Default::default())),
        )),
        other => Ok((inner, text.to_string(), other)),
    }
}

/// The dedupe key each call of a round will be checked under (`None` for a call that fails
/// before its key is made), computed once before the load: the load fetches only these
/// entries, and pass 1 reuses the keys instead of canonicalising and hashing again.
pub(crate) fn round_keys(calls: &[RawCall]) -> Vec<Option<DedupeKey>> {
    calls
        .iter()
        .map(|call| {
            let name = normalise_name(&call.name);
            if name.is_empty() {
                return None;
            }
            let args_raw = call.arguments.trim();
            if name == RUN_TOOL {
                let (inner, inner_raw, inner_parsed) = split_run_tool(args_raw).ok()?;
                Some(dedupe_key(&inner, inner_parsed.as_ref(), &inner_raw))
            } else {
                let parsed: Option<Value> = serde_json::from_str(args_raw).ok();
                Some(dedupe_key(&name, parsed.as_ref(), args_raw))
            }
        })
        .collect()
}
