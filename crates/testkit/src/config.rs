//! Renders the servers' config files from the templates in `crates/testkit/irc/`.
//!
//! The templates are the kit's own copies of `../shared/irc/*.template` with a few more
//! `@NAME@` placeholders for the [`ServerOptions`] knobs; rendering fails loudly if a
//! placeholder is left over, so a template edit cannot silently produce a broken config.
//! An InspIRCd server in a [`crate::IrcNetwork`] gets its own name and SID, a server port
//! and a `<link>` to the other server, and an operator block to cut and restore the link
//! with (see [`Link`]).

use std::path::Path;

use crate::server::{ServerKind, ServerOptions};
use crate::tls::TlsFiles;

const INSPIRCD_TEMPLATE: &str = include_str!("../irc/inspircd.conf.template");
const NGIRCD_TEMPLATE: &str = include_str!("../irc/ngircd.conf.template");
const ATHEME_TEMPLATE: &str = include_str!("../irc/atheme.conf.template");

/// The password both ends of a server link send (InspIRCd-Atheme, InspIRCd-InspIRCd;
/// loopback only).
const LINK_PASSWORD: &str = "testkit-link";

/// The operator account of a linked InspIRCd, for `OPER <name> <password>` from 127.0.0.1:
/// it may `CONNECT`, `SQUIT`, `REHASH` and `KILL`, and is exempt from flood control (so that the
/// kit's probes are not slowed down by [`ServerOptions::stock_flood`]).
pub(crate) const OPER_NAME: &str = "testkit";
pub(crate) const OPER_PASSWORD: &str = "testkit-oper";

/// The template's `<server>` tag, which a linked server replaces to get its own name and
/// SID (InspIRCd uses the first `<server>` tag only, so one cannot be added after it).
const SERVER_TAG: &str = r#"<server name="irc.test""#;

/// One InspIRCd server's side of a link to another InspIRCd server on 127.0.0.1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Link {
    /// This server's name (instead of `irc.test`), e.g. `irc0.test`.
    pub(crate) name: &'static str,
    /// This server's SID: a digit and two upper-case letters or digits, e.g. `0AA`.
    pub(crate) sid: &'static str,
    /// The port this server accepts server links on (`<bind type="servers">`).
    pub(crate) port: u16,
    /// The other server's name.
    pub(crate) peer: &'static str,
    /// The other server's server-link port.
    pub(crate) peer_port: u16,
    /// Dial the other server every second while unlinked (`<autoconnect period="1">`;
    /// InspIRCd checks its autoconnects every 5 s).
    pub(crate) autoconnect: bool,
}

/// Nick length used when [`ServerOptions::nicklen`] is `None` (ngIRCd's compiled-in maximum).
const DEFAULT_NICKLEN: u32 = 31;

/// The rendered config file for `kind`. `link_port` is the port Atheme links to, when
/// [`ServerOptions::services`] is on; `link` the link to another InspIRCd server.
pub(crate) fn render(
    kind: ServerKind,
    options: &ServerOptions,
    port: u16,
    link_port: Option<u16>,
    link: Option<&Link>,
    dir: &Path,
    tls: Option<&TlsFiles>,
) -> String {
    let dir = dir.to_str().expect("scratch dir path is not UTF-8");
    let port = port.to_string();
    let nicklen = options.nicklen.unwrap_or(DEFAULT_NICKLEN).to_string();
    match kind {
        ServerKind::InspIRCd => {
            let (threshold, commandrate, hardsendq) = if options.stock_flood {
                ("10", "1000", "8M")
            } else if options.unthrottled {
                ("1000000", "1000000000", "256M")
            } else {
                ("1000", "100000", "8M")
            };
            let localmax = options.max_per_ip.unwrap_or(1000).to_string();
            let tls_module = tls.map(|t| {
                format!(
                    "<module name=\"ssl_gnutls\">\n\
                     <sslprofile name=\"testkit\" provider=\"gnutls\" certfile=\"{}\" \
                     keyfile=\"{}\" dhfile=\"{}\" hash=\"sha256\" requestclientcert=\"no\">",
                    t.cert_pem.display(),
                    t.key_pem.display(),
                    t.dh_pem.display()
                )
            });
            // services_account: Atheme refuses to link without it (account names, +r).
            let services = link_port.map(|link| {
                format!(
                    "<bind address=\"127.0.0.1\" port=\"{link}\" type=\"servers\">\n\
                     <module name=\"spanningtree\">\n\
                     <module name=\"services_account\">\n\
                     <module name=\"ircv3_accounttag\">\n\
                     <module name=\"sasl\">\n\
                     <link name=\"services.test\" ipaddr=\"127.0.0.1\" port=\"{link}\" \
                     allowmask=\"127.0.0.1/32\" sendpass=\"{LINK_PASSWORD}\" \
                     recvpass=\"{LINK_PASSWORD}\">\n\
                     <uline server=\"services.test\" silent=\"yes\">\n\
                     <sasl target=\"services.test\" requiressl=\"no\">"
                )
            });
            let config = fill(
                INSPIRCD_TEMPLATE,
                &[
                    ("PORT", &port),
                    ("DIR", dir),
                    (
                        "BIND_TLS",
                        if tls.is_some() {
                            " sslprofile=\"testkit\""
                        } else {
                            ""
                        },
                    ),
                    ("LOCALMAX", &localmax),
                    ("THRESHOLD", threshold),
                    ("COMMANDRATE", commandrate),
                    ("HARDSENDQ", hardsendq),
                    ("MAXNICK", &nicklen),
                    (
                        "DEFAULTMODES",
                        if options.history {
                            "notH 100:1d"
                        } else {
                            "not"
                        },
                    ),
                    ("TLS_MODULE", tls_module.as_deref().unwrap_or("")),
                    ("SERVICES", services.as_deref().unwrap_or("")),
                ],
            );
            match link {
                Some(link) => linked(config, link),
                None => config,
            }
        }
        ServerKind::NgIRCd => {
            let plain_ports = match tls {
                Some(_) => "# Ports: none in plain text, TLS only (see [SSL])".to_string(),
                None => format!("Ports = {port}"),
            };
            let ssl = tls.map(|t| {
                format!(
                    "\n[SSL]\n\tCertFile = {}\n\tKeyFile = {}\n\tDHFile = {}\n\tPorts = {port}\n",
                    t.cert_pem.display(),
                    t.key_pem.display(),
                    t.dh_pem.display()
                )
            });
            let max_ip = options.max_per_ip.unwrap_or(0).to_string();
            fill(
                NGIRCD_TEMPLATE,
                &[
                    ("DIR", dir),
                    ("PLAIN_PORTS", &plain_ports),
                    ("MAXCONNIP", &max_ip),
                    ("MAXNICK", &nicklen),
                    (
                        "PENALTY",
                        if options.stock_flood {
                            "# MaxPenaltyTime unset: stock command penalties"
                        } else {
                            "MaxPenaltyTime = 0"
                        },
                    ),
                    ("SSL", ssl.as_deref().unwrap_or("")),
                ],
            )
        }
    }
}

/// `config` (a rendered InspIRCd config) renamed to `link.name` with SID `link.sid`, and
/// with the server port, the `<link>` to the peer, the `<autoconnect>` if on, and the
/// operator appended.
fn linked(config: String, link: &Link) -> String {
    assert_eq!(
        config.matches(SERVER_TAG).count(),
        1,
        "the InspIRCd template must have exactly one {SERVER_TAG}"
    );
    let Link {
        name,
        sid,
        port,
        peer,
        peer_port,
        autoconnect,
    } = link;
    let config = config.replace(SERVER_TAG, &format!(r#"<server name="{name}" id="{sid}""#));
    let autoconnect = if *autoconnect {
        format!("<autoconnect period=\"1\" server=\"{peer}\">\n")
    } else {
        String::new()
    };
    format!(
        "{config}\n\
         # Linked to {peer} (IrcNetwork).\n\
         <bind address=\"127.0.0.1\" port=\"{port}\" type=\"servers\">\n\
         <module name=\"spanningtree\">\n\
         <link name=\"{peer}\" ipaddr=\"127.0.0.1\" port=\"{peer_port}\" \
         allowmask=\"127.0.0.1/32\" sendpass=\"{LINK_PASSWORD}\" recvpass=\"{LINK_PASSWORD}\">\n\
         {autoconnect}\
         <class name=\"testkit-link\" commands=\"CONNECT SQUIT REHASH KILL\" \
         privs=\"users/flood/no-throttle\">\n\
         <type name=\"LinkAdmin\" classes=\"testkit-link\">\n\
         <oper name=\"{OPER_NAME}\" password=\"{OPER_PASSWORD}\" host=\"*@127.0.0.1\" \
         type=\"LinkAdmin\">\n"
    )
}

/// The Atheme config that links to the InspIRCd server port `link_port`.
pub(crate) fn render_atheme(link_port: u16) -> String {
    fill(
        ATHEME_TEMPLATE,
        &[
            ("LINK_PORT", &link_port.to_string()),
            ("LINK_PASSWORD", LINK_PASSWORD),
        ],
    )
}

/// Replaces every `@NAME@` and panics if the template names one that `values` lacks, or
/// has one in a comment line (a multi-line value would turn the comment's tail into config).
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    for line in template.lines().filter(|l| l.trim_start().starts_with('#')) {
        let names = placeholders(line);
        assert!(
            names.is_empty(),
            "placeholder(s) {names:?} in template comment {line:?}"
        );
    }
    let mut out = template.to_string();
    for (name, value) in values {
        out = out.replace(&format!("@{name}@"), value);
    }
    for line in out.lines() {
        let leftover = placeholders(line);
        assert!(
            leftover.is_empty(),
            "unfilled placeholder(s) {leftover:?} in config line {line:?}"
        );
    }
    out
}

/// The `NAME`s of all `@NAME@` (upper case and `_`) in `line`.
fn placeholders(line: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(start) = rest.find('@') {
        let after = &rest[start + 1..];
        let len = after
            .find(|c: char| !(c.is_ascii_uppercase() || c == '_'))
            .unwrap_or(after.len());
        if len > 0 && after[len..].starts_with('@') {
            found.push(&after[..len]);
            rest = &after[len + 1..];
        } else {
            rest = after;
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> ServerOptions {
        ServerOptions::default()
    }

    /// The config on port 4242, in /tmp/x, without TLS.
    fn config_for(kind: ServerKind, options: &ServerOptions, link_port: Option<u16>) -> String {
        render(
            kind,
            options,
            4242,
            link_port,
            None,
            Path::new("/tmp/x"),
            None,
        )
    }

    #[test]
    fn finds_placeholders_but_not_emails() {
        assert_eq!(placeholders("a @PORT@ b @DIR@/x"), ["PORT", "DIR"]);
        assert!(placeholders("email=\"test@localhost\"").is_empty());
        assert_eq!(placeholders("x@y @Z_Z@"), ["Z_Z"]);
    }

    #[test]
    fn inspircd_defaults_are_relaxed() {
        let conf = config_for(ServerKind::InspIRCd, &opts(), None);
        assert!(conf.contains(r#"<bind address="127.0.0.1" port="4242" type="clients">"#));
        assert!(conf.contains(r#"threshold="1000""#));
        assert!(conf.contains(r#"localmax="1000""#));
        assert!(conf.contains(r#"defaultmodes="notH 100:1d""#));
        assert!(conf.contains(r#"target="/tmp/x/inspircd.log""#));
        assert!(!conf.contains("<module name=\"ssl_gnutls\">"));
    }

    #[test]
    fn inspircd_options_apply() {
        let options = ServerOptions {
            stock_flood: true,
            max_per_ip: Some(2),
            history: false,
            nicklen: Some(20),
            ..opts()
        };
        let conf = config_for(ServerKind::InspIRCd, &options, None);
        assert!(conf.contains(r#"threshold="10""#));
        assert!(conf.contains(r#"commandrate="1000""#));
        assert!(conf.contains(r#"localmax="2""#));
        assert!(conf.contains(r#"globalmax="2""#));
        assert!(conf.contains(r#"defaultmodes="not""#));
        assert!(conf.contains(r#"maxnick="20""#));
    }

    #[test]
    fn inspircd_unthrottled_lifts_flood_control_and_the_sendq_limit() {
        assert!(config_for(ServerKind::InspIRCd, &opts(), None).contains(r#"hardsendq="8M""#));
        let unthrottled = ServerOptions {
            unthrottled: true,
            ..opts()
        };
        let conf = config_for(ServerKind::InspIRCd, &unthrottled, None);
        assert!(conf.contains(r#"threshold="1000000""#));
        assert!(conf.contains(r#"commandrate="1000000000""#));
        assert!(conf.contains(r#"hardsendq="256M""#));
        let stock_wins = ServerOptions {
            stock_flood: true,
            ..unthrottled
        };
        let conf = config_for(ServerKind::InspIRCd, &stock_wins, None);
        assert!(conf.contains(r#"threshold="10""#));
        assert!(conf.contains(r#"hardsendq="8M""#));
    }

    #[test]
    fn services_link_only_when_asked() {
        let plain = config_for(ServerKind::InspIRCd, &opts(), None);
        assert!(!plain.contains("spanningtree"));
        let linked = config_for(ServerKind::InspIRCd, &opts(), Some(4343));
        assert!(linked.contains(r#"<bind address="127.0.0.1" port="4343" type="servers">"#));
        assert!(linked.contains(r#"<link name="services.test" ipaddr="127.0.0.1" port="4343""#));
        assert!(linked.contains(r#"<sasl target="services.test""#));
        let atheme = render_atheme(4343);
        assert!(atheme.contains("\tport = 4343;\n"));
        assert!(atheme.contains(&format!("\tpassword = \"{LINK_PASSWORD}\";\n")));
        assert!(linked.contains(&format!(r#"sendpass="{LINK_PASSWORD}""#)));
    }

    #[test]
    fn a_linked_server_has_its_own_name_a_server_port_and_an_operator() {
        let mut link = Link {
            name: "irc1.test",
            sid: "1AA",
            port: 4343,
            peer: "irc0.test",
            peer_port: 4444,
            autoconnect: true,
        };
        let render_linked = |link: &Link| {
            render(
                ServerKind::InspIRCd,
                &opts(),
                4242,
                None,
                Some(link),
                Path::new("/tmp/x"),
                None,
            )
        };
        let conf = render_linked(&link);
        assert!(conf.contains(r#"<server name="irc1.test" id="1AA" description="#));
        assert!(!conf.contains(SERVER_TAG));
        assert!(conf.contains(r#"<bind address="127.0.0.1" port="4242" type="clients">"#));
        assert!(conf.contains(r#"<bind address="127.0.0.1" port="4343" type="servers">"#));
        assert_eq!(conf.matches(r#"<module name="spanningtree">"#).count(), 1);
        assert!(conf.contains(&format!(
            r#"<link name="irc0.test" ipaddr="127.0.0.1" port="4444" allowmask="127.0.0.1/32" sendpass="{LINK_PASSWORD}" recvpass="{LINK_PASSWORD}">"#
        )));
        assert!(conf.contains(r#"<autoconnect period="1" server="irc0.test">"#));
        assert!(conf.contains(&format!(
            r#"<oper name="{OPER_NAME}" password="{OPER_PASSWORD}" host="*@127.0.0.1" type="LinkAdmin">"#
        )));

        link.autoconnect = false;
        let conf = render_linked(&link);
        assert!(!conf.contains("<autoconnect"));
        assert!(conf.contains(r#"<link name="irc0.test""#));
    }

    #[test]
    fn ngircd_defaults_and_options() {
        let conf = config_for(ServerKind::NgIRCd, &opts(), None);
        assert!(conf.contains("\tPorts = 4242\n"));
        assert!(conf.contains("\tMaxPenaltyTime = 0\n"));
        assert!(conf.contains("MaxConnectionsIP = 0"));
        assert!(!conf.contains("\n[SSL]"));

        let options = ServerOptions {
            stock_flood: true,
            max_per_ip: Some(3),
            ..opts()
        };
        let conf = config_for(ServerKind::NgIRCd, &options, None);
        assert!(!conf.contains("\tMaxPenaltyTime = 0\n"));
        assert!(conf.contains("MaxConnectionsIP = 3"));
    }

    #[test]
    fn tls_sections_appear_once() {
        let dir = tempfile::tempdir().unwrap();
        let tls = TlsFiles::generate(dir.path());
        let options = ServerOptions {
            tls: true,
            ..opts()
        };
        let conf = render(
            ServerKind::InspIRCd,
            &options,
            4242,
            None,
            None,
            dir.path(),
            Some(&tls),
        );
        assert_eq!(conf.matches("<module name=\"ssl_gnutls\">").count(), 1);
        assert_eq!(conf.matches("<sslprofile name=\"testkit\"").count(), 1);
        assert!(conf.contains(r#"port="4242" type="clients" sslprofile="testkit">"#));

        let conf = render(
            ServerKind::NgIRCd,
            &options,
            4242,
            None,
            None,
            dir.path(),
            Some(&tls),
        );
        assert_eq!(conf.matches("\n[SSL]\n").count(), 1);
        assert_eq!(
            conf.matches("\tPorts = 4242\n").count(),
            1,
            "TLS port only:\n{conf}"
        );
        assert!(conf.contains("\tDHFile = "));
    }
}
