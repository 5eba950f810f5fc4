//! Section `web-view`: the page served at `/`, in headless Chromium (the
//! test kit's [`Browser`]), against `serve --http` on a copy of the large
//! history of section 3 plus a small channel, [`SMALL`].
//!
//! - First paint: the page loaded with `#big` in its address, from the
//!   navigation's start to the page's `data-painted` mark (set in the task
//!   after the frame that shows the channel's newest page). The first load
//!   has cold caches (browser and database); the median is of the loads
//!   after it, each a new document.
//! - Opening another channel: a click in the channel list to `data-painted`,
//!   alternately the small channel and the large one.
//! - An agent's message on the page: `send_message` over Streamable HTTP,
//!   from the wall clock before the request to the frame painted after the
//!   message's element was added (a `MutationObserver` in the page).
//! - Pages streaming: [`STREAMS`] clients of `/api/stream`, the connection a
//!   page holds open, each reading every event; the daemon's memory growth
//!   and every message on every stream, in order.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context, bail, ensure};
use serde_json::{Value, json};
use switchboard_testkit::Browser;
use tokio::task::JoinHandle;

use crate::{
    Plan, big_history,
    report::{Report, Row, Target, Unit, median, percentile, thousands},
    rpc::Session,
    server::{Data, Server, Switchboard},
    sys::Memory,
    web::{EventStream, HttpSession},
};

/// The small channel, filled with [`SMALL_MESSAGES`] before the page loads.
const SMALL: &str = "#ops";
const SMALL_MESSAGES: usize = 300;
/// The viewer's name, kept in the browser as a person's would be.
const VIEWER: &str = "watcher";
/// Page loads after the first.
const LOADS: usize = 10;
/// Channel switches, half to each channel.
const SWITCHES: usize = 20;
const SENDS: usize = 100;
const STREAMS: usize = 100;
const STREAMED: usize = 200;
/// Between two timed sends: the page is idle when the next one starts.
const SPACING: Duration = Duration::from_millis(20);
/// How long one page load, switch or arrival may take before the section fails.
const PATIENCE: Duration = Duration::from_secs(10);
const PAINT_MS: f64 = 300.0;
const SWITCH_MS: f64 = 100.0;
const ARRIVAL_P50_MS: f64 = 50.0;
const STREAMS_MIB: f64 = 20.0;
/// What the page shows, for an error: its text, marks and finished requests.
const SHOWN: &str = "return [document.body.innerText, { ...document.body.dataset }, \
     performance.getEntriesByType('resource').map(e => `${e.name} ${e.duration} ms`)]";

pub async fn section(
    switchboard: &Switchboard,
    plan: &Plan,
    report: &mut Report,
) -> anyhow::Result<()> {
    let data = big_history::copied(plan, report).await?;
    let (server, addr) = switchboard.start_http(Data::Dir(data.path())).await?;
    if let Err(e) = measure(&server, addr, plan, report).await {
        bail!("{e:#}\nthe server's log:\n{}", server.log());
    }
    server.stop().await
}

async fn measure(
    server: &Server,
    addr: SocketAddr,
    plan: &Plan,
    report: &mut Report,
) -> anyhow::Result<()> {
    let mut agent = HttpSession::open(addr).await?;
    for i in 0..SMALL_MESSAGES {
        say(&mut agent, &big_history::message_text(i)).await?;
    }
    let count = thousands(plan.messages as f64);
    let browser = Browser::start().await;
    let page = Page { browser, addr };
    page.name_the_viewer().await?;

    eprintln!(
        "- first paint of {} ({count} messages), {LOADS} loads after a cold one",
        big_history::CHANNEL
    );
    let (cold, warm) = page.first_paints().await?;
    report.rows.push(
        Row::new(
            format!(
                "web view: first paint of a channel of {count} messages, headless Chromium (median)"
            ),
            median(&warm),
            Unit::Millis,
            Target::AtMost(PAINT_MS),
        )
        .detail(format!(
            "max {}; the first load, with cold caches: {}",
            Unit::Millis.show(percentile(&warm, 100.0)),
            Unit::Millis.show(cold)
        )),
    );

    eprintln!("- opening another channel ({SWITCHES} clicks)");
    let (to_small, to_big) = page.switches().await?;
    report.rows.push(
        Row::new(
            format!("web view: opening another channel, the {count} message one (median)"),
            median(&to_big),
            Unit::Millis,
            Target::AtMost(SWITCH_MS),
        )
        .detail(format!(
            "max {}; to {SMALL} ({SMALL_MESSAGES} messages): median {}, max {}",
            Unit::Millis.show(percentile(&to_big, 100.0)),
            Unit::Millis.show(median(&to_small)),
            Unit::Millis.show(percentile(&to_small, 100.0)),
        )),
    );

    eprintln!("- {SENDS} messages sent over MCP, timed to the open page");
    let (painted, inserted) = page.arrivals(&mut agent).await?;
    report.rows.push(
        Row::new(
            "web view: an agent's send_message over HTTP to the message painted on an open page (p50)",
            percentile(&painted, 50.0),
            Unit::Millis,
            Target::AtMost(ARRIVAL_P50_MS),
        )
        .detail(format!(
            "p99 {}; in the page's DOM: p50 {}, p99 {}",
            Unit::Millis.show(percentile(&painted, 99.0)),
            Unit::Millis.show(percentile(&inserted, 50.0)),
            Unit::Millis.show(percentile(&inserted, 99.0)),
        )),
    );
    page.browser.close().await;

    eprintln!("- {STREAMS} pages' streams, {STREAMED} messages");
    let pid = server.pid()?;
    let before = Memory::of(pid)?;
    let (missed, after) = streams(addr, pid, &mut agent).await?;
    let growth = after.rss_kib.saturating_sub(before.rss_kib) as f64 / 1024.0;
    report.rows.push(
        Row::new(
            format!(
                "web view: daemon RSS growth with {STREAMS} pages streaming {STREAMED} messages"
            ),
            growth,
            Unit::Mebibytes,
            Target::AtMost(STREAMS_MIB),
        )
        .detail(format!(
            "RSS {} before the streams, {} after",
            Unit::Mebibytes.show(before.rss_kib as f64 / 1024.0),
            Unit::Mebibytes.show(after.rss_kib as f64 / 1024.0)
        )),
    );
    report.rows.push(Row::new(
        format!("web view: messages missed across {STREAMS} streams × {STREAMED}"),
        missed as f64,
        Unit::Count,
        Target::AtMost(0.0),
    ));
    report.note(
        "web view: the streaming pages are hyper clients of /api/stream, the one connection \
         an open page holds; a browser opens at most 6 connections to one host over HTTP/1.1, \
         so real tabs of one browser past the sixth wait for a free connection",
    );
    Ok(())
}

/// `send_message` to [`SMALL`] as the agent `bench`.
async fn say(agent: &mut HttpSession, text: &str) -> anyhow::Result<()> {
    agent
        .call_tool(
            "send_message",
            json!({"channel": SMALL, "text": text, "sender": "bench"}),
        )
        .await?;
    Ok(())
}

/// Milliseconds since the Unix epoch, as the page's
/// `performance.timeOrigin + performance.now()` counts them.
fn wall_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

struct Page {
    browser: Browser,
    addr: SocketAddr,
}

impl Page {
    async fn run(&self, script: &str, args: Vec<Value>) -> anyhow::Result<Value> {
        self.browser
            .client
            .execute(script, args)
            .await
            .with_context(|| format!("the page's script failed: {script:.200}"))
    }

    /// Polls `script` until it returns something other than `null`.
    async fn until(&self, what: &str, script: &str, args: Vec<Value>) -> anyhow::Result<Value> {
        let started = Instant::now();
        loop {
            let value = self.run(script, args.clone()).await?;
            if !value.is_null() {
                return Ok(value);
            }
            if started.elapsed() > PATIENCE {
                let shown = self.run(SHOWN, Vec::new()).await?;
                bail!("waited {PATIENCE:?} for {what}; the page shows:\n{shown:.2000}");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// [`Page::until`] a number.
    async fn number(&self, what: &str, script: &str, args: Vec<Value>) -> anyhow::Result<f64> {
        let value = self.until(what, script, args).await?;
        value
            .as_f64()
            .with_context(|| format!("{what}: {value} is not a number"))
    }

    async fn goto(&self, url: &str) -> anyhow::Result<()> {
        self.browser
            .client
            .goto(url)
            .await
            .with_context(|| format!("cannot load {url}"))
    }

    /// Keeps [`VIEWER`] as the browser's name, so no page asks for it.
    async fn name_the_viewer(&self) -> anyhow::Result<()> {
        self.goto(&format!("http://{}/api/session", self.addr))
            .await?;
        self.run(
            "localStorage.setItem('switchboard.name', arguments[0])",
            vec![json!(VIEWER)],
        )
        .await?;
        Ok(())
    }

    /// A new document showing `channel`: when it was painted, in ms from
    /// the navigation's start.
    async fn load(&self, channel: &str) -> anyhow::Result<f64> {
        self.goto("about:blank").await?;
        let url = format!("http://{}/#{}", self.addr, channel.replace('#', "%23"));
        self.goto(&url).await?;
        self.number(
            &format!("{channel} painted"),
            "const b = document.body.dataset; \
             return b.channel === arguments[0] && b.painted ? Number(b.painted) : null",
            vec![json!(channel)],
        )
        .await
    }

    /// The cold first load and [`LOADS`] loads after it.
    async fn first_paints(&self) -> anyhow::Result<(f64, Vec<f64>)> {
        let cold = self.load(big_history::CHANNEL).await?;
        let mut warm = Vec::with_capacity(LOADS);
        for _ in 0..LOADS {
            warm.push(self.load(big_history::CHANNEL).await?);
        }
        Ok((cold, warm))
    }

    /// Clicks `channel` in the list: ms from the click to its paint.
    async fn switch(&self, channel: &str) -> anyhow::Result<f64> {
        let clicked = self
            .number(
                &format!("{channel} in the channel list"),
                "const b = document.querySelector( \
                   `#channels button[data-channel=\"${CSS.escape(arguments[0])}\"]`); \
                 if (!b) return null; \
                 const t = performance.now(); b.click(); return t",
                vec![json!(channel)],
            )
            .await?;
        let painted = self
            .number(
                &format!("{channel} painted after the click"),
                "const b = document.body.dataset; \
                 return b.channel === arguments[0] && Number(b.painted) > arguments[1] \
                   ? Number(b.painted) : null",
                vec![json!(channel), json!(clicked)],
            )
            .await?;
        Ok(painted - clicked)
    }

    /// Alternating switches: (to the small channel, to the large one).
    async fn switches(&self) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
        let (mut to_small, mut to_big) = (Vec::new(), Vec::new());
        for _ in 0..SWITCHES / 2 {
            to_small.push(self.switch(SMALL).await?);
            to_big.push(self.switch(big_history::CHANNEL).await?);
        }
        Ok((to_small, to_big))
    }

    /// [`SENDS`] messages to the small channel, open on the page: ms from
    /// before each send to (its paint, its element in the DOM).
    async fn arrivals(&self, agent: &mut HttpSession) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
        self.switch(SMALL).await?;
        self.run(
            "window.arrived = {}; \
             new MutationObserver((records) => { \
               const inserted = performance.timeOrigin + performance.now(); \
               for (const r of records) for (const n of r.addedNodes) { \
                 const m = /^arrival-(\\d+)$/.exec(n.querySelector?.('.text')?.textContent ?? ''); \
                 if (!m) continue; \
                 const entry = { inserted }; window.arrived[m[1]] = entry; \
                 requestAnimationFrame(() => setTimeout(() => { \
                   entry.painted = performance.timeOrigin + performance.now(); })); \
               } \
             }).observe(document.getElementById('messages'), { childList: true })",
            Vec::new(),
        )
        .await?;
        let (mut painted, mut inserted) = (Vec::with_capacity(SENDS), Vec::with_capacity(SENDS));
        for i in 0..SENDS {
            tokio::time::sleep(SPACING).await;
            let sent = wall_ms();
            say(agent, &format!("arrival-{i}")).await?;
            let times = self
                .until(
                    &format!("arrival-{i} painted"),
                    "const e = window.arrived[arguments[0]]; \
                     return e && e.painted ? [e.inserted, e.painted] : null",
                    vec![json!(i.to_string())],
                )
                .await?;
            let at = |n: usize| {
                times[n]
                    .as_f64()
                    .with_context(|| format!("arrival-{i}: the page's times are {times}"))
            };
            inserted.push(at(0)? - sent);
            painted.push(at(1)? - sent);
        }
        Ok((painted, inserted))
    }
}

/// The texts one stream has given, as its reader task collects them.
type Texts = Arc<Mutex<Vec<String>>>;

/// [`STREAMS`] streams open while [`STREAMED`] messages are sent: the
/// messages missed across them, and the daemon's memory with them open.
async fn streams(
    addr: SocketAddr,
    pid: u32,
    agent: &mut HttpSession,
) -> anyhow::Result<(usize, Memory)> {
    let mut readers: Vec<(Texts, JoinHandle<anyhow::Result<()>>)> = Vec::with_capacity(STREAMS);
    for _ in 0..STREAMS {
        let mut events = EventStream::open(addr, "/api/stream").await?;
        let texts = Arc::new(Mutex::new(Vec::with_capacity(STREAMED)));
        let keep = texts.clone();
        let task = tokio::spawn(async move {
            loop {
                let event = events.next().await?;
                let message: Value = serde_json::from_str(&event.data)
                    .with_context(|| format!("an event that is not a message: {}", event.data))?;
                if let Some(text) = message["text"]
                    .as_str()
                    .filter(|t| t.starts_with("stream-"))
                {
                    keep.lock().expect("texts").push(text.to_owned());
                }
            }
        });
        readers.push((texts, task));
    }
    let sent: Vec<String> = (0..STREAMED).map(|i| format!("stream-{i}")).collect();
    for text in &sent {
        say(agent, text).await?;
    }
    let received = |texts: &Mutex<Vec<String>>| texts.lock().expect("texts").len();
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline && readers.iter().any(|(t, _)| received(t) < STREAMED) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let memory = Memory::of(pid)?;
    let mut missed = 0;
    for (texts, task) in readers {
        if task.is_finished() {
            task.await??;
            bail!("a stream ended while messages were sent");
        }
        task.abort();
        let texts = texts.lock().expect("texts");
        ensure!(
            texts.iter().zip(&sent).all(|(got, want)| got == want) && texts.len() <= STREAMED,
            "a stream gave the messages out of order or twice: {:?}",
            &texts[..texts.len().min(20)]
        );
        missed += STREAMED - texts.len();
    }
    Ok((missed, memory))
}
