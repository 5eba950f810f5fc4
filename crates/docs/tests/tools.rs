//! The docs toolset end to end: `search_docs` and `get_doc` through the
//! `Toolset` seam, and the resources API, against the imqueue fixture served
//! on loopback.

mod common;

use common::{TestSite, tools_for, tools_from_toml};
use serde_json::{Value, json};
use switchboard_docs::{DocsError, DocsTools};
use switchboard_toolset::{Caller, ToolError, ToolOutput, Toolset};

async fn call_tool(tools: &DocsTools, tool: &str, args: Value) -> Result<ToolOutput, ToolError> {
    let args = args.as_object().cloned().expect("arguments are an object");
    let id = tools.tool_id(tool).expect("a docs tool");
    tools.call(id, args, &Caller::new("test")).await
}

async fn call(tools: &DocsTools, tool: &str, args: Value) -> Result<ToolOutput, String> {
    call_tool(tools, tool, args)
        .await
        .map_err(|e| e.message().to_owned())
}

async fn ok(tools: &DocsTools, tool: &str, args: Value) -> ToolOutput {
    match call(tools, tool, args.clone()).await {
        Ok(output) => output,
        Err(e) => panic!("{tool} {args}: {e}"),
    }
}

async fn err(tools: &DocsTools, tool: &str, args: Value) -> String {
    match call(tools, tool, args.clone()).await {
        Ok(output) => panic!("{tool} {args} should fail, got {}", output.text),
        Err(e) => e,
    }
}

#[tokio::test]
async fn the_tool_list_has_the_fixed_names_and_parameters() {
    let site = TestSite::start().await;
    let tools = tools_for(&site, "");
    let list = tools.tools();
    let names: Vec<_> = list.iter().map(|t| t.name.to_string()).collect();
    assert_eq!(names, ["search_docs", "get_doc"]);
    let params = |i: usize| {
        let mut p: Vec<String> = list[i].input_schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        p.sort();
        p
    };
    assert_eq!(params(0), ["limit", "query", "source"]);
    assert_eq!(params(1), ["max_chars", "offset", "url"]);
    assert_eq!(list[0].input_schema["required"], json!(["query"]));
    assert_eq!(list[1].input_schema["required"], json!(["url"]));
    assert_eq!(
        list[1].input_schema["properties"]["max_chars"]["default"],
        20000
    );
    assert_eq!(list[0].input_schema["properties"]["limit"]["default"], 6);
    assert!(list[0].description.contains("imqueue"));
    assert_eq!(tools.name(), "docs");
    assert_eq!(
        site.total_hits(),
        0,
        "nothing is fetched before the first call"
    );
}

#[tokio::test]
async fn search_puts_the_expose_pages_first() {
    let site = TestSite::start().await;
    let tools = tools_for(&site, "");
    let out = ok(
        &tools,
        "search_docs",
        json!({"query": "how do I expose a method"}),
    )
    .await;
    let first = format!(
        "1. Exposing Methods with @expose() — {} (Guides / Services)\n   Make a service method callable remotely",
        site.url("/docs/guides/exposing-methods/")
    );
    assert!(out.text.starts_with(&first), "{}", out.text);
    assert!(
        out.text
            .contains(&format!("2. @expose() — {}", site.url("/api/rpc/expose"))),
        "{}",
        out.text
    );
    assert!(out.text.ends_with("Read a page with get_doc(url)."));
    let results = out.structured["results"].as_array().unwrap();
    assert_eq!(results.len(), 6);
    assert_eq!(
        results[0]["url"],
        site.url("/docs/guides/exposing-methods/")
    );
    assert_eq!(results[0]["section"], "Guides / Services");
    assert_eq!(results[0]["source"], "imqueue");
    assert!(results[0]["score"].as_f64().unwrap() > results[5]["score"].as_f64().unwrap());
    assert_eq!(out.structured["stale"], false);
    // The llms.txt is fetched once and then served from the cache.
    ok(
        &tools,
        "search_docs",
        json!({"query": "delayed jobs", "limit": 3, "source": "imqueue"}),
    )
    .await;
    assert_eq!(site.hits("/llms.txt"), 1);
}

#[tokio::test]
async fn search_limits_and_finds_nothing_politely() {
    let site = TestSite::start().await;
    let tools = tools_for(&site, "");
    let out = ok(
        &tools,
        "search_docs",
        json!({"query": "delayed jobs", "limit": 2}),
    )
    .await;
    assert_eq!(out.structured["results"].as_array().unwrap().len(), 2);
    assert!(out.text.starts_with("1. Delayed Jobs — "), "{}", out.text);
    let out = ok(
        &tools,
        "search_docs",
        json!({"query": "kubernetes", "limit": 50}),
    )
    .await;
    assert!(out.structured["results"].as_array().unwrap().len() >= 2);
    let out = ok(&tools, "search_docs", json!({"query": "zxqv blorp"})).await;
    assert!(
        out.text
            .starts_with("No pages of the docs match \"zxqv blorp\""),
        "{}",
        out.text
    );
    assert_eq!(out.structured["results"], json!([]));
}

#[tokio::test]
async fn search_refuses_bad_arguments() {
    let site = TestSite::start().await;
    let tools = tools_for(&site, "");
    let cases = [
        (json!({"query": ""}), "query is empty"),
        (json!({"query": "   "}), "query is empty"),
        (
            json!({"query": "how do I ... ?"}),
            "has no words to search for",
        ),
        (
            json!({"query": "x".repeat(501)}),
            "longer than 500 characters",
        ),
        (
            json!({"query": "redis", "limit": 0}),
            "limit must be between 1 and 50 (got 0)",
        ),
        (
            json!({"query": "redis", "limit": 51}),
            "limit must be between 1 and 50 (got 51)",
        ),
        (
            json!({"query": "redis", "limit": -3}),
            "limit must be between 1 and 50",
        ),
        (
            json!({"query": "redis", "source": "nope"}),
            "no docs source is named \"nope\"; configured: imqueue",
        ),
        (json!({"query": "redis", "lmit": 3}), "unknown field `lmit`"),
        (json!({"limit": 3}), "missing field `query`"),
        (json!({"query": 5}), "invalid type"),
    ];
    for (args, want) in cases {
        let message = err(&tools, "search_docs", args.clone()).await;
        assert!(message.contains(want), "{args}: {message}");
    }
}

#[tokio::test]
async fn mistakes_in_a_call_name_the_argument_for_programs() {
    let site = TestSite::start().await;
    let tools = tools_for(&site, "");
    let page = site.url("/docs/guides/exposing-methods/");
    let cases = [
        ("search_docs", json!({"query": " "}), Some("query")),
        (
            "search_docs",
            json!({"query": "x".repeat(501)}),
            Some("query"),
        ),
        (
            "search_docs",
            json!({"query": "how do I ... ?"}),
            Some("query"),
        ),
        (
            "search_docs",
            json!({"query": "redis", "limit": 0}),
            Some("limit"),
        ),
        (
            "search_docs",
            json!({"query": "redis", "source": "nope"}),
            Some("source"),
        ),
        (
            "get_doc",
            json!({"url": page, "offset": -1}),
            Some("offset"),
        ),
        (
            "get_doc",
            json!({"url": page, "offset": 1_000_000}),
            Some("offset"),
        ),
        (
            "get_doc",
            json!({"url": page, "max_chars": 0}),
            Some("max_chars"),
        ),
        // A page that is not there is a failure, not a mistake in the call.
        (
            "get_doc",
            json!({"url": site.url("/docs/no-such-page/")}),
            None,
        ),
    ];
    for (tool, args, argument) in cases {
        let Err(e) = call_tool(&tools, tool, args.clone()).await else {
            panic!("{tool} {args} should fail");
        };
        assert_eq!(
            e.structured().and_then(|s| s["invalid_argument"].as_str()),
            argument,
            "{tool} {args}: {e}"
        );
    }
}

#[tokio::test]
async fn get_doc_returns_a_short_page_whole() {
    let site = TestSite::start().await;
    let tools = tools_for(&site, "");
    let url = site.url("/docs/guides/exposing-methods/");
    let out = ok(&tools, "get_doc", json!({"url": url})).await;
    assert!(
        out.text.starts_with("# Exposing Methods with @expose()"),
        "{}",
        out.text
    );
    assert!(!out.text.contains("call get_doc with offset"));
    let s = &out.structured;
    assert_eq!(
        s["markdown_url"],
        site.url("/docs/guides/exposing-methods/index.md")
    );
    assert_eq!(s["offset"], 0);
    assert_eq!(s["end"], s["total_chars"]);
    assert_eq!(s["next_offset"], Value::Null);
    assert_eq!(s["stale"], false);
    assert_eq!(s["content"].as_str().unwrap(), out.text);
    // An API page: the `.md` form of the mirror, fragment ignored.
    let out = ok(
        &tools,
        "get_doc",
        json!({"url": site.url("/api/rpc/IMQService#start")}),
    )
    .await;
    assert_eq!(
        out.structured["markdown_url"],
        site.url("/api/rpc/IMQService.md")
    );
    assert!(out.text.starts_with("# IMQService"), "{}", out.text);
    // Served from the cache the second time.
    ok(
        &tools,
        "get_doc",
        json!({"url": site.url("/api/rpc/IMQService")}),
    )
    .await;
    assert_eq!(site.hits("/api/rpc/IMQService.md"), 1);
}

#[tokio::test]
async fn get_doc_pages_through_a_large_page() {
    let site = TestSite::start().await;
    let tools = tools_for(&site, "");
    let full = std::fs::read_to_string(common::fixture_root().join("api/index.md"))
        .unwrap()
        .replace(common::FIXTURE_SITE, &site.base());
    assert!(full.len() > 100 * 1024);
    let total = full.chars().count();
    let url = site.url("/api/");
    let mut offset = 0usize;
    let mut joined = String::new();
    let mut calls = 0;
    loop {
        let out = ok(&tools, "get_doc", json!({"url": url, "offset": offset})).await;
        calls += 1;
        let s = &out.structured;
        let content = s["content"].as_str().unwrap();
        assert!(content.chars().count() <= 20_000);
        assert_eq!(s["total_chars"], total);
        assert_eq!(s["offset"], offset);
        joined.push_str(content);
        let end = s["end"].as_u64().unwrap() as usize;
        assert_eq!(end, offset + content.chars().count());
        match s["next_offset"].as_u64() {
            Some(next) => {
                assert!(content.ends_with('\n'), "windows end at a line end");
                let note = format!(
                    "… (chars {offset}–{next} of {total}; call get_doc with offset={next} for more)"
                );
                assert!(
                    out.text.ends_with(&note),
                    "{}",
                    &out.text[out.text.len() - 200..]
                );
                offset = next as usize;
            }
            None => {
                assert!(out.text.ends_with(&format!(
                    "… (chars {offset}–{total} of {total}; end of page)"
                )));
                break;
            }
        }
        assert!(calls < 20);
    }
    assert_eq!(joined, full);
    assert!(calls >= 6, "{calls} calls");
    // Smaller windows, and the page was fetched only once.
    let out = ok(
        &tools,
        "get_doc",
        json!({"url": url, "offset": 5, "max_chars": 1000}),
    )
    .await;
    assert!(out.structured["content"].as_str().unwrap().chars().count() <= 1000);
    assert_eq!(site.hits("/api/index.md"), 1);
}

#[tokio::test]
async fn get_doc_refuses_bad_arguments_and_foreign_urls() {
    let site = TestSite::start().await;
    let tools = tools_for(&site, "");
    let page = site.url("/docs/guides/exposing-methods/");
    let port = site.port();
    let cases = [
        (
            json!({"url": "https://evil.example/docs/"}),
            "https://evil.example/docs/ is not on a configured docs site",
        ),
        (
            json!({"url": format!("http://127.0.0.1:{port}@evil.example/")}),
            "user name or password",
        ),
        (
            json!({"url": format!("http://127.0.0.2:{port}/docs/")}),
            "IP address 127.0.0.2",
        ),
        (
            json!({"url": format!("http://127.0.0.1:{}/docs/", port.wrapping_add(1))}),
            "is not on a configured docs site",
        ),
        (
            json!({"url": "docs/guides/"}),
            "is not an absolute http(s) URL",
        ),
        (
            json!({"url": "file:///etc/passwd"}),
            "is not an absolute http(s) URL",
        ),
        (
            json!({"url": format!("{page}?{}", "q".repeat(1 << 20))}),
            "the url is 1048",
        ),
        (
            json!({"url": page, "offset": -1}),
            "offset must be 0 or more (got -1)",
        ),
        (
            json!({"url": page, "offset": 1_000_000}),
            "offset 1000000 is past the end of",
        ),
        (
            json!({"url": page, "max_chars": 0}),
            "max_chars must be between 1 and 100000 (got 0)",
        ),
        (
            json!({"url": page, "max_chars": 100_001}),
            "max_chars must be between 1 and 100000",
        ),
        (json!({"url": page, "page": 2}), "unknown field `page`"),
        (json!({}), "missing field `url`"),
        (
            json!({"url": site.url("/docs/no-such-page/")}),
            "answered HTTP 404",
        ),
        (
            json!({"url": site.url("/t/html")}),
            "is an HTML page, not markdown",
        ),
    ];
    for (args, want) in cases {
        let message = err(&tools, "get_doc", args.clone()).await;
        assert!(message.contains(want), "{want}: {message:.300}");
        assert!(message.len() < 1000, "{want}: {} bytes", message.len());
    }
    let missing = err(
        &tools,
        "get_doc",
        json!({"url": site.url("/docs/no-such-page/")}),
    )
    .await;
    assert!(
        missing.contains(&site.url("/docs/no-such-page/index.md")),
        "{missing}"
    );
    assert!(
        missing.contains("there is no such page: use a URL as search_docs returns it"),
        "{missing}"
    );
    let html = err(&tools, "get_doc", json!({"url": site.url("/t/html")})).await;
    assert!(html.contains("set `mirror` of source `imqueue`"), "{html}");
    // Only the two fetches above reached the server: the refusals sent nothing.
    assert_eq!(site.total_hits(), 4);
}

#[tokio::test]
async fn stale_pages_and_indexes_are_served_and_said_to_be_stale() {
    let site = TestSite::start().await;
    let tools = tools_for(&site, "ttl_s = 0");
    let url = site.url("/docs/index.md");
    let fresh = ok(&tools, "get_doc", json!({"url": url})).await;
    ok(&tools, "search_docs", json!({"query": "redis"})).await;
    site.set_down(true);
    let stale = ok(&tools, "get_doc", json!({"url": url})).await;
    assert!(
        stale
            .text
            .starts_with("(stale copy: the site could not be reached"),
        "{}",
        stale.text
    );
    assert!(stale.text.contains("500"));
    assert_eq!(stale.structured["stale"], true);
    assert_eq!(stale.structured["content"], fresh.structured["content"]);
    let search = ok(&tools, "search_docs", json!({"query": "redis"})).await;
    assert_eq!(search.structured["stale"], true);
    assert!(
        search
            .text
            .contains("\nNote: imqueue: index from a stale copy"),
        "{}",
        search.text
    );
    assert!(!search.structured["results"].as_array().unwrap().is_empty());
    // Never fetched: a clear error naming the URL and the cause.
    let message = err(&tools, "get_doc", json!({"url": site.url("/docs/cli/")})).await;
    assert!(
        message.contains(&site.url("/docs/cli/index.md")) && message.contains("500"),
        "{message}"
    );
    assert!(
        message.contains("the site seems down and no copy is cached"),
        "{message}"
    );
}

#[tokio::test]
async fn a_search_of_one_source_counts_that_source_s_pages() {
    let site = TestSite::start().await;
    let source = |name: &str, path: &str| {
        format!(
            "[[sources]]\nname = \"{name}\"\nllms_txt = \"{}\"\nhttp_hosts = [\"127.0.0.1:{}\"]\n",
            site.url(path),
            site.port()
        )
    };
    let tools = tools_from_toml(&format!(
        "{}{}",
        source("imqueue", "/llms.txt"),
        source("v", "/t/llms-versioned.txt")
    ));
    let out = ok(
        &tools,
        "search_docs",
        json!({"query": "zxqv blorp", "source": "v"}),
    )
    .await;
    assert!(
        out.text
            .starts_with("No pages of the v docs match \"zxqv blorp\" (1 page indexed)"),
        "{}",
        out.text
    );
}

#[tokio::test]
async fn the_index_is_rebuilt_when_the_llms_txt_changes() {
    let site = TestSite::start().await;
    let tools = tools_from_toml(&format!(
        "[[sources]]\nname = \"v\"\nllms_txt = \"{}\"\nhttp_hosts = [\"127.0.0.1:{}\"]\nttl_s = 0\n",
        site.url("/t/llms-versioned.txt"),
        site.port()
    ));
    let out = ok(&tools, "search_docs", json!({"query": "brand new"})).await;
    assert_eq!(out.structured["results"], json!([]));
    // Unchanged (304): same index.
    ok(&tools, "search_docs", json!({"query": "stable"})).await;
    site.bump();
    let out = ok(&tools, "search_docs", json!({"query": "brand new"})).await;
    assert_eq!(out.structured["results"][0]["title"], "Brand New Page");
    assert_eq!(site.not_modified(), 1);
}

/// A link on a host no source allows would be refused by `get_doc`: it is
/// neither found nor listed.
#[tokio::test]
async fn links_on_hosts_not_allowed_are_not_offered() {
    let site = TestSite::start().await;
    let tools = tools_from_toml(&format!(
        "[[sources]]\nname = \"mixed\"\nllms_txt = \"{}\"\nhttp_hosts = [\"127.0.0.1:{}\"]\n",
        site.url("/t/foreign/llms.txt"),
        site.port()
    ));
    let out = ok(&tools, "search_docs", json!({"query": "page"})).await;
    let titles: Vec<&str> = out.structured["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["title"].as_str().unwrap())
        .collect();
    assert_eq!(titles, ["Local Page"], "{}", out.text);
    let listed: Vec<String> = tools
        .list_resources()
        .await
        .into_iter()
        .map(|r| r.uri)
        .collect();
    assert!(
        listed
            .iter()
            .all(|uri| !uri.contains("evil.example") && !uri.contains(":1/")),
        "{listed:?}"
    );
    assert!(
        listed.iter().any(|uri| uri.ends_with("/stable/")),
        "{listed:?}"
    );
}

#[tokio::test]
async fn broken_sources_are_named_and_do_not_hide_the_good_ones() {
    let site = TestSite::start().await;
    let port = site.port();
    let source = |name: &str, path: &str| {
        format!(
            "[[sources]]\nname = \"{name}\"\nllms_txt = \"{}\"\nhttp_hosts = [\"127.0.0.1:{port}\"]\n",
            site.url(path)
        )
    };
    let cases = [
        ("html", "/t/html/llms.txt", "docs source `html`: "),
        ("binary", "/t/binary/llms.txt", "NUL bytes"),
        (
            "words",
            "/t/words/llms.txt",
            "no `# Title` line and no `[title](url)` links",
        ),
        ("missing", "/nowhere/llms.txt", "HTTP 404"),
    ];
    for (name, path, want) in cases {
        let tools = tools_from_toml(&source(name, path));
        let message = err(&tools, "search_docs", json!({"query": "redis"})).await;
        assert!(message.contains(want), "{name}: {message}");
        assert!(
            message.contains(&format!("docs source `{name}`")),
            "{message}"
        );
    }
    let html = err(
        &tools_from_toml(&source("html", "/t/html/llms.txt")),
        "search_docs",
        json!({"query": "redis"}),
    )
    .await;
    assert!(
        html.contains("it is an HTML page, not an llms.txt"),
        "{html}"
    );
    // One good and one broken source: results plus a note.
    let both = tools_from_toml(&format!(
        "{}{}",
        source("imqueue", "/llms.txt"),
        source("html", "/t/html/llms.txt")
    ));
    let out = ok(&both, "search_docs", json!({"query": "redis cluster"})).await;
    assert!(
        out.text.starts_with("1. Redis Cluster Support — "),
        "{}",
        out.text
    );
    assert!(
        out.text.contains("(imqueue: Guides / Redis)"),
        "{}",
        out.text
    );
    assert!(
        out.text.contains("\nNote: docs source `html`: "),
        "{}",
        out.text
    );
    // Asking for the broken one alone is an error.
    let message = err(
        &both,
        "search_docs",
        json!({"query": "redis", "source": "html"}),
    )
    .await;
    assert!(message.contains("docs source `html`"), "{message}");
}

#[tokio::test]
async fn no_sources_configured_is_a_clear_error() {
    let tools = tools_from_toml("");
    let message = err(&tools, "search_docs", json!({"query": "redis"})).await;
    assert!(
        message.contains("no docs sources are configured"),
        "{message}"
    );
    let message = err(
        &tools,
        "get_doc",
        json!({"url": "https://imqueue.org/docs/"}),
    )
    .await;
    assert!(message.contains("none configured"), "{message}");
}

#[tokio::test]
async fn docs_pages_are_resources() {
    let site = TestSite::start().await;
    let tools = tools_for(&site, "");
    let resources = tools.list_resources().await;
    assert_eq!(resources[0].uri, site.url("/llms.txt"));
    assert_eq!(resources[0].name, "imqueue llms.txt");
    assert!(resources.len() > 300);
    let expose = resources
        .iter()
        .find(|r| r.uri == site.url("/docs/guides/exposing-methods/"))
        .unwrap();
    assert_eq!(expose.name, "Exposing Methods with @expose()");
    assert!(
        expose
            .description
            .as_deref()
            .unwrap()
            .starts_with("Make a service method")
    );
    assert_eq!(expose.mime_type, "text/markdown");
    let wire = serde_json::to_value(expose).unwrap();
    assert_eq!(wire["mimeType"], "text/markdown");
    let no_notes = resources
        .iter()
        .find(|r| r.name == "Code of Conduct")
        .unwrap();
    assert_eq!(
        serde_json::to_value(no_notes).unwrap().get("description"),
        None
    );

    let templates = tools.resource_templates();
    assert_eq!(templates.len(), 1);
    assert_eq!(
        templates[0].uri_template,
        format!("{}/{{+path}}", site.base())
    );
    assert_eq!(
        serde_json::to_value(&templates[0]).unwrap()["uriTemplate"],
        templates[0].uri_template
    );

    let read = tools.read_resource(&expose.uri).await.unwrap();
    assert!(read.text.starts_with("# Exposing Methods with @expose()"));
    assert_eq!(read.uri, expose.uri);
    assert!(!read.stale);
    let whole = tools.read_resource(&site.url("/api/")).await.unwrap();
    assert!(whole.text.len() > 100 * 1024, "resources are read whole");
    let llms = tools.read_resource(&site.url("/llms.txt")).await.unwrap();
    assert!(llms.text.starts_with("# imqueue"));
    assert_eq!(
        site.hits("/llms.txt"),
        1,
        "the llms.txt is shared with the index"
    );
    match tools.read_resource("https://evil.example/x").await {
        Err(DocsError::NotAllowed { .. }) => {}
        other => panic!("expected NotAllowed, got {other:?}"),
    }
}

#[tokio::test]
async fn resources_list_what_is_cached_when_the_site_is_down() {
    // Never reached: the llms.txt alone, no error.
    let site = TestSite::start().await;
    let tools = tools_for(&site, "ttl_s = 0");
    site.set_down(true);
    let resources = tools.list_resources().await;
    let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(uris, [site.url("/llms.txt")]);

    // Loaded once, then down: the pages of the copy it holds. (A fresh
    // server: one whose site just failed leaves it alone a while.)
    let tools = tools_for(&site, "ttl_s = 0");
    site.set_down(false);
    assert!(tools.list_resources().await.len() > 300);
    site.set_down(true);
    assert!(tools.list_resources().await.len() > 300);
}
