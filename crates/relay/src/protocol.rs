//! The relay protocol's messages and framing: one JSON object a line, at
//! most [`MAX_LINE`] bytes. See `docs/relay-protocol.md` for the spec.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use switchboard_lines::{LineReader, Next};
use tokio::io::{AsyncBufRead, AsyncWrite, AsyncWriteExt};

/// The protocol version this crate speaks.
pub const PROTOCOL_VERSION: u32 = 1;

/// The longest line either side accepts, without its `\n`.
pub const MAX_LINE: usize = 1024 * 1024;

/// A request id: an integer or a string, chosen by the client.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    Number(i64),
    String(String),
}

/// Every message of the protocol.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Message {
    /// Client → application, first line of a connection.
    Hello {
        protocol: u32,
        pid: u32,
        #[serde(default)]
        client: String,
        /// The name the client's user goes by (an agent's nick), if set.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        identity: Option<String>,
        /// The events the client can take part in (see [`Message::Event`]).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        events: Vec<String>,
    },
    /// Application → client, the answer to `hello`.
    Welcome {
        protocol: u32,
        app: String,
        app_id: String,
        /// The events of the hello's list that the application uses.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        events: Vec<String>,
        /// Guidance for the agent, for the client to pass on.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        instructions: Option<String>,
    },
    /// Either direction, once both sides agreed on `name` in hello and
    /// welcome: something happened (an application pushing a message to the
    /// agent; a client passing on its host's permission request).
    Event {
        name: String,
        /// An object; anything else is ignored by the receiver.
        #[serde(default)]
        params: Value,
    },
    /// Client → application.
    Request {
        id: RequestId,
        method: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        params: Option<Map<String, Value>>,
    },
    /// Client → application: the client no longer wants the answer to
    /// request `id` (its agent cancelled the call, or left). The application
    /// stops the call if it is still running; the request still gets its
    /// one response (an error, unless the call finished first).
    Cancel { id: RequestId },
    /// Application → client: exactly one per request.
    Response {
        id: RequestId,
        #[serde(flatten)]
        outcome: Outcome,
    },
    /// Application → client: something changed (`tools_changed`).
    Notify { event: String },
    /// Either direction: a problem with the connection or with a line.
    Error { message: String },
}

/// A response's `result` or `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Result(Value),
    Error(ErrorBody),
}

/// Why a request could not be routed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: ErrorCode,
    pub message: String,
}

/// The error codes of a `response`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    UnknownMethod,
    UnknownTool,
    InvalidRequest,
    Internal,
    /// The client cancelled the call (see [`Message::Cancel`]).
    Cancelled,
    /// A code this crate does not know (from a newer peer).
    #[serde(other)]
    Other,
}

/// The event of a `notify` telling that the tool list changed.
pub const TOOLS_CHANGED: &str = "tools_changed";

/// The longest `event` line a sender sends or a receiver passes on, without
/// its `\n`, measured as the line is on the wire; longer events are refused
/// (sender) or set apart as [`Read::EventTooLong`] (receiver).
pub const MAX_EVENT: usize = 64 * 1024;

/// What reading a line produced.
#[derive(Debug, PartialEq)]
pub enum Read {
    /// A well-formed message.
    Message(Message),
    /// A line that is not a message; the text says why (for an `error` reply).
    /// `id` is the request id, when the line was a request with a readable id.
    Malformed {
        reason: String,
        id: Option<RequestId>,
    },
    /// An `event` line longer than [`MAX_EVENT`] (named, when its name is
    /// readable): refused or ignored, and the connection goes on.
    EventTooLong { name: String, bytes: usize },
    /// The line exceeded [`MAX_LINE`]; the connection must be closed.
    TooLong,
    /// The peer closed the connection.
    Eof,
}

/// The reader for a relay connection's lines, bounded by [`MAX_LINE`].
pub fn line_reader() -> LineReader {
    LineReader::new(MAX_LINE)
}

/// Reads one line (skipping blank ones) and decodes it, never holding more
/// than [`MAX_LINE`] bytes. Cancel-safe: a partly read line stays in
/// `lines`.
pub async fn read_message<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    lines: &mut LineReader,
) -> std::io::Result<Read> {
    loop {
        return Ok(match lines.next(reader).await? {
            Next::Eof => Read::Eof,
            Next::TooLong => Read::TooLong,
            Next::Line(line) if line.iter().all(u8::is_ascii_whitespace) => continue,
            Next::Line(line) => decode(line),
        });
    }
}

/// Decodes one line (without its `\n`). A line that is not a message is
/// [`Read::Malformed`], with the request id when one can be read, so that
/// the error can be answered as a response:
///
/// ```
/// use switchboard_relay::protocol::{Read, RequestId, decode};
///
/// let Read::Malformed { reason, id } = decode(br#"{"type":"request","id":7}"#) else {
///     panic!("a request needs a method");
/// };
/// assert_eq!(id, Some(RequestId::Number(7)));
/// assert!(reason.contains("missing field `method`"), "{reason}");
/// ```
pub fn decode(line: &[u8]) -> Read {
    match serde_json::from_slice::<Message>(line) {
        // Measured as received: whitespace and unknown fields count, as they
        // cost the receiver as much as the params.
        Ok(Message::Event { name, .. }) if line.len() > MAX_EVENT => Read::EventTooLong {
            name,
            bytes: line.len(),
        },
        Ok(message) => Read::Message(message),
        Err(e) => {
            let value = serde_json::from_slice::<Value>(line).ok();
            let id = value
                .as_ref()
                .filter(|v| v.get("type").and_then(Value::as_str) == Some("request"))
                .and_then(|v| v.get("id"))
                .and_then(|id| serde_json::from_value::<RequestId>(id.clone()).ok());
            let reason = match value {
                None => format!("the line is not JSON: {e}"),
                Some(Value::Object(_)) => format!("the line is not a valid relay message: {e}"),
                Some(_) => "the line is not a JSON object".to_owned(),
            };
            Read::Malformed { reason, id }
        }
    }
}

/// Encodes a message as one line, `\n` included; [`decode`] reads it back.
///
/// ```
/// use switchboard_relay::protocol::{Message, Read, TOOLS_CHANGED, decode, encode};
///
/// let message = Message::Notify { event: TOOLS_CHANGED.into() };
/// let line = encode(&message);
/// assert_eq!(line, b"{\"type\":\"notify\",\"event\":\"tools_changed\"}\n");
/// assert_eq!(decode(line.strip_suffix(b"\n").unwrap()), Read::Message(message));
/// ```
pub fn encode(message: &Message) -> Vec<u8> {
    let mut line = serde_json::to_vec(message).expect("relay messages always serialise");
    line.push(b'\n');
    line
}

/// Writes one message and flushes.
pub async fn write_message<W: AsyncWrite + Unpin>(
    writer: &mut W,
    message: &Message,
) -> std::io::Result<()> {
    writer.write_all(&encode(message)).await?;
    writer.flush().await
}

impl Message {
    /// A successful response.
    pub fn result(id: RequestId, result: Value) -> Self {
        Message::Response {
            id,
            outcome: Outcome::Result(result),
        }
    }

    /// An error response.
    pub fn error_response(id: RequestId, code: ErrorCode, message: impl Into<String>) -> Self {
        Message::Response {
            id,
            outcome: Outcome::Error(ErrorBody {
                code,
                message: message.into(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    async fn read_all(input: &[u8]) -> Vec<Read> {
        let mut reader = tokio::io::BufReader::new(input);
        let mut lines = line_reader();
        let mut out = Vec::new();
        loop {
            let read = read_message(&mut reader, &mut lines).await.unwrap();
            let stop = matches!(read, Read::Eof | Read::TooLong);
            out.push(read);
            if stop {
                return out;
            }
        }
    }

    #[test]
    fn messages_round_trip_in_the_documented_shapes() {
        let cases = [
            (
                Message::Hello {
                    protocol: 1,
                    pid: 4242,
                    client: "shim".into(),
                    identity: None,
                    events: Vec::new(),
                },
                json!({"type":"hello","protocol":1,"pid":4242,"client":"shim"}),
            ),
            (
                Message::Hello {
                    protocol: 1,
                    pid: 7,
                    client: "shim".into(),
                    identity: Some("alice".into()),
                    events: vec!["claude/channel".into()],
                },
                json!({"type":"hello","protocol":1,"pid":7,"client":"shim","identity":"alice","events":["claude/channel"]}),
            ),
            (
                Message::Welcome {
                    protocol: 1,
                    app: "A".into(),
                    app_id: "a".into(),
                    events: vec!["claude/channel".into()],
                    instructions: Some("hi".into()),
                },
                json!({"type":"welcome","protocol":1,"app":"A","app_id":"a","events":["claude/channel"],"instructions":"hi"}),
            ),
            (
                Message::Event {
                    name: "claude/channel".into(),
                    params: json!({"content": "hello", "meta": {"channel": "#c"}}),
                },
                json!({"type":"event","name":"claude/channel","params":{"content":"hello","meta":{"channel":"#c"}}}),
            ),
            (
                Message::Request {
                    id: RequestId::Number(2),
                    method: "tools/call".into(),
                    params: Some(
                        json!({"name":"t","arguments":{}})
                            .as_object()
                            .cloned()
                            .unwrap(),
                    ),
                },
                json!({"type":"request","id":2,"method":"tools/call","params":{"name":"t","arguments":{}}}),
            ),
            (
                Message::result(RequestId::String("a".into()), json!({"tools":[]})),
                json!({"type":"response","id":"a","result":{"tools":[]}}),
            ),
            (
                Message::error_response(
                    RequestId::Number(3),
                    ErrorCode::UnknownTool,
                    "no tool named x",
                ),
                json!({"type":"response","id":3,"error":{"code":"unknown_tool","message":"no tool named x"}}),
            ),
            (
                Message::Notify {
                    event: TOOLS_CHANGED.into(),
                },
                json!({"type":"notify","event":"tools_changed"}),
            ),
        ];
        for (message, wire) in cases {
            assert_eq!(serde_json::to_value(&message).unwrap(), wire);
            assert_eq!(serde_json::from_value::<Message>(wire).unwrap(), message);
        }
    }

    #[tokio::test]
    async fn malformed_lines_are_reported_with_the_request_id_when_readable() {
        let got = read_all(b"not json\n[1]\n{\"type\":\"request\",\"id\":9}\n\n\r\n{\"type\":\"notify\",\"event\":\"x\",\"extra\":1}\n").await;
        assert!(
            matches!(&got[0], Read::Malformed { id: None, reason } if reason.contains("not JSON"))
        );
        assert!(
            matches!(&got[1], Read::Malformed { id: None, reason } if reason.contains("not a JSON object"))
        );
        assert!(matches!(
            &got[2],
            Read::Malformed {
                id: Some(RequestId::Number(9)),
                ..
            }
        ));
        assert_eq!(got[3], Read::Message(Message::Notify { event: "x".into() }));
        assert_eq!(got[4], Read::Eof);
    }

    #[test]
    fn an_event_line_is_measured_as_received() {
        // An event line of `total` bytes, `pad` of them spaces.
        let event_line = |total: usize, pad: usize| {
            let line = |content: usize| {
                format!(
                    r#"{{"type":"event","name":"claude/channel",{}"params":{{"content":"{}"}}}}"#,
                    " ".repeat(pad),
                    "c".repeat(content)
                )
            };
            let line = line(total - line(0).len());
            assert_eq!(line.len(), total);
            line
        };
        let too_long = |bytes| Read::EventTooLong {
            name: "claude/channel".into(),
            bytes,
        };
        assert!(matches!(
            decode(event_line(MAX_EVENT, 0).as_bytes()),
            Read::Message(Message::Event { .. })
        ));
        assert_eq!(
            decode(event_line(MAX_EVENT + 1, 0).as_bytes()),
            too_long(MAX_EVENT + 1)
        );
        // Whitespace counts, though the params alone would fit.
        assert_eq!(
            decode(event_line(MAX_EVENT + 10, 10).as_bytes()),
            too_long(MAX_EVENT + 10)
        );
    }

    #[tokio::test]
    async fn a_line_over_the_limit_is_refused_without_buffering_it() {
        let mut input = vec![b' '; MAX_LINE + 1];
        input.push(b'\n');
        let got = read_all(&input).await;
        assert_eq!(got, [Read::TooLong]);
        let mut exact = br#"{"type":"error","message":""#.to_vec();
        exact.resize(MAX_LINE - 2, b'x');
        exact.extend_from_slice(b"\"}\n");
        assert!(matches!(
            read_all(&exact).await[0],
            Read::Message(Message::Error { .. })
        ));
    }
}
