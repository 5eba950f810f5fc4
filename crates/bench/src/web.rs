//! HTTP clients for the two HTTP transports, on hyper's bare HTTP/1.1
//! connections (no pool, no redirects: the least client work per request).
//!
//! - [`HttpSession`]: Streamable HTTP. `POST /mcp` with the request; the
//!   reply is the JSON response body. One keep-alive connection per session.
//! - [`SseSession`]: legacy HTTP+SSE. `GET /sse` opens the event stream,
//!   whose `endpoint` event names `/messages/?session_id=…`; each request is
//!   POSTed there (answered `202`) on a second connection and its reply
//!   arrives as a `message` event on the stream.
//! - [`EventStream`]: any Server-Sent Events stream, such as the web view's
//!   `/api/stream`.

use std::net::SocketAddr;

use anyhow::{Context, bail, ensure};
use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::{
    body::Incoming,
    client::conn::http1::{self, SendRequest},
};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

use crate::rpc::{self, Reply, Session};

/// One HTTP/1.1 connection to the server.
struct Connection {
    sender: SendRequest<Full<Bytes>>,
    host: String,
    /// `Bearer <token>`, sent with every request, when the server wants one.
    authorization: Option<String>,
}

impl Connection {
    async fn open(addr: SocketAddr) -> anyhow::Result<Self> {
        let stream = TcpStream::connect(addr)
            .await
            .with_context(|| format!("cannot connect to {addr}"))?;
        stream.set_nodelay(true)?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                eprintln!("switchboard-bench: HTTP connection: {e}");
            }
        });
        Ok(Self {
            sender,
            host: addr.to_string(),
            authorization: None,
        })
    }

    async fn send(
        &mut self,
        method: Method,
        path: &str,
        headers: &[(header::HeaderName, &str)],
        body: Bytes,
    ) -> anyhow::Result<http::Response<Incoming>> {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, &self.host);
        if let Some(value) = &self.authorization {
            request = request.header(header::AUTHORIZATION, value);
        }
        for (name, value) in headers {
            request = request.header(name, *value);
        }
        self.sender.ready().await?;
        Ok(self
            .sender
            .send_request(request.body(Full::new(body))?)
            .await?)
    }

    async fn post_json(
        &mut self,
        path: &str,
        body: String,
    ) -> anyhow::Result<(StatusCode, String)> {
        let response = self
            .send(
                Method::POST,
                path,
                &[
                    (header::CONTENT_TYPE, "application/json"),
                    (header::ACCEPT, "application/json, text/event-stream"),
                    (
                        header::HeaderName::from_static("mcp-protocol-version"),
                        rpc::PROTOCOL_VERSION,
                    ),
                ],
                Bytes::from(body),
            )
            .await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        Ok((status, String::from_utf8(body.to_vec())?))
    }
}

/// A Streamable HTTP client of `/mcp`.
pub struct HttpSession {
    connection: Connection,
    next_id: u64,
}

impl HttpSession {
    /// Connects and runs the MCP handshake.
    pub async fn open(addr: SocketAddr) -> anyhow::Result<Self> {
        Self::open_with(addr, None).await
    }

    /// Connects presenting `token` with every request, and runs the MCP
    /// handshake.
    pub async fn open_with(addr: SocketAddr, token: Option<&str>) -> anyhow::Result<Self> {
        let mut connection = Connection::open(addr).await?;
        connection.authorization = token.map(|t| format!("Bearer {t}"));
        let mut session = Self {
            connection,
            next_id: 1,
        };
        session
            .request("initialize", &rpc::initialize_params())
            .await?
            .ok()
            .context("initialize")?;
        let (status, body) = session
            .connection
            .post_json("/mcp", rpc::INITIALIZED.to_owned())
            .await?;
        ensure!(
            status == StatusCode::ACCEPTED,
            "notifications/initialized: HTTP {status}: {body:.300}"
        );
        Ok(session)
    }
}

impl HttpSession {
    /// Whether the server has closed the connection (a request on it would fail).
    pub fn is_closed(&self) -> bool {
        self.connection.sender.is_closed()
    }
}

impl Session for HttpSession {
    async fn request(&mut self, method: &str, params: &Value) -> anyhow::Result<Reply> {
        let id = self.next_id;
        self.next_id += 1;
        let (status, body) = self
            .connection
            .post_json("/mcp", rpc::request(id, method, params))
            .await?;
        ensure!(
            status == StatusCode::OK,
            "{method}: HTTP {status}: {body:.300}"
        );
        let reply = Reply::parse(body)?;
        ensure!(
            reply.id == Some(id),
            "a reply to request {:?}, not {id}",
            reply.id
        );
        Ok(reply)
    }
}

/// A legacy HTTP+SSE client.
pub struct SseSession {
    posts: Connection,
    events: EventStream,
    endpoint: String,
    next_id: u64,
}

impl SseSession {
    /// Opens the event stream, reads the endpoint and runs the MCP handshake.
    pub async fn open(addr: SocketAddr) -> anyhow::Result<Self> {
        let mut events = EventStream::open(addr, "/sse").await?;
        let endpoint = events.next().await?;
        ensure!(
            endpoint.name == "endpoint",
            "the first SSE event is {:?}, not endpoint",
            endpoint.name
        );
        let mut session = Self {
            posts: Connection::open(addr).await?,
            events,
            endpoint: endpoint.data,
            next_id: 1,
        };
        session
            .request("initialize", &rpc::initialize_params())
            .await?
            .ok()
            .context("initialize")?;
        session.post(rpc::INITIALIZED.to_owned()).await?;
        Ok(session)
    }

    async fn post(&mut self, body: String) -> anyhow::Result<()> {
        let (status, text) = self.posts.post_json(&self.endpoint, body).await?;
        ensure!(
            status == StatusCode::ACCEPTED,
            "POST {}: HTTP {status}: {text:.300}",
            self.endpoint
        );
        Ok(())
    }
}

impl SseSession {
    /// Whether the server has closed the connection requests are posted on.
    pub fn is_closed(&self) -> bool {
        self.posts.sender.is_closed()
    }
}

impl Session for SseSession {
    async fn request(&mut self, method: &str, params: &Value) -> anyhow::Result<Reply> {
        let id = self.next_id;
        self.next_id += 1;
        self.post(rpc::request(id, method, params)).await?;
        loop {
            let event = self.events.next().await?;
            if event.name != "message" {
                continue;
            }
            let reply = Reply::parse(event.data)?;
            ensure!(
                reply.id == Some(id),
                "a reply to request {:?}, not {id}",
                reply.id
            );
            return Ok(reply);
        }
    }
}

/// One server-sent event.
pub struct Event {
    pub name: String,
    pub data: String,
}

/// Server-sent events parsed from a response body as it arrives.
pub struct EventStream {
    body: Incoming,
    buffer: Vec<u8>,
    /// Where to resume looking for the blank line that ends an event.
    scanned: usize,
}

impl EventStream {
    fn new(body: Incoming) -> Self {
        Self {
            body,
            buffer: Vec::new(),
            scanned: 0,
        }
    }

    /// `GET path` on a connection of its own, answered with an event stream.
    pub async fn open(addr: SocketAddr, path: &str) -> anyhow::Result<Self> {
        let response = Connection::open(addr)
            .await?
            .send(
                Method::GET,
                path,
                &[(header::ACCEPT, "text/event-stream")],
                Bytes::new(),
            )
            .await?;
        ensure!(
            response.status() == StatusCode::OK,
            "GET {path}: HTTP {}",
            response.status()
        );
        Ok(Self::new(response.into_body()))
    }

    /// The next event that carries data (comments and keep-alives skipped).
    pub async fn next(&mut self) -> anyhow::Result<Event> {
        loop {
            if let Some(end) = self.buffer[self.scanned..]
                .windows(2)
                .position(|w| w == b"\n\n")
                .map(|i| self.scanned + i)
            {
                let block: Vec<u8> = self.buffer.drain(..end + 2).collect();
                self.scanned = 0;
                if let Some(event) = parse_event(std::str::from_utf8(&block)?) {
                    return Ok(event);
                }
                continue;
            }
            self.scanned = self.buffer.len().saturating_sub(1);
            let Some(frame) = self.body.frame().await else {
                bail!("the SSE stream ended");
            };
            if let Ok(data) = frame?.into_data() {
                self.buffer.extend_from_slice(&data);
            }
        }
    }
}

/// Parses one event block (`event:` and `data:` lines, `\n`-separated).
fn parse_event(block: &str) -> Option<Event> {
    let mut name = String::from("message");
    let mut data: Option<String> = None;
    for line in block.lines() {
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => name = value.to_owned(),
            "data" => match &mut data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => data = Some(value.to_owned()),
            },
            _ => {}
        }
    }
    data.map(|data| Event { name, data })
}

#[cfg(test)]
mod tests {
    use super::parse_event;

    #[test]
    fn events_are_parsed_and_comments_skipped() {
        let event = parse_event("event: endpoint\ndata: /messages/?session_id=ab\n\n").unwrap();
        assert_eq!(
            (event.name.as_str(), event.data.as_str()),
            ("endpoint", "/messages/?session_id=ab")
        );
        let event = parse_event("data: {\"a\":1}\ndata: x\n\n").unwrap();
        assert_eq!(
            (event.name.as_str(), event.data.as_str()),
            ("message", "{\"a\":1}\nx")
        );
        assert!(parse_event(": keep-alive\n\n").is_none());
    }
}
