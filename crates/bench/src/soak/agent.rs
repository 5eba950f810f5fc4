//! One soak agent: a loop of sends, reads, waits and searches over one
//! transport, recording the outcome of every call. Texts are unique (`soak
//! RUN AGENT N`) so that the history can be checked send by send.
//!
//! Over HTTP and SSE an agent reconnects whenever its connection is gone (the
//! daemon was killed): a call that cannot even connect is not an attempt
//! (counted as unreachable); a call whose connection broke after the
//! request went out has an unknown outcome. stdio agents talk to their own
//! `serve --stdio`, shim agents to their `switchboard-shim`, which stay up.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use crate::{
    rpc::{Reply, Session},
    stdio::StdioClient,
    web::{HttpSession, SseSession},
};

/// Pause between two calls of one agent (plus up to as much again, varied
/// per agent so that agents do not march in step).
const PAUSE: Duration = Duration::from_millis(400);
/// The longest a send may take: the IRC backend waits up to 30 s
/// (`send_timeout_s`) for its lines to be confirmed.
const SEND_TIMEOUT: Duration = Duration::from_secs(45);
/// The longest a read, search or wait may take (waits block for 1 s).
const READ_TIMEOUT: Duration = Duration::from_secs(15);
/// How long an HTTP or SSE agent may take to connect and initialize.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The channels agents talk in; agent `i` uses channel `i % CHANNELS`.
pub const CHANNELS: usize = 5;

/// How an agent reaches switchboard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Transport {
    Stdio,
    Http,
    Sse,
    Shim,
}

impl Transport {
    pub const ALL: [Transport; 4] = [
        Transport::Stdio,
        Transport::Http,
        Transport::Sse,
        Transport::Shim,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Transport::Stdio => "stdio",
            Transport::Http => "HTTP",
            Transport::Sse => "SSE",
            Transport::Shim => "shim",
        }
    }

    /// Agent `index`'s transport.
    pub fn of(index: usize) -> Self {
        Self::ALL[index % Self::ALL.len()]
    }
}

pub fn channel(index: usize) -> String {
    format!("#soak{}", index % CHANNELS)
}

pub fn nick(index: usize) -> String {
    format!("soak{index:02}")
}

/// What a call came back with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Success: for a send, "stored".
    Ok,
    /// A tool or protocol error that says the call did not happen.
    Failed,
    /// A tool error that says it may or may not have happened.
    Uncertain,
    /// No reply: the connection broke after the request went out.
    Unknown,
}

/// One `send_message` and what became of it.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub text: String,
    /// When the reply (or the failure) came, since the run started.
    pub at: Duration,
    pub outcome: Outcome,
    /// The error text, unless it succeeded.
    pub error: Option<String>,
}

/// A read, wait or search and what became of it.
#[derive(Debug, Clone, Copy)]
pub struct Lookup {
    pub kind: LookupKind,
    pub at: Duration,
    pub ok: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LookupKind {
    Read,
    Wait,
    Search,
}

/// Everything an agent did.
#[derive(Debug, Default)]
pub struct Ledger {
    pub sends: Vec<Attempt>,
    pub lookups: Vec<Lookup>,
    /// Calls not made because the daemon could not be reached.
    pub unreachable: usize,
    /// Errors of failed lookups, for the report.
    pub lookup_errors: Vec<String>,
}

/// The agent's connection.
pub enum Link {
    /// Its own `serve --stdio`, or its shim: a child process that stays up.
    Child(StdioClient),
    Http {
        addr: SocketAddr,
        session: Option<HttpSession>,
    },
    Sse {
        addr: SocketAddr,
        session: Option<SseSession>,
    },
}

/// Why a call has no reply.
enum NoReply {
    /// Nothing was sent: the daemon could not be reached.
    Unreachable,
    /// The request went out; the reply was lost.
    Lost(String),
}

pub struct Agent {
    pub run: &'static str,
    pub index: usize,
    pub link: Link,
}

impl Agent {
    /// Loops until `end`, then returns what happened.
    pub async fn run(mut self, epoch: Instant, end: Instant) -> (Self, Ledger) {
        let mut ledger = Ledger::default();
        let channel = channel(self.index);
        let nick = nick(self.index);
        // Agent i's pause is PAUSE + i/agents of PAUSE, so their calls spread out.
        let pause = PAUSE + PAUSE * (self.index % 16) as u32 / 16;
        let mut sent = 0usize;
        let mut step = 0usize;
        while Instant::now() < end {
            let call = match step % 6 {
                0 | 2 | 4 => {
                    let text = format!("soak {} {nick} {sent}", self.run);
                    sent += 1;
                    let args = json!({"channel": channel, "sender": nick, "text": text});
                    let result = self.call("send_message", args, SEND_TIMEOUT).await;
                    record_send(&mut ledger, text, epoch, result);
                    step += 1;
                    tokio::time::sleep(pause).await;
                    continue;
                }
                1 => (
                    LookupKind::Read,
                    "read_messages",
                    json!({"channel": channel, "limit": 20}),
                ),
                3 => (
                    LookupKind::Wait,
                    "wait_for_messages",
                    json!({"channel": channel, "timeout_s": 1}),
                ),
                _ => (
                    LookupKind::Search,
                    "search_messages",
                    json!({"query": nick, "limit": 10}),
                ),
            };
            let (kind, tool, args) = call;
            match self.call(tool, args, READ_TIMEOUT).await {
                Err(NoReply::Unreachable) => ledger.unreachable += 1,
                result => {
                    let ok = matches!(&result, Ok(reply) if reply.failure.is_none());
                    if !ok && ledger.lookup_errors.len() < 20 {
                        ledger.lookup_errors.push(match &result {
                            Ok(reply) => reply.failure.clone().unwrap_or_default(),
                            Err(NoReply::Lost(e)) => e.clone(),
                            Err(NoReply::Unreachable) => unreachable!("matched above"),
                        });
                    }
                    ledger.lookups.push(Lookup {
                        kind,
                        at: epoch.elapsed(),
                        ok,
                    });
                }
            }
            step += 1;
            tokio::time::sleep(pause).await;
        }
        (self, ledger)
    }

    /// One `tools/call`, over a connection that is (re)opened if needed.
    async fn call(&mut self, tool: &str, args: Value, limit: Duration) -> Result<Reply, NoReply> {
        let params = crate::rpc::tool_params(tool, args);
        match &mut self.link {
            Link::Child(client) => answered(
                tokio::time::timeout(limit, client.request("tools/call", &params)).await,
                limit,
            ),
            Link::Http { addr, session } => {
                let open = HttpSession::open(*addr);
                reconnecting(session, open, HttpSession::is_closed, &params, limit).await
            }
            Link::Sse { addr, session } => {
                let open = SseSession::open(*addr);
                reconnecting(session, open, SseSession::is_closed, &params, limit).await
            }
        }
    }
}

/// A call over `session`, opened first if it is missing or closed; a
/// session that fails a call is dropped, to be opened again next time.
async fn reconnecting<S: Session>(
    session: &mut Option<S>,
    open: impl Future<Output = anyhow::Result<S>>,
    is_closed: fn(&S) -> bool,
    params: &Value,
    limit: Duration,
) -> Result<Reply, NoReply> {
    let live = match session.take() {
        Some(live) if !is_closed(&live) => live,
        _ => tokio::time::timeout(CONNECT_TIMEOUT, open)
            .await
            .ok()
            .and_then(Result::ok)
            .ok_or(NoReply::Unreachable)?,
    };
    let live = session.insert(live);
    let reply = answered(
        tokio::time::timeout(limit, live.request("tools/call", params)).await,
        limit,
    );
    if reply.is_err() {
        *session = None;
    }
    reply
}

fn answered(
    reply: Result<anyhow::Result<Reply>, tokio::time::error::Elapsed>,
    limit: Duration,
) -> Result<Reply, NoReply> {
    match reply {
        Ok(Ok(reply)) => Ok(reply),
        Ok(Err(e)) => Err(NoReply::Lost(format!("{e:#}"))),
        Err(_) => Err(NoReply::Lost(format!("no reply within {limit:?}"))),
    }
}

fn record_send(ledger: &mut Ledger, text: String, epoch: Instant, result: Result<Reply, NoReply>) {
    let (outcome, error) = match result {
        Err(NoReply::Unreachable) => {
            ledger.unreachable += 1;
            return;
        }
        Err(NoReply::Lost(e)) => (Outcome::Unknown, Some(e)),
        Ok(reply) => match reply.failure {
            None => (Outcome::Ok, None),
            Some(failure) => {
                let error = tool_error_text(&reply.text).unwrap_or(failure);
                (classify(&error), Some(error))
            }
        },
    };
    ledger.sends.push(Attempt {
        text,
        at: epoch.elapsed(),
        outcome,
        error,
    });
}

/// A failure that admits it may have happened anyway is uncertain: the
/// shim's "the call may (still) have run" and IRC's "they may or may not
/// have been delivered".
fn classify(error: &str) -> Outcome {
    if error.contains(" may ") {
        Outcome::Uncertain
    } else {
        Outcome::Failed
    }
}

/// The text of a tool error result (`result.content[0].text`).
fn tool_error_text(reply: &str) -> Option<String> {
    let value: Value = serde_json::from_str(reply).ok()?;
    value["result"]["content"][0]["text"]
        .as_str()
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_that_admit_delivery_may_have_happened_are_uncertain() {
        assert_eq!(
            classify("switchboard did not respond in time; the call may still have run"),
            Outcome::Uncertain
        );
        assert_eq!(
            classify("not confirmed: … they may or may not have been delivered"),
            Outcome::Uncertain
        );
        assert_eq!(
            classify("switchboard is not running; start it and try again"),
            Outcome::Failed
        );
        assert_eq!(
            classify("the message was not stored: the disk holding the data directory /d is full"),
            Outcome::Failed
        );
    }

    #[test]
    fn the_text_of_a_tool_error_is_extracted() {
        let reply = r#"{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"no room"}],"isError":true}}"#;
        assert_eq!(tool_error_text(reply).as_deref(), Some("no room"));
    }
}
