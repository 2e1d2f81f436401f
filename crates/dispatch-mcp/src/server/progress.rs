//! `notifications/progress` for a call whose request carried a progress token: the call's
//! `ToolProgress` events (a command's output, bytes downloaded), in order.

use std::sync::Arc;
use std::time::Duration;

use dispatch_engine::{Event, EventKind, EventSink};
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RoleServer};
use tokio::sync::mpsc;

/// How long the result waits for progress still being sent.
const FLUSH_LIMIT: Duration = Duration::from_secs(2);

/// Forwards one call's progress to the client, in a task of its own (an event sink must not
/// block the round).
pub struct Forwarder {
    sink: Arc<Sink>,
    task: tokio::task::JoinHandle<()>,
}

/// The round's live events in, this call's progress text out.
pub struct Sink {
    call_id: String,
    tx: mpsc::UnboundedSender<String>,
}

impl EventSink for Sink {
    fn send(&self, event: &Arc<Event>) {
        if let EventKind::ToolProgress { tool_id, text, .. } = &event.kind
            && **tool_id == *self.call_id
        {
            let _ = self.tx.send(text.clone());
        }
    }
}

impl Forwarder {
    pub fn start(peer: Peer<RoleServer>, token: ProgressToken, call_id: &str) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        let task = tokio::spawn(async move {
            let mut progress = 0.0;
            while let Some(text) = rx.recv().await {
                // Progress must increase with every notification; the total is unknown.
                progress += 1.0;
                let note = ProgressNotificationParam::new(token.clone(), progress)
                    .with_message(text.trim_end().to_string());
                if peer.notify_progress(note).await.is_err() {
                    // The client went away: the result will not reach it either.
                    break;
                }
            }
        });
        Forwarder {
            sink: Arc::new(Sink {
                call_id: call_id.to_string(),
                tx,
            }),
            task,
        }
    }

    pub fn sink(&self) -> Arc<Sink> {
        self.sink.clone()
    }

    /// Send what is queued before the result goes out (notifications after the response
    /// are dropped by clients).
    pub async fn finish(self) {
        let Forwarder { sink, mut task } = self;
        drop(sink);
        if tokio::time::timeout(FLUSH_LIMIT, &mut task).await.is_err() {
            task.abort();
        }
    }
}
