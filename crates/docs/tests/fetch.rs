//! The allow-listed fetcher and the page cache against a real HTTP server
//! on loopback: refusals, redirects, timeouts, size caps, revalidation and
//! stale copies.

mod common;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use common::TestSite;
use switchboard_docs::{
    cache::{Cache, Freshness},
    config::HostPattern,
    fetch::{FetchError, Fetched, Fetcher, HostPolicy, Refusal, Validators, http_client},
};
use url::Url;

const HOUR: Duration = Duration::from_secs(3600);

fn fetcher_with(https: &[&str], http: &[&str], timeout: Duration, max_bytes: usize) -> Fetcher {
    let patterns = |list: &[&str]| {
        list.iter()
            .map(|h| HostPattern::parse(h).unwrap())
            .collect()
    };
    Fetcher::new(
        http_client().unwrap(),
        HostPolicy::new(patterns(https), patterns(http)),
        timeout,
        max_bytes,
    )
}

/// A fetcher that may use plain http to the test site only.
fn fetcher(site: &TestSite) -> Fetcher {
    let host = format!("127.0.0.1:{}", site.port());
    fetcher_with(&[], &[&host], Duration::from_secs(5), 2 * 1024 * 1024)
}

fn url(s: &str) -> Url {
    Url::parse(s).unwrap()
}

async fn get(fetcher: &Fetcher, u: &str) -> Result<Fetched, FetchError> {
    fetcher.get(&url(u), &Validators::default()).await
}

fn body(outcome: Result<Fetched, FetchError>) -> switchboard_docs::fetch::Body {
    match outcome {
        Ok(Fetched::Body(body)) => body,
        other => panic!("expected a body, got {other:?}"),
    }
}

#[tokio::test]
async fn fetches_an_allowed_page_with_its_validators() {
    let site = TestSite::start().await;
    let page = body(get(&fetcher(&site), &site.url("/docs/index.md")).await);
    let text = String::from_utf8(page.bytes).unwrap();
    assert!(text.starts_with("# Introduction"));
    // The fixture's links point at the test site.
    assert!(text.contains(&site.url("/docs/getting-started/installation/")));
    assert!(page.validators.etag.is_some());
    assert_eq!(
        page.content_type.as_deref(),
        Some("text/markdown; charset=utf-8")
    );
}

type RefusalCheck = fn(&Refusal) -> bool;

#[tokio::test]
async fn refuses_disallowed_urls_without_sending_anything() {
    let site = TestSite::start().await;
    let port = site.port();
    let f = fetcher(&site);
    let cases: Vec<(String, RefusalCheck)> = vec![
        // The host is `evil.example`; the "127.0.0.1:port" is a user name.
        (format!("http://127.0.0.1:{port}@evil.example/"), |r| {
            *r == Refusal::Userinfo
        }),
        (format!("http://user:pw@127.0.0.1:{port}/llms.txt"), |r| {
            *r == Refusal::Userinfo
        }),
        (format!("http://127.0.0.2:{port}/llms.txt"), |r| {
            matches!(r, Refusal::IpNotListed(_))
        }),
        (format!("http://[::1]:{port}/llms.txt"), |r| {
            matches!(r, Refusal::IpNotListed(_))
        }),
        (
            format!("http://127.0.0.1:{}/llms.txt", port.wrapping_add(1)),
            |r| matches!(r, Refusal::PortNotListed { .. }),
        ),
        (format!("http://localhost:{port}/llms.txt"), |r| {
            matches!(r, Refusal::HostNotListed { .. })
        }),
        ("https://imqueue.org/llms.txt".to_owned(), |r| {
            matches!(r, Refusal::HostNotListed { .. })
        }),
        (format!("ftp://127.0.0.1:{port}/llms.txt"), |r| {
            matches!(r, Refusal::Scheme(_))
        }),
    ];
    for (u, want) in cases {
        match get(&f, &u).await {
            Err(FetchError::Refused { reason, .. }) => assert!(want(&reason), "{u}: {reason}"),
            other => panic!("{u}: expected a refusal, got {other:?}"),
        }
    }
    assert_eq!(site.total_hits(), 0);
}

#[tokio::test]
async fn https_only_hosts_are_not_fetched_over_http() {
    let site = TestSite::start().await;
    let host = format!("127.0.0.1:{}", site.port());
    let f = fetcher_with(&[&host], &[], Duration::from_secs(5), 1024 * 1024);
    let err = get(&f, &site.url("/llms.txt")).await.unwrap_err();
    assert!(
        matches!(
            &err,
            FetchError::Refused {
                reason: Refusal::PlainHttp(_),
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("plain http is not allowed"),
        "{err}"
    );
    assert_eq!(site.total_hits(), 0);
}

#[tokio::test]
async fn redirects_are_rechecked_at_every_hop() {
    let site = TestSite::start().await;
    let f = fetcher(&site);
    let port = site.port();
    let foreign = [
        "https://evil.example/steal".to_owned(),
        format!("http://127.0.0.1:{}/llms.txt", port.wrapping_add(1)),
        format!("http://127.0.0.1:{port}@evil.example/"),
        "http://10.0.0.1/".to_owned(),
        format!("http://localhost:{port}/llms.txt"),
    ];
    for to in foreign {
        let start = format!("{}?to={}", site.url("/t/redirect"), urlencode(&to));
        let err = get(&f, &start).await.unwrap_err();
        assert!(
            matches!(err, FetchError::RedirectRefused { .. }),
            "{to}: {err}"
        );
        assert!(
            err.to_string().contains("refused to follow the redirect"),
            "{err}"
        );
    }
    let err = get(
        &f,
        &format!(
            "{}?to={}",
            site.url("/t/redirect"),
            urlencode("https://evil.example/")
        ),
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("evil.example is not an allowed host"),
        "{err}"
    );
}

#[tokio::test]
async fn redirect_chains_within_the_allowed_hosts_are_followed_up_to_five() {
    let site = TestSite::start().await;
    let f = fetcher(&site);
    let end = body(get(&f, &site.url("/t/chain/2")).await);
    assert_eq!(end.final_url.path(), "/t/chain/5");
    assert_eq!(
        String::from_utf8(end.bytes).unwrap(),
        "# End of the chain\n"
    );
    // Exactly five hops is still fine; a loop is not.
    body(get(&f, &site.url("/t/chain/0")).await);
    let err = get(&f, &site.url("/t/loop")).await.unwrap_err();
    assert!(matches!(err, FetchError::TooManyRedirects { .. }), "{err}");
    assert_eq!(site.hits("/t/loop"), 6);
    let err = get(&f, &site.url("/t/no-location")).await.unwrap_err();
    assert!(matches!(err, FetchError::BadRedirect { .. }), "{err}");
}

#[tokio::test]
async fn slow_pages_time_out() {
    let site = TestSite::start().await;
    let host = format!("127.0.0.1:{}", site.port());
    let f = fetcher_with(&[], &[&host], Duration::from_millis(300), 1024 * 1024);
    let started = Instant::now();
    let err = get(&f, &site.url("/t/slow")).await.unwrap_err();
    assert!(matches!(err, FetchError::Timeout { .. }), "{err}");
    assert!(err.is_unavailable());
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(
        err.to_string().contains("did not answer within 0.3 s"),
        "{err}"
    );
}

#[tokio::test]
async fn oversized_pages_are_cut_off() {
    let site = TestSite::start().await;
    let f = fetcher(&site);
    for path in ["/t/big", "/t/big-declared"] {
        let err = get(&f, &site.url(path)).await.unwrap_err();
        assert!(matches!(err, FetchError::TooLarge { .. }), "{path}: {err}");
        assert!(err.to_string().contains("max_page_bytes"), "{err}");
    }
}

#[tokio::test]
async fn http_errors_say_whether_the_site_is_down() {
    let site = TestSite::start().await;
    let f = fetcher(&site);
    let err = get(&f, &site.url("/no/such/page.md")).await.unwrap_err();
    assert!(
        err.to_string().ends_with("answered HTTP 404 Not Found"),
        "{err}"
    );
    assert!(!err.is_unavailable());
    site.set_down(true);
    let err = get(&f, &site.url("/llms.txt")).await.unwrap_err();
    assert!(err.to_string().contains("500"), "{err}");
    assert!(err.is_unavailable());
}

#[tokio::test]
async fn cache_hits_do_not_refetch() {
    let site = TestSite::start().await;
    let f = fetcher(&site);
    let cache = Cache::new(1 << 20);
    let u = url(&site.url("/docs/index.md"));
    let first = cache.get(&u, &f, HOUR).await.unwrap();
    assert!(matches!(first.freshness, Freshness::Fetched));
    let second = cache.get(&u, &f, HOUR).await.unwrap();
    assert!(matches!(second.freshness, Freshness::Hit));
    assert!(Arc::ptr_eq(&first.page, &second.page));
    assert_eq!(site.hits("/docs/index.md"), 1);
    assert_eq!(cache.bytes(), first.page.text.len());
}

#[tokio::test]
async fn expired_copies_are_revalidated_with_etag_and_last_modified() {
    let site = TestSite::start().await;
    let f = fetcher(&site);
    let cache = Cache::new(1 << 20);
    for path in ["/t/etag", "/t/lastmod", "/docs/index.md"] {
        let u = url(&site.url(path));
        let first = cache.get(&u, &f, Duration::ZERO).await.unwrap();
        let second = cache.get(&u, &f, Duration::ZERO).await.unwrap();
        assert!(matches!(second.freshness, Freshness::Revalidated), "{path}");
        assert!(Arc::ptr_eq(&first.page.text, &second.page.text), "{path}");
        assert!(second.page.checked_at > first.page.checked_at);
        assert_eq!(site.hits(path), 2);
    }
    assert_eq!(site.not_modified(), 3);
}

#[tokio::test]
async fn a_changed_etag_replaces_the_copy() {
    let site = TestSite::start().await;
    let f = fetcher(&site);
    let cache = Cache::new(1 << 20);
    let u = url(&site.url("/t/etag"));
    let first = cache.get(&u, &f, Duration::ZERO).await.unwrap();
    assert_eq!(&*first.page.text, "# Version 1\n");
    site.bump();
    let second = cache.get(&u, &f, Duration::ZERO).await.unwrap();
    assert!(matches!(second.freshness, Freshness::Fetched));
    assert_eq!(&*second.page.text, "# Version 2\n");
    assert_eq!(second.page.validators.etag.as_deref(), Some("\"v2\""));
    let third = cache.get(&u, &f, HOUR).await.unwrap();
    assert_eq!(&*third.page.text, "# Version 2\n");
}

#[tokio::test]
async fn a_site_answering_500_gets_the_stale_copy_served() {
    let site = TestSite::start().await;
    let f = fetcher(&site);
    let cache = Cache::new(1 << 20).retry_after(Duration::from_millis(300));
    let u = url(&site.url("/docs/index.md"));
    let fresh = cache.get(&u, &f, Duration::ZERO).await.unwrap();
    site.set_down(true);
    let stale = cache.get(&u, &f, Duration::ZERO).await.unwrap();
    assert!(stale.is_stale());
    assert_eq!(stale.page.text, fresh.page.text);
    let note = stale.stale_note().unwrap();
    assert!(
        note.contains("stale copy") && note.contains("500"),
        "{note}"
    );
    // Back up, but it failed a moment ago: it is left alone a while, and
    // the stale copy served at once.
    site.set_down(false);
    let asked = site.hits("/docs/index.md");
    let meanwhile = cache.get(&u, &f, Duration::ZERO).await.unwrap();
    assert!(meanwhile.is_stale());
    assert_eq!(site.hits("/docs/index.md"), asked);
    // Then asked again: fresh.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let again = cache.get(&u, &f, Duration::ZERO).await.unwrap();
    assert!(!again.is_stale());
    assert_eq!(site.hits("/docs/index.md"), asked + 1);
}

#[tokio::test]
async fn a_site_that_times_out_is_not_waited_for_again_at_once() {
    let site = TestSite::start().await;
    let host = format!("127.0.0.1:{}", site.port());
    let f = fetcher_with(&[], &[&host], Duration::from_millis(300), 1 << 20);
    let cache = Cache::new(1 << 20);
    let u = url(&site.url("/t/slow"));
    let started = Instant::now();
    let first = cache.get(&u, &f, HOUR).await.unwrap_err();
    assert!(matches!(first, FetchError::Timeout { .. }), "{first}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    let started = Instant::now();
    let second = cache.get(&u, &f, HOUR).await.unwrap_err();
    assert_eq!(second.to_string(), first.to_string());
    assert!(
        started.elapsed() < Duration::from_millis(250),
        "waited again"
    );
    assert_eq!(site.hits("/t/slow"), 1);
    // Nor is any other page of the site: the error names the page asked for.
    let started = Instant::now();
    let other_url = site.url("/docs/index.md");
    let other = cache.get(&url(&other_url), &f, HOUR).await.unwrap_err();
    let text = other.to_string();
    assert!(
        text.contains(&other_url) && text.contains("could not be reached"),
        "{text}"
    );
    assert!(started.elapsed() < Duration::from_millis(250));
    assert_eq!(site.hits("/docs/index.md"), 0);
}

/// Nothing listening: the error says so in words, not as reqwest's chain.
#[tokio::test]
async fn a_refused_connection_is_said_in_words() {
    let site = TestSite::start().await;
    let f = fetcher(&site);
    let u = site.url("/docs/index.md");
    site.stop().await;
    let err = Cache::new(1 << 20)
        .get(&url(&u), &f, HOUR)
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("nothing answers at 127.0.0.1") && text.contains("the site may be down"),
        "{text}"
    );
    assert_eq!(text.matches(&u).count(), 1, "{text}");
}

#[tokio::test]
async fn a_site_that_is_gone_gets_the_stale_copy_served() {
    let site = TestSite::start().await;
    let f = fetcher(&site);
    let cache = Cache::new(1 << 20);
    let u = url(&site.url("/docs/index.md"));
    cache.get(&u, &f, Duration::ZERO).await.unwrap();
    site.stop().await;
    let stale = cache.get(&u, &f, Duration::ZERO).await.unwrap();
    match &stale.freshness {
        Freshness::Stale(FetchError::Connect { .. } | FetchError::Transport { .. }) => {}
        other => panic!("expected a connection failure, got {other:?}"),
    }
}

#[tokio::test]
async fn nothing_cached_and_the_site_down_is_an_error_naming_the_url() {
    let site = TestSite::start().await;
    let f = fetcher(&site);
    let cache = Cache::new(1 << 20);
    site.set_down(true);
    let u = site.url("/docs/index.md");
    let err = cache.get(&url(&u), &f, HOUR).await.unwrap_err();
    let text = err.to_string();
    assert!(text.contains(&u) && text.contains("500"), "{text}");
}

#[tokio::test]
async fn the_cache_keeps_to_its_byte_cap_evicting_the_least_recently_used() {
    let site = TestSite::start().await;
    let f = fetcher(&site);
    let pages = [
        "/docs/index.md",
        "/docs/guides/exposing-methods/index.md",
        "/docs/guides/jobs/delayed-jobs/index.md",
    ];
    let sizes: Vec<usize> = {
        let probe = Cache::new(1 << 20);
        let mut sizes = Vec::new();
        for p in pages {
            sizes.push(
                probe
                    .get(&url(&site.url(p)), &f, HOUR)
                    .await
                    .unwrap()
                    .page
                    .text
                    .len(),
            );
        }
        sizes
    };
    // Room for the first two, not all three.
    let cap = sizes[0] + sizes[1] + sizes[2] / 2;
    let cache = Cache::new(cap);
    for p in &pages[..2] {
        cache.get(&url(&site.url(p)), &f, HOUR).await.unwrap();
    }
    // Touch the first, so the second is the least recently used.
    cache
        .get(&url(&site.url(pages[0])), &f, HOUR)
        .await
        .unwrap();
    cache
        .get(&url(&site.url(pages[2])), &f, HOUR)
        .await
        .unwrap();
    assert!(cache.bytes() <= cap);
    let first = cache
        .get(&url(&site.url(pages[0])), &f, HOUR)
        .await
        .unwrap();
    assert!(matches!(first.freshness, Freshness::Hit));
    let second = cache
        .get(&url(&site.url(pages[1])), &f, HOUR)
        .await
        .unwrap();
    assert!(matches!(second.freshness, Freshness::Fetched));
}

fn urlencode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}
