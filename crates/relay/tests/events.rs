//! Events between an application and its clients: agreed in hello and
//! welcome, pushed by the application (`Handle::push`, `push_to`), passed on
//! by clients, and refused with a clear line when they break the rules.

mod common;

use std::time::Duration;

use common::{Raw, Running, WAIT};
use serde_json::{Map, Value, json};
use switchboard_relay::{
    Event, PushError,
    client::{Hello, Incoming, Link, LinkError},
    events::{self, MAX_EVENT},
};

const AGREED: [&str; 2] = [events::CHANNEL, events::PERMISSION_REQUEST];

async fn start() -> Running {
    Running::start_with(|options| options.events(AGREED)).await
}

async fn link_with(
    server: &Running,
    identity: Option<&str>,
    events: &[&str],
) -> (Link, tokio::sync::mpsc::Receiver<Incoming>) {
    let hello = Hello {
        identity: identity.map(str::to_owned),
        events: events.iter().map(|e| (*e).to_owned()).collect(),
        ..Hello::new("events test")
    };
    let (link, incoming) = Link::connect_as(&server.path, Duration::from_secs(1), hello)
        .await
        .unwrap();
    link.wait_welcome(WAIT).await.expect("welcome");
    (link, incoming)
}

async fn next_event(incoming: &mut tokio::sync::mpsc::Receiver<Incoming>) -> Option<Event> {
    loop {
        match tokio::time::timeout(Duration::from_millis(500), incoming.recv()).await {
            Ok(Some(Incoming::Event(event))) => return Some(event),
            Ok(Some(_)) => continue,
            _ => return None,
        }
    }
}

/// A `claude/channel` event line of exactly `bytes` bytes, padded with
/// spaces, its `meta.kind` set to `kind`.
fn event_line(bytes: usize, kind: &str) -> String {
    let line = json!({"type": "event", "name": events::CHANNEL, "params": {"content": "c", "meta": {"kind": kind}}}).to_string();
    format!("{line}{}", " ".repeat(bytes - line.len()))
}

#[tokio::test]
async fn the_welcome_agrees_on_what_both_list_and_pushes_reach_only_those() {
    let server = start().await;
    let (agreeing, mut agreeing_in) = link_with(
        &server,
        Some("alice"),
        &[events::CHANNEL, events::PERMISSION, "x/unknown"],
    )
    .await;
    let welcome = agreeing.welcome().unwrap();
    assert_eq!(welcome.events, [events::CHANNEL]);
    assert_eq!(welcome.instructions.as_deref(), Some("Hello alice."));
    let (silent, mut silent_in) = link_with(&server, None, &[]).await;
    assert!(silent.welcome().unwrap().events.is_empty());
    assert_eq!(silent.welcome().unwrap().instructions, None);

    let event = Event::channel("deploy finished", [("run", "42")]);
    assert_eq!(server.handle.push(&event), Ok(1));
    let got = next_event(&mut agreeing_in).await.expect("pushed");
    assert_eq!(got, event);
    assert_eq!(next_event(&mut silent_in).await, None);

    // An event nobody agreed on goes nowhere.
    let other = Event::new(events::PERMISSION, Map::new());
    assert_eq!(server.handle.push(&other), Ok(0));

    // Oversized events are refused before anything is sent.
    let huge = Event::channel("x".repeat(MAX_EVENT), [("a", "b")]);
    assert!(matches!(
        server.handle.push(&huge),
        Err(PushError::TooLarge(_))
    ));
    assert!(matches!(
        server.handle.push_to(999, &event),
        Err(PushError::NoConnection(999))
    ));
    server.stop().await;
}

#[tokio::test]
async fn push_to_reaches_one_connection_by_its_number() {
    let server = start().await;
    let (first, mut first_in) = link_with(&server, None, &[events::CHANNEL]).await;
    let (_second, mut second_in) = link_with(&server, None, &[events::CHANNEL]).await;
    let who = first
        .request(
            "tools/call",
            common::params(json!({"name": "whoami", "arguments": {}})),
            WAIT,
        )
        .await
        .unwrap();
    let pid = who["structuredContent"]["pid"].as_u64().unwrap();
    assert_eq!(pid, u64::from(std::process::id()));
    // Connections are numbered from 1 in order.
    let event = Event::channel("just you", Vec::<(String, String)>::new());
    server.handle.push_to(1, &event).unwrap();
    assert_eq!(next_event(&mut first_in).await, Some(event));
    assert_eq!(next_event(&mut second_in).await, None);
    let not_agreed = Event::new(events::PERMISSION, Map::new());
    assert_eq!(
        server.handle.push_to(1, &not_agreed),
        Err(PushError::NotAgreed(events::PERMISSION.into()))
    );
    server.stop().await;
}

#[tokio::test]
async fn client_events_reach_the_handler_when_agreed() {
    let server = start().await;
    let (link, _incoming) = link_with(&server, None, &AGREED).await;
    let mut params = Map::new();
    params.insert("request_id".into(), json!("abcde"));
    link.send_event(
        &Event::new(events::PERMISSION_REQUEST, params.clone()),
        WAIT,
    )
    .await
    .unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    while server.events.lock().unwrap().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no event reached the handler"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (_, event) = server.events.lock().unwrap()[0].clone();
    assert_eq!(event, Event::new(events::PERMISSION_REQUEST, params));
    // The client refuses what was not agreed, or does not fit.
    assert_eq!(
        link.send_event(&Event::new(events::PERMISSION, Map::new()), WAIT)
            .await,
        Err(LinkError::NotAgreed(events::PERMISSION.into()))
    );
    let huge = Event::channel("x".repeat(MAX_EVENT), [("a", "b")]);
    let huge = Event::new(events::PERMISSION_REQUEST, huge.params);
    assert!(matches!(
        link.send_event(&huge, WAIT).await,
        Err(LinkError::TooLarge(_))
    ));
    server.stop().await;
}

#[tokio::test]
async fn bad_client_events_get_an_error_line_and_the_connection_goes_on() {
    let server = start().await;
    let mut raw = Raw::connect(&server.path).await;
    raw.send(
        &json!({"type": "hello", "protocol": 1, "pid": std::process::id(), "client": "raw", "events": [events::PERMISSION_REQUEST]})
            .to_string(),
    )
    .await;
    let welcome = raw.recv().await;
    assert_eq!(welcome["events"], json!([events::PERMISSION_REQUEST]));
    let cases: [(Value, &str); 3] = [
        (
            json!({"type": "event", "name": events::CHANNEL, "params": {}}),
            "was not agreed",
        ),
        (
            json!({"type": "event", "name": events::PERMISSION_REQUEST, "params": [1]}),
            "params must be an object",
        ),
        (
            json!({"type": "event", "name": events::PERMISSION_REQUEST, "params": {"x": "y".repeat(MAX_EVENT)}}),
            "events are at most",
        ),
    ];
    for (line, expected) in cases {
        raw.send(&line.to_string()).await;
        let reply = raw.recv().await;
        assert_eq!(reply["type"], "error", "{reply}");
        assert!(
            reply["message"].as_str().unwrap().contains(expected),
            "{reply}"
        );
    }
    // Still serving.
    raw.send(&json!({"type": "request", "id": 1, "method": "tools/list"}).to_string())
        .await;
    assert_eq!(raw.recv().await["type"], "response");
    assert!(server.events.lock().unwrap().is_empty());
    server.stop().await;
}

#[tokio::test]
async fn a_client_ignores_events_it_did_not_agree_on_and_keeps_the_link() {
    // A scripted application that misbehaves after its welcome.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("relay.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let (done, finished) = tokio::sync::oneshot::channel::<()>();
    let app = tokio::spawn(async move {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
        let (stream, _) = listener.accept().await.unwrap();
        let (reader, mut writer) = stream.into_split();
        let mut lines = BufReader::new(reader).lines();
        let _hello = lines.next_line().await.unwrap();
        let mut say = async |line: String| {
            writer
                .write_all(format!("{line}\n").as_bytes())
                .await
                .unwrap();
        };
        say(json!({"type": "welcome", "protocol": 1, "app": "A", "app_id": "a", "events": [events::CHANNEL]}).to_string()).await;
        say(json!({"type": "event", "name": events::PERMISSION, "params": {}}).to_string()).await;
        say(
            json!({"type": "event", "name": events::CHANNEL, "params": "not an object"})
                .to_string(),
        )
        .await;
        // The limit is on the line as sent, spaces included.
        for (bytes, content) in [(MAX_EVENT + 1, "over"), (MAX_EVENT, "exact")] {
            say(event_line(bytes, content)).await;
        }
        say(json!({"type": "event", "name": events::CHANNEL, "params": {"content": "fine", "meta": {}}}).to_string()).await;
        let request: Value =
            serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        say(json!({"type": "response", "id": request["id"], "result": {"tools": []}}).to_string())
            .await;
        let _ = finished.await;
    });
    let hello = Hello {
        events: vec![events::CHANNEL.into()],
        ..Hello::new("client test")
    };
    let (link, mut incoming) = Link::connect_as(&path, WAIT, hello).await.unwrap();
    let event = next_event(&mut incoming)
        .await
        .expect("the event of MAX_EVENT bytes");
    assert_eq!(event.params["meta"]["kind"], "exact");
    let event = next_event(&mut incoming).await.expect("the good event");
    assert_eq!(event.params["content"], "fine");
    let list = link.request("tools/list", None, WAIT).await.unwrap();
    assert_eq!(list, json!({"tools": []}));
    assert!(!link.is_closed());
    done.send(()).unwrap();
    app.await.unwrap();
}
