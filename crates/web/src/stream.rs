//! `/api/stream`: every new message of every channel, as Server-Sent Events.
//!
//! Each event is `event: message`, `id: <message id>` and the message as
//! JSON. A page that reconnects (the browser's `EventSource` does so on its
//! own, sending `Last-Event-ID`), or that names `?since=<id>`, first gets
//! every message after that id from the history, then the live ones: no
//! hole and, since ids only grow, no duplicate. Without either it gets the
//! messages from now on. A stream that falls behind the live feed catches
//! up from the history the same way. Streams end when the server stops,
//! and within seconds of their token being revoked. A token limited to some
//! channels is streamed only theirs.
//!
//! A page names the server instance it loaded from (`?instance=`, from
//! `/api/session`). When that is not this process, or the id to resume
//! from is past the newest message, its ids name another history's
//! messages: the stream then ignores them, sends `event: reset`, and
//! follows from now on; the page reloads what it shows. A negative `since`
//! is a `400`.

use std::{convert::Infallible, sync::Arc, time::Duration};

use axum::{
    extract::State,
    response::sse::{Event, KeepAlive, Sse},
};
use futures::{Stream, StreamExt};
use http::HeaderMap;
use serde::Deserialize;
use switchboard_chat::{Access, ChatTools, Message};
use tokio::sync::broadcast;

use crate::api;

/// Messages read from the history per catch-up step.
const CATCH_UP: usize = 500;

/// How often a quiet stream looks whether its token was revoked.
const REVOKED_CHECK: Duration = Duration::from_secs(2);

#[derive(Deserialize)]
pub struct StreamQuery {
    since: Option<i64>,
    instance: Option<String>,
}

pub async fn stream(
    State(state): State<api::State>,
    api::Allowed(access): api::Allowed,
    headers: HeaderMap,
    api::Params(q): api::Params<StreamQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, api::ApiError> {
    if q.since.is_some_and(|since| since < 0) {
        return Err(api::ApiError::bad(
            "since must be a message id (0 or more); leave it out to follow from now on",
        ));
    }
    // Subscribed before the history is read: nothing falls in between.
    let feed = state.chat.feed();
    let newest = state.chat.newest_id().unwrap_or(0);
    let resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<i64>().ok())
        .filter(|id| *id >= 0)
        .or(q.since);
    // Ids only grow: one past the newest is another history's (a restart
    // in memory, a restored backup), as is another instance's.
    let reset = q
        .instance
        .as_deref()
        .is_some_and(|seen| seen != &*state.instance)
        || resume.is_some_and(|id| id > newest);
    let resume = resume.filter(|_| !reset);
    let last = resume.unwrap_or(newest);
    let follower = Follower {
        access,
        chat: state.chat.clone(),
        feed,
        last,
        catching_up: resume.is_some(),
        queue: Vec::new(),
    };
    let first = reset.then(|| {
        Ok(Event::default()
            .event("reset")
            .data(serde_json::json!({ "instance": &*state.instance }).to_string()))
    });
    let messages = futures::stream::unfold(follower, |mut f| async move {
        let message = f.next().await?;
        Some((Ok(event(&message)), f))
    });
    let events = futures::stream::iter(first).chain(messages);
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// One stream's position: the last id it sent, and what it must send next.
struct Follower {
    access: Access,
    chat: Arc<ChatTools>,
    feed: broadcast::Receiver<Arc<[Message]>>,
    last: i64,
    /// Reading the history rather than the feed.
    catching_up: bool,
    /// Messages to send, oldest last (popped from the end).
    queue: Vec<Message>,
}

impl Follower {
    /// The next message to send; `None` once the server is stopping.
    async fn next(&mut self) -> Option<Message> {
        loop {
            if let Some(message) = self.queue.pop() {
                if message.id > self.last {
                    self.last = message.id;
                    if self.access.allows(&message.channel) {
                        return Some(message);
                    }
                }
                continue;
            }
            if self.catching_up {
                match self.chat.after(self.last, CATCH_UP) {
                    Ok(page) => {
                        self.catching_up = page.len() == CATCH_UP;
                        self.queue = page;
                        self.queue.reverse();
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(
                            error = e.message(),
                            "the web stream cannot read the history"
                        );
                        return None;
                    }
                }
            }
            // A revoked token's stream ends (the page then hears 401 and
            // asks for another token), looked at every REVOKED_CHECK.
            if self.access.revoked() {
                return None;
            }
            let batch = tokio::select! {
                batch = self.feed.recv() => batch,
                () = self.chat.stopping() => return None,
                () = tokio::time::sleep(REVOKED_CHECK) => continue,
            };
            match batch {
                Ok(batch) => {
                    self.queue = batch.iter().rev().cloned().collect();
                }
                Err(broadcast::error::RecvError::Lagged(_)) => self.catching_up = true,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

fn event(message: &Message) -> Event {
    Event::default()
        .event("message")
        .id(message.id.to_string())
        .json_data(message)
        .unwrap_or_else(|_| Event::default().comment("a message that cannot be encoded"))
}
