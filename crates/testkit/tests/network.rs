//! Proves the kit's two-server InspIRCd network: humans on both servers share a channel;
//! after a split each side only hears itself (and sees the other side quit with the
//! netsplit reason), after healing they hear each other again; restarting either server
//! brings the link back, also from a split.
//!
//! InspIRCd registers a client about 1 s after NICK/USER, so humans are connected
//! concurrently.

use std::time::Duration;

use switchboard_testkit::{Human, IrcNetwork, Line, ServerOptions};

const WAIT: Duration = Duration::from_secs(5);
const CHANNEL: &str = "#net";

fn privmsg_from<'a>(nick: &'a str, text: &'a str) -> impl Fn(&Line) -> bool + 'a {
    move |l| l.is_from(nick, "PRIVMSG") && l.params == [CHANNEL, text]
}

/// Whether `human` ever received `text` (in a PRIVMSG or anything else).
fn heard(human: &Human, text: &str) -> bool {
    human.received().iter().any(|l| l.trailing() == Some(text))
}

/// `from` says `text` in the channel and each of `to` hears it.
async fn says(from: &Human, text: &str, to: &[&Human]) {
    from.privmsg(CHANNEL, text).await;
    for human in to {
        human.expect(privmsg_from(from.nick(), text), WAIT).await;
    }
}

/// Alice and Dave on irc0.test, Bob and Erin on irc1.test, all in the channel; each side
/// has seen the other side's humans join.
async fn four_humans(network: &IrcNetwork) -> [Human; 4] {
    let (alice, dave, bob, erin) = tokio::join!(
        Human::connect(network.server(0), "alice"),
        Human::connect(network.server(0), "dave"),
        Human::connect(network.server(1), "bob"),
        Human::connect(network.server(1), "erin"),
    );
    for human in [&alice, &dave, &bob, &erin] {
        human.join(CHANNEL).await;
    }
    for nick in ["bob", "erin"] {
        alice.expect(|l| l.is_from(nick, "JOIN"), WAIT).await;
    }
    [alice, dave, bob, erin]
}

#[tokio::test]
async fn humans_on_both_servers_talk_until_a_split_and_again_after_healing() {
    let mut network = IrcNetwork::start(ServerOptions::default()).await;
    assert_eq!(network.server_name(0), "irc0.test");
    assert_eq!(network.server_name(1), "irc1.test");
    assert_ne!(network.server(0).port(), network.server(1).port());
    let [alice, dave, bob, erin] = four_humans(&network).await;

    says(&alice, "hello from irc0", &[&bob, &erin, &dave]).await;
    says(&bob, "hello from irc1", &[&alice, &dave, &erin]).await;
    bob.privmsg("alice", "psst").await;
    alice
        .expect(
            |l| l.is_from("bob", "PRIVMSG") && l.params == ["alice", "psst"],
            WAIT,
        )
        .await;

    network.split().await;
    // Each side sees the other's humans quit with "<own server> <lost server>".
    for (watcher, gone, reason) in [
        (&alice, ["bob", "erin"], "irc0.test irc1.test"),
        (&bob, ["alice", "dave"], "irc1.test irc0.test"),
    ] {
        for nick in gone {
            let quit = watcher.expect(|l| l.is_from(nick, "QUIT"), WAIT).await;
            assert_eq!(quit.trailing(), Some(reason), "{quit}");
        }
    }
    // Each side still talks among itself.
    says(&alice, "alone on irc0", &[&dave]).await;
    says(&bob, "alone on irc1", &[&erin]).await;
    bob.privmsg("alice", "anyone there?").await;
    bob.expect(|l| l.command == "401", WAIT).await; // ERR_NOSUCHNICK

    network.heal().await;
    for nick in ["bob", "erin"] {
        alice.expect(|l| l.is_from(nick, "JOIN"), WAIT).await;
    }
    for nick in ["alice", "dave"] {
        bob.expect(|l| l.is_from(nick, "JOIN"), WAIT).await;
    }
    says(&alice, "back together", &[&bob, &erin, &dave]).await;
    says(&erin, "welcome back", &[&alice, &dave, &bob]).await;
    // What was said during the split arrived before these, or never: never.
    for (human, text) in [
        (&bob, "alone on irc0"),
        (&erin, "alone on irc0"),
        (&alice, "alone on irc1"),
        (&dave, "alone on irc1"),
    ] {
        assert!(
            !heard(human, text),
            "{} heard {text:?} across the split",
            human.nick()
        );
    }

    // And it splits and heals again.
    network.split().await;
    alice.expect(|l| l.is_from("bob", "QUIT"), WAIT).await;
    network.heal().await;
    says(&dave, "third time", &[&erin]).await;
}

/// Restarts server `i`: its humans are cut off, the other side sees them split off, and
/// once `restart` returns humans on both servers talk again.
async fn restart_brings_the_link_back(i: usize, split_first: bool) {
    let mut network = IrcNetwork::start(ServerOptions::default()).await;
    let [alice, dave, bob, erin] = four_humans(&network).await;
    if split_first {
        network.split().await;
    }
    network.restart(i).await;

    // The restarted side's humans are gone; the survivors hear each other.
    let (survivor, local, restarted) = if i == 0 {
        (&bob, &erin, [&alice, &dave])
    } else {
        (&alice, &dave, [&bob, &erin])
    };
    for human in restarted {
        human.wait_closed(WAIT).await;
        survivor
            .expect(|l| l.is_from(human.nick(), "QUIT"), WAIT)
            .await;
    }
    says(survivor, "still here", &[local]).await;

    let (frank, grace) = tokio::join!(
        Human::connect(network.server(i), "frank"),
        Human::connect(network.server(1 - i), "grace"),
    );
    frank.join(CHANNEL).await;
    grace.join(CHANNEL).await;
    survivor.expect(|l| l.is_from("frank", "JOIN"), WAIT).await;
    says(&frank, "back after a restart", &[survivor, local, &grace]).await;
    says(survivor, "welcome back", &[&frank]).await;
}

#[tokio::test]
async fn restarting_irc1_brings_the_link_back() {
    restart_brings_the_link_back(1, false).await;
}

#[tokio::test]
async fn restarting_irc0_brings_the_link_back() {
    restart_brings_the_link_back(0, false).await;
}

#[tokio::test]
async fn restarting_irc0_during_a_split_brings_the_link_back() {
    restart_brings_the_link_back(0, true).await;
}

#[tokio::test]
#[should_panic(expected = "IrcNetwork runs no services")]
async fn services_are_refused() {
    let options = ServerOptions {
        services: true,
        ..Default::default()
    };
    IrcNetwork::start(options).await;
}
