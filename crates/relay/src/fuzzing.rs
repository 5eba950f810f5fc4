//! The body of the `relay_line` fuzz target (`fuzz/` at the repository
//! root), kept here as a plain function so ordinary tests run it on the seed
//! corpus with a stable toolchain.
//!
//! ```
//! switchboard_relay::fuzzing::relay_line(br#"{"type":"request","id":1,"method":"tools/list"}"#);
//! switchboard_relay::fuzzing::relay_line(b"\xff\xfe not even UTF-8\n\n{");
//! ```

use std::{
    future::Future,
    pin::pin,
    sync::OnceLock,
    task::{Context, Poll, Waker},
};

use serde_json::{Value, json};

use crate::{
    protocol::{self, MAX_LINE, Message, Read},
    server::parse_call,
    tools::{Table, Tool},
};

/// Feeds `data` to the relay's line reader and decoder, and what they
/// produce to the server's request parsing and argument validation,
/// checking that nothing panics and that the reader never reserves more
/// than about twice [`MAX_LINE`] for one line.
///
/// `data` is used three ways: decoded whole as one line; read as a stream
/// of lines through a reader whose buffer size comes from the first byte
/// (so lines straddle buffer boundaries); and, when the first byte is
/// `0xff`, repeated past [`MAX_LINE`] to take the over-long path.
pub fn relay_line(data: &[u8]) {
    check(protocol::decode(data));

    let capacity = 1 + usize::from(data.first().copied().unwrap_or(0)) * 3;
    let stream: Vec<u8> = if data.first() == Some(&0xff) {
        let mut long = Vec::with_capacity(MAX_LINE + 2 * data.len() + 2);
        while long.len() <= MAX_LINE {
            long.extend(data.iter().map(|&b| if b == b'\n' { b' ' } else { b }));
            if data.len() <= 1 {
                long.push(b'x');
            }
        }
        long.push(b'\n');
        long.extend_from_slice(data);
        long
    } else {
        data.to_vec()
    };
    let mut reader = tokio::io::BufReader::with_capacity(capacity, stream.as_slice());
    let mut lines = protocol::line_reader();
    // Each read consumes at least one byte, so this ends.
    for _ in 0..=stream.len() {
        let read = block_on(protocol::read_message(&mut reader, &mut lines))
            .expect("reading from memory never fails");
        assert!(
            lines.capacity() <= 2 * MAX_LINE,
            "reserved {} bytes for one line",
            lines.capacity()
        );
        match read {
            Read::Eof | Read::TooLong => return,
            read => check(read),
        }
    }
    panic!(
        "read_message did not reach the end of {} bytes",
        stream.len()
    );
}

fn check(read: Read) {
    match read {
        Read::Message(message) => {
            let line = protocol::encode(&message);
            assert_eq!(line.last(), Some(&b'\n'));
            assert!(
                !line[..line.len() - 1].contains(&b'\n'),
                "an encoded message spans lines"
            );
            assert!(
                matches!(protocol::decode(&line[..line.len() - 1]), Read::Message(_)),
                "an encoded message does not decode"
            );
            if let Message::Request { method, params, .. } = message
                && method == "tools/call"
                && let Ok((name, arguments)) = parse_call(params)
            {
                let _ = table().validate(&name, &Value::Object(arguments));
            }
        }
        Read::Malformed { reason, .. } => assert!(!reason.is_empty()),
        Read::EventTooLong { bytes, .. } => assert!(bytes > protocol::MAX_EVENT),
        Read::TooLong | Read::Eof => {}
    }
}

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        Table::new(vec![
            Tool::new(
                "set_session_title",
                "Set the title.",
                json!({
                    "type": "object",
                    "properties": {"title": {"type": "string", "maxLength": 80}},
                    "required": ["title"],
                    "additionalProperties": false
                }),
            ),
            Tool::new(
                "nested",
                "Nested shapes.",
                json!({
                    "type": "object",
                    "properties": {
                        "items": {"type": "array", "items": {"type": "integer", "minimum": 0}, "maxItems": 4},
                        "mode": {"enum": ["a", "b"]},
                        "name": {"type": "string", "pattern": "^[a-z]+$"}
                    }
                }),
            ),
        ])
        .expect("the fuzz table compiles")
    })
}

/// Runs a future that never waits (reading from memory) to completion.
fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    match future.as_mut().poll(&mut cx) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("reading from memory never waits"),
    }
}
