//! The event streams (SSE). A session's stream first replays its committed events from the
//! store (each with its sequence number as the SSE id, so `Last-Event-ID` resumes exactly),
//! then forwards live events as they happen, and a `Committed` marker with the id of each
//! round's last event.
//!
//! A round may commit while the replay is read, or have started before the subscription.
//! Its stored events would then arrive twice, or only in part. So the stored events of
//! rounds that had started by the end of the replay are not taken from the live feed: when
//! such a round commits, its events are read from the store (unless the replay had them).
//! Rounds started later cannot be in the replay and go out as they happen. Daemon events
//! (confirmations, `RoundStarted`) are never stored and always go out at once.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::Stream;
use serde::Deserialize;
use tokio::sync::{broadcast, mpsc};

use crate::Daemon;
use crate::api::session_id;
use crate::error::ApiError;
use crate::hub::Feed;

#[derive(Deserialize)]
pub struct EventsQuery {
    after: Option<u64>,
}

type EventStream = Sse<
    axum::response::sse::KeepAliveStream<
        futures_util::stream::BoxStream<'static, Result<SseEvent, Infallible>>,
    >,
>;

fn into_stream(rx: mpsc::Receiver<SseEvent>) -> EventStream {
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|event| (Ok::<_, Infallible>(event), rx))
    });
    Sse::new(boxed(stream)).keep_alive(KeepAlive::default())
}

fn boxed<S>(stream: S) -> futures_util::stream::BoxStream<'static, Result<SseEvent, Infallible>>
where
    S: Stream<Item = Result<SseEvent, Infallible>> + Send + 'static,
{
    Box::pin(stream)
}

/// `GET /v1/sessions/{id}/events`
pub async fn session_events(
    State(daemon): State<Arc<Daemon>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<EventStream, ApiError> {
    let id = session_id(id)?;
    let Query(query) = query?;
    let after = match headers.get("last-event-id") {
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or_else(|| {
                ApiError::bad_request(
                    "bad_request",
                    "Last-Event-ID must be the id of an event this stream sent (a number)",
                )
            })?,
        None => query.after.unwrap_or(0),
    };
    // Subscribed before the replay is read, so nothing falls between the two. The replay is
    // read before the response starts: every round that starts after a client has the
    // stream's headers comes to it live.
    let feed = daemon.hub.watch(&id);
    let backlog = daemon.store.events(&id, after).await.map_err(|e| {
        ApiError::internal(format!(
            "cannot read the session's events from the store: {e}; retry"
        ))
    })?;
    let settled = daemon.hub.rounds_started(&id);
    let (tx, rx) = mpsc::channel(256);
    tokio::spawn(pump(daemon, id, after, feed, tx, Some((backlog, settled))));
    Ok(into_stream(rx))
}

/// Send one message unless the daemon is shutting down: a client that stops reading must not
/// hold the shutdown up.
async fn send(daemon: &Daemon, tx: &mpsc::Sender<SseEvent>, event: SseEvent) -> Result<(), ()> {
    tokio::select! {
        sent = tx.send(event) => sent.map_err(|_| ()),
        () = daemon.hub.closed() => Err(()),
    }
}

/// Send the session's committed events with a sequence number in `(after, until]` (all after
/// `after` when `until` is `None`), each with its id; `after` moves to the last one sent.
/// `Err` when the client is gone or the store failed (the stream then ends).
async fn replay(
    daemon: &Daemon,
    id: &str,
    after: &mut u64,
    until: Option<u64>,
    tx: &mpsc::Sender<SseEvent>,
) -> Result<(), ()> {
    let events = match daemon.store.events(id, *after).await {
        Ok(events) => events,
        Err(e) => {
            // The store's text goes to the daemon's log only (see `error`).
            let err = crate::error::log_internal(&format!(
                "cannot read session {id}'s events from the store: {e}"
            ));
            let text = serde_json::json!({"type": "Error", "id": err, "text": format!("the daemon could not read the session's events (see the daemon's log for {err}); reconnect with Last-Event-ID to resume")});
            let _ = send(daemon, tx, SseEvent::default().data(text.to_string())).await;
            return Err(());
        }
    };
    for (seq, json) in events {
        if until.is_some_and(|last| seq > last) {
            break;
        }
        send(
            daemon,
            tx,
            SseEvent::default().id(seq.to_string()).data(json),
        )
        .await?;
        *after = seq;
    }
    Ok(())
}

/// The committed events the handler read, and the rounds started when it read them.
type Backlog = (Vec<(u64, String)>, u64);

async fn pump(
    daemon: Arc<Daemon>,
    id: String,
    mut after: u64,
    mut feed: broadcast::Receiver<Feed>,
    tx: mpsc::Sender<SseEvent>,
    mut backlog: Option<Backlog>,
) {
    'replay: loop {
        // Rounds with a ticket up to `settled` had started when the replay was read: their
        // stored events may be in it, or may have been partly missed before the subscription.
        // They come from the store when they commit, never from the live feed.
        let settled = match backlog.take() {
            Some((events, settled)) => {
                for (seq, json) in events {
                    let event = SseEvent::default().id(seq.to_string()).data(json);
                    if send(&daemon, &tx, event).await.is_err() {
                        return;
                    }
                    after = seq;
                }
                settled
            }
            None => {
                if replay(&daemon, &id, &mut after, None, &tx).await.is_err() {
                    return;
                }
                daemon.hub.rounds_started(&id)
            }
        };
        daemon.hub.note_seq(&id, after);
        let replayed = after;
        loop {
            let item = tokio::select! {
                item = feed.recv() => item,
                () = daemon.hub.closed() => return,
                () = tx.closed() => return,
            };
            let out = match item {
                Ok(Feed::Live {
                    round,
                    stored: true,
                    ..
                }) if round <= settled => continue,
                Ok(Feed::Live { json, .. }) => SseEvent::default().data(&*json),
                Ok(Feed::Finished {
                    round,
                    last_seq,
                    json,
                }) => {
                    if let Some(last) = last_seq {
                        if round <= settled && last > replayed {
                            // Bounded by this round's last event: a later round's events
                            // come live.
                            if replay(&daemon, &id, &mut after, Some(last), &tx)
                                .await
                                .is_err()
                            {
                                return;
                            }
                        }
                        after = after.max(last);
                    }
                    if round <= settled && last_seq.is_some_and(|last| last <= replayed) {
                        continue; // the replay had all of it
                    }
                    let marker = SseEvent::default().data(&*json);
                    match last_seq {
                        Some(last) => marker.id(last.to_string()),
                        None => marker,
                    }
                }
                // Fell behind the feed: catch up from the store, from the last id sent.
                Err(broadcast::error::RecvError::Lagged(_)) => continue 'replay,
                Err(broadcast::error::RecvError::Closed) => return,
            };
            if send(&daemon, &tx, out).await.is_err() {
                return;
            }
        }
    }
}

/// `GET /v1/events`: every session's live events, each tagged with its session.
pub async fn all_events(State(daemon): State<Arc<Daemon>>) -> EventStream {
    let mut feed = daemon.hub.watch_all();
    let (tx, rx) = mpsc::channel(256);
    tokio::spawn(async move {
        loop {
            let item = tokio::select! {
                item = feed.recv() => item,
                () = daemon.hub.closed() => return,
                () = tx.closed() => return,
            };
            let (session, json) = match item {
                Ok((session, Feed::Live { json, .. } | Feed::Finished { json, .. })) => {
                    (session, json)
                }
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    let text = serde_json::json!({"type": "Lagged", "skipped": n,
                        "text": "this stream fell behind and skipped events; reload the sessions you show"});
                    let _ = send(&daemon, &tx, SseEvent::default().data(text.to_string())).await;
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            };
            let event = SseEvent::default().data(tag_session(&session, &json));
            if send(&daemon, &tx, event).await.is_err() {
                return;
            }
        }
    });
    into_stream(rx)
}

/// `{"type":…}` → `{"session":"<id>","type":…}`.
fn tag_session(session: &str, json: &str) -> String {
    let quoted = serde_json::to_string(session).unwrap_or_else(|_| "\"\"".into());
    match json.strip_prefix('{') {
        Some(rest) if rest.trim_start().starts_with('}') => format!("{{\"session\":{quoted}}}"),
        Some(rest) => format!("{{\"session\":{quoted},{rest}"),
        None => json.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn tagging_adds_the_session_as_a_field() {
        let tagged = super::tag_session("s\"1", r#"{"type":"Done","at_ms":1.0}"#);
        let v: serde_json::Value = serde_json::from_str(&tagged).unwrap();
        assert_eq!(v["session"], "s\"1");
        assert_eq!(v["type"], "Done");
        assert_eq!(super::tag_session("s", "{}"), r#"{"session":"s"}"#);
    }
}
