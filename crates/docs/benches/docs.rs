//! Measures the docs toolset against its targets and prints a table:
//! `search_docs` on a 10,000-entry index (p50 ≤ 200 µs, also with a
//! misspelt word), building that index (≤ 50 ms), search over the largest
//! evaluation site next to a textbook BM25, and `get_doc` served from the
//! cache (p50 ≤ 100 µs).
//!
//! `cargo bench -p switchboard-docs` (a release build).

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../tests/eval/mod.rs"]
mod eval;

use std::time::{Duration, Instant};

use serde_json::json;
use switchboard_docs::{
    index::{Entry, Index},
    llms_txt,
};
use switchboard_toolset::{Caller, Toolset};
use url::Url;

const QUERIES: &[&str] = &[
    "how do I expose a method",
    "delayed jobs",
    "schedule a recurring job every hour",
    "generate a client for a service",
    "redis cluster",
    "connect to redis with a password",
    "client call timeout",
    "graceful shutdown",
    "logging transports",
    "invalidate cache when a postgres table changes",
    "rate limiting",
    "IMQService",
    "safe delivery so messages are not lost",
    "broadcast events to clients",
    "imq ctl status",
    "JobQueue push",
];

/// Words mixed into the copies so that 10,000 entries are not 27 copies of
/// the same 376.
const VOCABULARY: &[&str] = &[
    "worker",
    "gateway",
    "tenant",
    "payment",
    "inventory",
    "order",
    "invoice",
    "session",
    "webhook",
    "report",
    "search",
    "upload",
    "image",
    "email",
    "notification",
    "billing",
    "audit",
    "catalog",
    "shipping",
    "profile",
    "token",
    "metrics",
    "tracing",
    "backup",
];

fn fixture_entries() -> Vec<Entry> {
    let text = std::fs::read_to_string(common::fixture_root().join("llms.txt")).unwrap();
    let doc = llms_txt::parse(&text, &Url::parse("https://imqueue.org/llms.txt").unwrap()).unwrap();
    Entry::all_of(0, &doc).collect()
}

fn ten_thousand() -> Vec<Entry> {
    let base = fixture_entries();
    (0..10_000)
        .map(|i| {
            let copy = i / base.len();
            let mut e = base[i % base.len()].clone();
            if copy > 0 {
                let word = VOCABULARY[(i * 7 + copy) % VOCABULARY.len()];
                let other = VOCABULARY[(i * 13 + copy * 5) % VOCABULARY.len()];
                e.title = format!("{} ({word})", e.title);
                e.notes = format!("{} — for the {other} {word} service", e.notes);
                e.url = e
                    .url
                    .replacen("imqueue.org/", &format!("imqueue.org/v{copy}/{word}/"), 1);
            }
            e
        })
        .collect()
}

/// Queries with a word the index lacks, which is then looked up among
/// the index's words by edit distance.
const MISSPELT: &[&str] = &[
    "delayed jbos",
    "redis clustr",
    "grcaeful shutdown",
    "IMQServcie",
];

/// `search_docs`'s index and the textbook BM25 over the largest evaluation
/// site, with its questions.
fn eval_site_search(rounds: usize) {
    use eval::Ranker;
    let sites = eval::load();
    let site = sites
        .iter()
        .max_by_key(|s| s.entries.len())
        .expect("evaluation sites");
    let index = Index::build(site.entries.clone());
    let bm25 = eval::Bm25::build(&site.entries);
    let rankers: [(&str, &dyn Ranker); 2] = [("search", &index), ("textbook BM25", &bm25)];
    for (name, ranker) in rankers {
        let mut samples = Vec::new();
        for i in 0..(5_000 / rounds) {
            let q = &site.queries[i % site.queries.len()].text;
            let t = Instant::now();
            let ranked = ranker.rank(q, 10);
            samples.push(t.elapsed());
            std::hint::black_box(ranked);
        }
        let s = stats(samples);
        row(
            &format!("{name}, {} ({} entries)", site.name, site.entries.len()),
            &s,
            "p50 ≤ 200 µs",
            s.p50 <= Duration::from_micros(200),
        );
    }
}

struct Stats {
    p50: Duration,
    p90: Duration,
    p99: Duration,
}

fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    Stats {
        p50: at(0.5),
        p90: at(0.9),
        p99: at(0.99),
    }
}

fn row(name: &str, s: &Stats, target: &str, ok: bool) {
    println!(
        "{name:<44} {:>10.1?} {:>10.1?} {:>10.1?}   {target:<14} {}",
        s.p50,
        s.p90,
        s.p99,
        if ok { "ok" } else { "MISSED" }
    );
}

fn main() {
    // `cargo test --benches` runs this with `--bench`-less args; keep it quick then.
    let quick = std::env::args().all(|a| a != "--bench");
    let rounds = if quick { 10 } else { 1 };

    println!(
        "{:<44} {:>10} {:>10} {:>10}   {:<14}",
        "measure", "p50", "p90", "p99", "target"
    );

    let entries = ten_thousand();
    let mut builds = Vec::new();
    for _ in 0..(if quick { 2 } else { 15 }) {
        let e = entries.clone();
        let t = Instant::now();
        let index = Index::build(e);
        builds.push(t.elapsed());
        assert_eq!(index.len(), 10_000);
    }
    let build = stats(builds);
    row(
        "index build, 10,000 entries",
        &build,
        "≤ 50 ms",
        build.p50 <= Duration::from_millis(50),
    );

    let index = Index::build(entries);
    let mut searches = Vec::new();
    for i in 0..(5_000 / rounds) {
        let q = QUERIES[i % QUERIES.len()];
        let t = Instant::now();
        let hits = index.search(q, 6, None);
        searches.push(t.elapsed());
        assert!(!hits.is_empty(), "{q}");
    }
    let search = stats(searches);
    row(
        "search, 10,000 entries, limit 6",
        &search,
        "p50 ≤ 200 µs",
        search.p50 <= Duration::from_micros(200),
    );
    let mut misspelt = Vec::new();
    for i in 0..(2_000 / rounds) {
        let q = MISSPELT[i % MISSPELT.len()];
        let t = Instant::now();
        let hits = index.search(q, 6, None);
        misspelt.push(t.elapsed());
        assert!(!hits.is_empty(), "{q}");
    }
    let misspelt = stats(misspelt);
    row(
        "search, 10,000 entries, a misspelt word",
        &misspelt,
        "p50 ≤ 200 µs",
        misspelt.p50 <= Duration::from_micros(200),
    );
    eval_site_search(rounds);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let site = common::TestSite::start().await;
        let tools = common::tools_for(&site, "");
        let caller = Caller::new("bench");
        let cases = [
            (
                "get_doc cache hit, 2 KB page",
                "get_doc",
                json!({"url": site.url("/docs/guides/exposing-methods/")}),
                true,
            ),
            (
                "get_doc cache hit, 20,000-char window of 120 KB",
                "get_doc",
                json!({"url": site.url("/api/")}),
                true,
            ),
            (
                "get_doc cache hit, window at offset 100,000",
                "get_doc",
                json!({"url": site.url("/api/"), "offset": 100_000}),
                true,
            ),
            (
                "search_docs tool call, 376 entries (cached)",
                "search_docs",
                json!({"query": "how do I expose a method"}),
                false,
            ),
        ];
        for (name, tool, args, is_get) in cases {
            let args = args.as_object().unwrap().clone();
            let tool = tools.tool_id(tool).expect("a docs tool");
            tools
                .call(tool, args.clone(), &caller)
                .await
                .expect("warm-up call");
            let mut samples = Vec::new();
            for _ in 0..(2_000 / rounds) {
                let t = Instant::now();
                let out = tools.call(tool, args.clone(), &caller).await;
                samples.push(t.elapsed());
                assert!(out.is_ok());
            }
            let s = stats(samples);
            let (target, ok) = if is_get {
                ("p50 ≤ 100 µs", s.p50 <= Duration::from_micros(100))
            } else {
                ("p50 ≤ 200 µs", s.p50 <= Duration::from_micros(200))
            };
            row(name, &s, target, ok);
        }
        assert_eq!(
            site.hits("/api/index.md"),
            1,
            "every timed get_doc was a cache hit"
        );
    });
}
