//! A scripted person in an IRC client, talking raw IRC to an [`IrcServer`].
//!
//! Written from RFC 1459/2812 only, on a plain tokio TCP stream (TLS via tokio-rustls when
//! the server has TLS). A background task reads every line into an inbox and answers the
//! server's `PING`s; tests send with [`Human::privmsg`]/[`Human::send_raw`] and wait for
//! what they expect with [`Human::expect`]. The client asks for no IRCv3 caps, like a
//! minimal client would.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::io::{ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_rustls::rustls::pki_types::ServerName;

use crate::line::Line;
use crate::server::IrcServer;

/// How long [`Human::connect`] waits for the TCP (and TLS) connection and then for `001`.
pub const REGISTER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long [`Human::join`] waits for the JOIN echo and the end of NAMES.
pub const JOIN_TIMEOUT: Duration = Duration::from_secs(10);
/// How many of the most recent lines a failed [`Human::expect`] lists.
const RECENT_LINES: usize = 40;

/// A person connected to an IRC server. Dropping it closes the connection without a QUIT.
pub struct Human {
    nick: String,
    writer: Arc<tokio::sync::Mutex<WriteHalf<Stream>>>,
    shared: Arc<Shared>,
    reader: JoinHandle<()>,
}

/// Why [`Human::try_connect`] could not register.
#[derive(Debug, Clone)]
pub struct ConnectError {
    /// What went wrong, in words.
    pub reason: String,
    /// Every line the server sent before it went wrong (an `ERROR` line, a `433`, ...).
    pub received: Vec<Line>,
}

impl ConnectError {
    /// The server's `ERROR` line, if it sent one (e.g. a per-IP connection limit).
    pub fn error_line(&self) -> Option<&Line> {
        self.received.iter().find(|l| l.command == "ERROR")
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}; received:", self.reason)?;
        for line in &self.received {
            write!(f, "\n  {line}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConnectError {}

impl Human {
    /// Connects to `server` as `nick` (`USER nick 0 * :nick`), answers PINGs, and waits up
    /// to [`REGISTER_TIMEOUT`] for the welcome (`001`). Uses TLS, trusting the server's
    /// throwaway CA, if the server was started with `tls: true`.
    ///
    /// # Panics
    /// If registration fails; see [`Human::try_connect`] to inspect the failure instead.
    pub async fn connect(server: &IrcServer, nick: &str) -> Human {
        Self::try_connect(server, nick).await.unwrap_or_else(|e| {
            panic!(
                "{nick} could not register on {} 127.0.0.1:{}: {e}",
                server.kind(),
                server.port()
            )
        })
    }

    /// Like [`Human::connect`], but returns what the server said when registration fails:
    /// an `ERROR` line and disconnect (per-IP limit), `432`/`433` (bad or taken nick), the
    /// connection closing, or no `001` in time.
    pub async fn try_connect(server: &IrcServer, nick: &str) -> Result<Human, ConnectError> {
        let fail = |reason: String| ConnectError {
            reason,
            received: Vec::new(),
        };
        let deadline = Instant::now() + REGISTER_TIMEOUT;
        let addr = (server.host(), server.port());
        let tcp = tokio::time::timeout_at(deadline, TcpStream::connect(addr))
            .await
            .map_err(|_| fail("TCP connect timed out".into()))?
            .map_err(|e| fail(format!("TCP connect failed: {e}")))?;
        tcp.set_nodelay(true).ok();
        let stream: Stream = match server.ca_der() {
            None => Box::new(tcp),
            Some(ca) => {
                let name = ServerName::try_from(server.host()).expect("127.0.0.1 is a name");
                let tls = crate::tls::connector(ca).connect(name, tcp);
                Box::new(
                    tokio::time::timeout_at(deadline, tls)
                        .await
                        .map_err(|_| fail("TLS handshake timed out".into()))?
                        .map_err(|e| fail(format!("TLS handshake failed: {e}")))?,
                )
            }
        };
        let human = Human::spawn(nick, stream);
        // A server that refuses us (per-IP limit) may close before these arrive; what it
        // sent is still read, so ignore write errors here.
        let _ = human.write_line(&format!("NICK {nick}")).await;
        let _ = human.write_line(&format!("USER {nick} 0 * :{nick}")).await;

        let outcome = human
            .wait_for(deadline, |l| {
                matches!(
                    l.command.as_str(),
                    "001" | "ERROR" | "431" | "432" | "433" | "436"
                )
            })
            .await;
        match outcome {
            Ok((_, line)) if line.command == "001" => Ok(human),
            Ok((_, line)) => Err(ConnectError {
                reason: format!("registration refused: {line}"),
                received: human.received(),
            }),
            Err(missing) => Err(ConnectError {
                reason: format!("no welcome (001): {missing}"),
                received: human.received(),
            }),
        }
    }

    fn spawn(nick: &str, stream: Stream) -> Human {
        let (read, write) = tokio::io::split(stream);
        let writer = Arc::new(tokio::sync::Mutex::new(write));
        let shared = Arc::new(Shared::default());
        let reader = tokio::spawn(read_loop(
            BufReader::new(read),
            Arc::clone(&writer),
            Arc::clone(&shared),
        ));
        Human {
            nick: nick.to_string(),
            writer,
            shared,
            reader,
        }
    }

    /// The nick this human registered with.
    pub fn nick(&self) -> &str {
        &self.nick
    }

    /// Joins `channel` and waits for the server's JOIN echo and the end of NAMES (`366`).
    /// Returns the nicks NAMES listed (without `@`/`+` prefixes).
    pub async fn join(&self, channel: &str) -> Vec<String> {
        self.send_raw(&format!("JOIN {channel}")).await;
        let deadline = Instant::now() + JOIN_TIMEOUT;
        let nick = self.nick.clone();
        let fail = |missing| {
            panic!(
                "{nick} could not join {channel}: {missing}; {}",
                self.recent()
            )
        };
        let (joined, _) = self
            .wait_for(deadline, |l| {
                l.is_from(&nick, "JOIN") && eq_irc(l.param(0), channel)
            })
            .await
            .unwrap_or_else(fail);
        let (end, _) = self
            .wait_for(deadline, |l| {
                l.command == "366" && eq_irc(l.param(1), channel)
            })
            .await
            .unwrap_or_else(fail);
        let inbox = self.shared.inbox.lock().unwrap();
        inbox.lines[joined.min(end)..end]
            .iter()
            .filter(|l| l.command == "353" && eq_irc(l.param(2), channel))
            .flat_map(|l| l.trailing().unwrap_or("").split_whitespace())
            .map(|n| n.trim_start_matches(['~', '&', '@', '%', '+']).to_string())
            .collect()
    }

    /// Sends `PRIVMSG target :text`.
    pub async fn privmsg(&self, target: &str, text: &str) {
        self.send_raw(&format!("PRIVMSG {target} :{text}")).await;
    }

    /// Sends one raw line (CR LF is appended), as `/quote` would.
    ///
    /// # Panics
    /// If `line` contains CR or LF (a real client would never send that as one line), or if
    /// the connection is broken.
    pub async fn send_raw(&self, line: &str) {
        assert!(
            !line.contains(['\r', '\n']),
            "send_raw takes one line without CR/LF, got {line:?}"
        );
        if let Err(e) = self.write_line(line).await {
            panic!("{} could not send {line:?}: {e}", self.nick);
        }
    }

    /// Waits up to `timeout` for a received line matching `pred` and returns it. Each line
    /// is returned by at most one `expect`; lines received before the call count too, so
    /// the order of two `expect`s does not have to match the order of arrival.
    ///
    /// # Panics
    /// If no such line arrives in time, or the connection closes first; the message lists
    /// the most recent lines received.
    pub async fn expect(&self, pred: impl FnMut(&Line) -> bool, timeout: Duration) -> Line {
        match self.wait_for(Instant::now() + timeout, pred).await {
            Ok((_, line)) => line,
            Err(missing) => panic!(
                "{}: expected line not received: {missing}; {}",
                self.nick,
                self.recent()
            ),
        }
    }

    /// Like [`Human::expect`], but `None` instead of a panic when no such line arrives in
    /// time or the connection closes first.
    pub(crate) async fn try_expect(
        &self,
        pred: impl FnMut(&Line) -> bool,
        timeout: Duration,
    ) -> Option<Line> {
        let found = self.wait_for(Instant::now() + timeout, pred).await;
        found.ok().map(|(_, line)| line)
    }

    /// Every line received so far, in order (including PINGs and lines already returned by
    /// [`Human::expect`]). `Line::raw` has the exact text, e.g. to assert that
    /// `QUIT :bye` never arrived as a command from some nick.
    pub fn received(&self) -> Vec<Line> {
        self.shared.inbox.lock().unwrap().lines.clone()
    }

    /// Waits up to `timeout` for the server to close the connection (for example after
    /// [`IrcServer::kill`]).
    ///
    /// # Panics
    /// If it is still open after `timeout`.
    pub async fn wait_closed(&self, timeout: Duration) {
        let never = |_: &Line| false;
        if let Err(Missing::TimedOut(waited)) = self.wait_for(Instant::now() + timeout, never).await
        {
            panic!(
                "{}: connection still open after {waited:?}; {}",
                self.nick,
                self.recent()
            );
        }
    }

    /// Sends `QUIT :Leaving` and waits briefly (up to 2 s) for the server to close the
    /// connection. Never fails: the server may already be gone.
    pub async fn quit(self) {
        if self.write_line("QUIT :Leaving").await.is_ok() {
            let deadline = Instant::now() + Duration::from_secs(2);
            let _ = self.wait_for(deadline, |_| false).await;
        }
    }

    async fn write_line(&self, line: &str) -> std::io::Result<()> {
        write_line(&self.writer, line).await
    }

    /// The first unconsumed line matching `pred` and its index in the inbox, marking it
    /// consumed; or why there is none by `deadline`.
    async fn wait_for(
        &self,
        deadline: Instant,
        mut pred: impl FnMut(&Line) -> bool,
    ) -> Result<(usize, Line), Missing> {
        let started = Instant::now();
        loop {
            let notified = self.shared.changed.notified();
            tokio::pin!(notified);
            // Register before looking, so a line pushed in between still wakes us.
            notified.as_mut().enable();
            {
                let mut inbox = self.shared.inbox.lock().unwrap();
                let Inbox {
                    lines,
                    consumed,
                    closed,
                } = &mut *inbox;
                let found = lines
                    .iter()
                    .zip(consumed.iter_mut())
                    .enumerate()
                    .find(|(_, (line, used))| !**used && pred(line));
                if let Some((index, (line, used))) = found {
                    *used = true;
                    return Ok((index, line.clone()));
                }
                if let Some(why) = closed {
                    return Err(Missing::Closed(why.clone()));
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(Missing::TimedOut(started.elapsed()));
            }
        }
    }

    fn recent(&self) -> String {
        recent(&self.shared.inbox.lock().unwrap().lines)
    }
}

impl fmt::Debug for Human {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Human")
            .field("nick", &self.nick)
            .finish_non_exhaustive()
    }
}

impl Drop for Human {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Why [`Human::wait_for`] found no matching line.
#[derive(Debug)]
enum Missing {
    /// The connection closed first (the reader's reason).
    Closed(String),
    /// Nothing matched before the deadline (how long it waited).
    TimedOut(Duration),
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missing::Closed(why) => f.write_str(why),
            Missing::TimedOut(waited) => write!(f, "none within {waited:?}"),
        }
    }
}

/// What the reader task shares with the [`Human`].
#[derive(Default)]
struct Shared {
    inbox: Mutex<Inbox>,
    /// Signalled after every received line and when the connection closes.
    changed: Notify,
}

#[derive(Default)]
struct Inbox {
    lines: Vec<Line>,
    /// Parallel to `lines`: already returned by an `expect`.
    consumed: Vec<bool>,
    /// Set when the connection is gone, with the reason.
    closed: Option<String>,
}

/// Any byte stream the human can talk over (plain TCP or TLS).
trait Transport: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Transport for T {}
type Stream = Box<dyn Transport>;

async fn write_line(
    writer: &tokio::sync::Mutex<WriteHalf<Stream>>,
    line: &str,
) -> std::io::Result<()> {
    let mut writer = writer.lock().await;
    writer.write_all(format!("{line}\r\n").as_bytes()).await?;
    writer.flush().await
}

/// Reads lines into the inbox until the connection ends; answers PING with PONG.
async fn read_loop(
    mut reader: BufReader<ReadHalf<Stream>>,
    writer: Arc<tokio::sync::Mutex<WriteHalf<Stream>>>,
    shared: Arc<Shared>,
) {
    let mut buf = Vec::new();
    let why = loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) => break "connection closed by the server".to_string(),
            Ok(_) => {
                let line = Line::parse(&String::from_utf8_lossy(&buf));
                if line.command == "PING" {
                    let token = line.params.first().map(String::as_str).unwrap_or("");
                    let _ = write_line(&writer, &format!("PONG :{token}")).await;
                }
                let mut inbox = shared.inbox.lock().unwrap();
                inbox.lines.push(line);
                inbox.consumed.push(false);
                drop(inbox);
                shared.changed.notify_waiters();
            }
            Err(e) => break format!("connection closed: {e}"),
        }
    };
    shared.inbox.lock().unwrap().closed = Some(why);
    shared.changed.notify_waiters();
}

fn recent(lines: &[Line]) -> String {
    let skip = lines.len().saturating_sub(RECENT_LINES);
    let mut out = format!(
        "last {} of {} lines received:",
        lines.len() - skip,
        lines.len()
    );
    for line in &lines[skip..] {
        out.push_str("\n  ");
        out.push_str(&line.raw);
    }
    out
}

/// Channel/nick equality as IRC servers apply it for ASCII (CASEMAPPING=ascii/rfc1459
/// agree on letters, which is all the tests use).
fn eq_irc(a: Option<&str>, b: &str) -> bool {
    a.is_some_and(|a| a.eq_ignore_ascii_case(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    const WAIT: Duration = Duration::from_secs(5);

    /// A human wired to an in-memory "server" end.
    fn wired() -> (Human, tokio::io::DuplexStream) {
        let (client, server) = tokio::io::duplex(4096);
        (Human::spawn("tester", Box::new(client)), server)
    }

    #[tokio::test]
    async fn answers_ping_in_the_background() {
        let (_human, mut server) = wired();
        server.write_all(b"PING :irc.test-42\r\n").await.unwrap();
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(WAIT, server.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buf[..n], b"PONG :irc.test-42\r\n");
    }

    #[tokio::test]
    async fn expect_returns_each_line_once_in_any_order() {
        let (human, mut server) = wired();
        server
            .write_all(b":a!a@h PRIVMSG #c :one\r\n:b!b@h PRIVMSG #c :two\r\n")
            .await
            .unwrap();
        let two = human.expect(|l| l.is_from("b", "PRIVMSG"), WAIT).await;
        assert_eq!(two.trailing(), Some("two"));
        let any = human.expect(|l| l.command == "PRIVMSG", WAIT).await;
        assert_eq!(any.trailing(), Some("one"));
        assert_eq!(human.received().len(), 2);

        human.send_raw("PRIVMSG #c :hi").await;
        let mut buf = [0u8; 64];
        let n = server.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"PRIVMSG #c :hi\r\n");
    }

    #[tokio::test]
    async fn a_closed_connection_ends_waiting_at_once() {
        let (human, mut server) = wired();
        server.write_all(b"ERROR :bye now\r\n").await.unwrap();
        drop(server);
        human.wait_closed(WAIT).await;
        let started = Instant::now();
        let never = human.wait_for(started + WAIT, |_| false).await;
        assert!(matches!(never, Err(Missing::Closed(_))), "{never:?}");
        assert!(started.elapsed() < WAIT);
        assert_eq!(human.received()[0].trailing(), Some("bye now"));
    }

    #[tokio::test]
    #[should_panic(expected = "expected line not received: none within")]
    async fn expect_times_out_listing_recent_lines() {
        let (human, mut server) = wired();
        server.write_all(b"NOTICE * :hello\r\n").await.unwrap();
        human
            .expect(|l| l.command == "PRIVMSG", Duration::from_millis(50))
            .await;
    }

    #[tokio::test]
    #[should_panic(expected = "without CR/LF")]
    async fn send_raw_refuses_line_breaks() {
        let (human, _server) = wired();
        human.send_raw("PRIVMSG #c :a\r\nQUIT :bye").await;
    }
}
