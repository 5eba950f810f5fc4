//! The llms.txt parser (<https://llmstxt.org>).
//!
//! The format: an H1 with the site's name, an optional blockquote summary,
//! free text, then H2 sections of link lists, `- [title](url): notes`. A
//! section named `Optional` holds links that can be skipped when context is
//! short; its links are kept and marked.
//!
//! Real files deviate, so the parser also takes: links without notes, `*`,
//! `+` and numbered bullets, links that are not bullets at all, relative URLs
//! (resolved against the llms.txt URL), CRLF line ends, `### ` subsections
//! (named `Section / Subsection`), notes after ` - ` or ` — ` instead of `: `,
//! notes continued on indented lines, duplicate links (the first is kept),
//! code fences (skipped) and stray whitespace. It refuses what is not an
//! llms.txt at all: an HTML page, or text with neither an H1 nor a link.

use url::Url;

/// A parsed llms.txt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LlmsTxt {
    /// The H1 text; empty when the file has links but no H1.
    pub title: String,
    /// The blockquote after the H1, lines joined.
    pub summary: Option<String>,
    /// Free text between the summary and the first section.
    pub details: String,
    pub sections: Vec<Section>,
}

/// An H2 section (or an H3 inside one) and its links.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// The heading; `Guides / Clients` for an H3 `Clients` under `Guides`;
    /// empty for links before the first heading.
    pub name: String,
    /// Under the `Optional` H2: may be skipped when context is short.
    pub optional: bool,
    pub links: Vec<Link>,
}

/// One `[title](url): notes` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub title: String,
    pub url: Url,
    pub notes: String,
}

/// Why a text is not an llms.txt.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("it is empty")]
    Empty,
    #[error(
        "it is an HTML page, not an llms.txt (is the URL right? does the site publish /llms.txt?)"
    )]
    Html,
    #[error("it has no `# Title` line and no `[title](url)` links, so it is not an llms.txt")]
    NoTitleNoLinks,
    #[error("it has more than {0} links; only that many are indexed per source")]
    TooManyLinks(usize),
}

/// The most links one llms.txt may have.
pub const MAX_LINKS: usize = 50_000;
const MAX_TITLE_CHARS: usize = 300;
const MAX_NOTES_CHARS: usize = 2_000;

impl LlmsTxt {
    /// Every link with its section, in file order.
    pub fn links(&self) -> impl Iterator<Item = (&Section, &Link)> {
        self.sections
            .iter()
            .flat_map(|s| s.links.iter().map(move |l| (s, l)))
    }

    /// The number of links.
    pub fn len(&self) -> usize {
        self.sections.iter().map(|s| s.links.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Parses `text`, resolving relative links against `base` (the llms.txt URL).
pub fn parse(text: &str, base: &Url) -> Result<LlmsTxt, ParseError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim().is_empty() {
        return Err(ParseError::Empty);
    }
    if looks_like_html(text) {
        return Err(ParseError::Html);
    }
    let mut parser = Parser {
        base,
        doc: LlmsTxt {
            title: String::new(),
            summary: None,
            details: String::new(),
            sections: Vec::new(),
        },
        h2: None,
        seen: std::collections::HashSet::new(),
        links: 0,
        last_link: false,
    };
    let mut in_fence: Option<&str> = None;
    let mut before_sections = true;
    let mut summary_open = false;
    for raw_line in text.split('\n') {
        let line = raw_line.strip_suffix('\r').unwrap_or(raw_line);
        let trimmed = line.trim();
        if let Some(fence) = in_fence {
            if trimmed.starts_with(fence) {
                in_fence = None;
            }
            continue;
        }
        if let Some(fence) = ["```", "~~~"].into_iter().find(|f| trimmed.starts_with(f)) {
            in_fence = Some(fence);
            parser.last_link = false;
            continue;
        }
        if let Some(h) = heading(trimmed, 1) {
            if parser.doc.title.is_empty() && before_sections {
                parser.doc.title = clip(h, MAX_TITLE_CHARS);
                summary_open = true;
            }
            parser.last_link = false;
            continue;
        }
        if let Some(h) = heading(trimmed, 2) {
            before_sections = false;
            summary_open = false;
            parser.open_section(h, None);
            continue;
        }
        if let Some(h) = heading(trimmed, 3) {
            before_sections = false;
            summary_open = false;
            parser.open_subsection(h);
            continue;
        }
        if trimmed.is_empty() {
            if summary_open && parser.doc.summary.is_some() {
                summary_open = false;
            }
            parser.last_link = false;
            continue;
        }
        if let Some(quote) = trimmed.strip_prefix('>') {
            if summary_open {
                let quote = quote.trim();
                match &mut parser.doc.summary {
                    Some(s) => {
                        s.push(' ');
                        s.push_str(quote);
                    }
                    None => parser.doc.summary = Some(quote.to_owned()),
                }
                continue;
            }
        } else {
            summary_open = false;
        }
        if parser.try_link(trimmed)? {
            continue;
        }
        if parser.last_link && line.starts_with([' ', '\t']) {
            parser.continue_notes(trimmed);
            continue;
        }
        parser.last_link = false;
        if before_sections && !parser.doc.title.is_empty() {
            if !parser.doc.details.is_empty() {
                parser.doc.details.push('\n');
            }
            parser.doc.details.push_str(trimmed);
        }
    }
    let doc = parser.doc;
    if doc.title.is_empty() && doc.is_empty() {
        return Err(ParseError::NoTitleNoLinks);
    }
    Ok(LlmsTxt {
        sections: doc
            .sections
            .into_iter()
            .filter(|s| !s.links.is_empty())
            .collect(),
        ..doc
    })
}

struct Parser<'a> {
    base: &'a Url,
    doc: LlmsTxt,
    /// The current H2 and whether it is `Optional`.
    h2: Option<(String, bool)>,
    seen: std::collections::HashSet<String>,
    links: usize,
    /// The previous line was a link, so an indented line continues its notes.
    last_link: bool,
}

impl Parser<'_> {
    fn open_section(&mut self, name: &str, sub: Option<&str>) {
        let h2 = clip(name, MAX_TITLE_CHARS);
        let optional = h2.eq_ignore_ascii_case("optional");
        let full = match sub {
            Some(sub) => format!("{h2} / {}", clip(sub, MAX_TITLE_CHARS)),
            None => h2.clone(),
        };
        self.h2 = Some((h2, optional));
        self.doc.sections.push(Section {
            name: full,
            optional,
            links: Vec::new(),
        });
        self.last_link = false;
    }

    fn open_subsection(&mut self, name: &str) {
        match self.h2.clone() {
            Some((h2, _)) => self.open_section(&h2, Some(name)),
            None => self.open_section(name, None),
        }
    }

    /// Takes `line` as a link if it is one; `Ok(false)` if it is not.
    fn try_link(&mut self, line: &str) -> Result<bool, ParseError> {
        let Some((title, target, rest)) = link_line(line) else {
            return Ok(false);
        };
        let Ok(url) = self.base.join(target) else {
            return Ok(false);
        };
        if !matches!(url.scheme(), "http" | "https") {
            return Ok(false);
        }
        self.last_link = true;
        if !self.seen.insert(url.as_str().to_owned()) {
            // A duplicate: the first one is kept; its notes stay as they are.
            self.last_link = false;
            return Ok(true);
        }
        self.links += 1;
        if self.links > MAX_LINKS {
            return Err(ParseError::TooManyLinks(MAX_LINKS));
        }
        let link = Link {
            title: clip(&collapse(&unescape(title)), MAX_TITLE_CHARS),
            url,
            notes: clip(&collapse(notes_of(rest)), MAX_NOTES_CHARS),
        };
        if self.doc.sections.is_empty() {
            self.doc.sections.push(Section {
                name: String::new(),
                optional: false,
                links: Vec::new(),
            });
        }
        if let Some(section) = self.doc.sections.last_mut() {
            section.links.push(link);
        }
        Ok(true)
    }

    fn continue_notes(&mut self, more: &str) {
        if let Some(link) = self
            .doc
            .sections
            .last_mut()
            .and_then(|s| s.links.last_mut())
        {
            if !link.notes.is_empty() {
                link.notes.push(' ');
            }
            link.notes.push_str(more);
            link.notes = clip(&collapse(&link.notes), MAX_NOTES_CHARS);
        }
    }
}

/// `# Title` → `Title` for `level` 1; `None` for other levels or text.
fn heading(line: &str, level: usize) -> Option<&str> {
    let rest = line.strip_prefix(&"#".repeat(level)[..])?;
    if rest.is_empty() {
        return Some("");
    }
    if !rest.starts_with([' ', '\t']) {
        return None;
    }
    Some(rest.trim().trim_end_matches('#').trim())
}

/// Splits `- [title](url) rest` into its parts. Bullets `-`, `*`, `+` and
/// `1.` are optional.
fn link_line(line: &str) -> Option<(&str, &str, &str)> {
    let mut s = line;
    if let Some(rest) = s.strip_prefix(['-', '*', '+']) {
        s = rest.trim_start();
    } else {
        let digits = s.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0
            && let Some(rest) = s[digits..].strip_prefix(['.', ')'])
        {
            s = rest.trim_start();
        }
    }
    let s = s.strip_prefix('[')?;
    let close = matching(s, '[', ']')?;
    let title = &s[..close];
    let after = s[close + 1..].strip_prefix('(')?;
    let end = matching(after, '(', ')')?;
    let mut target = after[..end].trim();
    if let Some(inner) = target.strip_prefix('<') {
        target = inner.split('>').next().unwrap_or_default();
    } else if let Some((url, _title)) = target.split_once([' ', '\t']) {
        target = url;
    }
    if target.is_empty() {
        return None;
    }
    Some((title, target, &after[end + 1..]))
}

/// The index of the bracket closing an already-open `open`, honouring
/// nesting and backslash escapes.
fn matching(s: &str, open: char, close: char) -> Option<usize> {
    let mut depth = 0usize;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == open {
            depth += 1;
        } else if c == close {
            if depth == 0 {
                return Some(i);
            }
            depth -= 1;
        }
    }
    None
}

/// What follows a link: `: notes`, ` - notes`, ` — notes`, or plain text.
fn notes_of(rest: &str) -> &str {
    let rest = rest.trim();
    for sep in [':', '-', '–', '—'] {
        if let Some(notes) = rest.strip_prefix(sep) {
            return notes.trim();
        }
    }
    rest
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `s` cut to at most `max` characters.
fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

fn looks_like_html(text: &str) -> bool {
    let head: String = text
        .trim_start()
        .chars()
        .take(512)
        .collect::<String>()
        .to_ascii_lowercase();
    head.starts_with("<!doctype")
        || head.starts_with("<html")
        || head.starts_with("<?xml")
        || (head.starts_with('<') && (head.contains("<head") || head.contains("<body")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Url {
        Url::parse("https://docs.example.org/llms.txt").unwrap()
    }

    fn ok(text: &str) -> LlmsTxt {
        parse(text, &base()).expect("parses")
    }

    const SPEC_EXAMPLE: &str = "# FastHTML

> FastHTML is a python library which brings together Starlette, Uvicorn, HTMX, and fastcore's `FT` \"FastTags\" into a library for creating server-rendered hypermedia applications.

Important notes:

- Although parts of its API are inspired by FastAPI, it is *not* compatible with FastAPI syntax
- FastHTML is compatible with JS-native web components

## Docs

- [FastHTML quick start](https://fastht.ml/docs/tutorials/quickstart_for_web_devs.html.md): A brief overview of many FastHTML features
- [HTMX reference](https://raw.githubusercontent.com/path/reference.md): Brief description of all HTMX attributes

## Examples

- [Todo list application](https://raw.githubusercontent.com/path/adv_app.py): Detailed walk-thru of a complete CRUD app

## Optional

- [Starlette full documentation](https://gist.githubusercontent.com/path/starlette-sml.md): A subset of the Starlette documentation
";

    #[test]
    fn parses_the_spec_example() {
        let doc = ok(SPEC_EXAMPLE);
        assert_eq!(doc.title, "FastHTML");
        assert!(
            doc.summary
                .as_deref()
                .unwrap()
                .starts_with("FastHTML is a python library")
        );
        assert!(doc.details.starts_with("Important notes:\n- Although"));
        assert_eq!(doc.sections.len(), 3);
        assert_eq!(doc.sections[0].name, "Docs");
        assert_eq!(doc.sections[0].links.len(), 2);
        let quick = &doc.sections[0].links[0];
        assert_eq!(quick.title, "FastHTML quick start");
        assert_eq!(
            quick.url.as_str(),
            "https://fastht.ml/docs/tutorials/quickstart_for_web_devs.html.md"
        );
        assert_eq!(quick.notes, "A brief overview of many FastHTML features");
        let optional = &doc.sections[2];
        assert!(optional.optional);
        assert_eq!(optional.links.len(), 1);
        assert!(!doc.sections[0].optional);
        assert_eq!(doc.len(), 4);
    }

    #[test]
    fn tolerates_real_world_deviations() {
        let text = "\u{feff}#   My Docs  \r\n\r\n> Summary line one\r\n> line two\r\n\r\n## Guides\r\n\r\n\
* [Intro](/intro/)\r\n\
+ [Setup]( setup.html )  -  How to set up\r\n\
- [Clients](https://docs.example.org/clients) — Calling services\r\n\
1. [Numbered](numbered.md): first\r\n\
- [Intro again](/intro/): duplicate, dropped\r\n\
-   [Spaced]  (bad) not a link\r\n\
- [Wrapped](/wrapped): starts here\r\n    and continues here\r\n\
[Bare](/bare): no bullet\r\n\
- [Esc \\[x\\]](/esc \"Title attr\"): escaped brackets\r\n\
- [Angle](</with space>): angle brackets\r\n\
- [Mail](mailto:a@b.c): not fetchable\r\n\
### Sub\r\n\
- [Deep](/deep)\r\n\
```\r\n- [Code](/code): inside a fence\r\n```\r\n";
        let doc = ok(text);
        assert_eq!(doc.title, "My Docs");
        assert_eq!(doc.summary.as_deref(), Some("Summary line one line two"));
        let links: Vec<_> = doc.links().collect();
        let titles: Vec<_> = links.iter().map(|(_, l)| l.title.as_str()).collect();
        assert_eq!(
            titles,
            [
                "Intro", "Setup", "Clients", "Numbered", "Wrapped", "Bare", "Esc [x]", "Angle",
                "Deep"
            ]
        );
        assert_eq!(links[0].1.url.as_str(), "https://docs.example.org/intro/");
        assert_eq!(links[0].1.notes, "");
        assert_eq!(
            links[1].1.url.as_str(),
            "https://docs.example.org/setup.html"
        );
        assert_eq!(links[1].1.notes, "How to set up");
        assert_eq!(links[2].1.notes, "Calling services");
        assert_eq!(links[3].1.notes, "first");
        assert_eq!(links[4].1.notes, "starts here and continues here");
        assert_eq!(links[6].1.url.as_str(), "https://docs.example.org/esc");
        assert_eq!(
            links[7].1.url.as_str(),
            "https://docs.example.org/with%20space"
        );
        assert_eq!(links[8].0.name, "Guides / Sub");
        assert!(links.iter().all(|(_, l)| l.notes != "duplicate, dropped"));
    }

    #[test]
    fn links_before_any_section_and_without_title_are_kept() {
        let doc = ok("- [A](https://a.org/a): one\n- [B](https://a.org/b)\n");
        assert_eq!(doc.title, "");
        assert_eq!(doc.len(), 2);
        assert_eq!(doc.sections[0].name, "");
    }

    #[test]
    fn a_title_alone_is_an_empty_index() {
        let doc = ok("# Nothing yet\n\n> Coming soon.\n");
        assert_eq!(doc.title, "Nothing yet");
        assert!(doc.is_empty());
    }

    #[test]
    fn refuses_what_is_not_an_llms_txt() {
        assert_eq!(parse("", &base()), Err(ParseError::Empty));
        assert_eq!(parse(" \n\r\n", &base()), Err(ParseError::Empty));
        assert_eq!(
            parse(
                "<!DOCTYPE html><html><head><title>x</title></head></html>",
                &base()
            ),
            Err(ParseError::Html)
        );
        assert_eq!(
            parse("\n  <html lang=\"en\">\n<body># Hi</body>", &base()),
            Err(ParseError::Html)
        );
        assert_eq!(
            parse("just some words\nand more words\n", &base()),
            Err(ParseError::NoTitleNoLinks)
        );
        assert_eq!(
            parse("{\"json\": [1, 2, 3]}", &base()),
            Err(ParseError::NoTitleNoLinks)
        );
    }

    #[test]
    fn long_titles_and_notes_are_clipped() {
        let text = format!(
            "# T\n## S\n- [{}](/x): {}\n",
            "t".repeat(1000),
            "n ".repeat(5000)
        );
        let doc = ok(&text);
        let link = &doc.sections[0].links[0];
        assert_eq!(link.title.chars().count(), MAX_TITLE_CHARS + 1);
        assert_eq!(link.notes.chars().count(), MAX_NOTES_CHARS + 1);
    }
}
