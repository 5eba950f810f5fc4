//! Incoming JSON-RPC 2.0 messages as MCP uses them: the one place that
//! decides whether the bytes a client sent are a message, and if not, the
//! exact error reply they get.
//!
//! Every front door (`serve --stdio`, Streamable HTTP, legacy SSE and the
//! shim) runs [`classify`] on each message before anything else looks at
//! it, so the same malformed input gets the same reply everywhere:
//!
//! - bytes that are not JSON, or JSON naming a key twice in one object
//!   (readers disagree on which one wins: serde_json takes the last, rmcp's
//!   types refuse the message): `-32700`, id `null`;
//! - JSON that is not one JSON-RPC 2.0 message (an array, a scalar, a wrong
//!   or missing `"jsonrpc"`, a `method` that is not a string, no `method`,
//!   `params` that are neither an object nor an array): `-32600`;
//! - a request whose `params` are an array: `-32602` (JSON-RPC allows
//!   positional params, MCP's methods take an object).
//!
//! A reply echoes the message's id only when it is a valid one (a string,
//! or an integer that fits an `i64`); otherwise its id is `null`. This crate
//! is its own so that the shim can share it without the daemon's
//! dependencies, and it depends on nothing but `serde` and `serde_json`.

use std::fmt;

use serde_json::{Map, Value, json};

/// The largest JSON-RPC message accepted on any transport. Generous on
/// purpose: an oversized tool argument should reach the tool and get its
/// specific error ("text is 10485760 bytes; the limit is ..."), not a
/// framing error.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// JSON-RPC 2.0's error codes.
pub mod code {
    pub const PARSE_ERROR: i32 = -32700;
    pub const INVALID_REQUEST: i32 = -32600;
    pub const METHOD_NOT_FOUND: i32 = -32601;
    pub const INVALID_PARAMS: i32 = -32602;
}

/// A request id a reply may echo.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Id {
    Number(i64),
    String(String),
}

impl Id {
    /// The id `value` stands for: a string, or an integer that fits an
    /// `i64` (`1.0` is `1`, as MCP's SDKs read it). Anything else (`null`,
    /// a fraction, a larger number, an object, an array, a bool) is no id.
    pub fn from_json(value: &Value) -> Option<Self> {
        /// 2^53: from here on an `f64` no longer says which integer was sent.
        const MAX_EXACT: f64 = 9_007_199_254_740_992.0;
        match value {
            Value::String(s) => Some(Id::String(s.clone())),
            Value::Number(n) => n
                .as_i64()
                .or_else(|| {
                    n.as_f64()
                        .filter(|f| f.fract() == 0.0 && f.abs() < MAX_EXACT)
                        .map(|f| f as i64)
                })
                .map(Id::Number),
            _ => None,
        }
    }
}

impl From<Id> for Value {
    fn from(id: Id) -> Self {
        match id {
            Id::Number(n) => n.into(),
            Id::String(s) => s.into(),
        }
    }
}

/// What kind of message [`classify`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A request, answered exactly once under its id.
    Request(Id),
    /// A notification: never answered.
    Notification,
    /// A response to a request the server sent: never answered.
    Response,
}

/// A well-formed JSON-RPC 2.0 message.
#[derive(Debug, Clone)]
pub struct Message {
    kind: Kind,
    object: Map<String, Value>,
}

impl Message {
    pub fn kind(&self) -> &Kind {
        &self.kind
    }

    /// The method of a request or notification.
    pub fn method(&self) -> Option<&str> {
        self.object.get("method").and_then(Value::as_str)
    }

    /// `params` as sent: absent, `null`, an object, or (for a notification
    /// only) an array.
    pub fn params(&self) -> Option<&Value> {
        self.object.get("params")
    }

    /// The message as the JSON object it was sent as.
    pub fn into_value(self) -> Value {
        Value::Object(self.object)
    }
}

/// Why a message is refused, as the error reply it gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The id the reply echoes; `None` is `null`.
    pub id: Option<Id>,
    pub code: i32,
    pub message: String,
}

impl Rejection {
    fn new(id: Option<Id>, code: i32, message: impl Into<String>) -> Self {
        Self {
            id,
            code,
            message: message.into(),
        }
    }

    fn invalid_request(id: Option<Id>, problem: &str) -> Self {
        Self::new(
            id,
            code::INVALID_REQUEST,
            format!("invalid request: {problem}"),
        )
    }

    /// A well-formed request whose params its method cannot take.
    pub fn invalid_params(id: Id, problem: impl fmt::Display) -> Self {
        Self::new(
            Some(id),
            code::INVALID_PARAMS,
            format!("invalid params: {problem}"),
        )
    }

    /// A request for a method the server does not have.
    pub fn method_not_found(id: Id, method: &str) -> Self {
        Self::new(
            Some(id),
            code::METHOD_NOT_FOUND,
            format!("method not found: {method}"),
        )
    }

    /// A request whose id another request in flight already uses: its
    /// reply could not be told from the other's.
    pub fn id_in_use(id: Id) -> Self {
        let shown = Value::from(id.clone());
        Self::invalid_request(
            Some(id),
            &format!(
                "id {shown} is already used by a request in flight; give each request its own id"
            ),
        )
    }

    /// A message longer than [`MAX_MESSAGE_BYTES`], which was not read.
    pub fn too_long() -> Self {
        Self::invalid_request(
            None,
            &format!("the message exceeds {MAX_MESSAGE_BYTES} bytes and was discarded"),
        )
    }

    /// The error reply, as one line of JSON.
    pub fn to_json(&self) -> String {
        error_json(self.id.clone(), self.code, &self.message)
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

/// A JSON-RPC error reply as one line of JSON; `None` is a `null` id.
pub fn error_json(id: Option<Id>, code: i32, message: &str) -> String {
    let id = id.map_or(Value::Null, Value::from);
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

/// What a `tools/call` request's params name: the tool, and its arguments
/// (none given is `None`).
#[derive(Debug, PartialEq)]
pub struct CallParams<'a> {
    pub name: &'a str,
    pub arguments: Option<&'a Map<String, Value>>,
}

/// Reads a `tools/call` request's params, or says what to reply with as
/// invalid params.
///
/// ```
/// use serde_json::json;
/// use switchboard_jsonrpc::call_params;
///
/// let params = json!({"name": "echo", "arguments": {"text": "hi"}});
/// let call = call_params(params.as_object()).unwrap();
/// assert_eq!((call.name, call.arguments.unwrap().len()), ("echo", 1));
/// assert_eq!(call_params(None), Err("tools/call needs a string name"));
/// let listed = json!({"name": "echo", "arguments": ["hi"]});
/// assert_eq!(call_params(listed.as_object()), Err("arguments must be an object"));
/// ```
pub fn call_params(params: Option<&Map<String, Value>>) -> Result<CallParams<'_>, &'static str> {
    let name = params
        .and_then(|p| p.get("name"))
        .and_then(Value::as_str)
        .ok_or("tools/call needs a string name")?;
    let arguments = match params.and_then(|p| p.get("arguments")) {
        None | Some(Value::Null) => None,
        Some(Value::Object(arguments)) => Some(arguments),
        Some(_) => return Err("arguments must be an object"),
    };
    Ok(CallParams { name, arguments })
}

/// `bytes` without a leading UTF-8 byte-order mark, which some clients on
/// Windows write before their first message.
pub fn strip_bom(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes)
}

/// Parses one message's JSON as [`classify`] does: an object that names a
/// key twice is an error, since parsers disagree on which value counts.
pub fn parse_json(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    serde_json::from_slice(strip_bom(bytes)).map(|Unambiguous(value)| value)
}

/// Decides what one incoming message is: a [`Message`], or the
/// [`Rejection`] to send back.
pub fn classify(bytes: &[u8]) -> Result<Message, Rejection> {
    let value = parse_json(bytes)
        .map_err(|e| Rejection::new(None, code::PARSE_ERROR, format!("parse error: {e}")))?;
    let object = match value {
        Value::Object(object) => object,
        Value::Array(batch) if batch.is_empty() => {
            return Err(Rejection::invalid_request(None, "an empty batch"));
        }
        Value::Array(_) => {
            return Err(Rejection::invalid_request(
                None,
                "batches are not supported; send one message at a time",
            ));
        }
        _ => {
            return Err(Rejection::invalid_request(
                None,
                "a message must be a JSON object",
            ));
        }
    };
    let raw_id = object.get("id");
    let id = raw_id.and_then(Id::from_json);
    let is_response = !object.contains_key("method")
        && (object.contains_key("result") || object.contains_key("error"));
    // An error response may carry a null id (its request's id was
    // unreadable); nothing else may.
    let null_allowed = is_response && raw_id == Some(&Value::Null);
    if let Some(raw) = raw_id.filter(|_| id.is_none() && !null_allowed) {
        // Past i64 (u64 above it, or beyond u64 and so read as a float).
        let too_big = raw.is_u64()
            || raw
                .as_f64()
                .is_some_and(|f| f.fract() == 0.0 && f.abs() >= 9.2e18);
        let problem = if too_big {
            "id must be an integer from -2^63 to 2^63-1, or a string"
        } else {
            "id must be a string or an integer"
        };
        return Err(Rejection::invalid_request(None, problem));
    }
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(Rejection::invalid_request(
            id,
            "\"jsonrpc\" must be \"2.0\"",
        ));
    }
    if is_response {
        return response(object, id);
    }
    match object.get("method") {
        Some(Value::String(_)) => {}
        Some(_) => return Err(Rejection::invalid_request(id, "method must be a string")),
        None => return Err(Rejection::invalid_request(id, "no method")),
    }
    match (object.get("params"), id) {
        (None | Some(Value::Null | Value::Object(_)), id) | (Some(Value::Array(_)), id @ None) => {
            let kind = id.map_or(Kind::Notification, Kind::Request);
            Ok(Message { kind, object })
        }
        (Some(Value::Array(_)), Some(id)) => Err(Rejection::invalid_params(
            id,
            "params must be an object, not an array",
        )),
        (Some(_), id) => Err(Rejection::invalid_request(
            id,
            "params must be an object or an array",
        )),
    }
}

/// A JSON value as serde_json reads it, except that an object naming a key
/// twice is an error rather than its last value.
struct Unambiguous(Value);

impl<'de> serde::Deserialize<'de> for Unambiguous {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(UnambiguousVisitor)
            .map(Unambiguous)
    }
}

struct UnambiguousVisitor;

impl<'de> serde::de::Visitor<'de> for UnambiguousVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(Unambiguous(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let Unambiguous(value) = map.next_value()?;
            if object.contains_key(&key) {
                return Err(serde::de::Error::custom(format!(
                    "the key {key:?} appears twice in one object"
                )));
            }
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// A response from the client (to a request the server sent).
fn response(object: Map<String, Value>, id: Option<Id>) -> Result<Message, Rejection> {
    let well_formed = match (object.get("result"), object.get("error")) {
        (Some(_), None) => id.is_some(),
        (None, Some(Value::Object(error))) => {
            error.get("code").is_some_and(|c| c.is_i64())
                && error.get("message").is_some_and(Value::is_string)
        }
        _ => false,
    };
    if !well_formed {
        return Err(Rejection::invalid_request(
            id,
            "a response needs an id and either a result or an error with an integer code and a string message",
        ));
    }
    Ok(Message {
        kind: Kind::Response,
        object,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(input: &str) -> (Value, i32) {
        let rejection = classify(input.as_bytes()).expect_err(input);
        (
            rejection.id.map_or(Value::Null, Value::from),
            rejection.code,
        )
    }

    #[test]
    fn malformed_input_gets_the_code_and_id_json_rpc_prescribes() {
        let cases: &[(&str, Value, i32)] = &[
            ("{not json", Value::Null, -32700),
            (
                r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#,
                Value::Null,
                -32700,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":{"b":1,"b":2}}}"#,
                Value::Null,
                -32700,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1e400,"method":"ping"}"#,
                Value::Null,
                -32700,
            ),
            ("[]", Value::Null, -32600),
            (
                r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
                Value::Null,
                -32600,
            ),
            ("42", Value::Null, -32600),
            (
                r#"{"jsonrpc":"1.0","id":3,"method":"ping"}"#,
                json!(3),
                -32600,
            ),
            (r#"{"id":"a","method":"ping"}"#, json!("a"), -32600),
            (
                r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#,
                Value::Null,
                -32600,
            ),
            (
                r#"{"jsonrpc":"2.0","id":[1],"method":"ping"}"#,
                Value::Null,
                -32600,
            ),
            (
                r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#,
                Value::Null,
                -32600,
            ),
            (
                r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
                Value::Null,
                -32600,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
                Value::Null,
                -32600,
            ),
            (
                r#"{"jsonrpc":"2.0","id":18446744073709551616,"method":"ping"}"#,
                Value::Null,
                -32600,
            ),
            (r#"{"jsonrpc":"2.0","id":4}"#, json!(4), -32600),
            (r#"{"jsonrpc":"2.0","id":5,"method":7}"#, json!(5), -32600),
            (r#"{"jsonrpc":"2.0","method":null}"#, Value::Null, -32600),
            (
                r#"{"jsonrpc":"2.0","id":6,"method":"ping","params":[1]}"#,
                json!(6),
                -32602,
            ),
            (
                r#"{"jsonrpc":"2.0","id":7,"method":"ping","params":"x"}"#,
                json!(7),
                -32600,
            ),
            (
                r#"{"jsonrpc":"2.0","id":8,"result":{},"error":{"code":1,"message":"m"}}"#,
                json!(8),
                -32600,
            ),
        ];
        for (input, id, code) in cases {
            assert_eq!(rejected(input), (id.clone(), *code), "{input}");
        }
    }

    #[test]
    fn well_formed_messages_pass_with_their_kind() {
        let kind = |input: &str| classify(input.as_bytes()).expect(input).kind().clone();
        assert_eq!(
            kind("\u{feff}{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"method\":\"ping\"}"),
            Kind::Request(Id::String("x".into()))
        );
        assert_eq!(
            kind(r#"{"jsonrpc":"2.0","id":1.0,"method":"ping","params":null}"#),
            Kind::Request(Id::Number(1))
        );
        assert_eq!(
            kind(r#"{"jsonrpc":"2.0","id":9223372036854775807,"method":"ping"}"#),
            Kind::Request(Id::Number(i64::MAX))
        );
        assert_eq!(
            kind(r#"{"jsonrpc":"2.0","method":"notifications/x","params":[1]}"#),
            Kind::Notification
        );
        assert_eq!(
            kind(r#"{"jsonrpc":"2.0","id":2,"result":{}}"#),
            Kind::Response
        );
        assert_eq!(
            kind(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-1,"message":"m"}}"#),
            Kind::Response
        );
    }

    #[test]
    fn an_integer_id_out_of_range_is_told_as_such() {
        let message = |input: &str| classify(input.as_bytes()).unwrap_err().message;
        for big in [
            "9223372036854775808",
            "18446744073709551615",
            "18446744073709551616",
        ] {
            let input = format!(r#"{{"jsonrpc":"2.0","id":{big},"method":"ping"}}"#);
            assert!(message(&input).contains("from -2^63 to 2^63-1"), "{big}");
        }
        for other in ["1.5", "true", "[1]"] {
            let input = format!(r#"{{"jsonrpc":"2.0","id":{other},"method":"ping"}}"#);
            assert!(
                message(&input).ends_with("id must be a string or an integer"),
                "{other}"
            );
        }
    }

    #[test]
    fn the_reply_is_one_json_line_echoing_a_valid_id() {
        let reply = classify(br#"{"jsonrpc":"1.0","id":"r","method":"ping"}"#)
            .unwrap_err()
            .to_json();
        assert_eq!(
            reply,
            r#"{"error":{"code":-32600,"message":"invalid request: \"jsonrpc\" must be \"2.0\""},"id":"r","jsonrpc":"2.0"}"#
        );
    }
}
