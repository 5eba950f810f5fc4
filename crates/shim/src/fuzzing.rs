//! The body of the `shim_stdio` fuzz target (`fuzz/` at the repository
//! root), and the checks on what an MCP stdio server wrote that the daemon's
//! `daemon_stdio` target shares. Built with the feature `fuzzing` only;
//! the crate's tests run it on the seed corpus with a stable toolchain.
//!
//! ```
//! switchboard_shim::fuzzing::shim_stdio(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n{oops\n");
//! ```

use std::{collections::HashMap, path::PathBuf, time::Duration};

use serde_json::Value;
use switchboard_jsonrpc::Id;
use tokio::io::{AsyncReadExt, DuplexStream};

use crate::{Target, serve, upstream::Timeouts};

/// Serves `data` as one client's stdin through the shim, with no
/// application behind it (time runs virtually, so its timeouts cost
/// nothing), and checks what the shim wrote with [`check_replies`]: every
/// request answered, nothing but JSON-RPC on stdout.
pub fn shim_stdio(data: &[u8]) {
    let output = run_paused(async {
        let target = Target {
            socket: PathBuf::from("/nonexistent/switchboard-fuzz/relay.sock"),
            cache_file: PathBuf::from("/nonexistent/switchboard-fuzz/tools.json"),
            app_id: "fuzz".into(),
            identity: None,
            timeouts: Timeouts {
                connect: Duration::from_millis(50),
                list: Duration::from_millis(50),
                call: Duration::from_millis(50),
            },
        };
        written_by(|stdout| serve(target, data, stdout)).await
    });
    check_replies(data, &output, Answers::EveryRequest);
}

/// Runs `server` with a stdout whose bytes are collected, and returns them
/// once the server has finished and dropped it.
pub async fn written_by<F: Future<Output = ()>>(server: impl FnOnce(DuplexStream) -> F) -> Vec<u8> {
    let (stdout, mut written) = tokio::io::duplex(64 * 1024);
    let reader = tokio::spawn(async move {
        let mut bytes = Vec::new();
        written
            .read_to_end(&mut bytes)
            .await
            .expect("reading a duplex never fails");
        bytes
    });
    server(stdout).await;
    reader.await.expect("the reader task does not panic")
}

/// How many replies a server owes its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answers {
    /// Every request (a `method` and a string or number `id`) gets exactly
    /// one reply, and every line that is not JSON a parse error: the shim's
    /// promise.
    EveryRequest,
    /// At most one reply a line; a server may end the session on a
    /// protocol violation (rmcp does when the first message is not
    /// `initialize`) and leave the rest unanswered.
    AtMostOneALine,
}

/// Checks that `output`, what a stdio MCP server wrote after reading
/// `input`, is newline-delimited JSON-RPC: each line a response (with an id
/// the client sent, or `null`, and exactly one of `result` and `error`) or
/// a notification, and no more replies than lines read.
pub fn check_replies(input: &[u8], output: &[u8], answers: Answers) {
    let lines: Vec<&[u8]> = input
        .split(|&b| b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
        .map(switchboard_jsonrpc::strip_bom)
        .filter(|line| !line.iter().all(u8::is_ascii_whitespace))
        .collect();
    let mut owed: HashMap<String, usize> = HashMap::new();
    let mut not_json = 0;
    let mut sent_ids = Vec::new();
    for line in &lines {
        let Ok(value) = switchboard_jsonrpc::parse_json(line) else {
            not_json += 1;
            continue;
        };
        // Ids as JSON-RPC reads them: `-0` and `1.0` are the integers 0
        // and 1; a fraction or an object is no id (answered with `null`).
        if let Some(id) = value.get("id").and_then(Id::from_json) {
            let id = Value::from(id);
            if value.get("method").is_some_and(Value::is_string) {
                *owed.entry(id.to_string()).or_default() += 1;
            }
            sent_ids.push(id);
        }
    }

    assert_eq!(
        output.last().copied().unwrap_or(b'\n'),
        b'\n',
        "a reply line is unterminated"
    );
    let mut replies = 0;
    let mut parse_errors = 0;
    let mut answered: HashMap<String, usize> = HashMap::new();
    for line in output.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let reply: Value = serde_json::from_slice(line).unwrap_or_else(|e| {
            panic!(
                "stdout carried a line that is not JSON ({e}): {}",
                String::from_utf8_lossy(line)
            )
        });
        let shown = || String::from_utf8_lossy(line).into_owned();
        assert_eq!(reply["jsonrpc"], "2.0", "not JSON-RPC 2.0: {}", shown());
        let Some(id) = reply.get("id") else {
            let method = reply["method"].as_str().unwrap_or_default();
            assert!(
                method.starts_with("notifications/"),
                "neither a response nor a notification: {}",
                shown()
            );
            continue;
        };
        replies += 1;
        assert!(
            id.is_null() || sent_ids.contains(id),
            "a reply to an id never sent: {}",
            shown()
        );
        match (reply.get("result"), reply.get("error")) {
            (Some(_), None) => {}
            (None, Some(error)) => {
                assert!(
                    error["code"].is_i64(),
                    "an error without an integer code: {}",
                    shown()
                );
                assert!(
                    error["message"].is_string(),
                    "an error without a message: {}",
                    shown()
                );
                if error["code"] == -32700 {
                    assert!(id.is_null(), "a parse error names an id: {}", shown());
                    parse_errors += 1;
                }
            }
            _ => panic!(
                "a response needs exactly one of result and error: {}",
                shown()
            ),
        }
        if !id.is_null() {
            *answered.entry(id.to_string()).or_default() += 1;
        }
    }

    assert!(
        replies <= lines.len(),
        "{replies} replies to {} lines",
        lines.len()
    );
    assert!(
        parse_errors <= not_json,
        "{parse_errors} parse errors for {not_json} lines that are not JSON"
    );
    if answers == Answers::EveryRequest {
        assert_eq!(
            parse_errors, not_json,
            "every line that is not JSON gets a parse error"
        );
        for (id, count) in &owed {
            let got = answered.get(id).copied().unwrap_or(0);
            assert!(
                got >= *count,
                "{count} requests with id {id} got {got} replies"
            );
        }
    }
}

/// Runs `future` on a fresh single-threaded runtime whose clock advances
/// whenever every task waits, so timeouts pass at once.
fn run_paused<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime starts")
        .block_on(future)
}
