//! Ranking quality of `search_docs` on the imqueue fixture: real-looking
//! questions with the pages a person would want, scored by precision@3,
//! hit@1, hit@3 and mean reciprocal rank. Run with `--nocapture` to see the
//! per-query table.

use switchboard_docs::{
    index::{Entry, Index},
    llms_txt,
};
use url::Url;

const SITE: &str = "https://imqueue.org";

/// (query, relevant page paths). The first relevant page found decides the
/// reciprocal rank; every relevant page in the top three counts for
/// precision@3.
const QUERIES: &[(&str, &[&str])] = &[
    (
        "how do I expose a method",
        &[
            "/docs/guides/exposing-methods/",
            "/api/rpc/expose",
            "/docs/guides/typing-methods/",
            "/docs/getting-started/first-service/",
        ],
    ),
    (
        "delayed jobs",
        &[
            "/docs/guides/jobs/delayed-jobs/",
            "/docs/guides/jobs/scheduling/",
            "/api/job/JobQueuePushOptions/delay",
            "/api/job/JobQueue/push",
            "/examples/email-jobs/",
            "/faq/cancel-delayed-job",
        ],
    ),
    (
        "schedule a recurring job every hour",
        &[
            "/docs/guides/jobs/scheduling/",
            "/examples/scheduler/",
            "/faq/schedule-at-time",
        ],
    ),
    (
        "generate a client for a service",
        &[
            "/docs/guides/clients/",
            "/docs/cli/client-generate/",
            "/api/rpc/IMQClient/generate",
            "/api/rpc/IMQClient/create",
            "/docs/getting-started/first-client/",
        ],
    ),
    (
        "redis cluster",
        &[
            "/docs/guides/redis/cluster/",
            "/api/core/ClusteredRedisQueue",
            "/docs/guides/scaling/clustered-queues/",
        ],
    ),
    (
        "connect to redis with a password",
        &[
            "/docs/guides/configuration/redis/",
            "/docs/guides/security/redis/",
        ],
    ),
    (
        "environment variables",
        &[
            "/docs/guides/configuration/env/",
            "/docs/guides/configuration/",
        ],
    ),
    (
        "client call timeout",
        &[
            "/docs/guides/timeouts/",
            "/api/rpc/IMQClientOptions/timeout",
            "/faq/timeouts",
        ],
    ),
    (
        "graceful shutdown",
        &[
            "/docs/guides/deployment/graceful-shutdown/",
            "/docs/guides/service-lifecycle/",
        ],
    ),
    (
        "deploy to kubernetes",
        &[
            "/docs/guides/deployment/kubernetes/",
            "/examples/kubernetes/",
        ],
    ),
    (
        "docker compose",
        &[
            "/docs/guides/deployment/docker/",
            "/examples/docker-compose/",
        ],
    ),
    (
        "logging transports",
        &[
            "/docs/guides/logging/transports/",
            "/api/async-logger/transports",
            "/api/async-logger/LoggerOptions/transports",
            "/docs/guides/logging/async-logger/",
        ],
    ),
    (
        "cache method results",
        &[
            "/docs/guides/caching/",
            "/api/rpc/cache",
            "/examples/caching/",
            "/docs/guides/caching/pg-cache/",
        ],
    ),
    (
        "invalidate cache when a postgres table changes",
        &[
            "/docs/guides/caching/pg-cache/",
            "/api/pg-cache/cacheWith",
            "/docs/guides/caching/invalidation/",
            "/api/pg-cache/PgCacheChannels",
        ],
    ),
    (
        "postgres listen notify",
        &[
            "/docs/guides/postgres/pubsub/",
            "/api/pg-pubsub/PgPubSub",
            "/api/pg-pubsub/PgPubSub/listen",
            "/api/pg-pubsub/PgPubSub/notify",
            "/docs/guides/postgres/single-listener/",
            "/docs/guides/postgres/table-triggers/",
        ],
    ),
    (
        "rate limiting",
        &[
            "/docs/guides/http/protect/",
            "/docs/guides/http/rate-limits/",
            "/api/http-protect/httpProtect",
            "/examples/rate-limited-api/",
            "/api/http-protect/RateLimitRule",
        ],
    ),
    (
        "create a new service with the cli",
        &[
            "/docs/cli/service-create/",
            "/docs/guides/services/",
            "/docs/getting-started/first-service/",
        ],
    ),
    (
        "start a service",
        &[
            "/api/rpc/IMQService/start",
            "/docs/guides/service-lifecycle/",
            "/docs/cli/ctl-start/",
            "/docs/getting-started/first-service/",
        ],
    ),
    (
        "IMQService",
        &["/api/rpc/IMQService", "/docs/guides/services/"],
    ),
    (
        "jsdoc types missing in generated client",
        &["/docs/guides/typing-methods/", "/faq/missing-types"],
    ),
    (
        "pass complex objects as arguments",
        &["/docs/guides/complex-types/", "/api/rpc/property"],
    ),
    (
        "error handling",
        &[
            "/docs/guides/service-errors/",
            "/api/rpc/IMQRPCError",
            "/faq/remote-errors",
        ],
    ),
    (
        "unit testing services",
        &[
            "/docs/guides/testing/",
            "/examples/testing-jest/",
            "/docs/guides/testing/mocking-clients/",
        ],
    ),
    (
        "mock a client in tests",
        &["/docs/guides/testing/mocking-clients/"],
    ),
    (
        "safe delivery so messages are not lost",
        &[
            "/docs/guides/redis/safe-delivery/",
            "/faq/delivery-guarantees",
            "/api/core/IMQOptions/safeDelivery",
            "/api/rpc/IMQServiceOptions/safeDelivery",
            "/blog/safe-delivery/",
        ],
    ),
    (
        "scale horizontally",
        &[
            "/docs/guides/scaling/",
            "/docs/guides/scaling/multi-core/",
            "/docs/guides/scaling/clustered-queues/",
        ],
    ),
    (
        "broadcast events to clients",
        &[
            "/docs/guides/client-events/",
            "/api/rpc/IMQService/publish",
            "/api/rpc/IMQClient/broadcast",
            "/examples/chat-pubsub/",
        ],
    ),
    (
        "install",
        &["/docs/getting-started/installation/", "/docs/cli/"],
    ),
    ("imq ctl status", &["/docs/cli/ctl-status/"]),
    (
        "delay a remote call",
        &[
            "/docs/guides/delayed-calls/",
            "/api/rpc/IMQDelay",
            "/api/rpc/IMQClient/remoteCall",
        ],
    ),
    (
        "authentication token",
        &[
            "/docs/guides/security/auth/",
            "/faq/auth",
            "/examples/auth-service/",
        ],
    ),
    (
        "compress messages with gzip",
        &[
            "/docs/guides/redis/compression/",
            "/api/core/IMQOptions/useGzip",
            "/api/rpc/IMQServiceOptions/useGzip",
        ],
    ),
    (
        "retry failed jobs",
        &["/docs/guides/jobs/retries/", "/examples/webhooks/"],
    ),
    (
        "migrate to version 2",
        &["/docs/guides/migration/v2/", "/changelog/rpc/2-0-0"],
    ),
    (
        "lock concurrent calls",
        &[
            "/docs/guides/locking/",
            "/api/rpc/lock",
            "/api/core/IMQLock",
        ],
    ),
    ("health check", &["/docs/guides/deployment/health-checks/"]),
    (
        "prometheus metrics",
        &[
            "/docs/guides/deployment/monitoring/",
            "/api/rpc/IMQServiceOptions/metrics",
        ],
    ),
    ("what is imqueue", &["/docs/", "/docs/concepts/"]),
    (
        "log level",
        &[
            "/docs/guides/logging/levels/",
            "/api/async-logger/LoggerOptions/level",
        ],
    ),
    (
        "JobQueue push",
        &["/api/job/JobQueue/push", "/api/job/JobQueuePublisher/push"],
    ),
];

fn index() -> Index {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/imqueue/llms.txt"
    ))
    .expect("fixture");
    let base = Url::parse(&format!("{SITE}/llms.txt")).unwrap();
    let doc = llms_txt::parse(&text, &base).expect("fixture parses");
    Index::build(Entry::all_of(0, &doc).collect())
}

fn path(url: &str) -> &str {
    url.strip_prefix(SITE).unwrap_or(url)
}

#[test]
fn fixture_is_a_realistic_llms_txt() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/imqueue/llms.txt"
    ))
    .unwrap();
    let doc = llms_txt::parse(&text, &Url::parse("https://imqueue.org/llms.txt").unwrap()).unwrap();
    assert_eq!(doc.title, "imqueue");
    assert!(doc.summary.as_deref().unwrap().contains("@expose()"));
    assert!(doc.len() >= 300, "{} entries", doc.len());
    let optional: Vec<_> = doc.sections.iter().filter(|s| s.optional).collect();
    assert_eq!(optional.len(), 1);
    assert!(optional[0].links.len() >= 10);
    // The relative links resolve against the llms.txt URL; the duplicate is dropped.
    let urls: Vec<_> = doc.links().map(|(_, l)| l.url.as_str()).collect();
    assert!(urls.contains(&"https://imqueue.org/examples/"));
    assert!(urls.contains(&"https://imqueue.org/faq/"));
    let hello = urls
        .iter()
        .filter(|u| **u == "https://imqueue.org/examples/hello-world/")
        .count();
    assert_eq!(hello, 1);
    // Every expected page of the evaluation exists.
    for (query, relevant) in QUERIES {
        for page in *relevant {
            let url = format!("{SITE}{page}");
            assert!(
                urls.contains(&url.as_str()),
                "{query}: {url} is not in the fixture"
            );
        }
    }
}

#[test]
fn ranking_quality_on_the_imqueue_fixture() {
    let index = index();
    let mut precision = 0.0;
    let mut reciprocal = 0.0;
    let mut hit1 = 0;
    let mut hit3 = 0;
    println!("{:<48} {:>4} {:>4}  top three", "query", "rank", "p@3");
    for (query, relevant) in QUERIES {
        let hits = index.search(query, 10, None);
        let urls: Vec<&str> = hits.iter().map(|h| path(&h.entry.url)).collect();
        let rank = urls
            .iter()
            .position(|u| relevant.contains(u))
            .map(|r| r + 1);
        let in_top3 = urls.iter().take(3).filter(|u| relevant.contains(u)).count();
        let p3 = in_top3 as f64 / 3.0;
        precision += p3;
        if let Some(r) = rank {
            reciprocal += 1.0 / r as f64;
        }
        hit1 += usize::from(rank == Some(1));
        hit3 += usize::from(rank.is_some_and(|r| r <= 3));
        println!(
            "{:<48} {:>4} {:>4.2}  {}",
            query,
            rank.map_or("-".into(), |r| r.to_string()),
            p3,
            urls.iter().take(3).copied().collect::<Vec<_>>().join("  ")
        );
    }
    let n = QUERIES.len() as f64;
    let precision = precision / n;
    let mrr = reciprocal / n;
    // The best precision@3 possible: every top-3 slot that can hold a
    // relevant page does.
    let ideal = QUERIES
        .iter()
        .map(|(_, r)| r.len().min(3) as f64 / 3.0)
        .sum::<f64>()
        / n;
    println!(
        "\n{} queries: precision@3 {precision:.3} (ideal {ideal:.3}), MRR {mrr:.3}, hit@1 {hit1}/{}, hit@3 {hit3}/{}",
        QUERIES.len(),
        QUERIES.len(),
        QUERIES.len()
    );
    assert!(QUERIES.len() >= 30);
    assert!(
        precision >= MIN_PRECISION_AT_3,
        "precision@3 {precision:.3}"
    );
    assert!(mrr >= MIN_MRR, "MRR {mrr:.3}");
}

/// Floors just under the measured figures, so a ranking regression fails.
const MIN_PRECISION_AT_3: f64 = 0.65;
const MIN_MRR: f64 = 0.95;

#[test]
fn expose_a_method_finds_the_rpc_expose_pages_first() {
    let index = index();
    let hits = index.search("how do I expose a method", 6, None);
    let top: Vec<&str> = hits.iter().take(2).map(|h| path(&h.entry.url)).collect();
    assert!(top.contains(&"/docs/guides/exposing-methods/"), "{top:?}");
    assert!(top.contains(&"/api/rpc/expose"), "{top:?}");
}

#[test]
fn delayed_jobs_finds_the_job_and_scheduling_pages() {
    let index = index();
    let hits = index.search("delayed jobs", 6, None);
    let urls: Vec<&str> = hits.iter().map(|h| path(&h.entry.url)).collect();
    // The guide of the "Jobs and Scheduling" section first, then job pages only.
    assert_eq!(urls[0], "/docs/guides/jobs/delayed-jobs/", "{urls:?}");
    assert!(urls.iter().all(|u| u.contains("job")), "{urls:?}");
    assert!(
        urls.contains(&"/api/job/JobQueuePushOptions/delay"),
        "{urls:?}"
    );
    let scheduling = index.search("schedule a recurring job", 3, None);
    assert_eq!(
        path(&scheduling[0].entry.url),
        "/docs/guides/jobs/scheduling/"
    );
}
