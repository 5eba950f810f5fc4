//! Section `tokens`: what per-agent tokens cost a request.
//!
//! - In-process: [`Tokens::check`] (hash the presented token, compare it with
//!   every configured digest in constant time) with [`MANY`] tokens
//!   configured, the work the HTTP guard adds to each request.
//! - Over HTTP: sequential `read_messages` round trips on `serve --http`
//!   without tokens, then with [`MANY`] `[[http.tokens]]` and one of them
//!   presented, alternately on fresh servers; the best medians are shown for
//!   context (their difference is within the round trip's noise).

use std::time::{Duration, Instant};

use serde_json::json;
use switchboard_toolset::{Rules, TokenSpec, Tokens};

use crate::{
    Plan,
    report::{Report, Row, Target, Unit, micros, percentile},
    rpc::Session,
    server::{Data, Switchboard},
    web::HttpSession,
};

/// Tokens configured.
const MANY: usize = 100;
/// Checks timed together, so that the clock's cost does not dominate.
const BATCH: u32 = 1_000;
const CHECK_NS: f64 = 5_000.0;
/// Servers started with and without tokens, alternately.
const ROUNDS: usize = 3;

pub async fn section(
    switchboard: &Switchboard,
    plan: &Plan,
    report: &mut Report,
) -> anyhow::Result<()> {
    eprintln!("- Tokens::check with {MANY} tokens");
    let samples = in_process(plan.reads);
    report.rows.push(
        Row::new(
            format!("token check per request, {MANY} tokens configured, in-process (p50)"),
            percentile(&samples, 50.0),
            Unit::Nanos,
            Target::AtMost(CHECK_NS),
        )
        .detail(format!(
            "p99 {}; batches of {BATCH}",
            Unit::Nanos.show(percentile(&samples, 99.0))
        )),
    );

    eprintln!(
        "- read_messages over HTTP without and with a token, {ROUNDS} rounds each, alternating"
    );
    let (mut without, mut with) = (f64::MAX, f64::MAX);
    for _ in 0..ROUNDS {
        without = without.min(percentile(
            &round_trips(switchboard, plan.reads, false).await?,
            50.0,
        ));
        with = with.min(percentile(
            &round_trips(switchboard, plan.reads, true).await?,
            50.0,
        ));
    }
    report.note(format!(
        "read_messages over HTTP, {} sequential round trips, best p50 of {ROUNDS} servers each: \
         {without:.0} µs without tokens, {with:.0} µs with {MANY} configured and one presented \
         ({:+.0} µs)",
        plan.reads,
        with - without
    ));
    Ok(())
}

fn specs() -> Vec<TokenSpec> {
    (0..MANY)
        .map(|i| TokenSpec {
            name: format!("agent{i}"),
            secret: secret(i),
            rules: Rules::unrestricted(),
        })
        .collect()
}

fn secret(i: usize) -> String {
    format!("bench-secret-{i:04}-0123456789abcdef0123456789abcdef")
}

/// ns per check, one sample per batch of [`BATCH`].
fn in_process(batches: usize) -> Vec<f64> {
    let tokens = Tokens::new(specs());
    let presented = secret(MANY / 2);
    assert!(tokens.check(&presented).is_some());
    (0..batches)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..BATCH {
                std::hint::black_box(tokens.check(std::hint::black_box(&presented)));
            }
            started.elapsed().as_secs_f64() * 1e9 / f64::from(BATCH)
        })
        .collect()
}

/// µs per sequential `read_messages` round trip.
async fn round_trips(
    switchboard: &Switchboard,
    count: usize,
    tokens: bool,
) -> anyhow::Result<Vec<f64>> {
    let scratch = tempfile::tempdir()?;
    let mut config = String::new();
    for (i, spec) in specs().iter().enumerate() {
        let file = scratch.path().join(format!("secret{i}"));
        std::fs::write(&file, &spec.secret)?;
        config.push_str(&format!(
            "[[http.tokens]]\nname = \"{}\"\nsecret_file = \"{}\"\n",
            spec.name,
            file.display()
        ));
    }
    let path = scratch.path().join("switchboard.toml");
    std::fs::write(&path, if tokens { config } else { String::new() })?;
    let path = path.to_str().unwrap_or_default().to_owned();
    let (server, addr) = switchboard
        .start_http_with(&["--config", &path], Data::Ephemeral)
        .await?;
    let presented = secret(MANY / 2);
    let mut client = HttpSession::open_with(addr, tokens.then_some(presented.as_str())).await?;
    let args = json!({"channel": "#bench", "limit": 50, "nick": "agent50"});
    client
        .call_tool(
            "send_message",
            json!({"channel": "#bench", "text": "hello", "sender": "agent50"}),
        )
        .await?;
    let mut samples: Vec<Duration> = Vec::with_capacity(count);
    for _ in 0..count + 200 {
        let started = Instant::now();
        client.call_tool("read_messages", args.clone()).await?;
        samples.push(started.elapsed());
    }
    server.stop().await?;
    Ok(micros(&samples[200..]))
}
