//! The bodies of the `llms_txt` and `fetch_urls` fuzz targets (`fuzz/` at
//! the repository root). Built with the feature `fuzzing` only; the crate's
//! tests run them on the seed corpora with a stable toolchain.
//!
//! ```
//! switchboard_docs::fuzzing::llms_txt(b"# Site\n\n## Docs\n\n- [Guide](/guide.md): how\n");
//! switchboard_docs::fuzzing::fetch_urls(b"docs.example.org\n\nhttps://docs.example.org/llms.txt\n/guide.md\n");
//! ```

use std::collections::HashSet;

use url::Url;

use crate::{
    config::HostPattern,
    fetch::{Body, HostPolicy, Validators, decode_text, redirect_target},
    llms_txt::{self, LlmsTxt, MAX_LINKS},
};

/// The longest title, section name part or link title the parser keeps,
/// in characters, with the ellipsis it appends when it cuts.
const MAX_TITLE_CHARS: usize = 300 + 1;
/// The longest notes of one link, likewise.
const MAX_NOTES_CHARS: usize = 2_000 + 1;

/// Decodes `data` as a fetched body and parses it as an llms.txt, checking
/// what the parser promises: bounded titles and notes, no duplicate links,
/// no empty sections.
pub fn llms_txt(data: &[u8]) {
    let base = Url::parse("https://docs.example.org/guide/llms.txt").expect("a base URL");
    let body = Body {
        final_url: base.clone(),
        bytes: data.to_vec(),
        content_type: Some("text/markdown".into()),
        validators: Validators::default(),
    };
    let Ok(text) = decode_text(&body) else {
        assert!(
            data.contains(&0) || std::str::from_utf8(data).is_err(),
            "decode_text refused clean UTF-8"
        );
        return;
    };
    assert!(!text.contains('\0'), "a NUL survived decoding");
    if let Ok(doc) = llms_txt::parse(&text, &base) {
        check_document(&doc);
    }
}

fn check_document(doc: &LlmsTxt) {
    assert!(
        doc.title.chars().count() <= MAX_TITLE_CHARS,
        "title {:?}",
        doc.title
    );
    assert!(doc.len() <= MAX_LINKS, "{} links", doc.len());
    assert_eq!(
        doc.len(),
        doc.sections.iter().map(|s| s.links.len()).sum::<usize>(),
        "len() disagrees with the sections"
    );
    let mut seen = HashSet::new();
    for section in &doc.sections {
        assert!(
            !section.links.is_empty(),
            "empty section {:?}",
            section.name
        );
        for part in section.name.split(" / ") {
            assert!(
                part.chars().count() <= MAX_TITLE_CHARS,
                "section {:?}",
                section.name
            );
        }
        for link in &section.links {
            assert!(
                link.title.chars().count() <= MAX_TITLE_CHARS,
                "link title {:?}",
                link.title
            );
            assert!(
                link.notes.chars().count() <= MAX_NOTES_CHARS,
                "notes of {}",
                link.url
            );
            assert!(
                seen.insert(link.url.as_str().to_owned()),
                "{} listed twice",
                link.url
            );
        }
    }
}

/// Reads `data` as lines: the `allowed_hosts` (comma-separated), the
/// `http_hosts`, a URL to fetch, then `Location` headers of redirects, each
/// resolved against the URL before it, as far as the policy lets the
/// fetcher go. Every URL the policy accepts —
/// directly or as a redirect target — must be http(s) without user info,
/// serialise to itself, parse with the `http` crate (which reqwest hands it
/// to) to the same host and port, and that host and port must be on the
/// lists. Host patterns must survive being written back and parsed again.
pub fn fetch_urls(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let https = patterns(lines.next().unwrap_or_default());
    let http = patterns(lines.next().unwrap_or_default());
    let policy = HostPolicy::new(https.clone(), http.clone());
    let Ok(mut url) = Url::parse(lines.next().unwrap_or_default().trim()) else {
        return;
    };
    // The fetcher requests nothing the policy refuses, so it never follows
    // a redirect from there.
    if policy.check(&url).is_err() {
        return;
    }
    check_allowed(&url, &https, &http);
    for location in lines {
        let Ok(response) = http::Response::builder()
            .status(302)
            .header(http::header::LOCATION, location.trim_end_matches('\r'))
            .body(String::new())
        else {
            continue;
        };
        let Ok(next) = redirect_target(&url, &reqwest::Response::from(response)) else {
            return;
        };
        if policy.check(&next).is_err() {
            return;
        }
        check_allowed(&next, &https, &http);
        url = next;
    }
}

/// The patterns that parse, each checked to read back as itself.
fn patterns(list: &str) -> Vec<HostPattern> {
    list.split(',')
        .filter_map(|raw| HostPattern::parse(raw).ok())
        .inspect(|pattern| {
            let again = HostPattern::parse(&pattern.to_string());
            assert_eq!(again.as_ref(), Ok(pattern), "{pattern} does not read back");
        })
        .collect()
}

fn check_allowed(url: &Url, https: &[HostPattern], http_hosts: &[HostPattern]) {
    let scheme = url.scheme();
    assert!(matches!(scheme, "https" | "http"), "accepted {url}");
    assert!(
        url.username().is_empty() && url.password().is_none(),
        "accepted {url}"
    );
    let again = Url::parse(url.as_str()).expect("an accepted URL parses again");
    assert_eq!(&again, url, "{url} does not serialise to itself");
    let uri: http::Uri = url
        .as_str()
        .parse()
        .unwrap_or_else(|e| panic!("the HTTP client cannot take the accepted {url}: {e}"));
    let host = url.host_str().expect("an accepted URL has a host");
    let port = url.port_or_known_default().expect("http(s) has a port");
    let default_port = if scheme == "https" { 443 } else { 80 };
    assert_eq!(
        uri.host(),
        Some(host),
        "{url} reaches another host over HTTP"
    );
    assert_eq!(
        uri.port_u16().unwrap_or(default_port),
        port,
        "{url} reaches another port over HTTP"
    );
    let candidates: Vec<&HostPattern> = if scheme == "http" {
        http_hosts.iter().collect()
    } else {
        https.iter().chain(http_hosts).collect()
    };
    assert!(
        candidates
            .iter()
            .any(|p| p.host.to_string() == host && p.port.unwrap_or(default_port) == port),
        "{url} was accepted, but {host}:{port} is not listed for {scheme}"
    );
}
