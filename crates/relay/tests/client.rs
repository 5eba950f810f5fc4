//! The client `Link` against applications that break the protocol or do not
//! speak its version: the link closes as `LinkError::Unusable`, saying why,
//! and the requests it carried fail with that reason.

use std::time::Duration;

use serde_json::{Value, json};
use switchboard_relay::client::{Link, LinkError};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    net::UnixListener,
};

const WAIT: Duration = Duration::from_secs(10);

/// An application that reads the hello, says `lines`, then closes if
/// `close` is set (else keeps the connection until the test ends). Returns
/// a link to it, dialled and with a `tools/list` in flight, and that
/// request's outcome.
async fn after(lines: &[Value], close: bool) -> (Link, Result<Value, LinkError>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("relay.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let lines: Vec<String> = lines.iter().map(|l| format!("{l}\n")).collect();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let (reader, mut writer) = stream.into_split();
        let mut reader = BufReader::new(reader).lines();
        let _hello = reader.next_line().await;
        for line in lines {
            writer.write_all(line.as_bytes()).await.unwrap();
        }
        if !close {
            while let Ok(Some(_)) = reader.next_line().await {}
        }
    });
    let (link, _incoming) = Link::connect(&path, WAIT, "client test").await.unwrap();
    let outcome = link.request("tools/list", None, WAIT).await;
    (link, outcome)
}

fn welcome(protocol: Value) -> Value {
    json!({"type": "welcome", "protocol": protocol, "app": "A", "app_id": "a"})
}

fn unusable(outcome: Result<Value, LinkError>) -> String {
    match outcome {
        Err(LinkError::Unusable(reason)) => reason,
        other => panic!("not refused as unusable: {other:?}"),
    }
}

#[tokio::test]
async fn a_welcome_in_another_protocol_version_closes_the_link() {
    let (link, outcome) = after(&[welcome(json!(2))], false).await;
    assert_eq!(
        unusable(outcome),
        "the application speaks relay protocol version 2; this client speaks version 1"
    );
    assert!(link.is_closed());
    assert_eq!(link.welcome(), None);
    assert!(matches!(link.closed_by(), Some(LinkError::Unusable(_))));
}

#[tokio::test]
async fn a_malformed_welcome_closes_the_link() {
    let (_, outcome) = after(&[welcome(json!("1"))], false).await;
    let reason = unusable(outcome);
    assert!(
        reason.starts_with("the application answered the hello with a malformed line: "),
        "{reason}"
    );
}

#[tokio::test]
async fn a_second_welcome_closes_the_link_and_keeps_the_first() {
    let mut second = welcome(json!(1));
    second["app"] = json!("Other");
    let (link, outcome) = after(&[welcome(json!(1)), second], false).await;
    assert_eq!(unusable(outcome), "the application sent a second welcome");
    assert_eq!(link.welcome().unwrap().app, "A");
}

#[tokio::test]
async fn an_error_then_a_close_before_the_welcome_is_a_refusal() {
    let (_, outcome) = after(&[json!({"type": "error", "message": "go away"})], true).await;
    assert_eq!(
        unusable(outcome),
        "the application refused the connection: go away"
    );
    // After the welcome, the same is a plain close, with the reason.
    let (_, outcome) = after(
        &[
            welcome(json!(1)),
            json!({"type": "error", "message": "shutting down"}),
        ],
        true,
    )
    .await;
    assert_eq!(
        outcome,
        Err(LinkError::Closed(
            "the application closed the connection after reporting: shutting down".into()
        ))
    );
}
