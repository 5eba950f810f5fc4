//! Proves the kit's Atheme services against a real InspIRCd: the link is up when `start`
//! returns (NickServ answers, the `sasl` cap is offered), accounts register, and a restart
//! brings the link back with the accounts kept.

use std::time::Duration;

use switchboard_testkit::{Human, IrcServer, ServerKind, ServerOptions};

const WAIT: Duration = Duration::from_secs(5);

fn with_services() -> ServerOptions {
    ServerOptions {
        services: true,
        ..Default::default()
    }
}

/// Asks for the caps (allowed after registration too) and asserts `sasl` is among them.
async fn assert_sasl_offered(human: &Human) {
    human.send_raw("CAP LS 302").await;
    let caps = human
        .expect(|l| l.command == "CAP" && l.param(1) == Some("LS"), WAIT)
        .await;
    assert!(
        caps.trailing()
            .unwrap_or_default()
            .split(' ')
            .any(|c| c == "sasl" || c.starts_with("sasl=")),
        "{caps}"
    );
}

#[tokio::test]
async fn accounts_register_and_survive_a_restart() {
    let mut server = IrcServer::start(ServerKind::InspIRCd, with_services()).await;
    let human = Human::connect(&server, "erin").await;
    assert_sasl_offered(&human).await;
    drop(human);

    server.register_account("dora", "dora-secret").await;
    assert_eq!(server.sasl_attempts(), 0);

    server.restart().await;
    let human = Human::connect(&server, "dora").await;
    assert_sasl_offered(&human).await;
    // NickServ first warns that the nick is registered, then refuses to register it again.
    human
        .privmsg("NickServ", "REGISTER other-secret dora@example.com")
        .await;
    human
        .expect(
            |l| {
                l.is_from("NickServ", "NOTICE")
                    && l.trailing()
                        .is_some_and(|t| t.contains("is already registered"))
            },
            WAIT,
        )
        .await;
}

#[tokio::test]
#[should_panic(expected = "NickServ did not register dora")]
async fn a_refused_registration_panics_quoting_nickserv() {
    let server = IrcServer::start(ServerKind::InspIRCd, with_services()).await;
    server.register_account("dora", "dora-secret").await;
    server.register_account("dora", "dora-secret").await;
}

#[tokio::test]
#[should_panic(expected = "ServerOptions::services needs InspIRCd")]
async fn services_on_ngircd_panic() {
    IrcServer::start(ServerKind::NgIRCd, with_services()).await;
}

#[tokio::test]
#[should_panic(expected = "needs services")]
async fn sasl_attempts_without_services_panics() {
    let server = IrcServer::start(ServerKind::InspIRCd, ServerOptions::default()).await;
    server.sasl_attempts();
}
