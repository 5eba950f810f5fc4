//! The web view: its API and headers with a plain HTTP client, and the page
//! itself in real headless Chromium (Debian's, over WebDriver), against the
//! real daemon, with agents on rmcp's client and people on IRC.

mod common;

use std::time::Duration;

use common::*;
use reqwest::{StatusCode, header};
use rmcp::model::ProtocolVersion;
use serde_json::{Value, json};
use switchboard_testkit::{Browser, BrowserOptions};

const WAIT: Duration = Duration::from_secs(15);

fn base(server: &Server) -> String {
    server.url("")
}

/// A JSON POST as the page makes it (same Origin).
async fn post(server: &Server, path: &str, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(server.url(path))
        .header(header::ORIGIN, base(server))
        .json(&body)
        .send()
        .await
        .unwrap()
}

async fn get_json(server: &Server, path: &str) -> (StatusCode, Value) {
    let response = reqwest::get(server.url(path)).await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_reads_writes_and_refuses_what_it_must() {
    let server = Server::start(&["--ephemeral"]).await;
    let agent = http_client(&server.url("/mcp"), ProtocolVersion::V_2025_11_25).await;
    send(&agent, "#ops", "robo", "deploy started\ndeploy finished").await;

    let page = reqwest::get(server.url("/")).await.unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    for part in [
        "default-src 'self'",
        "script-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(part), "{csp}");
    }
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert_eq!(page.headers()["x-content-type-options"], "nosniff");
    let html = page.text().await.unwrap();
    let script = html
        .split("src=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_owned();
    assert!(
        script.starts_with("/assets/app.") && script.ends_with(".js"),
        "{script}"
    );
    assert!(!html.contains("<script>"), "no inline script: {html}");

    // Assets: compressed when asked, cached forever, revalidated by ETag.
    let client = reqwest::Client::new();
    let js = client
        .get(server.url(&script))
        .header(header::ACCEPT_ENCODING, "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(js.headers()[header::CONTENT_ENCODING], "gzip");
    assert!(
        js.headers()[header::CACHE_CONTROL]
            .to_str()
            .unwrap()
            .contains("immutable")
    );
    let etag = js.headers()[header::ETAG].clone();
    let again = client
        .get(server.url(&script))
        .header(header::IF_NONE_MATCH, etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);

    let (status, channels) = get_json(&server, "/api/channels?viewer=ann").await;
    assert_eq!(status, 200);
    assert_eq!(
        channels["channels"],
        json!([{"channel": "#ops", "members": 1, "joined": false, "unread": 0, "mentions": 0}])
    );
    let (_, page) = get_json(&server, "/api/messages?channel=ops&viewer=ann").await;
    let texts: Vec<&str> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["deploy started", "deploy finished"]);
    assert_eq!(page["messages"][0]["kind"], "agent");
    let (_, members) = get_json(&server, "/api/members?channel=ops").await;
    assert_eq!(
        members["members"][0],
        json!({"nick": "robo", "kind": "agent"})
    );

    // A person writes: stored as a person's message, readable over MCP.
    let sent = post(
        &server,
        "/api/send",
        json!({"channel": "#ops", "text": "nice\nthanks", "nick": "ann"}),
    )
    .await;
    assert_eq!(sent.status(), 200);
    let sent: Value = sent.json().await.unwrap();
    assert_eq!(sent["lines"], 2);
    let read = call(
        &agent,
        "read_messages",
        json!({"channel": "#ops", "limit": 2}),
    )
    .await;
    let structured = read.structured_content.unwrap();
    assert_eq!(structured["messages"][0]["text"], "thanks");
    assert_eq!(structured["messages"][0]["kind"], "human");
    let (_, found) = get_json(&server, "/api/search?q=finished").await;
    assert_eq!(found["messages"][0]["text"], "deploy finished");
    let seq = found["messages"][0]["seq"].as_i64().unwrap();
    let (_, around) = get_json(
        &server,
        &format!("/api/around?channel=ops&seq={seq}&context=1"),
    )
    .await;
    assert_eq!(around["messages"].as_array().unwrap().len(), 3);
    // Pages after a position (scrolling down from a search result).
    for (after, limit, expected, newer) in [
        (1, 2, &["deploy finished", "nice"][..], true),
        (3, 100, &["thanks"][..], false),
        (4, 100, &[][..], false),
    ] {
        let (status, page) = get_json(
            &server,
            &format!("/api/messages?channel=ops&after={after}&limit={limit}"),
        )
        .await;
        assert_eq!(status, 200, "{page}");
        let texts: Vec<&str> = page["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["text"].as_str().unwrap())
            .collect();
        assert_eq!(texts, expected, "after {after}");
        assert_eq!(page["newer"], newer, "after {after}");
    }

    // Bad input: a clear 4xx, nothing changes.
    for (path, expected) in [
        ("/api/channels?viewer=no%20spaces", "viewer:"),
        (
            "/api/messages?channel=nowhere",
            "there is no channel #nowhere",
        ),
        (
            "/api/messages?channel=ops&limit=0",
            "limit must be 1 to 500",
        ),
        ("/api/messages?channel=bad%2Cname", "channel"),
        ("/api/search?q=%20%21", "no words"),
        (
            "/api/search?q=deploy&channel=nowhere",
            "there is no channel #nowhere",
        ),
        (
            "/api/around?channel=ops&seq=1&context=999",
            "context must be",
        ),
        ("/api/around?channel=ops&seq=-2", "seq must be a position"),
        ("/api/around?channel=ops&seq=99", "1 to 4 (got 99)"),
        ("/api/messages?channel=ops&limit=many", "limit"),
        ("/api/nope", "there is no /api/nope in the web view's API"),
        (
            "/api/messages?channel=ops&before=-1",
            "before must be a position",
        ),
        (
            "/api/messages?channel=ops&after=-1",
            "after must be a position of #ops, 0 or more",
        ),
        ("/api/messages?channel=ops&before=3&after=1", "not both"),
    ] {
        let (status, body) = get_json(&server, path).await;
        let want = if path == "/api/nope" { 404 } else { 400 };
        assert_eq!(status, want, "{path}: {body}");
        assert!(
            body["error"].as_str().unwrap().contains(expected),
            "{path}: {body}"
        );
    }
    // A body announced over the limit is refused in the API's own shape.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut raw = tokio::net::TcpStream::connect(server.addr).await.unwrap();
        raw.write_all(
            format!(
                "POST /api/send HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 20000000\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n",
                server.addr
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        let mut reply = String::new();
        tokio::time::timeout(Duration::from_secs(5), raw.read_to_string(&mut reply))
            .await
            .expect("no answer to an oversized body")
            .unwrap();
        assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
        assert!(
            reply.ends_with("{\"error\":\"the request body is over 16777216 bytes\"}"),
            "{reply}"
        );
    }
    for (body, expected) in [
        (
            json!({"channel": "#ops", "text": "x", "nick": "9"}),
            "nick:",
        ),
        (
            json!({"channel": "#ops", "text": "   ", "nick": "ann"}),
            "empty",
        ),
        (
            json!({"channel": "#o ps", "text": "x", "nick": "ann"}),
            "contains",
        ),
    ] {
        let response = post(&server, "/api/send", body.clone()).await;
        assert_eq!(response.status(), 400, "{body}");
        let error: Value = response.json().await.unwrap();
        assert!(
            error["error"].as_str().unwrap().contains(expected),
            "{body}: {error}"
        );
    }
    // Marking read past the newest message would hide what comes next.
    for seq in [5, -1] {
        let response = post(
            &server,
            "/api/read",
            json!({"channel": "#ops", "seq": seq, "viewer": "bea"}),
        )
        .await;
        assert_eq!(response.status(), 400, "seq {seq}");
        let error: Value = response.json().await.unwrap();
        assert!(
            error["error"]
                .as_str()
                .unwrap()
                .contains("0 to its newest 4"),
            "{error}"
        );
    }
    // Without a token that binds the person to a nick, sending or marking
    // read needs one.
    for (path, body) in [
        ("/api/send", json!({"channel": "#ops", "text": "x"})),
        ("/api/read", json!({"channel": "#ops", "seq": 1})),
    ] {
        let response = post(&server, path, body.clone()).await;
        assert_eq!(response.status(), 422, "{path} {body}");
        let error: Value = response.json().await.unwrap();
        assert!(
            error["error"]
                .as_str()
                .unwrap()
                .starts_with("missing field"),
            "{error}"
        );
    }
    let read = post(
        &server,
        "/api/read",
        json!({"channel": "#ops", "seq": 1, "viewer": "bea"}),
    )
    .await;
    assert_eq!(read.status(), 204);
    let (_, channels) = get_json(&server, "/api/channels?viewer=bea").await;
    assert_eq!(channels["channels"][0]["unread"], 3, "{channels}");
    // Not from the page: no Origin, a foreign Origin, or not JSON.
    let no_origin = client
        .post(server.url("/api/send"))
        .json(&json!({"channel": "#ops", "text": "csrf", "nick": "ann"}))
        .send()
        .await
        .unwrap();
    assert_eq!(no_origin.status(), 403);
    let foreign = client
        .post(server.url("/api/send"))
        .header(header::ORIGIN, "https://evil.example")
        .json(&json!({"channel": "#ops", "text": "csrf", "nick": "ann"}))
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 403);
    let form = client
        .post(server.url("/api/send"))
        .header(header::ORIGIN, base(&server))
        .header(header::CONTENT_TYPE, "text/plain")
        .body(r##"{"channel":"#ops","text":"csrf","nick":"ann"}"##)
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), 403);
    // A body that is not JSON, or a method a path does not take: JSON
    // errors like the rest.
    let garbled = client
        .post(server.url("/api/send"))
        .header(header::ORIGIN, base(&server))
        .header(header::CONTENT_TYPE, "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(garbled.status(), 400);
    let error: Value = garbled.json().await.unwrap();
    assert!(error["error"].is_string(), "{error}");
    let wrong = client
        .delete(server.url("/api/channels"))
        .header(header::ORIGIN, base(&server))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 405);
    let error: Value = wrong.json().await.unwrap();
    assert!(
        error["error"]
            .as_str()
            .unwrap()
            .contains("does not take DELETE"),
        "{error}"
    );
    let (_, page) = get_json(&server, "/api/messages?channel=ops").await;
    assert_eq!(page["messages"].as_array().unwrap().len(), 4, "{page}");
}

/// `text`'s bytes in hex, as an earlier cookie carried the secret.
fn hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

/// The first `limit` bytes the stream at `path` sends (or fewer, if it
/// sends nothing more for a second).
async fn stream_start(server: &Server, path: &str, limit: usize) -> (StatusCode, String) {
    let mut response = reqwest::get(server.url(path)).await.unwrap();
    let status = response.status();
    let mut text = String::new();
    while text.len() < limit {
        match tokio::time::timeout(Duration::from_secs(1), response.chunk()).await {
            Ok(Ok(Some(chunk))) => text.push_str(&String::from_utf8_lossy(&chunk)),
            _ => break,
        }
    }
    (status, text)
}

#[tokio::test]
async fn the_stream_resumes_from_an_id_and_resets_on_another_historys() {
    let server = Server::start(&["--ephemeral"]).await;
    let agent = http_client(&server.url("/mcp"), ProtocolVersion::V_2025_11_25).await;
    for text in ["one", "two", "three"] {
        send(&agent, "#c", "robo", text).await;
    }
    let (status, text) = stream_start(&server, "/api/stream?since=1", 1000).await;
    assert_eq!(status, 200);
    assert!(
        !text.contains("\"one\"") && text.contains("\"two\"") && text.contains("\"three\""),
        "{text}"
    );
    let (status, text) = stream_start(&server, "/api/stream?since=-5", 1000).await;
    assert_eq!(status, 400);
    assert!(text.contains("since must be a message id"), "{text}");
    // An id this history never gave: the client knew another one.
    let (status, text) = stream_start(&server, "/api/stream?since=999999", 10).await;
    assert_eq!(status, 200);
    assert!(text.starts_with("event: reset"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_asked_once_and_kept_in_a_strict_cookie() {
    let server = Server::start_with(
        &["--ephemeral"],
        &[("SWITCHBOARD_HTTP_TOKEN", "open sesame, please")],
    )
    .await;
    // The page needs no token; its data does.
    assert_eq!(reqwest::get(server.url("/")).await.unwrap().status(), 200);
    let (status, session) = get_json(&server, "/api/session").await;
    assert_eq!(
        (status, session["token_required"].clone()),
        (StatusCode::OK, json!(true))
    );
    let refused = reqwest::get(server.url("/api/channels")).await.unwrap();
    assert_eq!(refused.status(), 401);
    // A refusal in front of the web view is no more open to a browser than the page.
    assert_eq!(refused.headers()["x-content-type-options"], "nosniff");
    assert!(
        refused.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("frame-ancestors 'none'")
    );
    let wrong = post(&server, "/api/login", json!({"token": "guess"})).await;
    assert_eq!(wrong.status(), 401);
    assert!(wrong.headers().get(header::SET_COOKIE).is_none());
    let right = post(
        &server,
        "/api/login",
        json!({"token": "open sesame, please"}),
    )
    .await;
    assert_eq!(right.status(), 204);
    let cookie = right.headers()[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .to_owned();
    for part in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=2592000"] {
        assert!(cookie.contains(part), "{cookie}");
    }
    let pair = cookie.split(';').next().unwrap().to_owned();
    let client = reqwest::Client::new();
    let with_cookie = client
        .get(server.url("/api/channels"))
        .header(header::COOKIE, &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(with_cookie.status(), 200);
    // The cookie opens the web view only, not MCP.
    let mcp = client
        .post(server.url("/mcp"))
        .header(header::COOKIE, &pair)
        .header(header::CONTENT_TYPE, "application/json")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(mcp.status(), 401);
    // It holds no secret: its value is no bearer token either.
    let value = pair.split_once('=').unwrap().1;
    assert!(
        !pair.contains("open") && !pair.contains(&hex("open sesame, please")),
        "{pair}"
    );
    let mcp = client
        .post(server.url("/mcp"))
        .bearer_auth(value)
        .header(header::CONTENT_TYPE, "application/json")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(mcp.status(), 401);
    let bearer = client
        .get(server.url("/api/channels"))
        .bearer_auth("open sesame, please")
        .send()
        .await
        .unwrap();
    assert_eq!(bearer.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_web_turns_the_page_off() {
    let server = Server::start(&["--ephemeral", "--no-web"]).await;
    assert_eq!(reqwest::get(server.url("/")).await.unwrap().status(), 404);
    assert_eq!(
        reqwest::get(server.url("/api/channels"))
            .await
            .unwrap()
            .status(),
        404
    );
    assert!(
        !server.log().contains("serving the web view"),
        "{}",
        server.log()
    );
}

// --- in the browser -----------------------------------------------------------

/// Opens the page and answers its name prompt with `name`.
async fn open_as(browser: &Browser, url: &str, name: &str) {
    open_unnamed(browser, url).await;
    answer_name(browser, name).await;
}

/// Opens the page, which asks for a name.
async fn open_unnamed(browser: &Browser, url: &str) {
    browser.client.goto(url).await.unwrap();
    browser
        .until(
            "the name prompt",
            "return document.getElementById('name-dialog').open",
            WAIT,
        )
        .await;
}

/// Answers the name prompt with `name` and waits for the live stream.
async fn answer_name(browser: &Browser, name: &str) {
    browser.keys("name", &format!("{name}\u{E007}")).await;
    browser
        .until(
            "the live stream",
            "return document.body.dataset.live === 'true'",
            WAIT,
        )
        .await;
}

/// The texts of the messages on the page, in order.
async fn shown(browser: &Browser) -> Vec<String> {
    let value = browser
        .run(
            "return [...document.querySelectorAll('#messages li .text')].map(e => e.textContent)",
            vec![],
        )
        .await;
    serde_json::from_value(value).unwrap()
}

/// An agent, robo, that has said `said` in #c over `/mcp`, and a browser
/// open on #c as ann that shows `last_line` of it.
async fn ann_follows_robo_in_c(server: &Server, said: &str, last_line: &str) -> (Client, Browser) {
    let agent = http_client(&server.url("/mcp"), ProtocolVersion::V_2025_11_25).await;
    send(&agent, "#c", "robo", said).await;
    let browser = Browser::start().await;
    open_as(&browser, &server.url("/#c"), "ann").await;
    wait_shown(&browser, last_line).await;
    (agent, browser)
}

async fn wait_shown(browser: &Browser, text: &str) {
    browser
        .until(
            &format!("{text:?} on the page"),
            &format!(
                "return [...document.querySelectorAll('#messages li .text')].some(e => e.textContent === {})",
                json!(text)
            ),
            WAIT,
        )
        .await;
}

/// A channel made without a message shows up on an open page by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_made_without_a_message_shows_up_on_an_open_page() {
    let server = Server::start(&["--ephemeral"]).await;
    let (agent, browser) = ann_follows_robo_in_c(&server, "first", "first").await;
    let made = call(&agent, "create_channel", json!({"name": "quiet"})).await;
    assert!(!is_error(&made), "{}", text(&made));
    browser
        .until(
            "#quiet in the channel list",
            "return document.getElementById('channels').textContent.includes('#quiet')",
            WAIT,
        )
        .await;
    browser.close().await;
}

/// A page whose token is removed from the config (SIGHUP) says so by
/// asking for another token, within seconds and without a reload; the
/// new token's page goes on live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_whose_token_is_revoked_asks_for_another() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tokens.toml");
    let token = |name: &str| {
        format!(
            "[[http.tokens]]\nname = \"{name}\"\nsecret_env = \"{}_TOKEN\"\n",
            name.to_uppercase()
        )
    };
    std::fs::write(
        &config,
        format!("{}{}{}", token("ann"), token("robo"), token("bea")),
    )
    .unwrap();
    let (ann, robo, bea) = (
        "ann-secret-0123456789",
        "robo-secret-0123456789",
        "bea-secret-0123456789",
    );
    let server = Server::start_with(
        &["--ephemeral", "--config", config.to_str().unwrap()],
        &[("ANN_TOKEN", ann), ("ROBO_TOKEN", robo), ("BEA_TOKEN", bea)],
    )
    .await;
    let agent = http_client_as(&server.url("/mcp"), robo).await;
    send(&agent, "#c", "robo", "first").await;
    let browser = Browser::start().await;
    browser.client.goto(&server.url("/#c")).await.unwrap();
    let token_asked = "return document.getElementById('token-dialog').open";
    browser.until("the token prompt", token_asked, WAIT).await;
    browser.keys("token", &format!("{ann}\u{E007}")).await;
    wait_shown(&browser, "first").await;

    std::fs::write(&config, format!("{}{}", token("robo"), token("bea"))).unwrap();
    server.signal(libc::SIGHUP);
    browser
        .until("the token prompt after the revocation", token_asked, WAIT)
        .await;
    browser.keys("token", &format!("{bea}\u{E007}")).await;
    browser
        .until(
            "the live stream",
            "return document.body.dataset.live === 'true' && !document.getElementById('token-dialog').open",
            WAIT,
        )
        .await;
    send(&agent, "#c", "robo", "for bea").await;
    wait_shown(&browser, "for bea").await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_follows_an_agent_live_and_answers_in_several_lines() {
    let server = Server::start(&["--ephemeral"]).await;
    let agent = http_client(&server.url("/mcp"), ProtocolVersion::V_2025_11_25).await;
    send(&agent, "#general", "robo", "good morning").await;
    let browser = Browser::start().await;
    // Behind the name prompt the page already shows what there is.
    open_unnamed(&browser, &server.url("/")).await;
    wait_shown(&browser, "good morning").await;
    browser
        .until(
            "#general listed behind the name prompt",
            "return document.getElementById('name-dialog').open
                    && document.getElementById('channels').textContent.includes('#general')",
            WAIT,
        )
        .await;
    answer_name(&browser, "ann").await;
    wait_shown(&browser, "good morning").await;
    assert_eq!(
        browser
            .run("return document.getElementById('who').textContent", vec![])
            .await,
        "ann"
    );

    // Live: the agent writes, the page shows it without a reload.
    send(
        &agent,
        "#general",
        "robo",
        "ann: the build is green, see https://ci.example/42",
    )
    .await;
    wait_shown(
        &browser,
        "ann: the build is green, see https://ci.example/42",
    )
    .await;
    let row = browser
        .run(
            "const li = [...document.querySelectorAll('#messages li')].pop();
             return {mentioned: li.classList.contains('mentioned'),
                     mark: li.querySelector('mark')?.textContent,
                     link: li.querySelector('a')?.href,
                     kind: li.querySelector('.nick').title};",
            vec![],
        )
        .await;
    assert_eq!(
        row,
        json!({"mentioned": true, "mark": "ann", "link": "https://ci.example/42", "kind": "an agent"})
    );

    // Shift+Enter makes a new line; Enter sends.
    browser
        .keys(
            "text",
            "first line\u{E008}\u{E007}\u{E000}second line, says ann\u{E007}",
        )
        .await;
    wait_shown(&browser, "second line, says ann").await;
    // Ann naming herself is no mention of her.
    let own = browser
        .run(
            "const li = [...document.querySelectorAll('#messages li')].pop();
             return [li.classList.contains('mentioned'), li.querySelector('mark') !== null];",
            vec![],
        )
        .await;
    assert_eq!(own, json!([false, false]));
    let read = call(
        &agent,
        "read_messages",
        json!({"channel": "#general", "limit": 2}),
    )
    .await;
    let messages = read.structured_content.unwrap()["messages"].clone();
    assert_eq!(
        (
            &messages[0]["nick"],
            &messages[0]["text"],
            &messages[0]["kind"]
        ),
        (
            &json!("ann"),
            &json!("second line, says ann"),
            &json!("human")
        )
    );
    assert_eq!(messages[1]["text"], "first line");
    assert_eq!(
        browser
            .run("return document.getElementById('text').value", vec![])
            .await,
        ""
    );

    // The channel list counts for ann; members tell agents from people.
    let members = browser
        .run(
            "return [...document.querySelectorAll('#member-list li')].map(li => li.textContent)",
            vec![],
        )
        .await;
    assert!(
        members.as_array().unwrap().iter().any(|m| m == "roboagent"),
        "{members}"
    );
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_phone_width_dark_page_works_by_keyboard_alone() {
    let server = Server::start(&["--ephemeral"]).await;
    let agent = http_client(&server.url("/mcp"), ProtocolVersion::V_2025_11_25).await;
    send(&agent, "#k", "robo", "ann: anything from you?").await;
    let browser = Browser::start_with(BrowserOptions {
        width: 390,
        height: 800,
        dark: true,
    })
    .await;
    open_as(&browser, &server.url("/#k"), "ann").await;
    wait_shown(&browser, "ann: anything from you?").await;

    let layout = browser
        .run(
            "const luminance = (css) => {
               const [r, g, b] = css.match(/[\\d.]+/g).map(Number);
               return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255;
             };
             const box = document.getElementById('text').getBoundingClientRect();
             const unnamed = [...document.querySelectorAll('button, input, textarea, [tabindex]')]
               .filter(e => e.offsetParent !== null)
               .filter(e => !(e.getAttribute('aria-label') || (e.labels && e.labels.length)
                              || e.textContent.trim()))
               .map(e => e.outerHTML);
             return {
               overflow: document.documentElement.scrollWidth - window.innerWidth,
               composer: [box.left >= 0, box.right <= window.innerWidth,
                          box.bottom <= window.innerHeight, box.width >= 200],
               background: luminance(getComputedStyle(document.body).backgroundColor),
               text: luminance(getComputedStyle(document.body).color),
               unnamed,
             };",
            vec![],
        )
        .await;
    assert_eq!(layout["overflow"], 0, "wider than the window: {layout}");
    assert_eq!(
        layout["composer"],
        json!([true, true, true, true]),
        "{layout}"
    );
    assert!(
        layout["background"].as_f64().unwrap() < 0.25 && layout["text"].as_f64().unwrap() > 0.6,
        "not dark: {layout}"
    );
    assert_eq!(layout["unnamed"], json!([]), "controls without a name");

    // From the top of the page: Tab reaches the skip link, Enter follows it
    // to the message box, and Enter there sends.
    browser
        .run(
            "document.activeElement.blur(); window.scrollTo(0, 0)",
            vec![],
        )
        .await;
    browser.press('\u{E004}').await;
    let focused = browser
        .run("return document.activeElement.textContent", vec![])
        .await;
    assert_eq!(focused, "Skip to the message box");
    browser.press('\u{E007}').await;
    let focused = browser
        .run("return document.activeElement.id", vec![])
        .await;
    assert_eq!(focused, "text");
    for key in "on it".chars() {
        browser.press(key).await;
    }
    browser.press('\u{E007}').await;
    wait_shown(&browser, "on it").await;
    let read = call(
        &agent,
        "read_messages",
        json!({"channel": "#k", "limit": 1}),
    )
    .await;
    let newest = &read.structured_content.unwrap()["messages"][0];
    assert_eq!(
        (&newest["nick"], &newest["text"]),
        (&json!("ann"), &json!("on it"))
    );

    // The members, folded away at this width, open from their button.
    let toggle = "return [document.getElementById('members-toggle').getAttribute('aria-expanded'),
                          document.getElementById('members').getBoundingClientRect().width > 0
                          && getComputedStyle(document.getElementById('members')).display !== 'none']";
    assert_eq!(browser.run(toggle, vec![]).await, json!(["false", false]));
    browser.click("#members-toggle").await;
    assert_eq!(browser.run(toggle, vec![]).await, json!(["true", true]));
    // The open panel covers the page and its own button: it closes from
    // its Close button, with Escape, and with a tap beside it, giving the
    // keyboard back to its button.
    let focused = "return document.activeElement.id";
    assert_eq!(browser.run(focused, vec![]).await, "members-close");
    browser.click("#members-close").await;
    assert_eq!(browser.run(toggle, vec![]).await, json!(["false", false]));
    assert_eq!(browser.run(focused, vec![]).await, "members-toggle");
    browser.click("#members-toggle").await;
    browser.press('\u{E00C}').await;
    assert_eq!(browser.run(toggle, vec![]).await, json!(["false", false]));
    browser.click("#members-toggle").await;
    browser.click("#channel-title").await;
    assert_eq!(browser.run(toggle, vec![]).await, json!(["false", false]));

    // Choosing a channel by keyboard keeps the keyboard on that channel.
    send(&agent, "#other", "robo", "elsewhere").await;
    browser
        .until(
            "#other listed",
            "return !!document.querySelector('#channels button[data-channel=\"#other\"]')",
            WAIT,
        )
        .await;
    browser
        .run(
            "document.querySelector('#channels button[data-channel=\"#other\"]').focus()",
            vec![],
        )
        .await;
    browser.press('\u{E007}').await;
    wait_shown(&browser, "elsewhere").await;
    assert_eq!(
        browser
            .run("return document.activeElement.dataset.channel", vec![])
            .await,
        "#other"
    );
    browser.close().await;
}

/// Texts `prefix N` for N in `range`, as one multi-line send would post them.
fn numbered(prefix: &str, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|n| format!("{prefix} {n}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bursts_and_busy_channels_stay_in_order() {
    let server = Server::start(&["--ephemeral"]).await;
    let agent = http_client(&server.url("/mcp"), ProtocolVersion::V_2025_11_25).await;
    send(&agent, "#burst", "robo", "seed").await;
    send(&agent, "#race", "robo", "race 0").await;
    let browser = Browser::start().await;

    // No name, no way on: spaces are not a name, and Escape does not close
    // (Chromium closes a dialog on a second Escape whatever its handler).
    open_unnamed(&browser, &server.url("/#burst")).await;
    browser.keys("name", "   \u{E007}").await;
    browser.keys("name", "\u{E00C}").await;
    browser.press('\u{E00C}').await;
    browser.press('\u{E00C}').await;
    // Closed, it opens again.
    let asked = browser
        .until(
            "the name prompt open again",
            "const d = document.getElementById('name-dialog');
             return d.open && document.getElementById('name-error').textContent",
            WAIT,
        )
        .await;
    assert!(asked.as_str().unwrap().contains("Give the name"), "{asked}");
    // Select all, delete, then a name.
    answer_name(&browser, "\u{E009}a\u{E000}\u{E003}ann").await;
    wait_shown(&browser, "seed").await;

    // A burst of 500 lines in one send: all shown, in order, once.
    let burst = numbered("line", 0..500);
    send(&agent, "#burst", "robo", &burst.join("\n")).await;
    wait_shown(&browser, "line 499").await;
    let mut want = vec!["seed".to_owned()];
    want.extend(burst);
    assert_eq!(shown(&browser).await, want);

    // Opened while an agent writes there, and while another channel is
    // busy: the page shows the channel in order, and the busy channel
    // appears in the list before its traffic stops.
    let poster = {
        let agent = agent.peer().clone();
        tokio::spawn(async move {
            for n in 1..400 {
                for (channel, text) in [
                    ("#race", format!("race {n}")),
                    ("#busy", format!("busy {n}")),
                ] {
                    let args = json!({"channel": channel, "text": text, "sender": "robo"});
                    agent
                        .call_tool(
                            rmcp::model::CallToolRequestParams::new("send_message")
                                .with_arguments(args.as_object().cloned().unwrap()),
                        )
                        .await
                        .unwrap();
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    browser
        .run(
            "document.querySelector('#channels button[data-channel=\"#race\"]').click()",
            vec![],
        )
        .await;
    browser
        .until(
            "#busy listed",
            "return document.getElementById('channels').textContent.includes('#busy')",
            WAIT,
        )
        .await;
    assert!(
        !poster.is_finished(),
        "#busy was listed only once its traffic stopped"
    );
    poster.await.unwrap();
    wait_shown(&browser, "race 399").await;
    let texts = shown(&browser).await;
    let numbers: Vec<usize> = texts
        .iter()
        .map(|t| t.strip_prefix("race ").unwrap().parse().unwrap())
        .collect();
    assert!(
        numbers.windows(2).all(|w| w[1] == w[0] + 1),
        "out of order or missing: {numbers:?}"
    );
    assert_eq!(numbers.last(), Some(&399));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_text_stays_text() {
    let server = Server::start(&["--ephemeral"]).await;
    let agent = http_client(&server.url("/mcp"), ProtocolVersion::V_2025_11_25).await;
    let hostile = [
        "<script>window.__pwned = 1</script>",
        "<img src=x onerror=\"window.__pwned = 2\">",
        "[click](javascript:window.__pwned=3) javascript:window.__pwned=4",
        "\u{202E}gnp.exe\u{202C} and z\u{200B}ero\u{2066}width",
        "<b>bold</b> &amp; <a href=\"https://evil.example\">x</a>",
    ];
    for text in hostile {
        send(&agent, "#x", "mallory", text).await;
    }
    let browser = Browser::start().await;
    open_as(&browser, &server.url("/#x"), "ann").await;
    wait_shown(&browser, hostile[4]).await;
    let texts = shown(&browser).await;
    for text in hostile {
        assert!(
            texts.iter().any(|t| t == text),
            "{text:?} not shown as itself: {texts:?}"
        );
    }
    let dom = browser
        .run(
            "const log = document.getElementById('messages');
             return {scripts: log.querySelectorAll('script').length,
                     images: log.querySelectorAll('img').length,
                     bold: log.querySelectorAll('b').length,
                     links: [...log.querySelectorAll('a')].map(a => a.getAttribute('href')),
                     pwned: window.__pwned === undefined ? null : window.__pwned,
                     isolated: [...log.querySelectorAll('.text')].every(e => getComputedStyle(e).unicodeBidi === 'isolate')};",
            vec![],
        )
        .await;
    assert_eq!(dom["scripts"], 0);
    assert_eq!(dom["images"], 0);
    assert_eq!(dom["bold"], 0);
    assert_eq!(dom["pwned"], Value::Null);
    assert_eq!(dom["isolated"], true);
    // Only http(s) text becomes a link: never a javascript: one.
    let links = dom["links"].as_array().unwrap();
    assert_eq!(links, &[json!("https://evil.example")], "{dom}");
    browser.close().await;
}

/// Searches for `query` in the page and clicks the first result.
async fn search_and_open_the_first_result(browser: &Browser, query: &str) {
    browser
        .run(
            "document.getElementById('search-q').value = ''; document.getElementById('result-list').replaceChildren()",
            vec![],
        )
        .await;
    browser.keys("search-q", &format!("{query}\u{E007}")).await;
    browser
        .until(
            "a search result",
            "return document.querySelector('#result-list button')",
            WAIT,
        )
        .await;
    browser.click("#result-list button").await;
}

/// `count` lines `line N`, the one at `at` replaced by `needle`.
fn lines_with_a_needle(count: usize, at: usize, needle: &str) -> Vec<String> {
    (0..count)
        .map(|i| {
            if i == at {
                needle.to_owned()
            } else {
                format!("line {i}")
            }
        })
        .collect()
}

/// From a search result far back, scrolling down loads the pages after it
/// in order, without gaps or repeats, and the channel is live again at the
/// end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrolling_down_from_a_search_result_comes_back_to_the_live_channel() {
    let server = Server::start(&["--ephemeral"]).await;
    let agent = http_client(&server.url("/mcp"), ProtocolVersion::V_2025_11_25).await;
    let lines = lines_with_a_needle(260, 10, "an old needle");
    send(&agent, "#hay", "robo", &lines.join("\n")).await;
    let browser = Browser::start().await;
    open_as(&browser, &server.url("/#hay"), "ann").await;
    wait_shown(&browser, "line 259").await;
    search_and_open_the_first_result(&browser, "needle").await;
    browser
        .until(
            "the message in its place",
            "return document.querySelector('#messages li.target')",
            WAIT,
        )
        .await;
    assert!(!shown(&browser).await.contains(&"line 259".to_owned()));
    // Scroll down until the newest line is there.
    browser
        .until(
            "the newest line after scrolling down",
            "const l = document.getElementById('log');
             l.scrollTop = l.scrollHeight;
             return [...document.querySelectorAll('#messages li .text')]
               .some((t) => t.textContent === 'line 259')",
            WAIT,
        )
        .await;
    // Every line from the result's page on, once each, in order.
    let texts = shown(&browser).await;
    let first = lines.iter().position(|l| *l == texts[0]).unwrap();
    assert_eq!(texts, lines[first..], "{texts:?}");
    // Live again: a new message shows up without a reload.
    send(&agent, "#hay", "robo", "fresh news").await;
    wait_shown(&browser, "fresh news").await;

    // A channel too short to scroll is live again at once.
    send(&agent, "#short", "robo", "one\na zebra\nthree").await;
    search_and_open_the_first_result(&browser, "zebra").await;
    browser
        .until(
            "the short channel's result",
            "return document.querySelector('#messages li.target') && document.getElementById('channel-title').textContent === '#short'",
            WAIT,
        )
        .await;
    send(&agent, "#short", "robo", "four").await;
    wait_shown(&browser, "four").await;
    assert_eq!(shown(&browser).await, ["one", "a zebra", "three", "four"]);
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_jumps_to_a_message_and_older_pages_load_on_demand() {
    let server = Server::start(&["--ephemeral"]).await;
    let agent = http_client(&server.url("/mcp"), ProtocolVersion::V_2025_11_25).await;
    // 250 lines in one channel (one send), one needle among them.
    let lines = lines_with_a_needle(250, 40, "the needle is here");
    send(&agent, "#hay", "robo", &lines.join("\n")).await;
    send(&agent, "#other", "robo", "elsewhere").await;
    let browser = Browser::start().await;
    open_as(&browser, &server.url("/#hay"), "ann").await;
    wait_shown(&browser, "line 249").await;
    // The newest page first; older ones on demand, in order, without repeats.
    assert_eq!(shown(&browser).await.len(), 100);
    // Scrolling to the top loads the page before, keeping the view in place.
    for expected in [200, 250] {
        browser
            .run("document.getElementById('log').scrollTop = 0", vec![])
            .await;
        browser
            .until(
                &format!("{expected} messages"),
                &format!("return document.querySelectorAll('#messages li').length === {expected}"),
                WAIT,
            )
            .await;
    }
    let texts = shown(&browser).await;
    assert_eq!(texts, lines);
    assert_eq!(
        browser
            .run("return document.getElementById('older').hidden", vec![])
            .await,
        true
    );

    // Search from another channel, then jump to the result in its place.
    browser
        .click("#channels button[data-channel='#other']")
        .await;
    wait_shown(&browser, "elsewhere").await;
    search_and_open_the_first_result(&browser, "needle").await;
    let target = browser
        .until(
            "the message in its channel",
            "const t = document.querySelector('#messages li.target');
             return t && document.getElementById('channel-title').textContent === '#hay' && t.querySelector('.text').textContent",
            WAIT,
        )
        .await;
    assert_eq!(target, "the needle is here");
    let context = shown(&browser).await;
    assert!(
        context.contains(&"line 39".to_owned()) && context.contains(&"line 41".to_owned()),
        "{context:?}"
    );
    assert_eq!(
        browser
            .run(
                "return document.activeElement.classList.contains('target')",
                vec![]
            )
            .await,
        true
    );
    // Back to the newest.
    browser.click("#newest").await;
    wait_shown(&browser, "line 249").await;
    // The browser's Back returns from the jump to the channel before it,
    // rather than leaving the page.
    browser.run("history.back()", vec![]).await;
    browser
        .until(
            "the channel before the jump",
            "return document.getElementById('channel-title').textContent === '#other'",
            WAIT,
        )
        .await;
    // A reply written at a result goes to the channel's end, and the page
    // follows it there.
    browser
        .run("document.getElementById('search-q').value = ''", vec![])
        .await;
    browser.keys("search-q", "needle\u{E007}").await;
    browser
        .until(
            "the search result again",
            "const b = document.querySelector('#result-list button');
             return b && !document.getElementById('results').hidden",
            WAIT,
        )
        .await;
    browser.click("#result-list button").await;
    browser
        .until(
            "the result again",
            "return document.querySelector('#messages li.target') !== null",
            WAIT,
        )
        .await;
    browser
        .keys("text", "a reply from the result\u{E007}")
        .await;
    wait_shown(&browser, "a reply from the result").await;
    let end = shown(&browser).await;
    assert_eq!(
        end[end.len() - 2..],
        ["line 249".to_owned(), "a reply from the result".to_owned()]
    );
    browser.close().await;
}

/// A loopback port nobody listens on now, for a server that restarts on it.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A server's flags to listen on a fixed port with its history in a
/// directory of its own, so that it restarts where `browser`'s page is
/// with the same history.
struct Durable {
    _dir: tempfile::TempDir,
    args: Vec<String>,
}

impl Durable {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let args = vec![
            "--http".into(),
            format!("127.0.0.1:{}", free_port()),
            "--data-dir".into(),
            data.to_str().unwrap().into(),
        ];
        Self { _dir: dir, args }
    }

    fn args(&self) -> Vec<&str> {
        self.args.iter().map(String::as_str).collect()
    }
}

/// Stops `server` (SIGTERM) and waits until `browser`'s page has noticed.
async fn stop_under(server: Server, browser: &Browser) {
    server.signal(libc::SIGTERM);
    assert!(server.exit(WAIT).await.success());
    browser
        .until(
            "the page to notice",
            "return document.body.dataset.live === 'false'",
            WAIT,
        )
        .await;
}

/// Stops `server`, once `browser`'s page has noticed starts it again with
/// `args`, and connects an agent to it.
async fn restart(server: Server, browser: &Browser, args: &[&str]) -> (Server, Client) {
    stop_under(server, browser).await;
    let server = Server::start(args).await;
    let agent = http_client(&server.url("/mcp"), ProtocolVersion::V_2025_11_25).await;
    (server, agent)
}

/// Waits until `browser`'s page follows the live stream again.
async fn reconnected(browser: &Browser) {
    browser
        .until(
            "the page to reconnect",
            "return document.body.dataset.live === 'true'",
            Duration::from_secs(30),
        )
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_reconnects_after_a_restart_without_holes_or_repeats() {
    let durable = Durable::new();
    let args = durable.args();
    let server = Server::start(&args).await;
    let (agent, browser) = ann_follows_robo_in_c(&server, "before", "before").await;
    send(&agent, "#c", "robo", "live one").await;
    wait_shown(&browser, "live one").await;

    let (_server, agent) = restart(server, &browser, &args).await;
    // Said before the page is back: it must fill them in.
    send(&agent, "#c", "robo", "while away 1\nwhile away 2").await;
    reconnected(&browser).await;
    send(&agent, "#c", "robo", "after").await;
    wait_shown(&browser, "after").await;
    assert_eq!(
        shown(&browser).await,
        [
            "before",
            "live one",
            "while away 1",
            "while away 2",
            "after"
        ]
    );
    let ids = browser
        .run("return [...document.querySelectorAll('#messages li')].map(li => Number(li.dataset.id))", vec![])
        .await;
    let ids: Vec<i64> = serde_json::from_value(ids).unwrap();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    browser.close().await;
}

/// Switching channels while the server is down shows neither the other
/// channel's messages nor its members; once it is back, the new channel's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_channels_while_the_server_is_down_shows_nothing_stale() {
    let durable = Durable::new();
    let args = durable.args();
    let server = Server::start(&args).await;
    let (agent, browser) = ann_follows_robo_in_c(&server, "in c", "in c").await;
    send(&agent, "#d", "other", "in d").await;
    let members =
        "return [...document.querySelectorAll('#member-list li bdi')].map(e => e.textContent)";
    browser
        .until(
            "#d listed and robo among #c's members",
            &format!(
                "return document.querySelector('#channels button[data-channel=\"#d\"]') !== null \
                 && (() => {{ {members} }})().includes('robo')"
            ),
            WAIT,
        )
        .await;

    stop_under(server, &browser).await;
    browser
        .run(
            "document.querySelector('#channels button[data-channel=\"#d\"]').click()",
            vec![],
        )
        .await;
    browser
        .until(
            "#d's title",
            "return document.getElementById('channel-title').textContent === '#d'",
            WAIT,
        )
        .await;
    assert_eq!(shown(&browser).await, Vec::<String>::new());
    assert_eq!(browser.run(members, vec![]).await, json!([]));

    let _server = Server::start(&args).await;
    reconnected(&browser).await;
    browser
        .run(
            "document.querySelector('#channels button[data-channel=\"#d\"]').click()",
            vec![],
        )
        .await;
    wait_shown(&browser, "in d").await;
    browser
        .until(
            "other among #d's members",
            &format!("return (() => {{ {members} }})().includes('other')"),
            WAIT,
        )
        .await;
    assert!(
        !browser
            .run(members, vec![])
            .await
            .as_array()
            .unwrap()
            .contains(&json!("robo"))
    );
    browser.close().await;
}

/// An `--ephemeral` server starts a new history when it restarts, its ids
/// from 1 again: the open page shows the new history, not the old one with
/// the new messages whose ids it had already seen left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_ephemeral_restart_the_page_shows_the_new_history() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let args = ["--http", addr.as_str(), "--ephemeral"];
    let server = Server::start(&args).await;
    let (_agent, browser) =
        ann_follows_robo_in_c(&server, "old 1\nold 2\nold 3\nold 4", "old 4").await;

    let (_server, agent) = restart(server, &browser, &args).await;
    send(&agent, "#c", "robo", "new 1").await;
    reconnected(&browser).await;
    wait_shown(&browser, "new 1").await;
    send(&agent, "#c", "robo", "new 2").await;
    wait_shown(&browser, "new 2").await;
    assert_eq!(shown(&browser).await, ["new 1", "new 2"]);
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_left_behind_give_back_their_stream() {
    let server = Server::start(&["--ephemeral"]).await;
    let agent = http_client(&server.url("/mcp"), ProtocolVersion::V_2025_11_25).await;
    send(&agent, "#c", "robo", "first").await;
    let browser = Browser::start().await;
    let page = server.url("/#c");
    open_as(&browser, &page, "ann").await;
    wait_shown(&browser, "first").await;
    // A browser opens six connections to one host: a page kept in its
    // back/forward cache with its stream open would starve the next ones.
    for _ in 0..8 {
        browser.client.goto("about:blank").await.unwrap();
        browser.client.goto(&page).await.unwrap();
        wait_shown(&browser, "first").await;
    }
    browser.client.goto("about:blank").await.unwrap();
    send(&agent, "#c", "robo", "while away").await;
    browser.client.back().await.unwrap();
    wait_shown(&browser, "while away").await;
    send(&agent, "#c", "robo", "back again").await;
    wait_shown(&browser, "back again").await;
    assert_eq!(shown(&browser).await, ["first", "while away", "back again"]);
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_approves_a_pending_request_with_a_button() {
    let runtime = runtime_dir();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("relay.sock");
    let config = dir.path().join("switchboard.toml");
    std::fs::write(
        &config,
        "[chat.approvals]\nchannel = \"#approvals\"\napprovers = [\"ann\"]\n",
    )
    .unwrap();
    let server = Server::start_with(
        &[
            "--ephemeral",
            "--config",
            config.to_str().unwrap(),
            "--socket",
            socket.to_str().unwrap(),
        ],
        &[("XDG_RUNTIME_DIR", runtime.path().to_str().unwrap())],
    )
    .await;
    let worker = RawClient::spawn(switchboard(
        &[
            "shim",
            "--socket",
            socket.to_str().unwrap(),
            "--nick",
            "worker",
        ],
        runtime.path(),
    ));
    let init = worker.initialize().await;
    assert_eq!(
        init["capabilities"]["experimental"]["claude/channel/permission"],
        json!({}),
        "{init}"
    );
    let browser = Browser::start().await;
    open_as(&browser, &server.url("/"), "bob").await;
    worker
        .notify(
            "notifications/claude/channel/permission_request",
            json!({"request_id": "abcde", "tool_name": "Bash", "description": "List files", "input_preview": "{\"command\":\"ls\"}"}),
        )
        .await;
    let pending = browser
        .until(
            "the pending request",
            "const li = document.querySelector('#approval-list li[data-id=\"abcde\"]');
             return li && !document.getElementById('approvals').hidden && li.textContent",
            WAIT,
        )
        .await;
    assert!(
        pending
            .as_str()
            .unwrap()
            .contains("worker wants to run Bash: List files"),
        "{pending}"
    );
    // The header and the tab's title say a request waits, wherever the
    // list is.
    let told = browser
        .until(
            "the badge",
            "const b = document.getElementById('approvals-badge');
             return !b.hidden && document.title.startsWith('(1) ') && b.textContent;",
            WAIT,
        )
        .await;
    assert_eq!(told, "1 approval waiting");
    // Bob is no approver: his click is refused, and the page says why.
    browser
        .run(
            "document.querySelector('#approval-list li[data-id=\"abcde\"] button.allow').click();",
            vec![],
        )
        .await;
    let why = browser
        .until(
            "the refusal",
            "const s = document.getElementById('status').textContent;
             return s.includes('abcde') && s",
            WAIT,
        )
        .await;
    assert_eq!(
        why,
        "bob: you are not an approver here; abcde is unchanged."
    );
    browser
        .run(
            "document.getElementById('who').click(); document.getElementById('name').value = '';",
            vec![],
        )
        .await;
    answer_name(&browser, "ann").await;
    // The page checks a new name with the server before taking it.
    browser
        .until(
            "ann's name taken",
            "return !document.getElementById('name-dialog').open
                    && document.getElementById('who').textContent === 'ann'",
            WAIT,
        )
        .await;
    // A double click answers once.
    browser
        .run(
            "const b = document.querySelector('#approval-list li[data-id=\"abcde\"] button.allow');
             b.focus(); b.click(); b.click();",
            vec![],
        )
        .await;
    let verdict = worker
        .wait_for("notifications/claude/channel/permission", 1, WAIT)
        .await;
    assert_eq!(verdict.len(), 1, "{}", server.log());
    assert_eq!(
        verdict[0].1["params"],
        json!({"request_id": "abcde", "behavior": "allow"})
    );
    browser
        .until(
            "the request to go",
            "return !document.querySelector('#approval-list li[data-id=\"abcde\"]')",
            WAIT,
        )
        .await;
    // With none left to answer, the keyboard goes on from the messages.
    assert_eq!(
        browser
            .run("return document.activeElement.id", vec![])
            .await,
        "log"
    );
    let title = browser
        .run(
            "return document.getElementById('approvals-badge').hidden && document.title",
            vec![],
        )
        .await;
    assert!(
        title.as_str().is_some_and(|t| !t.starts_with('(')),
        "{title}"
    );
    let answers: Vec<String> = texts(
        &call(
            &http_client(&server.url("/mcp"), ProtocolVersion::V_2025_11_25).await,
            "read_messages",
            json!({"channel": "#approvals", "limit": 50}),
        )
        .await,
    )
    .into_iter()
    .filter(|t| t == "yes abcde")
    .collect();
    // Bob's refused one, and Ann's double click posted once.
    assert_eq!(answers.len(), 2, "{answers:?}");
    worker.close().await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_irc_the_person_speaks_under_their_own_nick() {
    use switchboard_testkit::{Human, IrcServer, ServerKind, ServerOptions};
    let irc = IrcServer::start(ServerKind::InspIRCd, ServerOptions::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("switchboard.toml");
    std::fs::write(
        &config,
        irc.switchboard_config("send_timeout_s = 20\nchannels = [\"#team\"]\n"),
    )
    .unwrap();
    let server = Server::start(&["--ephemeral", "--config", config.to_str().unwrap()]).await;
    let carol = Human::connect(&irc, "carol").await;
    carol.join("#team").await;
    carol.privmsg("#team", "hello from irc").await;
    let browser = Browser::start().await;
    open_as(&browser, &server.url("/#team"), "ann").await;
    wait_shown(&browser, "hello from irc").await;
    browser.keys("text", "hi carol, ann here\u{E007}").await;
    let heard = carol
        .expect(
            |l| l.is_from("ann", "PRIVMSG") && l.param(0) == Some("#team"),
            Duration::from_secs(20),
        )
        .await;
    assert_eq!(heard.trailing(), Some("hi carol, ann here"));
    wait_shown(&browser, "hi carol, ann here").await;
    let kinds = browser
        .run(
            "return [...document.querySelectorAll('#messages li')].map(li => li.querySelector('.nick').textContent + ':' + li.className)",
            vec![],
        )
        .await;
    assert_eq!(
        kinds,
        json!(["carol:from-human", "ann:from-human"]),
        "{kinds}"
    );
    carol.quit().await;
    browser.close().await;
}
