//! The chat tools on the `irc` backend, against real InspIRCd 3 and ngIRCd
//! servers started here on loopback, with a raw-socket IRC client playing
//! the human. Every behaviour runs against both servers; SASL runs against
//! InspIRCd with Atheme services (ngIRCd has no SASL).

mod common;

use std::{path::PathBuf, time::Duration};

use common::*;
use rmcp::model::ProtocolVersion;
use serde_json::json;
use switchboard_testkit::{Human, IrcServer, Line, ServerKind, ServerOptions};

/// A switchboard on the IRC backend, driven over stdio, with its data dir,
/// config and log in a temp dir.
struct Bridge {
    client: Client,
    dir: tempfile::TempDir,
}

impl Bridge {
    async fn start(server: &IrcServer, extra_toml: &str) -> Self {
        Self::start_with(server, extra_toml, tempfile::tempdir().unwrap(), &[]).await
    }

    /// `start`, keeping its files in `dir`, with `env` set for switchboard.
    async fn start_with(
        server: &IrcServer,
        extra_toml: &str,
        dir: tempfile::TempDir,
        env: &[(&str, &str)],
    ) -> Self {
        let data = dir.path().join("data");
        Self::start_on(server, extra_toml, dir, &data, env).await
    }

    /// `start_with`, its history in `data`.
    async fn start_on(
        server: &IrcServer,
        extra_toml: &str,
        dir: tempfile::TempDir,
        data: &std::path::Path,
        env: &[(&str, &str)],
    ) -> Self {
        let config = dir.path().join("switchboard.toml");
        std::fs::write(
            &config,
            server.switchboard_config(&format!(
                "{}\n{extra_toml}\n",
                if extra_toml.contains("send_timeout_s") {
                    ""
                } else {
                    "send_timeout_s = 20"
                }
            )),
        )
        .unwrap();
        let log = dir.path().join("switchboard.log");
        let args = [
            "--config",
            config.to_str().unwrap(),
            "--data-dir",
            data.to_str().unwrap(),
            "--log-file",
            log.to_str().unwrap(),
        ];
        let mut env = env.to_vec();
        env.push(("SWITCHBOARD_LOG", "debug,rmcp=warn"));
        let client = stdio_client_with(&args, &env, ProtocolVersion::V_2025_11_25).await;
        Self { client, dir }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("switchboard.log")).unwrap_or_default()
    }

    async fn send(&self, channel: &str, sender: &str, text: &str) -> rmcp::model::CallToolResult {
        call(
            &self.client,
            "send_message",
            json!({"channel": channel, "text": text, "sender": sender}),
        )
        .await
    }

    async fn send_ok(&self, channel: &str, sender: &str, text: &str) {
        let result = self.send(channel, sender, text).await;
        assert!(
            !is_error(&result),
            "send failed: {}\n--- switchboard log ---\n{}",
            common::text(&result),
            self.log()
        );
        assert_eq!(
            common::text(&result),
            format!("Sent to {} as {sender}", normalise(channel))
        );
    }

    async fn stop(self) -> tempfile::TempDir {
        self.client.cancel().await.unwrap();
        self.dir
    }
}

fn normalise(channel: &str) -> String {
    if channel.starts_with('#') {
        channel.to_owned()
    } else {
        format!("#{channel}")
    }
}

fn privmsg_from<'a>(nick: &'a str, channel: &'a str) -> impl FnMut(&Line) -> bool + 'a {
    move |l| l.is_from(nick, "PRIVMSG") && l.param(0) == Some(channel)
}

const WAIT: Duration = Duration::from_secs(20);

/// Defines one test per server for an `async fn(ServerKind)`.
macro_rules! on_both_servers {
    ($($name:ident),* $(,)?) => {
        mod inspircd {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::ServerKind::InspIRCd).await })*
        }
        mod ngircd {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::ServerKind::NgIRCd).await })*
        }
    };
}

on_both_servers!(
    agents_and_humans_hear_each_other,
    long_multiline_text_arrives_whole_in_order_within_512_bytes,
    line_breaks_never_inject_commands,
    members_follow_join_part_nick_kick_and_quit,
    bad_names_and_texts_are_tool_errors,
    a_taken_sender_nick_is_a_clear_error,
    two_switchboards_with_default_settings_share_a_network,
    a_taken_configured_observer_nick_stops_switchboard_at_start,
    the_per_ip_limit_is_a_clear_error,
    a_server_restart_loses_no_acknowledged_message,
    tls_with_a_private_ca,
    fifty_lines_burst_through_stock_flood_control,
    two_switchboards_sharing_a_data_dir_record_each_line_once,
    the_other_observer_of_a_shared_data_dir_is_switchboard_not_a_person,
    a_person_who_takes_a_gone_agents_nick_is_a_person,
    a_send_cut_off_part_way_says_how_much_arrived,
    a_cancelled_send_stops_its_remaining_lines,
    a_ban_says_whose_join_was_refused,
);

/// RFC 1459's nine-character nicks (stock ngIRCd's): the default observer
/// nick is too long there, and switchboard takes a shorter one by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_network_of_nine_character_nicks_the_observer_takes_a_shorter_one() {
    let options = ServerOptions {
        nicklen: Some(9),
        ..ServerOptions::default()
    };
    let server = IrcServer::start(ServerKind::NgIRCd, options).await;
    let (human, bridge) =
        tokio::join!(Human::connect(&server, "carol"), Bridge::start(&server, ""));
    human.join("#short").await;
    bridge.send_ok("short", "alice", "fits").await;
    let heard = human.expect(privmsg_from("alice", "#short"), WAIT).await;
    assert_eq!(heard.trailing(), Some("fits"));
    let members = call(&bridge.client, "get_members", json!({"channel": "#short"})).await;
    let members = members.structured_content.unwrap()["members"].clone();
    assert!(
        members.as_array().unwrap().iter().any(|m| m == "switchboa"),
        "{members}\n{}",
        bridge.log()
    );
}

async fn agents_and_humans_hear_each_other(kind: ServerKind) {
    let server = IrcServer::start(kind, ServerOptions::default()).await;
    let (human, bridge) =
        tokio::join!(Human::connect(&server, "carol"), Bridge::start(&server, ""));
    human.join("#agents").await;

    bridge.send_ok("agents", "alice", "hello humans").await;
    let heard = human.expect(privmsg_from("alice", "#agents"), WAIT).await;
    assert_eq!(heard.trailing(), Some("hello humans"));

    // The human answers; the agent waiting on the channel hears it.
    let waiting = spawn_call(
        &bridge.client,
        "wait_for_messages",
        json!({"channel": "#agents", "timeout_s": 20}),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    human.privmsg("#agents", "hi alice, carol here").await;
    let woke = waiting.await.unwrap();
    assert!(
        text(&woke).ends_with("<carol> hi alice, carol here"),
        "{}",
        text(&woke)
    );

    let read = call(
        &bridge.client,
        "read_messages",
        json!({"channel": "#agents"}),
    )
    .await;
    assert_eq!(texts(&read), ["hi alice, carol here", "hello humans"]);
    let members = call(&bridge.client, "get_members", json!({"channel": "#agents"})).await;
    let members = members.structured_content.unwrap()["members"].clone();
    for nick in ["alice", "carol", "switchboard"] {
        assert!(
            members.as_array().unwrap().iter().any(|m| m == nick),
            "{nick} not in {members}"
        );
    }
    let channels = call(&bridge.client, "list_channels", json!({})).await;
    assert_eq!(text(&channels), "- #agents (3 members, 0 unread, joined)");
    let found = call(&bridge.client, "search_messages", json!({"query": "carol"})).await;
    assert_eq!(texts(&found), ["hi alice, carol here"]);
}

async fn long_multiline_text_arrives_whole_in_order_within_512_bytes(kind: ServerKind) {
    let server = IrcServer::start(kind, ServerOptions::default()).await;
    let (human, bridge) =
        tokio::join!(Human::connect(&server, "carol"), Bridge::start(&server, ""));
    human.join("#long").await;
    // ~5,000 characters: paragraphs, long words, multi-byte text and emoji.
    let paragraph = "Ünïcödé façade — naïve café 🎉 résumé. ".repeat(80);
    let word = "x".repeat(700);
    let text_ = format!(
        "{paragraph}\n\n{word}\nshort line\n{}",
        "日本語のテキスト".repeat(200)
    );
    assert!(text_.chars().count() >= 5_000, "{}", text_.chars().count());
    bridge.send_ok("#long", "alice", &text_).await;

    let strip = |s: &str| s.split_whitespace().collect::<String>();
    let expected = strip(&text_);
    let mut got = String::new();
    while got.len() < expected.len() {
        let line = human.expect(privmsg_from("alice", "#long"), WAIT).await;
        assert!(
            line.raw.len() + 2 <= 512,
            "relayed line of {} bytes: {}",
            line.raw.len() + 2,
            line.raw
        );
        got.push_str(&strip(line.trailing().unwrap()));
    }
    assert_eq!(got, expected);
    let stored = call(
        &bridge.client,
        "read_messages",
        json!({"channel": "#long", "limit": 500}),
    )
    .await;
    let mut lines = texts(&stored);
    lines.reverse();
    assert_eq!(strip(&lines.concat()), expected);
}

async fn line_breaks_never_inject_commands(kind: ServerKind) {
    let server = IrcServer::start(kind, ServerOptions::default()).await;
    let (human, bridge) =
        tokio::join!(Human::connect(&server, "carol"), Bridge::start(&server, ""));
    human.join("#safe").await;
    bridge
        .send_ok("#safe", "alice", "hi\r\nQUIT :bye\rPART #safe\0x")
        .await;
    for expected in ["hi", "QUIT :bye", "PART #safe\u{FFFD}x"] {
        let line = human.expect(privmsg_from("alice", "#safe"), WAIT).await;
        assert_eq!(line.trailing(), Some(expected));
    }
    for (sender, channel) in [("alice\r\nQUIT", "#safe"), ("alice", "#safe\r\nQUIT :x")] {
        let result = bridge.send(channel, sender, "x").await;
        assert!(is_error(&result), "{sender:?} {channel:?} was accepted");
    }
    // alice is still there: nothing she "said" became a command.
    bridge.send_ok("#safe", "alice", "still here").await;
    human
        .expect(|l| l.trailing() == Some("still here"), WAIT)
        .await;
    let from_alice: Vec<String> = human
        .received()
        .into_iter()
        .filter(|l| l.nick() == Some("alice") && l.command != "PRIVMSG" && l.command != "JOIN")
        .map(|l| l.raw)
        .collect();
    assert!(from_alice.is_empty(), "commands from alice: {from_alice:?}");
}

async fn members_follow_join_part_nick_kick_and_quit(kind: ServerKind) {
    let server = IrcServer::start(kind, ServerOptions::default()).await;
    let (dave, erin, bridge) = tokio::join!(
        Human::connect(&server, "dave"),
        Human::connect(&server, "erin"),
        Bridge::start(&server, "")
    );
    bridge.send_ok("#room", "alice", "hello").await;
    dave.join("#room").await;
    erin.join("#room").await;
    let members = |expected: &'static [&'static str]| {
        let client = &bridge.client;
        async move {
            let mut last = String::new();
            for _ in 0..50 {
                let result = call(client, "get_members", json!({"channel": "#room"})).await;
                let mut got: Vec<String> = result.structured_content.unwrap()["members"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|m| m.as_str().unwrap().to_owned())
                    .collect();
                got.sort();
                if got == expected {
                    return;
                }
                last = format!("{got:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            panic!("members were {last}, expected {expected:?}");
        }
    };
    members(&["alice", "dave", "erin", "switchboard"]).await;
    erin.send_raw("NICK erin2").await;
    members(&["alice", "dave", "erin2", "switchboard"]).await;
    erin.send_raw("PART #room").await;
    members(&["alice", "dave", "switchboard"]).await;
    // dave created the channel first? No: alice did; the channel's first
    // joiner has ops, so dave cannot kick. dave quits instead.
    dave.quit().await;
    members(&["alice", "switchboard"]).await;
}

async fn bad_names_and_texts_are_tool_errors(kind: ServerKind) {
    let server = IrcServer::start(kind, ServerOptions::default()).await;
    let bridge = Bridge::start(&server, "").await;
    // Wait until the observer has the server's ISUPPORT.
    bridge.send_ok("#ok", "alice", "ready").await;
    let long_nick = "n".repeat(32);
    let cases = [
        ("#ok", "al ice", "x", "a space"),
        ("#ok", "al:ice", "x", "contains ':'"),
        ("#ok", "#alice", "x", "starts with '#'"),
        ("#ok", long_nick.as_str(), "x", "at most 31"),
        ("#ok", "", "x", "nick is empty"),
        ("#ok", "alice", "   ", "text is empty"),
        ("#ok", "alice", "", "text is empty"),
        ("#a b", "alice", "x", "a space"),
        ("#a,b", "alice", "x", "a comma"),
        ("#a\u{7}b", "alice", "x", "BEL"),
    ];
    for (channel, sender, text_, expected) in cases {
        let result = bridge.send(channel, sender, text_).await;
        assert!(
            is_error(&result),
            "{channel:?} {sender:?} {text_:?} accepted"
        );
        assert!(
            text(&result).contains(expected),
            "{channel:?} {sender:?}: {}",
            text(&result)
        );
    }
    // InspIRCd announces CHANTYPES=#, so `&local` has the wrong prefix there;
    // ngIRCd offers & channels too.
    let amp = bridge.send("&local", "alice", "x").await;
    match kind {
        ServerKind::InspIRCd => assert!(text(&amp).contains("start with one of"), "{}", text(&amp)),
        ServerKind::NgIRCd => assert!(!is_error(&amp), "{}", text(&amp)),
    }
}

async fn a_taken_sender_nick_is_a_clear_error(kind: ServerKind) {
    let server = IrcServer::start(kind, ServerOptions::default()).await;
    let (_bob, bridge) = tokio::join!(Human::connect(&server, "bob"), Bridge::start(&server, ""));
    let result = bridge.send("#n", "bob", "impostor").await;
    assert!(is_error(&result));
    assert!(
        text(&result).contains("bob is already in use"),
        "{}",
        text(&result)
    );

    let suffixed =
        Bridge::start(&server, "nick_in_use = \"suffix\"\nnick = \"switchboard2\"").await;
    let result = suffixed.send("#n", "bob", "as bob_").await;
    assert_eq!(text(&result), "Sent to #n as bob_");
}

/// Two hosts (here, two switchboards on one) on default settings: the
/// second observer finds `switchboard` taken and takes a variant naming
/// the host; both send, and each records the other's messages.
async fn two_switchboards_with_default_settings_share_a_network(kind: ServerKind) {
    let server = IrcServer::start(kind, ServerOptions::default()).await;
    let (one, two) = tokio::join!(Bridge::start(&server, ""), Bridge::start(&server, ""));
    for bridge in [&one, &two] {
        let created = call(&bridge.client, "create_channel", json!({"name": "#shared"})).await;
        assert!(
            !is_error(&created),
            "{}\n--- switchboard log ---\n{}",
            text(&created),
            bridge.log()
        );
    }
    one.send_ok("#shared", "alice", "from the first").await;
    two.send_ok("#shared", "bob", "from the second").await;
    for bridge in [&one, &two] {
        let mut recorded = Vec::new();
        for _ in 0..100 {
            let read = call(
                &bridge.client,
                "read_messages",
                json!({"channel": "#shared"}),
            )
            .await;
            recorded = texts(&read);
            if recorded.len() >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(
            recorded,
            ["from the second", "from the first"],
            "{}",
            bridge.log()
        );
    }
    let members = call(&one.client, "get_members", json!({"channel": "#shared"})).await;
    let members = members.structured_content.unwrap()["members"].clone();
    let mut observers: Vec<&str> = members
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m.as_str())
        .filter(|m| m.starts_with("switchboard"))
        .collect();
    observers.sort_unstable();
    assert_eq!(observers.len(), 2, "{members}");
    assert_eq!(observers[0], "switchboard");
    assert!(observers[1].starts_with("switchboard-"), "{members}");
}

/// Two stdio switchboards given one data directory, as the README suggests
/// for agents that should share a history: both observers hear every line,
/// each process's sends are confirmed whichever process stores the line,
/// and the history holds each line once (and a line said twice, twice).
async fn two_switchboards_sharing_a_data_dir_record_each_line_once(kind: ServerKind) {
    let server = IrcServer::start(kind, ServerOptions::default()).await;
    let shared = tempfile::tempdir().unwrap();
    let data = shared.path().join("data");
    let (human, one, two) = tokio::join!(
        Human::connect(&server, "carol"),
        Bridge::start_on(&server, "", tempfile::tempdir().unwrap(), &data, &[]),
        Bridge::start_on(&server, "", tempfile::tempdir().unwrap(), &data, &[]),
    );
    human.join("#shared").await;
    let mut said = Vec::new();
    for i in 0..4 {
        let (first, second) = (format!("first {i}"), format!("second {i}"));
        tokio::join!(
            one.send_ok("#shared", "alice", &first),
            two.send_ok("#shared", "bob", &second)
        );
        said.extend([first, second]);
    }
    human.privmsg("#shared", "same").await;
    human.privmsg("#shared", "same").await;
    for bridge in [&one, &two] {
        for _ in 0..100 {
            if shared_texts(bridge)
                .await
                .iter()
                .filter(|t| *t == "same")
                .count()
                >= 2
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // Whatever either observer heard late is stored by now.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for bridge in [&one, &two] {
        let mut texts = shared_texts(bridge).await;
        assert_eq!(texts.split_off(8), ["same", "same"], "{}", bridge.log());
        // The two senders' lines of one round may be heard in either order.
        texts.sort();
        said.sort();
        assert_eq!(texts, said, "{}", bridge.log());
    }
}

/// Two processes sharing a data directory: each knows the other's observer
/// as switchboard's own connection, not a member (a channel of an agent and
/// a person stays a direct channel), and the notice one posts is stored
/// once, as switchboard's, not again as a person's line by the other.
async fn the_other_observer_of_a_shared_data_dir_is_switchboard_not_a_person(kind: ServerKind) {
    let server = IrcServer::start(kind, ServerOptions::default()).await;
    let shared = tempfile::tempdir().unwrap();
    let data = shared.path().join("data");
    let guard = "[chat.push]\nloop_messages = 3\n";
    let (carol, one, two) = tokio::join!(
        Human::connect(&server, "carol"),
        Bridge::start_on(&server, guard, tempfile::tempdir().unwrap(), &data, &[]),
        Bridge::start_on(&server, guard, tempfile::tempdir().unwrap(), &data, &[]),
    );
    carol.join("#pair").await;
    one.send_ok("#pair", "alice", "hello carol").await;
    // The other process's observer comes into the channel.
    call(&two.client, "create_channel", json!({"name": "#pair"})).await;
    let people = |result: &rmcp::model::CallToolResult| -> Vec<String> {
        let structured = result.structured_content.as_ref().unwrap();
        structured["kinds"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["kind"] != "system")
            .map(|m| m["nick"].as_str().unwrap().to_owned())
            .collect()
    };
    for bridge in [&one, &two] {
        let members = eventually(Duration::from_secs(10), "two people", || async {
            let listed = call(&bridge.client, "get_members", json!({"channel": "#pair"})).await;
            let mut found = people(&listed);
            found.sort();
            if found == ["alice", "carol"] {
                Ok(found)
            } else {
                Err(format!("{found:?}: {}", text(&listed)))
            }
        })
        .await;
        assert_eq!(members, ["alice", "carol"]);
    }
    // Agents only, past the loop guard: one pause notice, switchboard's.
    for i in 0..4 {
        one.send_ok(
            "#pair",
            if i % 2 == 0 { "alice" } else { "bob" },
            &format!("turn {i}"),
        )
        .await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let read = call(
        &one.client,
        "read_messages",
        json!({"channel": "#pair", "limit": 50}),
    )
    .await;
    let notices: Vec<&serde_json::Value> = read.structured_content.as_ref().unwrap()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| {
            m["text"]
                .as_str()
                .unwrap()
                .starts_with("Pausing notifications")
        })
        .collect();
    assert_eq!(
        notices.len(),
        1,
        "{notices:?}\n{}\n{}",
        one.log(),
        two.log()
    );
    assert_eq!(notices[0]["kind"], "system", "{notices:?}");
}

/// An agent's connection closed for being idle frees its nick at once: a
/// person who takes it is stored as a person (so the loop guard and readers
/// see one), not as the agent for the rest of the agent's mark. The idle
/// time (1 s) is shorter than registering takes on InspIRCd, so this also
/// holds that a connection is not closed during its first send.
async fn a_person_who_takes_a_gone_agents_nick_is_a_person(kind: ServerKind) {
    let server = IrcServer::start(kind, ServerOptions::default()).await;
    let (carol, bridge) = tokio::join!(
        Human::connect(&server, "carol"),
        Bridge::start(&server, "sender_idle_s = 1")
    );
    carol.join("#handover").await;
    bridge.send_ok("#handover", "alice", "signing off").await;
    carol
        .expect(
            |l| l.is_from("alice", "QUIT") || l.is_from("alice", "PART"),
            WAIT,
        )
        .await;
    let person = Human::connect(&server, "alice").await;
    person.join("#handover").await;
    person.privmsg("#handover", "a person now").await;
    let mut kinds = Vec::new();
    for _ in 0..100 {
        let read = call(
            &bridge.client,
            "read_messages",
            json!({"channel": "#handover"}),
        )
        .await;
        kinds = read.structured_content.unwrap()["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["text"].as_str().unwrap().to_owned(),
                    m["kind"].as_str().unwrap().to_owned(),
                )
            })
            .collect::<Vec<_>>();
        if kinds.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        kinds,
        [
            ("a person now".to_owned(), "human".to_owned()),
            ("signing off".to_owned(), "agent".to_owned())
        ],
        "{}",
        bridge.log()
    );
}

/// A paced send of many lines that the network cuts off part-way fails,
/// saying how many of its first lines reached the channel and were stored,
/// which is what the history then holds: the agent knows what not to send
/// again.
async fn a_send_cut_off_part_way_says_how_much_arrived(kind: ServerKind) {
    let mut server = IrcServer::start(kind, ServerOptions::default()).await;
    let (carol, bridge) = tokio::join!(
        Human::connect(&server, "carol"),
        Bridge::start(&server, "flood_burst = 2\nflood_per_second = 2.0")
    );
    carol.join("#cut").await;
    let lines: Vec<String> = (1..=30).map(|i| format!("step {i} of 30")).collect();
    let sending = spawn_call(
        &bridge.client,
        "send_message",
        json!({"channel": "#cut", "text": lines.join("\n"), "sender": "alice"}),
    );
    let mut seen = 0;
    while seen < 6 {
        carol.expect(privmsg_from("alice", "#cut"), WAIT).await;
        seen += 1;
    }
    // The observer hears what carol heard.
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.kill().await;
    let result = sending.await.unwrap();
    assert!(is_error(&result), "{}", text(&result));
    let read = call(
        &bridge.client,
        "read_messages",
        json!({"channel": "#cut", "limit": 50}),
    )
    .await;
    let mut stored = texts(&read);
    stored.reverse();
    assert!(stored.len() >= 6 && stored.len() < 30, "{stored:?}");
    assert_eq!(stored, lines[..stored.len()], "{}", bridge.log());
    let said = text(&result);
    assert!(
        said.contains(&format!(
            "the first {} of its 30 IRC lines were heard in the channel and are in the history",
            stored.len()
        )),
        "{said}\nstored: {stored:?}"
    );
}

/// A paced send the client cancels part-way writes no more of its lines,
/// and the agent's connection goes on sending what comes next.
async fn a_cancelled_send_stops_its_remaining_lines(kind: ServerKind) {
    let server = IrcServer::start(kind, ServerOptions::default()).await;
    let (carol, bridge) = tokio::join!(
        Human::connect(&server, "carol"),
        Bridge::start(&server, "flood_burst = 2\nflood_per_second = 2.0")
    );
    carol.join("#stop").await;
    let lines: Vec<String> = (1..=30).map(|i| format!("step {i} of 30")).collect();
    let request = rmcp::model::ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(
        rmcp::model::CallToolRequestParams::new("send_message").with_arguments(
            json!({"channel": "#stop", "text": lines.join("\n"), "sender": "alice"})
                .as_object()
                .cloned()
                .unwrap(),
        ),
    ));
    let handle = bridge
        .client
        .peer()
        .send_cancellable_request(request, rmcp::service::PeerRequestOptions::no_options())
        .await
        .unwrap();
    for _ in 0..4 {
        carol.expect(privmsg_from("alice", "#stop"), WAIT).await;
    }
    handle.cancel(None).await.unwrap();
    let heard = || {
        carol
            .received()
            .iter()
            .filter(|l| {
                l.is_from("alice", "PRIVMSG")
                    && l.trailing().is_some_and(|t| t.starts_with("step "))
            })
            .count()
    };
    let at_cancel = heard();
    tokio::time::sleep(Duration::from_secs(3)).await;
    // At most a line already on its way; at 2 a second, 6 more otherwise.
    assert!(
        heard() <= at_cancel + 1,
        "{} lines after the cancel, {at_cancel} before\n{}",
        heard(),
        bridge.log()
    );
    bridge.send_ok("#stop", "alice", "after the cancel").await;
    carol
        .expect(
            |l| l.is_from("alice", "PRIVMSG") && l.trailing() == Some("after the cancel"),
            WAIT,
        )
        .await;
}

/// A channel that bans the agent, or switchboard's own connection: the
/// send fails naming whose join was refused and what to do.
async fn a_ban_says_whose_join_was_refused(kind: ServerKind) {
    let server = IrcServer::start(kind, ServerOptions::default()).await;
    let (carol, bridge) =
        tokio::join!(Human::connect(&server, "carol"), Bridge::start(&server, ""));
    for (channel, banned) in [("#noalice", "alice"), ("#nobots", "switchboard")] {
        carol.join(channel).await;
        carol
            .send_raw(&format!("MODE {channel} +b {banned}!*@*"))
            .await;
        carol
            .expect(|l| l.command == "MODE" && l.param(0) == Some(channel), WAIT)
            .await;
    }
    let refused = bridge.send("#noalice", "alice", "let me in").await;
    assert!(is_error(&refused));
    let said = common::text(&refused);
    assert!(
        said.starts_with("not delivered: alice: cannot join #noalice"),
        "{said}"
    );
    let refused = bridge.send("#nobots", "bob", "hello").await;
    assert!(is_error(&refused));
    let said = common::text(&refused);
    assert!(
        said.contains("switchboard's own connection (switchboard) cannot join #nobots")
            && said.contains("ask the channel's operators to let switchboard in"),
        "{said}"
    );
}

/// What `#shared` holds, oldest first.
async fn shared_texts(bridge: &Bridge) -> Vec<String> {
    let read = call(
        &bridge.client,
        "read_messages",
        json!({"channel": "#shared", "limit": 50}),
    )
    .await;
    let mut texts = texts(&read);
    texts.reverse();
    texts
}

/// An observer nick set in the config and held by someone else: switchboard
/// exits at once, saying which setting to change, instead of failing every
/// send after its timeout.
async fn a_taken_configured_observer_nick_stops_switchboard_at_start(kind: ServerKind) {
    let server = IrcServer::start(kind, ServerOptions::default()).await;
    let _holder = Human::connect(&server, "watcher").await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("switchboard.toml");
    std::fs::write(&config, server.switchboard_config("nick = \"watcher\"\n")).unwrap();
    let data = dir.path().join("data");
    let started = std::time::Instant::now();
    let output = command(&[
        "--config",
        config.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
        "--http",
        "127.0.0.1:0",
        "--no-socket",
    ])
    .output();
    let output = tokio::time::timeout(Duration::from_secs(15), output)
        .await
        .expect("switchboard exits")
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    let expected = format!(
        "switchboard: chat.irc.nick: the nick watcher is already in use on the IRC network 127.0.0.1:{}; set chat.irc.nick (or IRC_NICK) to a free nick",
        server.port()
    );
    assert!(stderr.contains(&expected), "{stderr}");
}

async fn the_per_ip_limit_is_a_clear_error(kind: ServerKind) {
    let server = IrcServer::start(
        kind,
        ServerOptions {
            max_per_ip: Some(2),
            ..ServerOptions::default()
        },
    )
    .await;
    let bridge = Bridge::start(&server, "").await;
    bridge
        .send_ok("#lim", "alice", "one of two connections")
        .await;
    let refused = bridge.send("#lim", "bob", "a third connection").await;
    assert!(is_error(&refused));
    let message = text(&refused);
    assert!(message.contains("per-IP connection limit"), "{message}");
    assert!(
        message.contains("MaxConnectionsIP") && message.contains("localmax"),
        "{message}"
    );
}

async fn a_server_restart_loses_no_acknowledged_message(kind: ServerKind) {
    let mut server = IrcServer::start(kind, ServerOptions::default()).await;
    let bridge = Bridge::start(&server, "").await;
    bridge.send_ok("#ops", "alice", "before the outage").await;

    server.kill().await;
    // Sends during the outage: each either succeeds (after the restart) or
    // says it was not delivered.
    let during = {
        let peer = bridge.client.peer().clone();
        tokio::spawn(async move {
            let mut acknowledged = Vec::new();
            for i in 0..3 {
                let text_ = format!("during the outage {i}");
                let args = json!({"channel": "#ops", "text": text_, "sender": "alice"});
                let result = peer
                    .call_tool(
                        rmcp::model::CallToolRequestParams::new("send_message")
                            .with_arguments(args.as_object().cloned().unwrap()),
                    )
                    .await
                    .unwrap();
                if is_error(&result) {
                    let said = text(&result);
                    assert!(
                        said.starts_with("not delivered") || said.starts_with("not confirmed"),
                        "{said}"
                    );
                } else {
                    acknowledged.push(text_);
                }
            }
            acknowledged
        })
    };
    // Members are unknown while the connection is down, and said so.
    let members = eventually(Duration::from_secs(10), "an outage noticed", || async {
        let listed = call(&bridge.client, "get_members", json!({"channel": "#ops"})).await;
        let said = text(&listed);
        if is_error(&listed) && said.contains("unknown while the IRC connection is") {
            Ok(said)
        } else {
            Err(said)
        }
    })
    .await;
    assert!(members.contains("#ops"), "{members}");
    // Reads say they may be missing what the network says meanwhile.
    let read = call(&bridge.client, "read_messages", json!({"channel": "#ops"})).await;
    assert!(
        !is_error(&read) && text(&read).contains("(Not up to date: the IRC connection is"),
        "{}",
        text(&read)
    );
    // A channel that cannot be created now is not created behind the
    // caller's back once the network returns.
    let created = call(&bridge.client, "create_channel", json!({"name": "#later"})).await;
    assert!(
        is_error(&created) && text(&created).contains("nothing was created"),
        "{}",
        text(&created)
    );
    server.restart().await;
    let acknowledged = during.await.unwrap();

    // Recovered without a restart of switchboard: agents and humans talk again.
    let human = Human::connect(&server, "carol").await;
    human.join("#ops").await;
    bridge.send_ok("#ops", "alice", "after the outage").await;
    human.expect(privmsg_from("alice", "#ops"), WAIT).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(human.join("#later").await, ["carol"]);
    let listed = call(&bridge.client, "list_channels", json!({})).await;
    assert!(!text(&listed).contains("#later"), "{}", text(&listed));
    human.privmsg("#ops", "welcome back").await;
    let mut recorded = Vec::new();
    for _ in 0..100 {
        let read = call(
            &bridge.client,
            "read_messages",
            json!({"channel": "#ops", "limit": 50}),
        )
        .await;
        recorded = texts(&read);
        if recorded.iter().any(|t| t == "welcome back") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        recorded.iter().any(|t| t == "welcome back"),
        "observer did not record again: {recorded:?}\n{}",
        bridge.log()
    );
    let read = call(&bridge.client, "read_messages", json!({"channel": "#ops"})).await;
    assert!(!text(&read).contains("Not up to date"), "{}", text(&read));
    for text_ in acknowledged
        .iter()
        .map(String::as_str)
        .chain(["before the outage", "after the outage"])
    {
        assert!(
            recorded.iter().any(|t| t == text_),
            "acknowledged {text_:?} missing from {recorded:?}"
        );
    }
}

async fn tls_with_a_private_ca(kind: ServerKind) {
    let server = IrcServer::start(
        kind,
        ServerOptions {
            tls: true,
            ..ServerOptions::default()
        },
    )
    .await;
    let ca: PathBuf = server.ca_pem_path().unwrap().to_owned();
    let trusting = format!("tls = true\nca_file = {:?}", ca.display().to_string());
    let (human, bridge) = tokio::join!(
        Human::connect(&server, "carol"),
        Bridge::start(&server, &trusting)
    );
    human.join("#tls").await;
    bridge.send_ok("#tls", "alice", "over TLS").await;
    human
        .expect(|l| l.trailing() == Some("over TLS"), WAIT)
        .await;

    // Without the CA, the server's certificate is not trusted: not delivered,
    // and the error says which setting trusts it.
    let untrusted = Bridge::start(&server, "tls = true\nnick = \"sb2\"\nsend_timeout_s = 3").await;
    let result = untrusted.send("#tls", "bob", "x").await;
    assert!(
        is_error(&result)
            && text(&result).starts_with("not delivered")
            && text(&result).contains("certificate was refused")
            && text(&result).contains("chat.irc.ca_file"),
        "{}",
        text(&result)
    );
}

async fn fifty_lines_burst_through_stock_flood_control(kind: ServerKind) {
    let server = IrcServer::start(
        kind,
        ServerOptions {
            stock_flood: true,
            ..ServerOptions::default()
        },
    )
    .await;
    let (human, bridge) =
        tokio::join!(Human::connect(&server, "carol"), Bridge::start(&server, ""));
    human.join("#flood").await;
    let lines: Vec<String> = (1..=50).map(|i| format!("line {i} of 50")).collect();
    bridge.send_ok("#flood", "alice", &lines.join("\n")).await;
    for expected in &lines {
        let line = human
            .expect(privmsg_from("alice", "#flood"), Duration::from_secs(90))
            .await;
        assert_eq!(line.trailing(), Some(expected.as_str()));
    }
    let dropped: Vec<String> = human
        .received()
        .into_iter()
        .filter(|l| l.command == "QUIT" && l.nick() == Some("alice"))
        .map(|l| l.raw)
        .collect();
    assert!(dropped.is_empty(), "alice was disconnected: {dropped:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_posted_while_switchboard_was_down_are_backfilled_from_inspircd_history() {
    let server = IrcServer::start(ServerKind::InspIRCd, ServerOptions::default()).await;
    let bridge = Bridge::start(&server, "").await;
    bridge.send_ok("#log", "alice", "recorded live").await;
    let dir = bridge.stop().await;

    let human = Human::connect(&server, "carol").await;
    human.join("#log").await;
    human
        .privmsg("#log", "said while switchboard was away")
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let bridge = Bridge::start_with(&server, "", dir, &[]).await;
    let mut recorded = Vec::new();
    for _ in 0..100 {
        let read = call(&bridge.client, "read_messages", json!({"channel": "#log"})).await;
        recorded = texts(&read);
        if recorded.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        recorded,
        ["said while switchboard was away", "recorded live"],
        "{}",
        bridge.log()
    );
}

/// SASL PLAIN against a real network: InspIRCd 3 with Atheme services linked,
/// accounts registered with NickServ. The observer logs in with
/// `chat.irc.sasl_account`; a refused login is a clear error naming the
/// account, and is not retried.
mod sasl {
    use super::*;

    const ACCOUNT: &str = "bridge";
    const PASSWORD: &str = "bridge-secret";
    const WAIT: Duration = Duration::from_secs(10);

    async fn network() -> IrcServer {
        let options = ServerOptions {
            services: true,
            ..Default::default()
        };
        IrcServer::start(ServerKind::InspIRCd, options).await
    }

    /// A bridge whose observer logs in as `account`, the password in
    /// `IRC_SASL_PASSWORD`.
    async fn sasl_bridge(server: &IrcServer, account: &str, password: &str) -> Bridge {
        let extra = format!(
            "sasl_account = \"{account}\"\nsasl_password_env = \"IRC_SASL_PASSWORD\"\nsend_timeout_s = 10"
        );
        let env = [("IRC_SASL_PASSWORD", password)];
        Bridge::start_with(server, &extra, tempfile::tempdir().unwrap(), &env).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_observer_logs_in_and_the_chat_tools_work() {
        let server = network().await;
        server.register_account(ACCOUNT, PASSWORD).await;
        let (human, bridge) = tokio::join!(
            Human::connect(&server, "carol"),
            sasl_bridge(&server, ACCOUNT, PASSWORD)
        );
        human.join("#agents").await;

        // Succeeds only once the observer (registered, so logged in) heard it in the channel.
        send(&bridge.client, "#agents", "alice", "hello from alice").await;
        let heard = human.expect(|l| l.is_from("alice", "PRIVMSG"), WAIT).await;
        assert_eq!(heard.params, ["#agents", "hello from alice"]);

        // The server says the observer is logged in to the account.
        human.send_raw("WHOIS switchboard").await;
        let whois = human.expect(|l| l.command == "330", WAIT).await;
        assert_eq!(
            whois.params[1..3],
            ["switchboard", ACCOUNT],
            "{whois}\n--- switchboard log ---\n{}",
            bridge.log()
        );

        human.privmsg("#agents", "hi alice, carol here").await;
        eventually(WAIT, "carol's line in the history", || async {
            let read = call(
                &bridge.client,
                "read_messages",
                json!({"channel": "#agents"}),
            )
            .await;
            if texts(&read) == ["hi alice, carol here", "hello from alice"] {
                Ok(())
            } else {
                Err(text(&read))
            }
        })
        .await;

        // Only the observer logs in; sender connections (alice) do not.
        assert_eq!(server.sasl_attempts(), 1, "{}", server.log());
        bridge.client.cancel().await.unwrap();
    }

    /// The observer's login is refused: every chat tool says so, naming the account, and
    /// switchboard does not try again.
    async fn a_refused_login_is_reported_once(account: &str, password: &str) {
        let server = network().await;
        server.register_account(ACCOUNT, PASSWORD).await;
        let bridge = sasl_bridge(&server, account, password).await;
        let refused = format!("cannot log in to the IRC network as account {account} (SASL PLAIN)");

        let result = call(
            &bridge.client,
            "send_message",
            json!({"channel": "#agents", "text": "hello", "sender": "alice"}),
        )
        .await;
        assert!(is_error(&result), "{}", text(&result));
        assert!(
            text(&result).contains(&refused),
            "{}\n--- switchboard log ---\n{}",
            text(&result),
            bridge.log()
        );

        // A retry would come after 250 ms, then 0.5 s, 1 s, 2 s: wait past several.
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(server.sasl_attempts(), 1, "{}", server.log());
        let channels = call(&bridge.client, "list_channels", json!({})).await;
        assert!(is_error(&channels), "{}", text(&channels));
        assert!(text(&channels).contains(&refused), "{}", text(&channels));
        assert!(
            text(&channels).ends_with("fix it and restart switchboard"),
            "{}",
            text(&channels)
        );
        let log = bridge.log();
        assert!(
            log.lines()
                .any(|l| l.contains("IRC connection failed for good") && l.contains(&refused)),
            "{log}"
        );
        bridge.client.cancel().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wrong_password_is_a_clear_error_and_not_retried() {
        a_refused_login_is_reported_once(ACCOUNT, "not-the-password").await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unknown_account_is_a_clear_error_and_not_retried() {
        a_refused_login_is_reported_once("nobody", PASSWORD).await;
    }

    /// A login was asked for, so a network that cannot do SASL (ngIRCd has
    /// none; InspIRCd offers it only with services linked) is an error naming
    /// the account, never a silent anonymous connection.
    async fn a_network_without_sasl_is_refused(kind: ServerKind) {
        let server = IrcServer::start(kind, ServerOptions::default()).await;
        let bridge = sasl_bridge(&server, ACCOUNT, PASSWORD).await;
        // Until the server has answered CAP LS, the connection is still
        // "connecting"; the refusal follows within a moment.
        let result = eventually(WAIT, "the connection to settle", || async {
            let result = call(&bridge.client, "list_channels", json!({})).await;
            if text(&result).contains("is connecting") {
                Err(text(&result))
            } else {
                Ok(result)
            }
        })
        .await;
        assert!(is_error(&result), "{}", text(&result));
        assert!(
            text(&result).contains(
                "cannot log in to the IRC network as account bridge (SASL PLAIN): the server does not offer SASL"
            ),
            "{}\n--- switchboard log ---\n{}",
            text(&result),
            bridge.log()
        );
        let log = bridge.log();
        assert!(!log.contains("IRC connection registered"), "{log}");
        bridge.client.cancel().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ngircd_without_sasl_is_refused() {
        a_network_without_sasl_is_refused(ServerKind::NgIRCd).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn inspircd_without_services_is_refused() {
        a_network_without_sasl_is_refused(ServerKind::InspIRCd).await;
    }
}
