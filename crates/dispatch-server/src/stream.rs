//! The event streams (SSE). A session's stream first replays its committed events from the
//! store (each with its sequence number as the SSE id, so `Last-Event-ID` resumes exactly),
//! then forwards live events as they happen, and a `Committed` marker with the id of each
//! round's last event.
//!
//! A round may commit while the replay is read. Its live events then arrive twice: once in
//! the replay, once from the feed. So live events of rounds that had started by the end of
//! the replay are held back until their `Finished` marker says whether the replay had them.
//! Rounds started later cannot be in the replay and go out as they happen.

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
    // Subscribed before the replay is read, so nothing falls between the two.
    let feed = daemon.hub.watch(&id);
    let (tx, rx) = mpsc::channel(256);
    tokio::spawn(pump(daemon, id, after, feed, tx));
    Ok(into_stream(rx))
}

async fn pump(
    daemon: Arc<Daemon>,
    id: String,
    mut after: u64,
    mut feed: broadcast::Receiver<Feed>,
    tx: mpsc::Sender<SseEvent>,
) {
    'replay: loop {
        let events = match daemon.store.events(&id, after).await {
            Ok(events) => events,
            Err(e) => {
                let text = serde_json::json!({"type": "Error", "text": format!("cannot read the session's events from the store: {e}; reconnect to retry")});
                let _ = tx.send(SseEvent::default().data(text.to_string())).await;
                return;
            }
        };
        for (seq, json) in events {
            if tx
                .send(SseEvent::default().id(seq.to_string()).data(json))
                .await
                .is_err()
            {
                return;
            }
            after = seq;
        }
        daemon.hub.note_seq(&id, after);
        let replayed = after;
        // Rounds with a ticket up to here may be in the replay; later ones cannot be.
        let settled = daemon.hub.rounds_started(&id);
        let mut held: Vec<(u64, Arc<str>)> = Vec::new();
        loop {
            let item = tokio::select! {
                item = feed.recv() => item,
                () = daemon.hub.closed() => return,
                () = tx.closed() => return,
            };
            let out = match item {
                Ok(Feed::Live { round, json }) if round <= settled => {
                    held.push((round, json));
                    continue;
                }
                Ok(Feed::Live { json, .. }) => vec![SseEvent::default().data(&*json)],
                Ok(Feed::Finished {
                    round,
                    last_seq,
                    json,
                }) => {
                    let mut out = Vec::new();
                    let seen_in_replay =
                        round <= settled && last_seq.is_some_and(|s| s <= replayed);
                    let (mine, others): (Vec<_>, Vec<_>) =
                        held.drain(..).partition(|(r, _)| *r == round);
                    held = others;
                    if !seen_in_replay {
                        out.extend(mine.into_iter().map(|(_, j)| SseEvent::default().data(&*j)));
                        let mut marker = SseEvent::default().data(&*json);
                        if let Some(seq) = last_seq {
                            marker = marker.id(seq.to_string());
                            after = after.max(seq);
                        }
                        out.push(marker);
                    }
                    out
                }
                // Fell behind the feed: catch up from the store, from the last id sent.
                Err(broadcast::error::RecvError::Lagged(_)) => continue 'replay,
                Err(broadcast::error::RecvError::Closed) => return,
            };
            for event in out {
                if tx.send(event).await.is_err() {
                    return;
                }
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
                    let _ = tx.send(SseEvent::default().data(text.to_string())).await;
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            };
            if tx
                .send(SseEvent::default().data(tag_session(&session, &json)))
                .await
                .is_err()
            {
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
