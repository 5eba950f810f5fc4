//! Per-agent tokens end to end: `[[http.tokens]]` on the real daemon, with
//! rmcp's client over Streamable HTTP, a legacy SSE client, the web view's
//! API and raw HTTP for the bad input; SIGHUP reloading them in place.

mod common;

use std::{path::Path, time::Duration};

use common::*;
use reqwest::{StatusCode, header};
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-0123456789";
const BOB: &str = "bob-secret-0123456789ab";
const ADMIN: &str = "admin-secret-0123456789";

/// A config of `tokens` (TOML) with the secrets in files beside it, and a
/// catalog toolset besides chat.
fn config(dir: &Path, tokens: &str) -> std::path::PathBuf {
    for (name, secret) in [
        ("alice", ALICE),
        ("bob", BOB),
        ("carol", "carol-secret-0123456789"),
    ] {
        std::fs::write(dir.join(format!("{name}.token")), format!("{secret}\n")).unwrap();
    }
    let path = dir.join("switchboard.toml");
    std::fs::write(
        &path,
        format!(
            r##"
[[catalog]]
tool = "list_things"
title = "Things"
description = "The things."
heading = "# Things"

[[catalog.entries]]
name = "thing"
summary = "A thing."
install = "get thing"

{tokens}"##
        ),
    )
    .unwrap();
    path
}

const TOKENS: &str = r##"
[[http.tokens]]
name = "alice"
secret_file = "alice.token"
channels = ["#team-*"]
tools = ["chat"]
sends_per_minute = 3

[[http.tokens]]
name = "bob"
secret_file = "bob.token"
nicks = ["bob", "bob-*"]
"##;

async fn start(dir: &Path, tokens: &str) -> Server {
    let config = config(dir, tokens);
    Server::start_with(
        &["--ephemeral", "--config", config.to_str().unwrap()],
        &[("SWITCHBOARD_HTTP_TOKEN", ADMIN)],
    )
    .await
}

fn tool_names(tools: &[rmcp::model::Tool]) -> Vec<String> {
    tools.iter().map(|t| t.name.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_speaks_as_its_nicks_in_its_channels_with_its_tools() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), TOKENS).await;
    let url = server.url("/mcp");
    let alice = http_client_as(&url, ALICE).await;
    let bob = http_client_as(&url, BOB).await;
    let admin = http_client_as(&url, ADMIN).await;

    // Tools: alice has chat only; bob and the admin token have all.
    let listed = tool_names(&alice.list_all_tools().await.unwrap());
    assert!(listed.contains(&"send_message".into()), "{listed:?}");
    assert!(!listed.contains(&"list_things".into()), "{listed:?}");
    assert!(tool_names(&bob.list_all_tools().await.unwrap()).contains(&"list_things".into()));
    let refused = call(&alice, "list_things", json!({})).await;
    assert!(is_error(&refused));
    assert!(
        text(&refused).contains("the token \"alice\" may not use the catalog tools"),
        "{}",
        text(&refused)
    );
    assert!(!is_error(&call(&bob, "list_things", json!({})).await));

    // Nicks: alice speaks as alice without saying so, and as nobody else.
    let sent = call(
        &alice,
        "send_message",
        json!({"channel": "#team-a", "text": "hello"}),
    )
    .await;
    assert_eq!(text(&sent), "Sent to #team-a as alice");
    let forged = call(
        &alice,
        "send_message",
        json!({"channel": "#team-a", "text": "I am bob", "sender": "bob"}),
    )
    .await;
    assert!(is_error(&forged));
    assert!(
        text(&forged).contains("may act only as alice, not as bob"),
        "{}",
        text(&forged)
    );
    assert!(is_error(
        &call(&alice, "read_messages", json!({"nick": "bob"})).await
    ));
    // Bob's globs let him speak as bob-ci, not as alice.
    let as_ci = call(
        &bob,
        "send_message",
        json!({"channel": "#team-a", "text": "ci green", "sender": "bob-ci"}),
    )
    .await;
    assert!(!is_error(&as_ci), "{}", text(&as_ci));
    assert!(is_error(
        &call(
            &bob,
            "send_message",
            json!({"channel": "#team-a", "text": "x", "sender": "alice"})
        )
        .await
    ));

    // Channels: alice's are #team-*; the others do not exist for her.
    send(&admin, "#ops", "root", "secret plans").await;
    for (tool, args) in [
        ("send_message", json!({"channel": "#ops", "text": "hi"})),
        ("read_messages", json!({"channel": "#ops"})),
        ("get_members", json!({"channel": "#ops"})),
        ("create_channel", json!({"name": "#elsewhere"})),
        (
            "search_messages",
            json!({"query": "plans", "channel": "#ops"}),
        ),
        (
            "wait_for_messages",
            json!({"channel": "#ops", "timeout_s": 0}),
        ),
    ] {
        let result = call(&alice, tool, args).await;
        assert!(is_error(&result), "{tool}: {}", text(&result));
        assert!(
            text(&result).contains("may not use #"),
            "{tool}: {}",
            text(&result)
        );
    }
    let listed = call(&alice, "list_channels", json!({})).await;
    assert_eq!(
        listed.structured_content.unwrap()["channels"],
        json!(["#team-a"])
    );
    let found = call(&alice, "search_messages", json!({"query": "plans"})).await;
    assert_eq!(found.structured_content.unwrap()["messages"], json!([]));
    // Nothing the refusals touched exists or changed.
    let all = call(&admin, "list_channels", json!({})).await;
    assert_eq!(
        all.structured_content.unwrap()["channels"],
        json!(["#ops", "#team-a"])
    );
    let ops = call(&admin, "read_messages", json!({"channel": "#ops"})).await;
    assert_eq!(texts(&ops), ["secret plans"]);

    // Sends a minute count messages, one a line: a text of more lines than
    // the token may send in a minute is refused, and costs nothing.
    let long = call(
        &alice,
        "send_message",
        json!({"channel": "#team-a", "text": "1\n2\n3\n4"}),
    )
    .await;
    assert!(
        is_error(&long) && text(&long).contains("this text makes 4 (one a line); send fewer lines"),
        "{}",
        text(&long)
    );
    // Refusals cost nothing, so alice has two more sends.
    for more in ["two", "three"] {
        let sent = call(
            &alice,
            "send_message",
            json!({"channel": "#team-a", "text": more}),
        )
        .await;
        assert!(!is_error(&sent), "{}", text(&sent));
    }
    let over = call(
        &alice,
        "send_message",
        json!({"channel": "#team-a", "text": "four"}),
    )
    .await;
    assert!(is_error(&over));
    assert!(
        text(&over).contains("may send 3 messages a minute"),
        "{}",
        text(&over)
    );
    let retry = error_facts(&over)["retry_after"].as_u64().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    let team = call(&admin, "read_messages", json!({"channel": "#team-a"})).await;
    assert_eq!(texts(&team), ["three", "two", "ci green", "hello"]);
    // Everyone else keeps going.
    assert!(!is_error(
        &call(
            &bob,
            "send_message",
            json!({"channel": "#team-a", "text": "still here"})
        )
        .await
    ));

    let log = server.log();
    assert!(
        log.contains("token=\"alice\"") || log.contains("token=alice"),
        "{log}"
    );
    for secret in [ALICE, BOB, ADMIN] {
        assert!(!log.contains(secret), "a secret reached the log");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_missing_and_malformed_tokens_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), TOKENS).await;
    let http = reqwest::Client::new();
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    let long = format!("Bearer {}", "x".repeat(8000));
    for authorization in [
        None,
        Some("Bearer wrong-secret-0123456789"),
        Some("Bearer "),
        Some("Bearer"),
        Some(ALICE),
        Some("Basic YWxpY2U6c2VjcmV0"),
        Some(long.as_str()),
    ] {
        let mut request = post_json(&http, &server.url("/mcp")).body(list.clone());
        if let Some(value) = authorization {
            request = request.header(header::AUTHORIZATION, value);
        }
        let response = request.send().await.unwrap();
        assert_eq!(
            response.status(),
            StatusCode::UNAUTHORIZED,
            "{authorization:.40?}"
        );
        assert_eq!(response.headers()[header::WWW_AUTHENTICATE], "Bearer");
        let body: Value = response.json().await.unwrap();
        assert!(
            body["error"]["message"].as_str().unwrap().contains("token"),
            "{body}"
        );
    }
    // The right one, in any case of the scheme, passes.
    let response = post_json(&http, &server.url("/mcp"))
        .header(header::AUTHORIZATION, format!("bearer {ALICE}"))
        .header("mcp-protocol-version", "2025-06-18")
        .body(list)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

/// Guessing is slowed down: after GUESS_BURST wrong tokens from one
/// address, every token from it, the right one too, is refused with `429`
/// and `Retry-After` until a try has come back; the web view's login counts
/// the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_guessing_tokens_is_made_to_wait() {
    use switchboard_toolset::{GUESS_BURST, GUESS_REFILL};
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), TOKENS).await;
    let http = reqwest::Client::new();
    let list = |token: &str| {
        post_json(&http, &server.url("/mcp"))
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .header("mcp-protocol-version", "2025-06-18")
            .body(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string())
            .send()
    };
    for i in 0..GUESS_BURST {
        let guess = list(&format!("guess-number-{i:04}")).await.unwrap();
        assert_eq!(guess.status(), StatusCode::UNAUTHORIZED, "guess {i}");
    }
    let refused = list(ALICE).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let wait: u64 = refused.headers()[header::RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(wait, GUESS_REFILL.as_secs());
    let body: Value = refused.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("too many wrong tokens from this address; try again in"),
        "{body}"
    );
    let login = http
        .post(server.url("/api/login"))
        .header(header::ORIGIN, server.url(""))
        .json(&json!({"token": ALICE}))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(login.headers().contains_key(header::RETRY_AFTER));
    // A cookie is a web key anyone can compute from a guess: it is refused
    // unchecked too, the right one included.
    let cookie_from = |client: &reqwest::Client, secret: &str| {
        client
            .get(server.url("/api/channels"))
            .header(
                header::COOKIE,
                format!(
                    "switchboard_token={}",
                    switchboard_toolset::Tokens::web_key(secret)
                ),
            )
            .send()
    };
    let with_cookie = |secret: &str| cookie_from(&http, secret);
    assert_eq!(
        with_cookie(ALICE).await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // Once the wait is over, the right token is taken again.
    tokio::time::sleep(Duration::from_secs(wait)).await;
    assert_eq!(list(ALICE).await.unwrap().status(), StatusCode::OK);
    // Wrong cookies use up an address's allowance as wrong tokens do (from
    // another loopback address, whose allowance is whole).
    let other = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    let cookie_from_other = |secret: &str| cookie_from(&other, secret);
    for i in 0..GUESS_BURST {
        let guess = cookie_from_other(&format!("guess-number-{i:04}"))
            .await
            .unwrap();
        assert_eq!(guess.status(), StatusCode::UNAUTHORIZED, "cookie guess {i}");
    }
    assert_eq!(
        cookie_from_other(ALICE).await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_session_belongs_to_the_token_that_opened_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), TOKENS).await;
    let mut sse = SseClient::open_as(&server.url(""), Some(ALICE)).await;
    sse.initialize().await;
    let reply = sse
        .call(
            "send_message",
            json!({"channel": "#team-b", "text": "over sse"}),
        )
        .await;
    assert_eq!(result_text(&reply["result"]), "Sent to #team-b as alice");
    let reply = sse
        .call("send_message", json!({"channel": "#ops", "text": "no"}))
        .await;
    assert_eq!(reply["result"]["isError"], true, "{reply}");
    let hijack = reqwest::Client::new()
        .post(&sse.endpoint)
        .header(header::AUTHORIZATION, format!("Bearer {BOB}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(hijack.status(), StatusCode::FORBIDDEN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_view_follows_the_token_of_its_cookie() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), TOKENS).await;
    let admin = http_client_as(&server.url("/mcp"), ADMIN).await;
    send(&admin, "#ops", "root", "not for alice").await;
    send(&admin, "#team-x", "root", "for alice").await;
    let base = server.url("");
    let http = reqwest::Client::new();
    let login = http
        .post(server.url("/api/login"))
        .header(header::ORIGIN, &base)
        .json(&json!({"token": ALICE}))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), StatusCode::NO_CONTENT);
    let cookie = login.headers()[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let get = |path: &str| {
        http.get(server.url(path))
            .header(header::COOKIE, &cookie)
            .send()
    };
    let session: Value = get("/api/session").await.unwrap().json().await.unwrap();
    assert_eq!(session["nick"], "alice");
    let channels: Value = get("/api/channels?viewer=alice")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let names: Vec<&str> = channels["channels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["channel"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["#team-x"]);
    assert_eq!(
        get("/api/messages?channel=%23ops").await.unwrap().status(),
        StatusCode::FORBIDDEN
    );
    let post = |body: Value| {
        http.post(server.url("/api/send"))
            .header(header::COOKIE, &cookie)
            .header(header::ORIGIN, &base)
            .json(&body)
            .send()
    };
    let forged = post(json!({"channel": "#team-x", "text": "hi", "nick": "bob"}))
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    // Left out, the nick is the one the token binds her to.
    let sent = post(json!({"channel": "#team-x", "text": "hi"}))
        .await
        .unwrap();
    assert_eq!(sent.status(), StatusCode::OK);
    let sent: Value = sent.json().await.unwrap();
    assert_eq!(sent["sent_as"], "alice", "{sent}");
    let team = call(&admin, "read_messages", json!({"channel": "#team-x"})).await;
    assert_eq!(texts(&team), ["hi", "for alice"]);
    // alice's token is an agent's: posting through the page does not make
    // her a person (who could answer approvals).
    let kinds: Vec<&str> = team.structured_content.as_ref().unwrap()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["agent", "agent"]);
    // Her sends a minute hold on the page too, a message a line.
    let over = post(json!({"channel": "#team-x", "text": "a\nb\nc", "nick": "alice"}))
        .await
        .unwrap();
    assert_eq!(over.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = over.headers()[header::RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    let long = post(json!({"channel": "#team-x", "text": "a\nb\nc\nd", "nick": "alice"}))
        .await
        .unwrap();
    assert_eq!(long.status(), StatusCode::BAD_REQUEST);
}

/// A token without the chat tools may not use the web view, which is chat:
/// not read, post nor stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_without_chat_tools_may_not_use_the_web_view() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = format!(
        "{TOKENS}\n[[http.tokens]]\nname = \"carol\"\nsecret_file = \"carol.token\"\ntools = [\"catalog\"]\n"
    );
    let server = start(dir.path(), &tokens).await;
    let admin = http_client_as(&server.url("/mcp"), ADMIN).await;
    send(&admin, "#general", "root", "private").await;
    let http = reqwest::Client::new();
    for path in [
        "/api/session",
        "/api/channels",
        "/api/messages?channel=%23general",
        "/api/stream?since=0",
    ] {
        let refused = http
            .get(server.url(path))
            .bearer_auth("carol-secret-0123456789")
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), StatusCode::FORBIDDEN, "{path}");
        let body: Value = refused.json().await.unwrap();
        assert!(
            body["error"]
                .as_str()
                .unwrap()
                .contains("may not use the chat tools"),
            "{path}: {body}"
        );
    }
    let posted = http
        .post(server.url("/api/send"))
        .bearer_auth("carol-secret-0123456789")
        .header(header::ORIGIN, server.url(""))
        .json(&json!({"channel": "#general", "text": "hi", "nick": "carol"}))
        .send()
        .await
        .unwrap();
    assert_eq!(posted.status(), StatusCode::FORBIDDEN);
    let general = call(&admin, "read_messages", json!({"channel": "#general"})).await;
    assert_eq!(texts(&general), ["private"]);
    // Nor may the page log in with it: no cookie to hold for 30 days.
    let login = http
        .post(server.url("/api/login"))
        .header(header::ORIGIN, server.url(""))
        .json(&json!({"token": "carol-secret-0123456789"}))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), StatusCode::FORBIDDEN);
    assert!(!login.headers().contains_key(header::SET_COOKIE));
    let body: Value = login.json().await.unwrap();
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("may not use the chat tools"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_tokens_in_place_and_refuses_a_broken_config() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), TOKENS).await;
    let url = server.url("/mcp");
    let alice = http_client_as(&url, ALICE).await;
    let mut sse = SseClient::open_as(&server.url(""), Some(BOB)).await;
    sse.initialize().await;
    let sent = call(
        &alice,
        "send_message",
        json!({"channel": "#team-a", "text": "before"}),
    )
    .await;
    assert!(!is_error(&sent));
    // A wait of alice's on #team-a, begun before the reload below.
    let waiting = spawn_call(
        &alice,
        "wait_for_messages",
        json!({"channel": "#team-a", "timeout_s": 20}),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Alice moves to #ops only; bob is gone; carol arrives.
    config(
        dir.path(),
        r##"
[[http.tokens]]
name = "alice"
secret_file = "alice.token"
channels = ["#ops"]

[[http.tokens]]
name = "carol"
secret_file = "carol.token"
"##,
    );
    server.signal(libc::SIGHUP);
    server.wait_for_log("reloaded the HTTP tokens").await;
    // The same client, no reconnection: the new rules hold at once.
    let moved = call(
        &alice,
        "send_message",
        json!({"channel": "#team-a", "text": "after"}),
    )
    .await;
    assert!(is_error(&moved), "{}", text(&moved));
    assert!(!is_error(
        &call(
            &alice,
            "send_message",
            json!({"channel": "#ops", "text": "now here"})
        )
        .await
    ));
    let carol = http_client_as(&url, "carol-secret-0123456789").await;
    assert!(!is_error(&call(&carol, "list_channels", json!({})).await));
    // What is said in #team-a now is not for alice, whose wait began when
    // it was.
    let admin = http_client_as(&url, ADMIN).await;
    send(&admin, "#team-a", "root", "after alice left").await;
    let woke = waiting.await.unwrap();
    assert!(is_error(&woke), "{}", text(&woke));
    assert!(!text(&woke).contains("after alice left"), "{}", text(&woke));
    // Bob's SSE stream is still open, but his token no longer opens anything.
    let status = reqwest::Client::new()
        .post(&sse.endpoint)
        .header(header::AUTHORIZATION, format!("Bearer {BOB}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}).to_string())
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // A broken config is refused, naming the key; the running tokens stay.
    std::fs::write(
        dir.path().join("switchboard.toml"),
        "[[http.tokens]]\nname = \"dave\"\nsecret_env = \"NOT_SET_ANYWHERE\"\n",
    )
    .unwrap();
    server.signal(libc::SIGHUP);
    server.wait_for_log("http.tokens[0].secret_env").await;
    assert!(!is_error(
        &call(
            &alice,
            "send_message",
            json!({"channel": "#ops", "text": "still"})
        )
        .await
    ));
    assert!(!is_error(&call(&carol, "list_channels", json!({})).await));

    server.signal(libc::SIGTERM);
    assert!(server.exit(Duration::from_secs(15)).await.success());
}

/// A reload that would leave no token at all would open HTTP to anyone who
/// can reach it: refused, and the running tokens stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_without_tokens_keeps_the_running_ones() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), TOKENS);
    let server = Server::start(&["--ephemeral", "--config", config.to_str().unwrap()]).await;
    let url = server.url("/mcp");
    std::fs::write(&config, "").unwrap();
    server.signal(libc::SIGHUP);
    server.wait_for_log("the running tokens stay").await;
    let anonymous = post_json(&reqwest::Client::new(), &url)
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let bob = http_client_as(&url, BOB).await;
    assert!(!is_error(&call(&bob, "list_channels", json!({})).await));
}

/// A reload applies the tokens and names the settings that changed besides
/// them, which take a restart; with nothing else changed it names none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_names_the_settings_that_take_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), TOKENS);
    let server = Server::start(&["--ephemeral", "--config", config.to_str().unwrap()]).await;
    server.signal(libc::SIGHUP);
    server.wait_for_log("reloaded the HTTP tokens").await;
    assert!(!server.log().contains("take effect only after a restart"));
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("\n[chat]\nmax_text_bytes = 1000\n[http]\nmax_streams = 7\n");
    std::fs::write(&config, text).unwrap();
    server.signal(libc::SIGHUP);
    server
        .wait_for_log(
            "SIGHUP: [http] (besides tokens), [chat] changed and take effect only after a restart",
        )
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_token_configs_stop_the_daemon_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for (tokens, key) in [
        (
            "[[http.tokens]]\nname = \"a\"\nsecret_env = \"NOT_SET_ANYWHERE\"\n",
            "http.tokens[0].secret_env",
        ),
        (
            "[[http.tokens]]\nname = \"a\"\n",
            "http.tokens[0]: the token \"a\" needs exactly one of secret_env and secret_file",
        ),
        (
            "[[http.tokens]]\nname = \"a\"\nsecret_file = \"alice.token\"\nsecret_env = \"X\"\n",
            "exactly one",
        ),
        (
            "[[http.tokens]]\nname = \"a\"\nsecret_file = \"short.token\"\n",
            "http.tokens[0].secret_file: the secret of \"a\" is shorter than 16",
        ),
        (
            "[[http.tokens]]\nname = \"a\"\nsecret_file = \"alice.token\"\n[[http.tokens]]\nname = \"a\"\nsecret_file = \"bob.token\"\n",
            "http.tokens[1].name",
        ),
        (
            "[[http.tokens]]\nname = \"a\"\nsecret_file = \"alice.token\"\n[[http.tokens]]\nname = \"b\"\nsecret_file = \"alice.token\"\n",
            "same secret",
        ),
        (
            "[[http.tokens]]\nname = \"a\"\nsecret_file = \"alice.token\"\ntools = [\"chat\", \"email\"]\n",
            "http.tokens[0].tools",
        ),
        (
            "[[http.tokens]]\nname = \"a\"\nsecret_file = \"alice.token\"\nchannels = [\"ops\"]\n",
            "http.tokens[0].channels",
        ),
        (
            "[[http.tokens]]\nname = \"a\"\nsecret_file = \"alice.token\"\nnicks = [\"bad nick\"]\n",
            "http.tokens[0].nicks",
        ),
        (
            "[[http.tokens]]\nname = \"a\"\nsecret_file = \"alice.token\"\nnicks = []\n",
            "http.tokens[0].nicks: an empty list leaves \"a\" no nick",
        ),
        (
            "[[http.tokens]]\nname = \"a\"\nsecret_file = \"alice.token\"\nchannels = []\n",
            "http.tokens[0].channels: an empty list opens no channel",
        ),
        (
            "[[http.tokens]]\nname = \"a\"\nsecret_file = \"alice.token\"\nsends_per_minute = 0\n",
            "http.tokens[0].sends_per_minute",
        ),
        (
            "[[http.tokens]]\nname = \"a\"\nsecret = \"inline\"\n",
            "unknown field `secret`",
        ),
    ] {
        std::fs::write(dir.path().join("short.token"), "tooshort").unwrap();
        let path = config(dir.path(), tokens);
        let output = command(&[
            "--no-http",
            "--no-socket",
            "--stdio",
            "--config",
            path.to_str().unwrap(),
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{tokens}\n{stderr}");
        // The file, the key (with its line there) and the problem.
        let (key, problem) = key.split_once(": ").unwrap_or((key, ""));
        assert!(
            stderr.contains(path.to_str().unwrap())
                && stderr.contains(key)
                && stderr.contains(problem),
            "{tokens}\nwanted {key:?} and {problem:?} in:\n{stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_new_prints_lines_the_daemon_takes_as_they_are() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("secrets")).unwrap();
    std::fs::create_dir_all(dir.path().join("etc")).unwrap();
    let file = dir.path().join("secrets/ci-bot.token");
    let run = |args: &[&str]| {
        std::process::Command::new(BIN)
            .arg("token")
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    // A relative path, and a config file in another directory: the
    // printed lines name the file wherever the config is.
    let output = run(&["new", "ci-bot", "--file", "secrets/ci-bot.token"]);
    assert!(output.status.success(), "{output:?}");
    let printed = String::from_utf8(output.stdout).unwrap();
    let lines = &printed[printed.find("[[http.tokens]]").expect("config lines")..];
    let secret = std::fs::read_to_string(&file).unwrap();
    let secret = secret.trim();
    assert!(!printed.contains(secret), "the secret was printed");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );

    let config = dir.path().join("etc/switchboard.toml");
    std::fs::write(&config, lines).unwrap();
    let server = Server::start(&["--ephemeral", "--config", config.to_str().unwrap()]).await;
    let bot = http_client_as(&server.url("/mcp"), secret).await;
    let sent = call(
        &bot,
        "send_message",
        json!({"channel": "#ci", "text": "build green"}),
    )
    .await;
    assert_eq!(text(&sent), "Sent to #ci as ci-bot");

    // Printed instead of written, the secret is the daemon's too.
    let output = run(&["new", "alice"]);
    let printed = String::from_utf8(output.stdout).unwrap();
    assert!(
        printed.contains("secret_env = \"SWITCHBOARD_TOKEN_ALICE\""),
        "{printed}"
    );
    let shown = printed
        .split_whitespace()
        .find(|w| w.starts_with("sbt_"))
        .expect("the secret is shown");
    assert_eq!(shown.len(), 68);

    // Bad input: a name with a space, a file that exists.
    assert_eq!(run(&["new", "ci bot"]).status.code(), Some(2));
    let again = run(&["new", "ci-bot", "--file", file.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("must not exist yet"));
    let nowhere = run(&["new", "ci-bot", "--file", "missing/ci-bot.token"]);
    assert_eq!(nowhere.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&nowhere.stderr).contains("--file"));
    assert_eq!(std::fs::read_to_string(&file).unwrap().trim(), secret);

    // A name that is no nick gets a nicks line that loads, and says so.
    for (name, nick) in [("9lives", "_9lives"), ("bob.smith", "bob-smith")] {
        let path = format!("secrets/{name}.token");
        let output = run(&["new", name, "--file", &path]);
        assert!(output.status.success(), "{output:?}");
        let printed = String::from_utf8(output.stdout).unwrap();
        assert!(
            printed.contains(&format!("nicks = [\"{nick}\"]")),
            "{printed}"
        );
        let lines = &printed[printed.find("[[http.tokens]]").unwrap()..];
        std::fs::write(&config, lines).unwrap();
        let loaded = command(&["--no-http", "--no-socket", "--stdio", "--config"])
            .arg(&config)
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .unwrap();
        assert!(loaded.status.success(), "{name}: {lines}\n{loaded:?}");
    }
}
