//! The daemon's live side: the sessions it has seen, each one's feed of events, who watches,
//! and the confirmations waiting for an answer. The hub is the daemon's [`Confirmer`]: a
//! call that needs approval waits for a watching client, and is declined at once when nobody
//! watches (the headless rule, DESIGN §3).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use dispatch_engine::{ClientTools, ConfirmReply, ConfirmRequest, Confirmer, Event, EventSink};
use dispatch_store::EventJson;
use serde::Serialize;
use serde_json::json;
use tokio::sync::{broadcast, oneshot};
use tokio_util::sync::CancellationToken;

/// Events a slow watcher may fall behind by before it must catch up from the store.
const FEED_CAPACITY: usize = 1024;

/// Sessions kept in memory. Past it, the longest-idle session that nobody watches and that
/// has no round in flight is forgotten (its state stays in the store; only the daemon's
/// declared client tools and exclusions go).
const MAX_SESSIONS: usize = 10_000;

/// One message of a session's feed. `round` is the daemon's ticket for the round it belongs
/// to (rounds of a session are numbered in the order this process started them), so a
/// watcher that replayed the store can tell which live messages it has already seen.
#[derive(Clone, Debug)]
pub enum Feed {
    /// An event of a round in flight (JSON text). `stored`: an engine event, which the store
    /// keeps when the round commits; daemon events (`RoundStarted`, confirmations) are live only.
    Live {
        round: u64,
        stored: bool,
        json: Arc<str>,
    },
    /// The round ended. `last_seq` is the store's sequence number of its last event when it
    /// committed and someone watched; `json` is the `Committed` marker to send.
    Finished {
        round: u64,
        last_seq: Option<u64>,
        json: Arc<str>,
    },
}

/// A session as the daemon knows it.
#[derive(Clone, Debug, Serialize)]
pub struct SessionInfo {
    pub id: Arc<str>,
    pub created_ms: u64,
    pub last_active_ms: u64,
    /// Rounds (and answers) dispatched by this process.
    pub rounds: u64,
    /// Clients subscribed to this session's events right now.
    pub watchers: usize,
    #[serde(skip)]
    /// Checked and compiled when the session was created; every round shares them.
    pub client_tools: ClientTools,
    #[serde(skip)]
    pub exclude: Arc<Vec<String>>,
}

struct SessionState {
    info: SessionInfo,
    /// Created when the first watcher subscribes: most sessions are never watched.
    feed: Option<broadcast::Sender<Feed>>,
    /// Created by `POST /v1/sessions` (then its client tools and exclusions are final).
    declared: bool,
    /// Bytes of client-tool declarations held (counted against the daemon's budget).
    client_bytes: usize,
    /// Cloned by each round from before it waits for the session until its `Finished`
    /// marker: a session with a round queued or running is never forgotten. (The rounds
    /// themselves are kept apart by the engine's hold on the session.)
    in_use: Arc<()>,
    /// Tickets handed out so far.
    started: u64,
    /// The ticket of the round in flight.
    current: Option<u64>,
    /// The highest event sequence number known to be committed.
    last_seq: u64,
}

impl SessionState {
    fn watchers(&self) -> usize {
        self.feed
            .as_ref()
            .map_or(0, broadcast::Sender::receiver_count)
    }

    fn view(&self) -> SessionInfo {
        let mut info = self.info.clone();
        info.watchers = self.watchers();
        info
    }
}

/// A confirmation waiting for an answer, as the API lists it.
#[derive(Clone, Debug, Serialize)]
pub struct Confirmation {
    pub id: String,
    /// The call and why it asks (`session`, `run`, `tool_*`, `why`, `remember_rule`).
    #[serde(flatten)]
    pub request: ConfirmRequest,
    pub created_ms: u64,
    pub expires_ms: u64,
}

struct Waiting {
    view: Confirmation,
    reply: oneshot::Sender<ConfirmReply>,
}

/// Why a session could not be created.
#[derive(Debug, PartialEq, Eq)]
pub enum CreateError {
    Exists,
    /// Its client tools would take the sessions' declarations past the daemon's budget.
    OverBudget {
        /// Bytes of declarations the daemon holds now.
        held: usize,
        /// Sessions holding them.
        sessions: usize,
    },
}

/// Why a session could not be released.
#[derive(Debug, PartialEq, Eq)]
pub enum ReleaseError {
    Unknown,
    /// A round of it is queued or running.
    InUse,
}

pub struct Hub {
    sessions: Mutex<HashMap<Arc<str>, SessionState>>,
    /// Every session's feed, tagged with the session, for the console's overview.
    global: broadcast::Sender<(Arc<str>, Feed)>,
    confirmations: Mutex<HashMap<String, Waiting>>,
    next_confirmation: AtomicU64,
    confirm_timeout: Duration,
    /// Set when the daemon shuts down: waiting confirmations are declined, none are taken.
    closing: CancellationToken,
    /// Sessions whose confirmations another confirmer answers: an MCP client that can ask
    /// its user (elicitation) is asked instead of the console.
    routes: Mutex<HashMap<String, Arc<dyn Confirmer>>>,
    /// Bytes of client-tool declarations all known sessions hold (changed under the
    /// sessions' lock).
    client_bytes: AtomicUsize,
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these maps leaves it consistent (every update is one
    // insert or remove), so a poisoned lock is still safe to use.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Hub {
    pub fn new(confirm_timeout: Duration) -> Arc<Hub> {
        let (global, _) = broadcast::channel(FEED_CAPACITY);
        Arc::new(Hub {
            sessions: Mutex::new(HashMap::new()),
            global,
            confirmations: Mutex::new(HashMap::new()),
            next_confirmation: AtomicU64::new(1),
            confirm_timeout,
            closing: CancellationToken::new(),
            routes: Mutex::new(HashMap::new()),
            client_bytes: AtomicUsize::new(0),
        })
    }

    /// Let `confirmer` answer the confirmations of `session` until
    /// [`Hub::unroute_confirmations`]; other sessions keep the hub.
    pub fn route_confirmations(&self, session: &str, confirmer: Arc<dyn Confirmer>) {
        lock(&self.routes).insert(session.to_string(), confirmer);
    }

    /// The hub answers `session`'s confirmations again.
    pub fn unroute_confirmations(&self, session: &str) {
        lock(&self.routes).remove(session);
    }

    fn route(&self, session: &str) -> Option<Arc<dyn Confirmer>> {
        lock(&self.routes).get(session).cloned()
    }

    /// Who answers `request` when not the hub: its session's confirmer, else (a subagent
    /// leg's call) its parent session's.
    fn route_for(&self, request: &ConfirmRequest) -> Option<Arc<dyn Confirmer>> {
        self.route(&request.session).or_else(|| {
            request
                .parent_session
                .as_deref()
                .and_then(|parent| self.route(parent))
        })
    }

    fn new_state(id: &Arc<str>, client_tools: ClientTools, exclude: Vec<String>) -> SessionState {
        let now = now_ms();
        SessionState {
            info: SessionInfo {
                id: id.clone(),
                created_ms: now,
                last_active_ms: now,
                rounds: 0,
                watchers: 0,
                client_tools,
                exclude: Arc::new(exclude),
            },
            feed: None,
            declared: false,
            client_bytes: 0,
            in_use: Arc::default(),
            started: 0,
            current: None,
            last_seq: 0,
        }
    }

    /// Register a session (`POST /v1/sessions`) whose client-tool declarations take
    /// `client_bytes`, refused when the declarations of all sessions would then pass `budget`
    /// bytes (a session without client tools is never refused for it).
    pub fn create(
        &self,
        id: &str,
        client_tools: ClientTools,
        exclude: Vec<String>,
        client_bytes: usize,
        budget: usize,
    ) -> Result<SessionInfo, CreateError> {
        let mut sessions = lock(&self.sessions);
        let exists = sessions
            .get(id)
            .is_some_and(|state| state.declared || state.info.rounds > 0);
        if exists {
            return Err(CreateError::Exists);
        }
        let held = self.client_bytes.load(Ordering::Relaxed);
        if client_bytes > 0 && held.saturating_add(client_bytes) > budget {
            let holding = sessions.values().filter(|s| s.client_bytes > 0).count();
            return Err(CreateError::OverBudget {
                held,
                sessions: holding,
            });
        }
        self.client_bytes.fetch_add(client_bytes, Ordering::Relaxed);
        if let Some(state) = sessions.get_mut(id) {
            // Watched or looked at before it was declared: it is still the caller's to set up.
            state.declared = true;
            state.client_bytes = client_bytes;
            state.info.client_tools = client_tools;
            state.info.exclude = Arc::new(exclude);
            return Ok(state.info.clone());
        }
        let id: Arc<str> = Arc::from(id);
        let mut state = Self::new_state(&id, client_tools, exclude);
        state.declared = true;
        state.client_bytes = client_bytes;
        let info = state.info.clone();
        self.make_room(&mut sessions);
        sessions.insert(id.clone(), state);
        drop(sessions);
        self.announce_created(&id);
        Ok(info)
    }

    /// Bytes of client-tool declarations the known sessions hold.
    pub fn client_tool_bytes(&self) -> usize {
        self.client_bytes.load(Ordering::Relaxed)
    }

    /// Forget a session (`DELETE /v1/sessions/{id}`): its client tools and exclusions leave
    /// the daemon's memory and its budget; its state in the store stays. Refused while a
    /// round of it is queued or running. Its event streams end.
    pub fn release(&self, id: &str) -> Result<usize, ReleaseError> {
        let mut sessions = lock(&self.sessions);
        let state = sessions.get(id).ok_or(ReleaseError::Unknown)?;
        if state.current.is_some() || Arc::strong_count(&state.in_use) > 1 {
            return Err(ReleaseError::InUse);
        }
        let bytes = state.client_bytes;
        sessions.remove(id);
        self.client_bytes.fetch_sub(bytes, Ordering::Relaxed);
        Ok(bytes)
    }

    /// Forget the longest-idle session nobody uses, when the map is full.
    fn make_room(&self, sessions: &mut HashMap<Arc<str>, SessionState>) {
        if sessions.len() < MAX_SESSIONS {
            return;
        }
        let idle = sessions
            .values()
            .filter(|s| {
                s.current.is_none() && s.watchers() == 0 && Arc::strong_count(&s.in_use) == 1
            })
            .min_by_key(|s| s.info.last_active_ms)
            .map(|s| s.info.id.clone());
        if let Some(state) = idle.and_then(|id| sessions.remove(&id)) {
            self.client_bytes
                .fetch_sub(state.client_bytes, Ordering::Relaxed);
        }
    }

    /// Tell the overview stream a session appeared.
    fn announce_created(&self, id: &Arc<str>) {
        if self.global.receiver_count() > 0 {
            let item = Feed::Live {
                round: 0,
                stored: false,
                json: Arc::from(r#"{"type":"SessionCreated"}"#),
            };
            let _ = self.global.send((id.clone(), item));
        }
    }

    /// The session as known, without registering it (a look is not a use).
    pub fn lookup(&self, id: &str) -> Option<SessionInfo> {
        lock(&self.sessions).get(id).map(SessionState::view)
    }

    /// The session, registered on first use (a round, a watcher).
    pub fn session(&self, id: &str) -> SessionInfo {
        self.with_session(id, |state| state.view())
    }

    /// Work on the session's state under one lock, registering the session first if needed.
    fn with_session<R>(&self, id: &str, work: impl FnOnce(&mut SessionState) -> R) -> R {
        let mut sessions = lock(&self.sessions);
        if let Some(state) = sessions.get_mut(id) {
            return work(state);
        }
        let id: Arc<str> = Arc::from(id);
        let mut state = Self::new_state(&id, ClientTools::default(), Vec::new());
        let out = work(&mut state);
        self.make_room(&mut sessions);
        sessions.insert(id.clone(), state);
        drop(sessions);
        self.announce_created(&id);
        out
    }

    /// Every session, most recently active first.
    pub fn sessions(&self) -> Vec<SessionInfo> {
        let sessions = lock(&self.sessions);
        let mut list: Vec<SessionInfo> = sessions.values().map(SessionState::view).collect();
        list.sort_by(|a, b| {
            b.last_active_ms
                .cmp(&a.last_active_ms)
                .then_with(|| a.id.cmp(&b.id))
        });
        list
    }

    /// Keep the session known while the returned token lives: a round holds one from before
    /// it waits for the session until its `Finished` marker.
    pub fn keep_session(&self, id: &str) -> Arc<()> {
        self.with_session(id, |state| state.in_use.clone())
    }

    /// Subscribe to a session's feed (the subscription makes the session watched).
    pub fn watch(&self, id: &str) -> broadcast::Receiver<Feed> {
        self.with_session(id, |state| {
            state
                .feed
                .get_or_insert_with(|| broadcast::channel(FEED_CAPACITY).0)
                .subscribe()
        })
    }

    /// Rounds of the session started so far (see [`Feed`]).
    pub fn rounds_started(&self, id: &str) -> u64 {
        lock(&self.sessions).get(id).map_or(0, |s| s.started)
    }

    /// A watcher replayed the store up to `seq`.
    pub fn note_seq(&self, id: &str, seq: u64) {
        if let Some(s) = lock(&self.sessions).get_mut(id) {
            s.last_seq = s.last_seq.max(seq);
        }
    }

    pub fn watch_all(&self) -> broadcast::Receiver<(Arc<str>, Feed)> {
        self.global.subscribe()
    }

    fn send(&self, session: &Arc<str>, feed: Option<&broadcast::Sender<Feed>>, item: Feed) {
        if self.global.receiver_count() > 0 {
            let _ = self.global.send((session.clone(), item.clone()));
        }
        if let Some(feed) = feed.filter(|f| f.receiver_count() > 0) {
            let _ = feed.send(item);
        }
    }

    /// An event of the daemon's own (never stored) on a session's feed.
    fn send_daemon_event(
        &self,
        session: &Arc<str>,
        feed: Option<&broadcast::Sender<Feed>>,
        round: u64,
        value: &serde_json::Value,
    ) {
        let item = Feed::Live {
            round,
            stored: false,
            json: Arc::from(value.to_string()),
        };
        self.send(session, feed, item);
    }

    /// A round of `session` starts: its ticket, and the sink its live events go to.
    pub fn start_round(self: &Arc<Self>, id: &str, run: &str) -> RoundFeed {
        let (round, session, feed) = self.with_session(id, |state| {
            state.started += 1;
            state.current = Some(state.started);
            state.info.rounds += 1;
            state.info.last_active_ms = now_ms();
            (state.started, state.info.id.clone(), state.feed.clone())
        });
        let started = json!({"type": "RoundStarted", "run": run});
        self.send_daemon_event(&session, feed.as_ref(), round, &started);
        RoundFeed {
            session,
            round,
            feed,
            global: self.global.clone(),
        }
    }

    /// Whether anyone would see the round's `Finished` marker (then it is worth reading the
    /// store for the last sequence number).
    pub fn watched(&self, id: &str) -> bool {
        self.global.receiver_count() > 0
            || lock(&self.sessions)
                .get(id)
                .is_some_and(|s| s.watchers() > 0)
    }

    pub fn last_seq(&self, id: &str) -> u64 {
        lock(&self.sessions).get(id).map_or(0, |s| s.last_seq)
    }

    /// The round ended; `committed` carries its run, number and last event sequence number
    /// when it committed.
    pub fn finish_round(
        &self,
        feed: &RoundFeed,
        committed: Option<(&str, u64)>,
        last_seq: Option<u64>,
    ) {
        let mut sessions = lock(&self.sessions);
        let mut watchers = None;
        if let Some(state) = sessions.get_mut(&*feed.session) {
            watchers = state.feed.clone();
            if state.current == Some(feed.round) {
                state.current = None;
            }
            if let Some(seq) = last_seq {
                state.last_seq = state.last_seq.max(seq);
            }
            state.info.last_active_ms = now_ms();
        }
        drop(sessions);
        let marker = match committed {
            Some((run, round)) => {
                json!({"type": "Committed", "run": run, "round": round, "last_event_id": last_seq})
            }
            None => {
                json!({"type": "RoundEnded", "text": "the round ended without committing results"})
            }
        };
        self.send(
            &feed.session,
            watchers.as_ref(),
            Feed::Finished {
                round: feed.round,
                last_seq,
                json: Arc::from(marker.to_string()),
            },
        );
    }

    /// A daemon event for a session's round in flight (or its latest round).
    fn announce(&self, id: &str, value: serde_json::Value) {
        let sessions = lock(&self.sessions);
        let Some(state) = sessions.get(id) else {
            return;
        };
        let round = state.current.unwrap_or(state.started);
        let (session, feed) = (state.info.id.clone(), state.feed.clone());
        drop(sessions);
        self.send_daemon_event(&session, feed.as_ref(), round, &value);
    }

    /// A confirmation's event on its session's stream and, for a subagent leg's call, on its
    /// parent's too: whoever drives the parent approves the calls of its subagents.
    fn announce_confirmation(&self, request: &ConfirmRequest, value: &serde_json::Value) {
        self.announce(&request.session, value.clone());
        if let Some(parent) = request
            .parent_session
            .as_deref()
            .filter(|p| *p != request.session)
        {
            self.announce(parent, value.clone());
        }
    }

    /// An event of an agent turn (the model's side) on the session's feed, live only.
    pub fn announce_agent(&self, id: &str, value: &serde_json::Value) {
        let (round, session, feed) = self.with_session(id, |state| {
            state.info.last_active_ms = now_ms();
            (
                state.current.unwrap_or(state.started),
                state.info.id.clone(),
                state.feed.clone(),
            )
        });
        self.send_daemon_event(&session, feed.as_ref(), round, value);
    }

    /// Confirmations waiting now, oldest first; only one session's when given.
    pub fn confirmations(&self, session: Option<&str>) -> Vec<Confirmation> {
        let waiting = lock(&self.confirmations);
        let mut list: Vec<Confirmation> = waiting
            .values()
            .filter(|w| session.is_none_or(|s| w.view.request.concerns(s)))
            .map(|w| w.view.clone())
            .collect();
        list.sort_by(|a, b| {
            a.created_ms
                .cmp(&b.created_ms)
                .then_with(|| a.id.cmp(&b.id))
        });
        list
    }

    /// Answer a waiting confirmation; `false` when there is none by that id (answered,
    /// expired, or never asked).
    pub fn resolve(&self, id: &str, reply: ConfirmReply) -> bool {
        let Some(waiting) = lock(&self.confirmations).remove(id) else {
            return false;
        };
        let approve = reply.approve;
        // The round may have stopped waiting a moment ago (timeout, cancel): then the answer
        // has no one to go to, which is what the caller is told.
        let delivered = waiting.reply.send(reply).is_ok();
        if delivered {
            self.announce_confirmation(
                &waiting.view.request,
                &json!({"type": "ConfirmationResolved", "id": id, "approve": approve}),
            );
        }
        delivered
    }

    /// The daemon is stopping: decline what waits, and take no new confirmations.
    pub fn close(&self) {
        self.closing.cancel();
        let waiting: Vec<Waiting> = lock(&self.confirmations).drain().map(|(_, w)| w).collect();
        for w in waiting {
            let _ = w.reply.send(ConfirmReply {
                approve: false,
                reason: Some("the daemon is shutting down".into()),
                ..ConfirmReply::default()
            });
        }
    }

    pub fn closing(&self) -> bool {
        self.closing.is_cancelled()
    }

    pub fn closed(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.closing.cancelled()
    }
}

/// Removes a confirmation that stopped waiting (timed out, round cancelled) from the list.
struct Forget<'a> {
    hub: &'a Hub,
    id: String,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        lock(&self.hub.confirmations).remove(&self.id);
    }
}

#[async_trait]
impl Confirmer for Hub {
    async fn confirm(&self, request: &ConfirmRequest) -> ConfirmReply {
        if let Some(routed) = self.route_for(request) {
            return routed.confirm(request).await;
        }
        let (tx, rx) = oneshot::channel();
        let n = self.next_confirmation.fetch_add(1, Ordering::Relaxed);
        let id = format!("cf-{n}");
        let created_ms = now_ms();
        let limit = u64::try_from(self.confirm_timeout.as_millis()).unwrap_or(u64::MAX);
        let view = Confirmation {
            id: id.clone(),
            request: request.clone(),
            created_ms,
            expires_ms: created_ms.saturating_add(limit),
        };
        let announcement = json!({"type": "ConfirmationRequested", "confirmation": &view});
        lock(&self.confirmations).insert(id.clone(), Waiting { view, reply: tx });
        let _forget = Forget { hub: self, id };
        self.announce_confirmation(request, &announcement);
        tokio::select! {
            reply = rx => reply.unwrap_or_else(|_| ConfirmReply {
                approve: false,
                reason: Some("the daemon is shutting down".into()),
                ..ConfirmReply::default()
            }),
            () = self.closing.cancelled() => ConfirmReply {
                approve: false,
                reason: Some("the daemon is shutting down".into()),
                ..ConfirmReply::default()
            },
        }
    }

    /// Someone can approve only while a client watches this session, or every session.
    fn available(&self, request: &ConfirmRequest) -> bool {
        if self.closing() {
            return false;
        }
        match self.route_for(request) {
            Some(routed) => routed.available(request),
            None => {
                self.watched(&request.session)
                    || request
                        .parent_session
                        .as_deref()
                        .is_some_and(|parent| self.watched(parent))
            }
        }
    }

    fn unavailable_reason(&self) -> &str {
        "no one is available to approve it (no client is watching this session: approvals come from the web console or an API client subscribed to the session's events; the user can also allow such calls with a rule in .tooldispatch/rules, or start the daemon with --approve all)"
    }
}

/// Where one round's live events go: the session's feed and the global one.
pub struct RoundFeed {
    pub session: Arc<str>,
    pub round: u64,
    /// The session's feed when the round started; a watcher that comes later gets this
    /// round's events from the store (see stream.rs).
    feed: Option<broadcast::Sender<Feed>>,
    global: broadcast::Sender<(Arc<str>, Feed)>,
}

impl EventSink for RoundFeed {
    fn send(&self, event: &Arc<Event>) {
        let watched = self.feed.as_ref().is_some_and(|f| f.receiver_count() > 0);
        let everywhere = self.global.receiver_count() > 0;
        if !watched && !everywhere {
            return;
        }
        let item = Feed::Live {
            round: self.round,
            stored: true,
            json: Arc::from(event.to_json()),
        };
        if everywhere {
            let _ = self.global.send((self.session.clone(), item.clone()));
        }
        if let Some(feed) = self.feed.as_ref().filter(|_| watched) {
            let _ = feed.send(item);
        }
    }
}
