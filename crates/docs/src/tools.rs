//! The docs toolset: `search_docs` and `get_doc`.
//!
//! `search_docs` ranks the links of the sources' llms.txt files for a query;
//! `get_doc` returns a page's markdown copy in windows of at most
//! `max_chars` characters, ending with a note that says how to get the rest,
//! so a long page never exceeds what a client shows the model. Each result's
//! text stands on its own (many hosts show the model only the text) and
//! `structuredContent` mirrors it.

use std::{sync::Arc, time::Duration};

use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_toolset::{
    Caller, JsonObject, Session, ToolAnnotations, ToolError, ToolFuture, ToolId, ToolOutput,
    ToolSpec, ToolTable, Toolset, bounded, object_schema, parse_args,
};

use crate::{
    config::{DocsConfig, MAX_PAGE_CHARS, MAX_SEARCH_LIMIT},
    library::{Library, SetupError},
};

/// The longest query accepted, in characters.
const MAX_QUERY_CHARS: usize = 500;

/// The docs tools over the configured sources.
#[derive(Debug)]
pub struct DocsTools {
    pub(crate) library: Library,
    page_chars: usize,
    search_limit: usize,
    tools: ToolTable<DocsTool>,
}

/// What each docs tool is, to dispatch a call from its declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DocsTool {
    SearchDocs,
    GetDoc,
}

impl DocsTools {
    /// Validates `config` and prepares the tools; nothing is fetched until
    /// the first call.
    pub fn new(config: &DocsConfig) -> Result<Self, SetupError> {
        let library = Library::new(config)?;
        // A call may fetch an llms.txt and then a page, each bounded by its
        // source's timeout; a relay client (the shim) must wait that long.
        let longest_fetch = config
            .sources
            .iter()
            .map(|s| s.timeout_s)
            .fold(0.0, f64::max);
        let deadline = Duration::from_secs_f64(2.0 * longest_fetch + 1.0);
        let tools = tool_definitions(
            &library.source_names(),
            config.page_chars,
            config.search_limit,
            deadline,
        );
        Ok(Self {
            library,
            page_chars: config.page_chars,
            search_limit: config.search_limit,
            tools,
        })
    }

    /// The sources, cache and index behind the tools.
    pub fn library(&self) -> &Library {
        &self.library
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchParams {
    query: String,
    limit: Option<i64>,
    source: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GetParams {
    url: String,
    offset: Option<i64>,
    max_chars: Option<i64>,
}

impl Toolset for DocsTools {
    fn name(&self) -> &str {
        "docs"
    }

    fn tools(&self) -> &[ToolSpec] {
        self.tools.specs()
    }

    fn instructions(&self, _session: Option<&Session>) -> Option<String> {
        let sources = self.library.source_names();
        if sources.is_empty() {
            return None;
        }
        Some(format!(
            "Documentation of {}: search_docs with a few keywords finds pages, then get_doc \
with a result's url reads one; a long page comes in parts, and the end of each part says the \
offset of the next.",
            sources.join(", ")
        ))
    }

    fn call<'a>(&'a self, tool: ToolId, args: JsonObject, _caller: &'a Caller) -> ToolFuture<'a> {
        let (kind, spec) = self.tools.get(tool);
        let name = spec.name.as_str();
        Box::pin(async move {
            match kind {
                DocsTool::SearchDocs => self.search_docs(parse_args(name, args)?).await,
                DocsTool::GetDoc => self.get_doc(parse_args(name, args)?).await,
            }
        })
    }
}

fn fail(e: impl std::fmt::Display) -> ToolError {
    ToolError::new(e.to_string())
}

impl DocsTools {
    async fn search_docs(&self, p: SearchParams) -> Result<ToolOutput, ToolError> {
        let query = p.query.trim();
        if query.is_empty() {
            return Err(ToolError::invalid_argument(
                "query",
                "query is empty; say what you are looking for, e.g. \"configure logging\"",
            ));
        }
        if query.chars().count() > MAX_QUERY_CHARS {
            return Err(ToolError::invalid_argument(
                "query",
                format!("query is longer than {MAX_QUERY_CHARS} characters; use a few keywords"),
            ));
        }
        let limit = bounded("limit", p.limit, self.search_limit, MAX_SEARCH_LIMIT)?;
        let source = match p.source.as_deref() {
            Some(name) => Some(
                self.library
                    .source_index(name.trim())
                    .map_err(|e| ToolError::invalid_argument("source", e.to_string()))?,
            ),
            None => None,
        };
        if self.library.source_names().is_empty() {
            return Err(ToolError::new(
                "no docs sources are configured ([[docs.sources]] in the config)",
            ));
        }
        let loaded = self.library.load(source).await.map_err(fail)?;
        let index = &loaded.catalog.index;
        if !index.has_terms(query) {
            return Err(ToolError::invalid_argument(
                "query",
                format!(
                    "query {query:?} has no words to search for (only common words or punctuation); name the topic, e.g. \"retry failed requests\""
                ),
            ));
        }
        let hits = index.search(query, limit, source);
        let several = self.library.source_names().len() > 1;
        let mut lines = Vec::new();
        let mut results = Vec::new();
        for (rank, hit) in hits.iter().enumerate() {
            let e = hit.entry;
            let source_name = self.library.source_name(e.source);
            let place = match (several, e.section.is_empty()) {
                (true, true) => format!(" ({source_name})"),
                (true, false) => format!(" ({source_name}: {})", e.section),
                (false, true) => String::new(),
                (false, false) => format!(" ({})", e.section),
            };
            let title = if e.title.is_empty() { &e.url } else { &e.title };
            lines.push(format!("{}. {title} — {}{place}", rank + 1, e.url));
            if !e.notes.is_empty() {
                lines.push(format!("   {}", e.notes));
            }
            results.push(json!({
                "title": e.title,
                "url": e.url,
                "section": e.section,
                "notes": e.notes,
                "score": (f64::from(hit.score) * 1000.0).round() / 1000.0,
                "source": source_name,
                "optional": e.optional,
            }));
        }
        let mut text = if hits.is_empty() {
            let scope = match source {
                Some(i) => format!("the {} docs", self.library.source_name(i)),
                None => "the docs".to_owned(),
            };
            let pages = match index.len_of(source) {
                1 => "1 page".to_owned(),
                n => format!("{n} pages"),
            };
            format!(
                "No pages of {scope} match {query:?} ({pages} indexed). Try other words: a class, method, command or topic name."
            )
        } else {
            lines.push(String::new());
            lines.push("Read a page with get_doc(url).".to_owned());
            lines.join("\n")
        };
        for warning in &loaded.warnings {
            text.push_str(&format!("\nNote: {warning}"));
        }
        Ok(ToolOutput::new(
            text,
            json!({
                "query": query,
                "results": results,
                "stale": loaded.stale,
                "warnings": loaded.warnings,
            }),
        ))
    }

    async fn get_doc(&self, p: GetParams) -> Result<ToolOutput, ToolError> {
        let offset = match p.offset {
            None => 0,
            Some(n) if n >= 0 => usize::try_from(n).unwrap_or(usize::MAX),
            Some(n) => {
                return Err(ToolError::invalid_argument(
                    "offset",
                    format!("offset must be 0 or more (got {n})"),
                ));
            }
        };
        let max_chars = bounded("max_chars", p.max_chars, self.page_chars, MAX_PAGE_CHARS)?;
        let page = self.library.page(&p.url).await.map_err(fail)?;
        let doc = &page.lookup.page;
        let total = doc.chars;
        if offset > 0 && offset >= total {
            return Err(ToolError::invalid_argument(
                "offset",
                format!(
                    "offset {offset} is past the end of {} ({total} characters); use an offset below {total}, or 0 to start again",
                    page.page_url
                ),
            ));
        }
        let window = window(&doc.text, doc.byte_offset(offset), offset, max_chars);
        let mut text = String::with_capacity(window.text.len() + 200);
        let stale_note = page.lookup.stale_note();
        if let Some(note) = &stale_note {
            text.push_str(&format!("({note})\n\n"));
        }
        if total == 0 {
            text.push_str("(the page is empty)");
        } else {
            text.push_str(window.text);
        }
        let more = window.end < total;
        if more {
            text.push_str(&format!(
                "\n\n… (chars {}–{} of {total}; call get_doc with offset={} for more)",
                window.start, window.end, window.end
            ));
        } else if offset > 0 {
            text.push_str(&format!(
                "\n\n… (chars {}–{total} of {total}; end of page)",
                window.start
            ));
        }
        Ok(ToolOutput::new(
            text,
            json!({
                "url": page.page_url.as_str(),
                "markdown_url": page.markdown_url.as_str(),
                "source": self.library.source_name(page.source),
                "offset": window.start,
                "end": window.end,
                "total_chars": total,
                "next_offset": if more { json!(window.end) } else { Value::Null },
                "stale": stale_note.is_some(),
                "content": window.text,
            }),
        ))
    }
}

/// A slice of a page, in characters.
#[derive(Debug, PartialEq, Eq)]
struct Window<'a> {
    text: &'a str,
    start: usize,
    end: usize,
}

/// At most `max` characters of `text` from character `start` (at byte
/// `start_byte`), cut at the last line end in the window if that keeps at
/// least half of it.
fn window(text: &str, start_byte: usize, start: usize, max: usize) -> Window<'_> {
    let rest = &text[start_byte..];
    let (mut cut, mut chars) = match rest.char_indices().nth(max) {
        Some((b, _)) => (b, max),
        None => (rest.len(), rest.chars().count()),
    };
    if cut < rest.len()
        && let Some(newline) = rest[..cut].rfind('\n')
    {
        let kept = rest[..=newline].chars().count();
        if kept >= max / 2 {
            cut = newline + 1;
            chars = kept;
        }
    }
    Window {
        text: &rest[..cut],
        start,
        end: start + chars,
    }
}

/// The docs tools; `deadline` bounds a call (relay clients wait that long).
fn tool_definitions(
    sources: &[&str],
    page_chars: usize,
    search_limit: usize,
    deadline: Duration,
) -> ToolTable<DocsTool> {
    let read_only = |open_world: bool| {
        ToolAnnotations::new()
            .read_only(true)
            .destructive(false)
            .idempotent(true)
            .open_world(open_world)
    };
    let output = |v: Value| Arc::new(v.as_object().cloned().unwrap_or_default());
    let mut source = json!({"type": "string", "description": "Only this docs source"});
    if !sources.is_empty() {
        source["enum"] = json!(sources);
    }
    let names = if sources.is_empty() {
        "none configured".to_owned()
    } else {
        sources.join(", ")
    };
    ToolTable::new()
        .with(DocsTool::SearchDocs, ToolSpec::new(
            "search_docs",
            format!(
                "Search the documentation ({names}) for pages about a topic, class, method or command; returns the best pages (title, url, section, notes). Read one with get_doc."
            ),
            object_schema(
                json!({
                    "query": {"type": "string", "description": "Words to look for: a topic, class, method or command, e.g. \"configure logging\" or \"retry failed requests\""},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_LIMIT, "default": search_limit},
                    "source": source
                }),
                &["query"],
            ),
        )
        .with_output_schema(output(json!({
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "results": {"type": "array", "items": {
                    "type": "object",
                    "properties": {
                        "title": {"type": "string"},
                        "url": {"type": "string"},
                        "section": {"type": "string"},
                        "notes": {"type": "string"},
                        "score": {"type": "number"},
                        "source": {"type": "string"},
                        "optional": {"type": "boolean"}
                    },
                    "required": ["title", "url", "section", "notes", "score"]
                }},
                "stale": {"type": "boolean"},
                "warnings": {"type": "array", "items": {"type": "string"}}
            },
            "required": ["query", "results"]
        })))
        .with_annotations(read_only(true))
        .with_timeout(deadline))
        .with(DocsTool::GetDoc, ToolSpec::new(
            "get_doc",
            "Read a documentation page as markdown, by the url search_docs gave. Long pages come in parts: the text ends with the offset to pass for the next part.",
            object_schema(
                json!({
                    "url": {"type": "string", "description": "Page URL from search_docs"},
                    "offset": {"type": "integer", "minimum": 0, "default": 0, "description": "Character to start at"},
                    "max_chars": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_CHARS, "default": page_chars}
                }),
                &["url"],
            ),
        )
        .with_output_schema(output(json!({
            "type": "object",
            "properties": {
                "url": {"type": "string"},
                "markdown_url": {"type": "string"},
                "source": {"type": "string"},
                "offset": {"type": "integer"},
                "end": {"type": "integer"},
                "total_chars": {"type": "integer"},
                "next_offset": {"type": ["integer", "null"]},
                "stale": {"type": "boolean"},
                "content": {"type": "string"}
            },
            "required": ["url", "offset", "end", "total_chars", "content"]
        })))
        .with_annotations(read_only(true))
        .with_timeout(deadline))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_cut_at_char_and_line_boundaries() {
        let text = "ab\ncd\néé€\n";
        let w = |offset: usize, max| {
            let byte = text
                .char_indices()
                .nth(offset)
                .map_or(text.len(), |(b, _)| b);
            let w = window(text, byte, offset, max);
            (w.text, w.start, w.end)
        };
        assert_eq!(w(0, 100), (text, 0, 10));
        // A line end in the second half of the window is preferred.
        assert_eq!(w(0, 5), ("ab\n", 0, 3));
        assert_eq!(w(0, 6), ("ab\ncd\n", 0, 6));
        // No line end in the window: cut at a character boundary.
        assert_eq!(w(6, 2), ("éé", 6, 8));
        assert_eq!(w(8, 5), ("€\n", 8, 10));
        assert_eq!(w(10, 5), ("", 10, 10));
        let long = "x".repeat(30);
        assert_eq!(window(&long, 10, 10, 7).text.len(), 7);
    }

    #[test]
    fn tools_are_read_only_and_name_the_sources() {
        let tools = tool_definitions(&["imqueue"], 20_000, 6, Duration::from_secs(11));
        for tool in tools.specs() {
            let annotations = tool.annotations.as_ref().unwrap();
            assert_eq!(annotations.read_only_hint, Some(true));
            assert!(tool.output_schema.is_some());
            // Both may reach the site (search_docs fetches the llms.txt).
            assert_eq!(annotations.open_world_hint, Some(true));
        }
        let search = &tools.specs()[0];
        assert_eq!(
            search.input_schema["properties"]["source"]["enum"],
            json!(["imqueue"])
        );
    }
}
