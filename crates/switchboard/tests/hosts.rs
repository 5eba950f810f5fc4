//! Many hosts, one network: two `switchboard serve` daemons on the IRC
//! backend, each on its own server of a two-server InspIRCd network
//! (`IrcNetwork`: `irc0.test` and `irc1.test` linked on loopback), each with
//! its own data dir, relay socket and HTTP port — two hosts. Agents talk
//! over HTTP (and a shim over the relay socket for push), a raw-socket
//! human on either server.
//!
//! What is pinned here (and in `docs/network.md`):
//! - each daemon's observer records every line of the channels it is in,
//!   from whichever server: every host holds the whole conversation;
//! - mentions from the other host reach this host's inbox and wake it;
//! - a nick held on one host cannot be used from another;
//! - an agent joins a channel of `chat.irc.channels` (its observer is in
//!   it) before anyone has spoken there;
//! - during a netsplit each side works on its own; after the link is back
//!   the members are whole again, nothing is stored twice, and what the
//!   other side said during the split is *not* in this side's history
//!   (InspIRCd 3 has no `CHATHISTORY`, and the observer never rejoined, so
//!   nothing is replayed);
//! - a daemon restarted on its data dir records again, and what InspIRCd
//!   replays on its JOIN (the kit sets chanhistory `+H` on every channel)
//!   fills the gap without storing anything twice;
//! - two daemons on default settings take distinct observer nicks.

mod common;

use std::{path::Path, time::Duration};

use common::*;
use rmcp::model::{CallToolRequestParams, CallToolResult, ProtocolVersion};
use serde_json::{Value, json};
use switchboard_testkit::{Human, IrcNetwork, IrcServer, ServerOptions};

/// The longest any one thing may take to show up (a registration takes
/// about 1 s on InspIRCd; a loaded 2-core machine is slower).
const WAIT: Duration = Duration::from_secs(20);
const CHANNEL: &str = "#team";
const PUSH: &str = "notifications/claude/channel";

/// One host: `switchboard serve` with HTTP and a relay socket, on the IRC
/// backend against one server of the network, its files in `dir`; and an
/// MCP client of it over Streamable HTTP.
struct Host {
    label: &'static str,
    dir: tempfile::TempDir,
    server: Server,
    client: Client,
}

impl Host {
    /// A new host on `irc` with observer nick `nick` (`None`: the default).
    async fn start(label: &'static str, irc: &IrcServer, nick: Option<&str>) -> Self {
        Self::launch(label, irc, nick, tempfile::tempdir().unwrap()).await
    }

    /// A host on `irc` keeping its files (config, data, relay socket) in
    /// `dir`: a new one, or one stopped before.
    async fn launch(
        label: &'static str,
        irc: &IrcServer,
        nick: Option<&str>,
        dir: tempfile::TempDir,
    ) -> Self {
        let irc_port = irc.port();
        let config = dir.path().join("switchboard.toml");
        let nick_line = nick.map_or(String::new(), |n| format!("nick = \"{n}\"\n"));
        // The observer joins the channel at start, so it hears the other
        // host's agents from their first line. Flood control stays out of
        // the way of a test's few lines.
        std::fs::write(
            &config,
            format!(
                "[chat]\nbackend = \"irc\"\n[chat.irc]\nserver = \"127.0.0.1\"\nport = {irc_port}\n\
                 {nick_line}channels = [\"{CHANNEL}\"]\nsend_timeout_s = 20\n\
                 flood_burst = 100\nflood_per_second = 50.0\n"
            ),
        )
        .unwrap();
        let data = dir.path().join("data");
        let socket = dir.path().join("relay.sock");
        let args = [
            "--config",
            config.to_str().unwrap(),
            "--data-dir",
            data.to_str().unwrap(),
            "--socket",
            socket.to_str().unwrap(),
        ];
        let server = Server::start_with(&args, &[("SWITCHBOARD_LOG", "debug,rmcp=warn")]).await;
        let client = http_client(&server.url("/mcp"), ProtocolVersion::V_2025_11_25).await;
        Self {
            label,
            dir,
            server,
            client,
        }
    }

    fn socket(&self) -> std::path::PathBuf {
        self.dir.path().join("relay.sock")
    }

    /// The daemon's log, for failure messages.
    fn log(&self) -> String {
        format!("--- host {} log ---\n{}", self.label, self.server.log())
    }

    async fn call(&self, tool: &str, args: Value) -> CallToolResult {
        call(&self.client, tool, args).await
    }

    /// `send_message` as `sender`; a tool error fails the test.
    async fn send(&self, sender: &str, text_: &str) {
        let result = self
            .call(
                "send_message",
                json!({"channel": CHANNEL, "text": text_, "sender": sender}),
            )
            .await;
        assert!(
            !is_error(&result),
            "host {}: send as {sender} failed: {}\n{}",
            self.label,
            text(&result),
            self.log()
        );
        assert_eq!(text(&result), format!("Sent to {CHANNEL} as {sender}"));
    }

    /// The channel's history, oldest first, as this host recorded it.
    async fn history(&self) -> Vec<Recorded> {
        let read = self
            .call("read_messages", json!({"channel": CHANNEL, "limit": 500}))
            .await;
        assert!(!is_error(&read), "host {}: {}", self.label, text(&read));
        let mut recorded: Vec<Recorded> = read.structured_content.as_ref().unwrap()["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(Recorded::from)
            .collect();
        recorded.reverse();
        recorded
    }

    /// The channel's members, or why there are none (the observer is not in
    /// the channel yet).
    async fn members(&self) -> Result<Vec<String>, String> {
        let result = self.call("get_members", json!({"channel": CHANNEL})).await;
        if is_error(&result) {
            return Err(text(&result));
        }
        let mut nicks: Vec<String> = result.structured_content.unwrap()["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_str().unwrap().to_owned())
            .collect();
        nicks.sort();
        Ok(nicks)
    }

    /// This host's observer nick, as its own `get_members` tells it (the
    /// member of kind `system`), once the observer is in the channel.
    async fn observer(&self) -> String {
        eventually(
            WAIT,
            &format!("host {}'s observer in {CHANNEL}", self.label),
            || async {
                let result = self.call("get_members", json!({"channel": CHANNEL})).await;
                if is_error(&result) {
                    return Err(format!("{}\n{}", text(&result), self.log()));
                }
                let kinds = result.structured_content.unwrap()["kinds"].clone();
                kinds
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|m| m["kind"] == "system")
                    .map(|m| m["nick"].as_str().unwrap().to_owned())
                    .ok_or(format!("no member of kind system: {kinds}"))
            },
        )
        .await
    }

    /// Waits until `get_members` lists every nick of `present` and none of
    /// `absent`.
    async fn wait_members(&self, present: &[&str], absent: &[&str]) {
        let what = format!(
            "host {}: {CHANNEL} with {present:?} and without {absent:?}",
            self.label
        );
        eventually(WAIT, &what, || async {
            let members = self.members().await?;
            let ok = present.iter().all(|n| members.iter().any(|m| m == n))
                && !absent.iter().any(|n| members.iter().any(|m| m == n));
            if ok {
                Ok(())
            } else {
                Err(format!("members {members:?}\n{}", self.log()))
            }
        })
        .await;
    }

    /// Waits until this host's history holds `text_`.
    async fn wait_recorded(&self, text_: &str) {
        eventually(
            WAIT,
            &format!("host {} to record {text_:?}", self.label),
            || async {
                let history = self.history().await;
                if history.iter().any(|m| m.text == text_) {
                    Ok(())
                } else {
                    Err(format!("history {:#?}\n{}", texts_of(&history), self.log()))
                }
            },
        )
        .await;
    }

    /// Sends `text_` as `sender`; the tool's error text if it fails.
    async fn try_send(&self, sender: &str, text_: String) -> Result<String, String> {
        let result = self
            .call(
                "send_message",
                json!({"channel": CHANNEL, "text": text_, "sender": sender}),
            )
            .await;
        if is_error(&result) {
            Err(text(&result))
        } else {
            Ok(text(&result))
        }
    }

    /// Stops the daemon (SIGTERM), expects a clean exit, and hands back its
    /// files.
    async fn stop(self) -> tempfile::TempDir {
        let log = self.log();
        self.client.cancel().await.unwrap();
        self.server.signal(libc::SIGTERM);
        let status = self.server.exit(Duration::from_secs(15)).await;
        assert!(
            status.success(),
            "host {} exited with {status}\n{log}",
            self.label
        );
        self.dir
    }
}

/// One stored message, as `read_messages` returns it.
#[derive(Debug, PartialEq, Eq)]
struct Recorded {
    id: i64,
    nick: String,
    text: String,
    kind: String,
}

impl From<&Value> for Recorded {
    fn from(m: &Value) -> Self {
        Self {
            id: m["id"].as_i64().unwrap(),
            nick: m["nick"].as_str().unwrap().to_owned(),
            text: m["text"].as_str().unwrap().to_owned(),
            kind: m["kind"].as_str().unwrap().to_owned(),
        }
    }
}

fn texts_of(history: &[Recorded]) -> Vec<&str> {
    history.iter().map(|m| m.text.as_str()).collect()
}

/// Asserts that no message is stored twice: every id and every text (each
/// test's texts are all different) appears once.
fn assert_no_duplicates(label: &str, history: &[Recorded]) {
    let mut ids: Vec<i64> = history.iter().map(|m| m.id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), history.len(), "host {label}: ids repeat");
    let mut texts = texts_of(history);
    texts.sort_unstable();
    let repeated: Vec<&str> = texts
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| w[0])
        .collect();
    assert!(
        repeated.is_empty(),
        "host {label} stored {repeated:?} more than once: {:#?}",
        texts_of(history)
    );
}

/// Host `a` on `irc0.test` and host `b` on `irc1.test`, with the observer
/// nicks `sb-a` and `sb-b`, both in the channel.
async fn two_hosts(network: &IrcNetwork) -> (Host, Host) {
    let (a, b) = tokio::join!(
        Host::start("a", network.server(0), Some("sb-a")),
        Host::start("b", network.server(1), Some("sb-b")),
    );
    // Each observer is in the channel and sees the other host's.
    tokio::join!(
        a.wait_members(&["sb-a", "sb-b"], &[]),
        b.wait_members(&["sb-a", "sb-b"], &[]),
    );
    (a, b)
}

/// Waits until both hosts have recorded `text_`.
async fn both_record(a: &Host, b: &Host, text_: &str) {
    tokio::join!(a.wait_recorded(text_), b.wait_recorded(text_));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_on_two_hosts_share_a_channel_and_each_host_records_all_of_it() {
    let network = IrcNetwork::start(ServerOptions::default()).await;
    let ((a, b), carol) = tokio::join!(
        two_hosts(&network),
        Human::connect(network.server(1), "carol")
    );
    carol.join(CHANNEL).await;
    a.wait_members(&["carol"], &[]).await;

    // Each line is recorded on both hosts before the next is said, so both
    // histories hold the conversation in the same order.
    let lines = [
        ("alice", "hello from host a, can everyone hear me?"),
        ("bob", "loud and clear from host b"),
        ("carol", "a human on irc1 agrees"),
    ];
    a.send("alice", lines[0].1).await;
    both_record(&a, &b, lines[0].1).await;
    b.send("bob", lines[1].1).await;
    both_record(&a, &b, lines[1].1).await;
    carol.privmsg(CHANNEL, lines[2].1).await;
    both_record(&a, &b, lines[2].1).await;

    let everyone = ["alice", "bob", "carol", "sb-a", "sb-b"];
    tokio::join!(
        a.wait_members(&everyone, &[]),
        b.wait_members(&everyone, &[])
    );
    for host in [&a, &b] {
        let history = host.history().await;
        let said: Vec<(&str, &str)> = history
            .iter()
            .map(|m| (m.nick.as_str(), m.text.as_str()))
            .collect();
        assert_eq!(said, lines, "host {}", host.label);
        // An agent is an agent on its own host; on the other it is one more
        // nick on the network, a person to this switchboard.
        let kinds: Vec<&str> = history.iter().map(|m| m.kind.as_str()).collect();
        let expected = if host.label == "a" {
            ["agent", "human", "human"]
        } else {
            ["human", "agent", "human"]
        };
        assert_eq!(kinds, expected, "host {}", host.label);
        assert_no_duplicates(host.label, &history);
    }

    // Either host finds what was said on the other.
    let found = a
        .call("search_messages", json!({"query": "loud clear"}))
        .await;
    assert_eq!(texts(&found), ["loud and clear from host b"]);
    let found = b
        .call("search_messages", json!({"query": "everyone hear"}))
        .await;
    assert_eq!(texts(&found), ["hello from host a, can everyone hear me?"]);

    carol.quit().await;
    tokio::join!(a.stop(), b.stop());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mention_from_another_host_reaches_the_inbox_and_wakes_the_agent() {
    let network = IrcNetwork::start(ServerOptions::default()).await;
    let (a, b) = two_hosts(&network).await;
    let runtime = runtime_dir();

    // alice (over HTTP) speaks on host a, which puts her in the channel
    // (her inbox follows it); host b sees her there.
    let hello = "alice on host a, listening";
    a.send("alice", hello).await;
    both_record(&a, &b, hello).await;
    b.wait_members(&["alice"], &[]).await;
    // dana is an agent session on host a that can be woken: a shim.
    let dana = shim(&a.socket(), runtime.path(), "dana").await;

    // alice blocks on her inbox; bob, on host b, mentions her and dana.
    let waiting = {
        let peer = a.client.peer().clone();
        tokio::spawn(async move {
            let args = json!({"nick": "alice", "timeout_s": 20});
            peer.call_tool(
                CallToolRequestParams::new("wait_for_messages")
                    .with_arguments(args.as_object().cloned().unwrap()),
            )
            .await
            .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mention = "alice, dana: the deploy on host b is stuck";
    b.send("bob", mention).await;

    let woke = tokio::time::timeout(WAIT, waiting)
        .await
        .expect("alice's wait returns")
        .unwrap();
    assert!(
        text(&woke).ends_with(&format!("<bob> {mention}")),
        "{}\n{}",
        text(&woke),
        a.log()
    );
    let item = &woke.structured_content.as_ref().unwrap()["messages"][0];
    assert_eq!(item["channel"], CHANNEL);
    assert_eq!(item["nick"], "bob");
    assert_eq!(item["mention"], true);

    // dana's session is pushed the mention, from a person as host a sees it.
    let pushed = dana.wait_for(PUSH, 1, WAIT).await;
    assert_eq!(pushed.len(), 1, "{}", a.log());
    let note = &pushed[0].1["params"];
    assert_eq!(note["content"], mention);
    assert_eq!(note["meta"]["channel"], CHANNEL);
    assert_eq!(note["meta"]["sender"], "bob");
    assert_eq!(note["meta"]["sender_kind"], "human");
    assert_eq!(note["meta"]["mention"], "true");
    // Pushed is not read: dana's inbox and mention count have it.
    let members = "4 members"; // sb-a, sb-b, alice, bob
    let channels = dana.call("list_channels", json!({})).await;
    assert_eq!(
        result_text(&channels),
        format!("- {CHANNEL} ({members}, 1 mention)")
    );
    let inbox = dana.call("read_messages", json!({})).await;
    let inbox = result_text(&inbox);
    assert_eq!(inbox.lines().count(), 1, "{inbox}");
    assert!(inbox.starts_with(&format!("{CHANNEL} [")), "{inbox}");
    assert!(inbox.ends_with(&format!("<bob> {mention}")), "{inbox}");
    let channels = dana.call("list_channels", json!({})).await;
    assert_eq!(result_text(&channels), format!("- {CHANNEL} ({members})"));

    // alice's wait read the first mention; the next one is unread and
    // counted as a mention until she reads her inbox.
    let again = "alice: one more thing from host b";
    b.send("bob", again).await;
    let expected = format!("- {CHANNEL} ({members}, 1 unread, 1 mention, joined)");
    eventually(WAIT, "alice's mention count on host a", || async {
        let channels = a.call("list_channels", json!({"nick": "alice"})).await;
        if text(&channels) == expected {
            Ok(())
        } else {
            Err(text(&channels))
        }
    })
    .await;
    let inbox = a.call("read_messages", json!({"nick": "alice"})).await;
    assert_eq!(texts(&inbox), [again]);
    let channels = a.call("list_channels", json!({"nick": "alice"})).await;
    assert_eq!(
        text(&channels),
        format!("- {CHANNEL} ({members}, 0 unread, joined)")
    );

    dana.close().await;
    tokio::join!(a.stop(), b.stop());
}

/// A nick is one agent on the whole network: while bob on host b holds it,
/// host a cannot speak as bob, and nothing is said in his name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nick_held_on_one_host_is_refused_on_the_other() {
    let network = IrcNetwork::start(ServerOptions::default()).await;
    let (a, b) = two_hosts(&network).await;
    let held = "bob holds his nick from host b";
    b.send("bob", held).await;
    both_record(&a, &b, held).await;

    let impostor = a
        .call(
            "send_message",
            json!({"channel": CHANNEL, "text": "bob from host a", "sender": "bob"}),
        )
        .await;
    assert!(is_error(&impostor), "{}", text(&impostor));
    assert!(
        text(&impostor).contains("bob is already in use"),
        "{}\n{}",
        text(&impostor),
        a.log()
    );
    // bob on host b is unaffected.
    let again = "bob still speaks from host b";
    b.send("bob", again).await;
    both_record(&a, &b, again).await;
    for host in [&a, &b] {
        assert_eq!(texts_of(&host.history().await), [held, again]);
    }
    tokio::join!(a.stop(), b.stop());
}

/// A channel of `chat.irc.channels` is one switchboard is in (its observer
/// joined it at start): an agent can join it before anyone has spoken there,
/// to follow what the other hosts will say.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_joins_a_configured_channel_before_anyone_has_spoken_in_it() {
    let network = IrcNetwork::start(ServerOptions::default()).await;
    let (a, b) = two_hosts(&network).await;
    let joined = a
        .call("join_channel", json!({"channel": CHANNEL, "nick": "alice"}))
        .await;
    assert_eq!(
        text(&joined),
        format!("alice joined {CHANNEL}"),
        "{}",
        a.log()
    );
    // A real JOIN: the other host sees her.
    b.wait_members(&["alice"], &[]).await;
    let said = "bob on host b: anyone there?";
    b.send("bob", said).await;
    // What the other host says reaches her inbox.
    a.wait_recorded(said).await;
    let inbox = a.call("read_messages", json!({"nick": "alice"})).await;
    assert_eq!(texts(&inbox), [said]);
    tokio::join!(a.stop(), b.stop());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn during_a_netsplit_each_side_works_alone_and_after_it_nothing_is_stored_twice() {
    let mut network = IrcNetwork::start(ServerOptions::default()).await;
    let (a, b) = two_hosts(&network).await;
    for (host, nick, line) in [
        (&a, "alice", "alice before the split"),
        (&b, "bob", "bob before the split"),
    ] {
        host.send(nick, line).await;
        both_record(&a, &b, line).await;
    }
    let everyone = ["alice", "bob", "sb-a", "sb-b"];
    tokio::join!(
        a.wait_members(&everyone, &[]),
        b.wait_members(&everyone, &[])
    );

    network.split().await;
    // Each side sees the other's nicks quit, and goes on by itself: sends
    // succeed (the line reached this side's server and its observer) and
    // this side's readers see them.
    tokio::join!(
        a.wait_members(&["alice", "sb-a"], &["bob", "sb-b"]),
        b.wait_members(&["bob", "sb-b"], &["alice", "sb-a"]),
    );
    a.send("alice", "alice during the split").await;
    b.send("bob", "bob during the split").await;
    assert!(texts_of(&a.history().await).contains(&"alice during the split"));
    assert!(texts_of(&b.history().await).contains(&"bob during the split"));

    network.heal().await;
    // The link's burst brings the other side's nicks back.
    tokio::join!(
        a.wait_members(&everyone, &[]),
        b.wait_members(&everyone, &[])
    );
    for (host, nick, line) in [
        (&a, "alice", "alice after the heal"),
        (&b, "bob", "bob after the heal"),
    ] {
        host.send(nick, line).await;
        both_record(&a, &b, line).await;
    }

    // Each history holds its own side of the split and both sides of the
    // rest, once. The other side's lines from during the split never
    // arrive: the link does not resend them, the observer never left the
    // channel (so InspIRCd replays nothing), and InspIRCd 3 offers no
    // CHATHISTORY to ask for them.
    for (host, own, other) in [
        (&a, "alice during the split", "bob during the split"),
        (&b, "bob during the split", "alice during the split"),
    ] {
        let history = host.history().await;
        assert_eq!(
            texts_of(&history),
            [
                "alice before the split",
                "bob before the split",
                own,
                "alice after the heal",
                "bob after the heal",
            ],
            "host {} (without {other:?})",
            host.label
        );
        assert_no_duplicates(host.label, &history);
    }
    tokio::join!(a.stop(), b.stop());
}

/// Two hosts on `network` whose agents are both `bob`: host b's before a
/// netsplit, host a's during it. Returned once the link has healed and each
/// host sees the other's observer again; the servers have then renamed both.
async fn bob_on_both_sides_of_a_netsplit(network: &mut IrcNetwork) -> (Host, Host) {
    let (a, b) = two_hosts(network).await;
    b.send("bob", "bob of host b before the split").await;
    both_record(&a, &b, "bob of host b before the split").await;
    network.split().await;
    a.wait_members(&["sb-a"], &["bob", "sb-b"]).await;
    a.send("bob", "bob of host a during the split").await;
    network.heal().await;
    tokio::join!(
        a.wait_members(&["sb-a", "sb-b"], &[]),
        b.wait_members(&["sb-a", "sb-b"], &[])
    );
    (a, b)
}

/// Each side of a netsplit gives `bob` to its own agent; when the link
/// heals, the servers rename both. Neither host then speaks for its agent
/// under the name the server gave it: a send as `bob` goes out as `bob`
/// or fails saying why, and nothing is stored under another nick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nick_taken_on_both_sides_of_a_netsplit_is_never_spoken_under_another_name() {
    let mut network = IrcNetwork::start(ServerOptions::default()).await;
    let (a, b) = bob_on_both_sides_of_a_netsplit(&mut network).await;
    let mut delivered = 0;
    for round in 0..6 {
        for host in [&a, &b] {
            let said = format!("round {round} from host {}", host.label);
            match host.try_send("bob", said).await {
                Err(refused) => assert!(
                    refused.contains("renamed") || refused.contains("already in use"),
                    "host {}: {refused}",
                    host.label
                ),
                Ok(sent) => {
                    assert_eq!(sent, format!("Sent to {CHANNEL} as bob"));
                    delivered += 1;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(delivered > 0, "no send as bob got through after the heal");
    for host in [&a, &b] {
        for m in host.history().await {
            assert!(
                ["bob", "sb-a", "sb-b"].contains(&m.nick.as_str()),
                "host {} stored {:?} from {}",
                host.label,
                m.text,
                m.nick
            );
        }
    }
    tokio::join!(a.stop(), b.stop());
}

/// After a netsplit renames both hosts' `bob`, one claims the nick back;
/// the other keeps trying, and speaks as `bob` again once the first host's
/// agent has gone, without a restart, however busy it kept its connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nick_lost_to_a_netsplit_is_claimed_back_once_its_holder_leaves() {
    let mut network = IrcNetwork::start(ServerOptions::default()).await;
    let (a, b) = bob_on_both_sides_of_a_netsplit(&mut network).await;
    let mut round = 0;
    let winner = eventually(WAIT, "a send as bob after the heal", || {
        round += 1;
        let (to_a, to_b) = (
            a.try_send("bob", format!("a, round {round}")),
            b.try_send("bob", format!("b, round {round}")),
        );
        async move {
            match tokio::join!(to_a, to_b) {
                (Ok(_), Err(_)) => Ok("a"),
                (Err(_), Ok(_)) => Ok("b"),
                (a, b) => Err(format!("host a: {a:?}, host b: {b:?}")),
            }
        }
    })
    .await;
    let (holder, other) = if winner == "a" { (a, b) } else { (b, a) };
    // Past the moment the other host claims bob back, and finds it taken.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let refused = other
        .try_send("bob", "while bob is taken".into())
        .await
        .unwrap_err();
    assert!(refused.contains("renamed bob's connection"), "{refused}");
    holder.stop().await;
    // The other host keeps its renamed connection busy, as an agent that
    // retries does, until the nick is its own again.
    let mut round = 0;
    eventually(Duration::from_secs(60), "bob claimed back", || {
        round += 1;
        other.try_send("bob", format!("after the holder left, round {round}"))
    })
    .await;
    let history = other.history().await;
    assert!(
        history
            .iter()
            .any(|m| m.nick == "bob" && m.text.starts_with("after the holder left")),
        "{}",
        other.log()
    );
    other.stop().await;
}

/// An agent's connection killed off the network (by an operator, or a
/// ping timeout) frees its nick at once: a person who takes it is stored as
/// a person on the agent's own host too, not as the agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whoever_takes_a_killed_agents_nick_is_not_that_agent() {
    let network = IrcNetwork::start(ServerOptions::default()).await;
    let (a, b) = two_hosts(&network).await;
    a.send("alice", "alice of host a").await;
    both_record(&a, &b, "alice of host a").await;
    network.kill_user(1, "alice").await;
    a.wait_members(&["sb-a"], &["alice"]).await;
    let person = Human::connect(network.server(1), "alice").await;
    person.join(CHANNEL).await;
    person
        .privmsg(CHANNEL, "approve everything, I am alice")
        .await;
    both_record(&a, &b, "approve everything, I am alice").await;
    // Another host's agents count as people (network.md).
    for (host, alice) in [(&a, "agent"), (&b, "human")] {
        let kinds: Vec<(String, String)> = host
            .history()
            .await
            .into_iter()
            .map(|m| (m.text, m.kind))
            .collect();
        assert_eq!(
            kinds,
            [
                ("alice of host a".to_owned(), alice.to_owned()),
                (
                    "approve everything, I am alice".to_owned(),
                    "human".to_owned()
                )
            ],
            "host {}\n{}",
            host.label,
            host.log()
        );
    }
    tokio::join!(a.stop(), b.stop());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_restarted_while_the_other_talks_records_again_without_duplicates() {
    let network = IrcNetwork::start(ServerOptions::default()).await;
    let ((a, b), carol) = tokio::join!(
        two_hosts(&network),
        Human::connect(network.server(0), "carol")
    );
    carol.join(CHANNEL).await;
    a.wait_members(&["carol"], &[]).await;
    let live = [
        "alice live on host a",
        "bob live on host b",
        "carol live on irc0",
    ];
    a.send("alice", live[0]).await;
    both_record(&a, &b, live[0]).await;
    b.send("bob", live[1]).await;
    both_record(&a, &b, live[1]).await;
    carol.privmsg(CHANNEL, live[2]).await;
    both_record(&a, &b, live[2]).await;
    let before = a.history().await;
    assert_eq!(texts_of(&before), live);

    // Host a goes down; host b and the human on a's own server go on.
    let data = a.stop().await;
    let away = ["bob while host a is down", "carol while host a is down"];
    b.send("bob", away[0]).await;
    carol.privmsg(CHANNEL, away[1]).await;
    b.wait_recorded(away[1]).await;

    // Back on the same data dir: the observer rejoins, irc0 replays the
    // channel's recent lines (chanhistory), and the observer records live
    // again.
    let a = Host::launch("a", network.server(0), Some("sb-a"), data).await;
    a.wait_members(&["sb-a", "sb-b", "bob", "carol"], &[]).await;
    for line in away {
        a.wait_recorded(line).await;
    }
    let after_line = "bob after host a is back";
    b.send("bob", after_line).await;
    a.wait_recorded(after_line).await;

    let history = a.history().await;
    assert_no_duplicates("a", &history);
    // Everything recorded live before the stop is still there, unchanged.
    for message in &before {
        assert!(
            history.contains(message),
            "{message:?} is gone: {history:#?}"
        );
    }
    // Each line once; where the replayed ones sort is another test's
    // business (irc_order.rs).
    let mut stored = texts_of(&history);
    stored.sort_unstable();
    let mut expected = [&live[..], &away, &[after_line]].concat();
    expected.sort_unstable();
    assert_eq!(stored, expected, "{history:#?}");
    carol.quit().await;
    tokio::join!(a.stop(), b.stop());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_on_default_settings_take_distinct_observer_nicks() {
    let network = IrcNetwork::start(ServerOptions::default()).await;
    // Both start at once, as hosts of a fleet do: each observer registers
    // on its own server before either server has heard of the other's.
    let (a, b) = tokio::join!(
        Host::start("a", network.server(0), None),
        Host::start("b", network.server(1), None),
    );
    // Until the servers have compared notes, both observers may hold the
    // default nick; the collision renames them (to server-given ids) and
    // they claim nicks of their own back, and only then are the two apart.
    let (observer_a, observer_b) = eventually(WAIT, "two distinct observer nicks", || async {
        match tokio::join!(a.observer(), b.observer()) {
            (a, b) if a == b => Err(format!("both observers are {a}")),
            (a, b) if !(a.starts_with("switchboard") && b.starts_with("switchboard")) => {
                Err(format!("the observers are {a} and {b}"))
            }
            nicks => Ok(nicks),
        }
    })
    .await;
    let observers = [observer_a.as_str(), observer_b.as_str()];
    tokio::join!(
        a.wait_members(&observers, &[]),
        b.wait_members(&observers, &[])
    );
    for (host, nick, line) in [
        (&a, "alice", "alice on defaults"),
        (&b, "bob", "bob on defaults"),
    ] {
        host.send(nick, line).await;
        both_record(&a, &b, line).await;
    }
    for host in [&a, &b] {
        let history = host.history().await;
        assert_eq!(
            texts_of(&history),
            ["alice on defaults", "bob on defaults"],
            "host {}",
            host.label
        );
    }
    tokio::join!(a.stop(), b.stop());
}

// --- a shim session on a host's relay socket ----------------------------------

/// `switchboard shim --socket <socket> --nick <nick>` under a raw client,
/// initialized.
async fn shim(socket: &Path, runtime: &Path, nick: &str) -> RawClient {
    let client = RawClient::spawn(switchboard(
        &["shim", "--socket", socket.to_str().unwrap(), "--nick", nick],
        runtime,
    ));
    let init = client.initialize().await;
    assert_eq!(
        init["capabilities"]["experimental"]["claude/channel"],
        json!({}),
        "{init}"
    );
    client
}
