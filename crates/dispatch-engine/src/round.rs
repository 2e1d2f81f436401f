//! One round, start to end: load state, pass 1 (pre-flight), pass 2 (execute), pass 3
//! (commit), store. Each pass lives in its own file; this one runs them in order and holds
//! the state they share.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use dispatch_store::{
    DedupeEntry, JournalEntry, PendingTask, RecordedCall, RoundRecord, RunSnapshot,
    SessionSnapshot, Todo, TranscriptEntry, TranscriptMessage,
};
use serde::Serialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::canonical::{DedupeKey, KeyMap};
use crate::client::ClientTools;
use crate::engine::{Engine, EngineError};
use crate::events::{Event, EventKind, EventLog, EventSink};
use crate::handoff::ClientCalls;
use crate::redact::{Redactor, ToolSecrets};
use crate::registry::Registry;
use crate::slot::{Slot, SlotResult, SlotState};
use crate::spec::Effect;
use crate::status::Status;
use crate::tool::Exclude;
use crate::wire::{Provider, RawCall, WireResult};

/// One round to dispatch.
pub struct RoundRequest {
    pub session: String,
    pub run: String,
    pub provider: Provider,
    pub calls: Vec<RawCall>,
    /// The caller's own tools, compiled once (`ClientTools::compile`) and shared by rounds.
    pub client_tools: ClientTools,
    pub exclude: Vec<String>,
    /// The whole run is allowed: the gate only applies deny rules.
    pub allow_all: bool,
    /// The caller gave the model every tool's full schema (an MCP client lists them all with
    /// `tools/list`), so no call waits for find_tools first.
    pub schemas_shown: bool,
    pub cancel: CancellationToken,
    /// Live copy of every event as it happens.
    pub live: Option<Arc<dyn EventSink>>,
    /// The session this round works for, when it is not its own (a subagent leg's parent):
    /// its confirmations carry it, so whoever answers for that session answers them too.
    pub parent_session: Option<String>,
}

impl RoundRequest {
    pub fn new(
        session: impl Into<String>,
        run: impl Into<String>,
        provider: Provider,
        calls: Vec<RawCall>,
    ) -> Self {
        RoundRequest {
            session: session.into(),
            run: run.into(),
            provider,
            calls,
            client_tools: ClientTools::default(),
            exclude: Vec::new(),
            allow_all: false,
            schemas_shown: false,
            cancel: CancellationToken::new(),
            live: None,
            parent_session: None,
        }
    }
}

/// What a round produced.
#[derive(Clone, Debug, Serialize)]
pub struct RoundOutcome {
    pub session: String,
    pub run: String,
    /// The round's number in its run, from 1; 0 when the reply carried no calls and nothing was
    /// committed ([`RoundOutcome::no_calls`]).
    pub round: u64,
    pub results: Vec<SlotResult>,
    pub events: Vec<Arc<Event>>,
    pub pending: Option<PendingTask>,
    /// A tool reported a fatal error: the results are committed, but the run should stop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fatal: Option<String>,
    /// Mutating calls of earlier rounds of this session that started but whose results were
    /// never committed (the process died): reported once, never run again (DESIGN §4.7).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub interrupted: Vec<JournalEntry>,
    /// The sequence numbers the store gave the round's events (`SessionStore::events`), so a
    /// caller that follows the log knows where the round ended without reading it back.
    #[serde(skip)]
    pub event_seqs: std::ops::Range<u64>,
}

impl RoundOutcome {
    /// The outcome of an assistant reply without tool calls: the model answered, so there is
    /// nothing to run, and no round is committed (the run's round count, its events and its
    /// store are untouched).
    pub fn no_calls(session: impl Into<String>, run: impl Into<String>) -> Self {
        RoundOutcome {
            session: session.into(),
            run: run.into(),
            round: 0,
            results: Vec::new(),
            events: Vec::new(),
            pending: None,
            fatal: None,
            interrupted: Vec::new(),
            event_seqs: 0..0,
        }
    }

    /// The results to send back to the model (client-tool calls are the caller's to answer).
    pub fn wire_results(&self) -> Vec<WireResult<'_>> {
        self.results
            .iter()
            .filter(|r| r.status != Status::Client)
            .map(|r| WireResult {
                tool_call_id: r.id_origin.is_sent().then_some(r.tool_call_id.as_str()),
                name: r.called_as.as_deref().unwrap_or(&r.name),
                content: &r.content,
                is_error: r.is_error,
                images: &r.images,
            })
            .collect()
    }

    /// The results in the provider's wire format.
    pub fn render(&self, provider: Provider) -> Vec<Value> {
        provider.format().render_results(&self.wire_results())
    }

    /// The round report of DESIGN §5.
    pub fn report(&self) -> Value {
        serde_json::to_value(self).unwrap_or_else(|e| json!({"error": e.to_string()}))
    }

    /// The round report written straight to `out`: the same JSON as [`RoundOutcome::report`]
    /// without building it in memory first (a tree of it, then its text, would hold every
    /// argument and result twice more). Each call's arguments are one shared text in the
    /// outcome, however many events carry them.
    pub fn write_report(&self, out: impl std::io::Write) -> serde_json::Result<()> {
        serde_json::to_writer(out, self)
    }
}

/// State shared by the three passes of one round.
pub(crate) struct RoundCx<'e> {
    pub engine: &'e Engine,
    /// The tools as they were when the round started.
    pub registry: Arc<Registry>,
    pub req: RoundRequest,
    pub session_id: Arc<str>,
    pub run_id: Arc<str>,
    pub log: Arc<EventLog>,
    pub exclude: Arc<Exclude>,
    pub session: SessionSnapshot,
    pub run: RunSnapshot,
    pub dedupe: KeyMap<DedupeEntry>,
    /// Each call's dedupe key, by call index, made before the load (see `round_keys`).
    pub call_keys: Vec<Option<crate::canonical::DedupeKey>>,
    pub record: RoundRecord,
    pub newly_marked: BTreeSet<String>,
    pub todos: Option<Vec<Todo>>,
    pub fatal: Option<String>,
    /// `related_errors` text per slot index, looked up before the commit.
    pub related: HashMap<usize, String>,
    /// Journal entries of this round's mutating calls, closed by its commit.
    pub journaled: Vec<String>,
    /// Journal entries left open by earlier rounds, reported by this one.
    pub interrupted: Vec<JournalEntry>,
    /// Result cache entries committed results asked for, written after the commit.
    pub cache_puts: Vec<crate::tool::CachePut>,
    pub redactor: Redactor,
    /// The secrets handed to tools; storing one also extends `redactor`.
    pub tool_secrets: Option<ToolSecrets>,
}

impl RoundCx<'_> {
    pub fn mark(&mut self, name: &str) {
        if self.session.marked.insert(name.to_string()) {
            self.newly_marked.insert(name.to_string());
        }
    }

    pub fn emit(&self, kind: EventKind) {
        self.log.emit(kind);
    }
}

impl Engine {
    /// Dispatch one round: check every call, run the ready ones, commit in call order. A reply
    /// without calls is the model's answer, not a round: [`RoundOutcome::no_calls`], and nothing
    /// is stored.
    pub async fn round(&self, req: RoundRequest) -> Result<RoundOutcome, EngineError> {
        self.hold_session(&req.session).await.round(req).await
    }

    /// [`Engine::round`] once the session is held.
    pub(crate) async fn round_held(&self, req: RoundRequest) -> Result<RoundOutcome, EngineError> {
        let mut cx = self.begin(req).await?;
        let round = cx.record.round;
        let calls = std::mem::take(&mut cx.req.calls);
        cx.record.transcript.push(TranscriptEntry {
            run: cx.req.run.clone(),
            round,
            in_tools: false,
            message: assistant_message(&calls, &cx.redactor),
        });

        // A reply with a valid client call is the caller's to run (spec §1.1, `handoff.rs`).
        let (mut slots, handoff) = match cx.client_calls(&calls) {
            ClientCalls::HandedBack(slots) => (slots, true),
            ClientCalls::Checked(decided) => {
                // Pass 1: check every call in order (invalid client calls are decided).
                let mut slots = cx.preflight(&calls, decided).await;
                // A call that needs the user parks the run instead of running (spec §1.4).
                let pending = cx.park_for_ask_user(&calls, &mut slots);
                if pending.is_none() {
                    // Pass 2: run the ready calls.
                    cx.execute(&mut slots).await;
                    if cx.req.cancel.is_cancelled() {
                        return cx.cancelled(&slots).await;
                    }
                }
                cx.record.pending = pending;
                cx.recall_errors(&slots).await;
                (slots, false)
            }
        };
        // Pass 3: every result, in call order.
        let results = cx.commit(&calls, &mut slots);
        if handoff {
            // The caller runs the client tools; this run's part of the turn ends here.
            cx.emit(EventKind::Done);
        }
        cx.finish(results).await
    }

    /// The next round of `req.run`, loaded from the store, before any call is looked at. The
    /// caller holds the session's lock.
    pub(crate) async fn begin(&self, req: RoundRequest) -> Result<RoundCx<'_>, EngineError> {
        // Only the entries this round's calls could be answered from: a load costs O(calls),
        // not O(entries the run has remembered).
        let call_keys = crate::preflight::round_keys(&req.calls);
        let mut keys: Vec<String> = Vec::with_capacity(call_keys.len());
        for hex in call_keys.iter().flatten().map(|key| key.to_hex()) {
            if !keys.contains(&hex) {
                keys.push(hex);
            }
        }
        // The three reads are independent: a store that serves reads in parallel (SQLite's
        // reader threads, Redis) answers them in the time of one.
        let redactor = async {
            // Fail closed: a round that cannot learn the secrets could not keep them out.
            match &self.secrets {
                Some(store) => self
                    .redaction
                    .redactor(store.as_ref())
                    .await
                    .map_err(|e| EngineError::Secrets(e.to_string())),
                None => Ok(Redactor::default()),
            }
        };
        // Rounds of a session run one at a time, so a journal entry still open here was begun
        // by a round that never committed.
        let (loaded, interrupted, redactor) = tokio::join!(
            self.store.load_keys(&req.session, &req.run, &keys),
            self.store.journal_open(&req.session),
            redactor,
        );
        let (session, run) = loaded?;
        let interrupted = interrupted?;
        let redactor = redactor?;
        let tool_secrets = self
            .secrets
            .clone()
            .map(|store| ToolSecrets::new(store, redactor.clone()));
        let log = Arc::new(EventLog::with_redactor(req.live.clone(), redactor.clone()));
        let round = run.rounds + 1;
        let record = RoundRecord {
            session: req.session.clone(),
            run: req.run.clone(),
            round,
            write_epoch: run.write_epoch,
            turn_allow_all: run.turn_allow_all,
            ..RoundRecord::default()
        };
        let mut run = run;
        let dedupe = std::mem::take(&mut run.dedupe)
            .into_iter()
            .filter_map(|e| Some((DedupeKey::from_hex(&e.key)?, e)))
            .collect();
        let exclude = Arc::new(Exclude::new(req.exclude.iter().cloned()));
        self.refresh_sources();
        let mut cx = RoundCx {
            engine: self,
            registry: self.registry(),
            session_id: Arc::from(req.session.as_str()),
            run_id: Arc::from(req.run.as_str()),
            req,
            log,
            exclude,
            session,
            run,
            dedupe,
            call_keys,
            record,
            newly_marked: BTreeSet::new(),
            todos: None,
            fatal: None,
            related: HashMap::new(),
            journaled: Vec::new(),
            interrupted: Vec::new(),
            cache_puts: Vec::new(),
            redactor,
            tool_secrets,
        };
        // After the load: an outage it met is reported with this round's events.
        cx.report_store_health();
        cx.report_interrupted(interrupted);
        Ok(cx)
    }
}

impl RoundCx<'_> {
    /// A `StoreDegraded` event when the store has a new health notice: a degraded store
    /// never fails a round, but the user should know their state is not being shared.
    pub(crate) fn report_store_health(&self) {
        if let Some(text) = self.engine.store.health_notice() {
            self.emit(EventKind::StoreDegraded { text });
        }
    }

    /// Pass 2 was cancelled: keep the assistant message and the events, commit nothing else.
    pub(crate) async fn cancelled(mut self, slots: &[Slot]) -> Result<RoundOutcome, EngineError> {
        self.emit(EventKind::Canceled {
            text: "the round was cancelled; no results were committed".into(),
        });
        // A mutating call that started may have changed things before it was stopped: the
        // run's remembered results must not outlive that.
        let mutation_started = slots.iter().any(|s| {
            matches!(s.state, SlotState::Running | SlotState::Executed(_))
                && s.effect == Effect::Mutates
        });
        if mutation_started {
            self.invalidate(&[]);
            self.record.write_epoch = self.run.write_epoch;
        }
        let mut record = std::mem::take(&mut self.record);
        // The cancelled calls are the caller's knowledge now, not a dead round's.
        record.journal_done.append(&mut self.journaled);
        self.log.emit(EventKind::RoundCommitted {
            run: self.req.run.clone(),
            round: record.round,
        });
        record.events = store_events(&self.log.take());
        self.engine.store.commit_round(record).await?;
        Err(EngineError::Cancelled)
    }

    pub(crate) async fn finish(
        mut self,
        results: Vec<SlotResult>,
    ) -> Result<RoundOutcome, EngineError> {
        // A run parked now: its task holds every result of the run, earlier rounds included.
        let earlier = if self.record.pending.is_some() {
            match self
                .engine
                .store
                .transcript(&self.req.session, Some(&self.req.run))
                .await
            {
                Ok(entries) => entries,
                Err(e) => {
                    self.emit(EventKind::Error {
                        text: format!(
                            "the run's earlier results could not be read, so the pending task holds only this round's: {e}"
                        ),
                    });
                    Vec::new()
                }
            }
        } else {
            Vec::new()
        };
        self.emit(EventKind::RoundCommitted {
            run: self.req.run.clone(),
            round: self.record.round,
        });
        let events = self.log.take();
        let mut record = std::mem::take(&mut self.record);
        record.journal_done.append(&mut self.journaled);
        record.marked = self.newly_marked.iter().cloned().collect();
        record.todos = self.todos.take();
        if let Some(pending) = record.pending.as_mut() {
            pending.tool_results =
                crate::answer::results_so_far(earlier.iter().chain(&record.transcript));
            if let Some(todos) = &record.todos {
                pending.todos = todos.clone();
            }
        }
        record.events = store_events(&events);
        let pending = record.pending.clone();
        let round = record.round;
        let committed = self.engine.store.commit_round(record).await?;
        // An outage the commit met is reported too (live and in the outcome; the record
        // is already written).
        self.report_store_health();
        // After the commit: an entry must never describe a result that was not committed.
        // A cache that fails costs a later fetch, never this round.
        if let Some(cache) = &self.engine.result_cache {
            for put in std::mem::take(&mut self.cache_puts) {
                if let Err(e) = cache
                    .cache_put(&put.scope, &put.key, &put.value, put.ttl)
                    .await
                {
                    self.log.emit(EventKind::Error {
                        text: format!("result cache unavailable, {} not cached: {e}", put.key),
                    });
                }
            }
        }
        // Cache failures happen after the record was written: the outcome still shows them.
        let mut events = events;
        events.extend(self.log.take());
        Ok(RoundOutcome {
            session: self.req.session,
            run: self.req.run,
            round,
            results,
            events,
            pending,
            fatal: self.fatal,
            interrupted: self.interrupted,
            event_seqs: committed.events,
        })
    }

    /// Close the journal entries an earlier, dead round left open, say so, and forget what
    /// the run remembered if one of them belonged to it (its write may have half happened).
    fn report_interrupted(&mut self, entries: Vec<JournalEntry>) {
        if entries.is_empty() {
            return;
        }
        if entries.iter().any(|e| e.run == self.req.run) {
            self.invalidate(&[]);
            self.record.write_epoch = self.run.write_epoch;
        }
        for entry in &entries {
            self.emit(EventKind::Error {
                text: format!(
                    "call {} ({}) of round {} in run {} was interrupted before its result was committed; it was not run again, so check what it may have changed",
                    entry.tool_call_id, entry.tool_name, entry.round, entry.run
                ),
            });
            self.record.journal_done.push(entry.id.clone());
        }
        self.interrupted = entries;
    }
}

/// Trim a tool name and cut it at the first `<|` (leaked special-token tails).
pub(crate) fn normalise_name(name: &str) -> String {
    normalised(name).to_string()
}

/// `normalise_name` without the copy.
pub(crate) fn normalised(name: &str) -> &str {
    let name = name.trim();
    match name.find("<|") {
        Some(i) => name[..i].trim(),
        None => name,
    }
}

/// The provider-neutral assistant message that carried the calls.
fn assistant_message(calls: &[RawCall], redactor: &Redactor) -> TranscriptMessage {
    let tool_calls = calls
        .iter()
        .map(|c| RecordedCall {
            id: c.id.clone(),
            name: normalise_name(&c.name),
            arguments: redactor.redact(c.arguments.trim()).into_owned(),
        })
        .collect();
    TranscriptMessage::Assistant { tool_calls }
}

/// The events for the store, which writes them as JSON only when it needs the text.
/// The events the store keeps. A call's streamed text (`ToolCallText`) is live only: its
/// result event carries what the model saw, and storing the stream too would store most
/// results twice.
fn store_events(events: &[Arc<Event>]) -> Vec<Arc<dyn dispatch_store::EventJson>> {
    events
        .iter()
        .filter(|e| !matches!(e.kind, EventKind::ToolCallText { .. }))
        .map(|e| Arc::clone(e) as Arc<dyn dispatch_store::EventJson>)
        .collect()
}

pub(crate) fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Go-style duration text (`5m0s`, `1m30s`, `250ms`), as the seed's messages use.
pub(crate) fn go_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let secs = d.as_secs();
    let frac = d.subsec_millis();
    let s = if frac == 0 {
        format!("{}s", secs % 60)
    } else {
        let frac = format!("{frac:03}");
        format!("{}.{}s", secs % 60, frac.trim_end_matches('0'))
    };
    match (secs / 3600, (secs % 3600) / 60) {
        (0, 0) => s,
        (0, m) => format!("{m}m{s}"),
        (h, m) => format!("{h}h{m}m{s}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_duration_matches_go_formatting() {
        assert_eq!(go_duration(Duration::from_secs(300)), "5m0s");
        assert_eq!(go_duration(Duration::from_secs(60)), "1m0s");
        assert_eq!(go_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(go_duration(Duration::from_secs(45)), "45s");
        assert_eq!(go_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration(Duration::from_secs(3600 * 2 + 5)), "2h0m5s");
    }

    #[test]
    fn name_is_trimmed_and_cut_at_special_token() {
        assert_eq!(
            normalise_name("  read_files<|channel|>commentary "),
            "read_files"
        );
        assert_eq!(normalise_name("calculate"), "calculate");
    }
}
