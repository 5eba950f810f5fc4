//! The library: the configured sources, their llms.txt files turned into one
//! search index, and the pages behind the links. The tools and the MCP
//! resources both read through it.
//!
//! Every llms.txt and page goes through the [`Cache`], so the TTL,
//! revalidation and stale-on-error rules apply to both. The index is rebuilt
//! whenever a source's llms.txt text changes (a new download with a
//! different body); a `304` or a cache hit reuses it.

use std::sync::{Arc, Mutex};

use url::Url;

use crate::{
    cache::{Cache, Lookup},
    config::{ConfigError, DocsConfig, Mirror, Source},
    fetch::{FetchError, Fetcher, HostPolicy, Refusal, http_client},
    index::{Entry, Index},
    llms_txt::{self, LlmsTxt, ParseError},
};

/// What to do when a source's site does not answer.
fn unavailable_hint(error: &FetchError) -> &'static str {
    if error.is_unavailable() {
        "; its pages are searchable once the site answers (switchboard asks again within 30 s), or point the source's llms_txt at a local copy (docs/profiles.md)"
    } else {
        ""
    }
}

/// The longest page URL taken: far beyond any real page's, well within
/// what an HTTP client sends.
pub const MAX_URL_BYTES: usize = 8 * 1024;

/// A failure of the library; each message names the source or URL.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DocsError {
    #[error(
        "docs source `{source_name}`: cannot load its llms.txt: {error}{}",
        unavailable_hint(error)
    )]
    LlmsTxtFetch {
        source_name: String,
        error: Box<FetchError>,
    },
    #[error("docs source `{source_name}`: {url} is not usable: {error}")]
    LlmsTxtParse {
        source_name: String,
        url: String,
        error: ParseError,
    },
    #[error("{url:?} is not an absolute http(s) URL; pass a page URL as search_docs returns it")]
    BadUrl { url: String },
    #[error(
        "the url is {len} bytes long; the limit is {MAX_URL_BYTES}; pass a page URL as search_docs returns it"
    )]
    UrlTooLong { len: usize },
    #[error(
        "{url} is not on a configured docs site{detail} (allowed: {allowed}); pass a URL that search_docs returned"
    )]
    NotAllowed {
        url: String,
        /// Why, when it is more than "another host": `: the URL carries a user name…`.
        detail: String,
        allowed: String,
    },
    #[error("cannot get {page}: {error}{hint}")]
    Page {
        page: String,
        error: Box<FetchError>,
        /// What probably went wrong, when that can be told.
        hint: &'static str,
    },
    #[error(
        "{url} (the markdown copy of {page}) is an HTML page, not markdown; the site may have no markdown copies: set `mirror` of source `{source_name}` to \"none\", \"index.md\" or \"append-md\" to match it"
    )]
    HtmlMirror {
        url: String,
        page: String,
        source_name: String,
    },
    #[error("no docs source is named {name:?}; configured: {known}")]
    UnknownSource { name: String, known: String },
}

/// Setting up the library failed.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("docs: cannot set up the HTTP client: {0}")]
    Client(#[from] reqwest::Error),
}

struct SourceState {
    source: Source,
    fetcher: Fetcher,
}

/// The parsed llms.txt of one source and the text it came from.
struct Parsed {
    text: Arc<str>,
    doc: LlmsTxt,
}

/// The index over every source parsed so far.
pub(crate) struct Catalog {
    pub index: Index,
}

/// The outcome of loading the indexes: the catalog plus what went wrong
/// with individual sources (stale copies, errors).
pub(crate) struct Loaded {
    pub catalog: Arc<Catalog>,
    /// One line per source that is stale or failed.
    pub warnings: Vec<String>,
    pub stale: bool,
}

/// One source as [`Library::probe`] found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceProbe {
    pub name: String,
    pub llms_txt: String,
    /// The links indexed from it, or why it cannot be loaded.
    pub outcome: Result<usize, String>,
}

/// A page resolved to its markdown copy and fetched.
pub(crate) struct Page {
    pub source: usize,
    pub page_url: Url,
    pub markdown_url: Url,
    pub lookup: Lookup,
}

/// Sources, cache and index.
pub struct Library {
    sources: Vec<SourceState>,
    cache: Cache,
    state: Mutex<State>,
}

struct State {
    parsed: Vec<Option<Parsed>>,
    catalog: Arc<Catalog>,
    /// The texts `catalog` was built from, by source.
    built_from: Vec<Option<Arc<str>>>,
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Library")
            .field("sources", &self.source_names())
            .finish()
    }
}

impl Library {
    /// Validates `config` and prepares the sources; nothing is fetched yet.
    pub fn new(config: &DocsConfig) -> Result<Self, SetupError> {
        let sources = config.resolve()?;
        let client = http_client()?;
        let sources: Vec<SourceState> = sources
            .into_iter()
            .map(|source| SourceState {
                fetcher: Fetcher::new(
                    client.clone(),
                    HostPolicy::new(source.https_hosts.clone(), source.http_hosts.clone()),
                    source.timeout,
                    source.max_page_bytes,
                ),
                source,
            })
            .collect();
        let n = sources.len();
        Ok(Self {
            sources,
            cache: Cache::new(config.cache_bytes),
            state: Mutex::new(State {
                parsed: (0..n).map(|_| None).collect(),
                catalog: Arc::new(Catalog {
                    index: Index::build(Vec::new()),
                }),
                built_from: vec![None; n],
            }),
        })
    }

    /// The source names, in configuration order.
    pub fn source_names(&self) -> Vec<&str> {
        self.sources
            .iter()
            .map(|s| s.source.name.as_str())
            .collect()
    }

    pub(crate) fn source_name(&self, index: usize) -> &str {
        &self.sources[index].source.name
    }

    pub(crate) fn source_llms_txt(&self, index: usize) -> &Url {
        &self.sources[index].source.llms_txt
    }

    /// The index of the source called `name`.
    pub(crate) fn source_index(&self, name: &str) -> Result<usize, DocsError> {
        self.sources
            .iter()
            .position(|s| s.source.name == name)
            .ok_or_else(|| DocsError::UnknownSource {
                name: name.to_owned(),
                known: self.source_names().join(", "),
            })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Loads (through the cache) the llms.txt of `only`, or of every
    /// source, and returns the index, rebuilt if any text changed. Fails
    /// only if no requested source could be loaded at all.
    pub(crate) async fn load(&self, only: Option<usize>) -> Result<Loaded, DocsError> {
        let wanted: Vec<usize> = match only {
            Some(i) => vec![i],
            None => (0..self.sources.len()).collect(),
        };
        let lookups = futures::future::join_all(wanted.iter().map(|&i| {
            let s = &self.sources[i];
            self.cache.get(&s.source.llms_txt, &s.fetcher, s.source.ttl)
        }))
        .await;
        let mut warnings = Vec::new();
        let mut errors = Vec::new();
        let mut stale = false;
        let mut state = self.lock();
        for (&i, lookup) in wanted.iter().zip(lookups) {
            let name = &self.sources[i].source.name;
            let lookup = match lookup {
                Ok(lookup) => lookup,
                Err(error) => {
                    errors.push(DocsError::LlmsTxtFetch {
                        source_name: name.clone(),
                        error: Box::new(error),
                    });
                    continue;
                }
            };
            if let Some(note) = lookup.stale_note() {
                stale = true;
                warnings.push(format!("{name}: index from a {note}"));
            }
            if let Err(error) = self.take(&mut state, i, &lookup) {
                errors.push(error);
            }
        }
        if !errors.is_empty() && errors.len() == wanted.len() {
            return Err(errors.swap_remove(0));
        }
        warnings.extend(errors.iter().map(ToString::to_string));
        self.rebuild_if_changed(&mut state);
        Ok(Loaded {
            catalog: state.catalog.clone(),
            warnings,
            stale,
        })
    }

    /// Takes source `i`'s llms.txt as `lookup` found it: parsed anew
    /// when its text changed; an error if it does not parse (the source is
    /// then left out of the index).
    fn take(&self, state: &mut State, i: usize, lookup: &Lookup) -> Result<(), DocsError> {
        let text = lookup.page.text.clone();
        if let Some(parsed) = &mut state.parsed[i]
            && !Arc::ptr_eq(&parsed.text, &text)
            && parsed.text == text
        {
            // Downloaded again (say, after eviction) but unchanged: keep
            // the index, remember the new copy.
            if let Some(built) = &mut state.built_from[i]
                && Arc::ptr_eq(built, &parsed.text)
            {
                *built = text.clone();
            }
            parsed.text = text.clone();
        }
        let current = state.parsed[i]
            .as_ref()
            .is_some_and(|p| Arc::ptr_eq(&p.text, &text));
        if current {
            return Ok(());
        }
        match llms_txt::parse(&text, &self.sources[i].source.llms_txt) {
            Ok(doc) => {
                state.parsed[i] = Some(Parsed { text, doc });
                Ok(())
            }
            Err(error) => {
                state.parsed[i] = None;
                Err(DocsError::LlmsTxtParse {
                    source_name: self.sources[i].source.name.clone(),
                    url: lookup.page.final_url.to_string(),
                    error,
                })
            }
        }
    }

    /// Rebuilds the index over every source's entries unless it was built
    /// from the very texts now parsed.
    fn rebuild_if_changed(&self, state: &mut State) {
        let texts: Vec<Option<Arc<str>>> = state
            .parsed
            .iter()
            .map(|p| p.as_ref().map(|p| p.text.clone()))
            .collect();
        let unchanged = texts.len() == state.built_from.len()
            && texts
                .iter()
                .zip(&state.built_from)
                .all(|(a, b)| match (a, b) {
                    (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                    (None, None) => true,
                    _ => false,
                });
        if !unchanged {
            // A link no source allows fetching would be offered and then
            // refused by get_doc: it is left out, and the log says so.
            let (entries, refused): (Vec<Entry>, Vec<Entry>) = state
                .parsed
                .iter()
                .enumerate()
                .filter_map(|(i, p)| p.as_ref().map(|p| (i, p)))
                .flat_map(|(i, p)| Entry::all_of(i, &p.doc))
                .partition(|entry| self.source_of(&entry.url).is_ok());
            if let Some(first) = refused.first() {
                tracing::warn!(
                    source = self.sources[first.source].source.name,
                    left_out = refused.len(),
                    first = first.url,
                    "docs: links on hosts no source allows are left out of the index; list their hosts in allowed_hosts to offer them"
                );
            }
            state.catalog = Arc::new(Catalog {
                index: Index::build(entries),
            });
            state.built_from = texts;
            tracing::debug!(entries = state.catalog.index.len(), "docs: index rebuilt");
        }
    }

    /// Loads every source's llms.txt now, one by one: for each, how many
    /// links the index takes from it, or why it cannot be loaded. What
    /// `switchboard check` reports.
    pub async fn probe(&self) -> Vec<SourceProbe> {
        let mut probes = Vec::with_capacity(self.sources.len());
        for (i, state) in self.sources.iter().enumerate() {
            let outcome = match self.load(Some(i)).await {
                Ok(loaded) => Ok(loaded.catalog.index.len_of(Some(i))),
                Err(e) => Err(e.to_string()),
            };
            probes.push(SourceProbe {
                name: state.source.name.clone(),
                llms_txt: state.source.llms_txt.to_string(),
                outcome,
            });
        }
        probes
    }

    /// The index as last built, without loading anything: what the cache
    /// gave the last successful [`Library::load`] (empty before the first).
    pub(crate) fn cached_catalog(&self) -> Arc<Catalog> {
        self.lock().catalog.clone()
    }

    /// The source whose hosts include `url`.
    pub(crate) fn source_of(&self, raw: &str) -> Result<(usize, Url), DocsError> {
        if raw.len() > MAX_URL_BYTES {
            return Err(DocsError::UrlTooLong { len: raw.len() });
        }
        let url = Url::parse(raw.trim()).map_err(|_| DocsError::BadUrl {
            url: raw.chars().take(200).collect(),
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(DocsError::BadUrl {
                url: raw.chars().take(200).collect(),
            });
        }
        let mut refusal = None;
        for (i, s) in self.sources.iter().enumerate() {
            match s.fetcher.policy().check(&url) {
                Ok(()) => return Ok((i, url)),
                Err(r) => refusal = refusal.or(Some(r)),
            }
        }
        let detail = match refusal {
            None | Some(Refusal::HostNotListed { .. }) => String::new(),
            Some(reason) => format!(": {reason}"),
        };
        let allowed = self
            .sources
            .iter()
            .map(|s| s.fetcher.policy().describe())
            .collect::<Vec<_>>()
            .join(", ");
        Err(DocsError::NotAllowed {
            url: url.into(),
            detail,
            allowed: if allowed.is_empty() {
                "none configured".into()
            } else {
                allowed
            },
        })
    }

    /// Resolves a page URL to its markdown copy and fetches it.
    pub(crate) async fn page(&self, raw: &str) -> Result<Page, DocsError> {
        let (source, mut page_url) = self.source_of(raw)?;
        page_url.set_fragment(None);
        let s = &self.sources[source];
        let markdown_url = if page_url == s.source.llms_txt {
            page_url.clone()
        } else {
            markdown_url(&page_url, s.source.mirror)
        };
        let lookup = self
            .cache
            .get(&markdown_url, &s.fetcher, s.source.ttl)
            .await
            .map_err(|error| DocsError::Page {
                page: page_url.to_string(),
                hint: match &error {
                    e if e.is_unavailable() => "; the site seems down and no copy is cached",
                    FetchError::Status { status, .. } if status.as_u16() == 404 => {
                        "; there is no such page: use a URL as search_docs returns it (if every page of the source gives 404, its `mirror` setting may be wrong)"
                    }
                    _ => "",
                },
                error: Box::new(error),
            })?;
        if s.source.mirror != Mirror::None && is_html(&lookup) {
            return Err(DocsError::HtmlMirror {
                url: markdown_url.into(),
                page: page_url.into(),
                source_name: s.source.name.clone(),
            });
        }
        Ok(Page {
            source,
            page_url,
            markdown_url,
            lookup,
        })
    }
}

fn is_html(lookup: &Lookup) -> bool {
    let declared = lookup
        .page
        .content_type
        .as_deref()
        .is_some_and(|t| t.to_ascii_lowercase().starts_with("text/html"));
    let head: String = lookup
        .page
        .text
        .trim_start()
        .chars()
        .take(64)
        .collect::<String>()
        .to_ascii_lowercase();
    declared || head.starts_with("<!doctype html") || head.starts_with("<html")
}

/// The URL of the markdown copy of `page` under `mirror`.
pub fn markdown_url(page: &Url, mirror: Mirror) -> Url {
    let mut url = page.clone();
    url.set_fragment(None);
    let path = url.path().to_owned();
    let dir = path.ends_with('/');
    let new_path = match mirror {
        Mirror::None => return url,
        _ if path.ends_with(".md") => return url,
        Mirror::Auto if dir => format!("{path}index.md"),
        Mirror::Auto => format!("{path}.md"),
        Mirror::IndexMd if dir => format!("{path}index.md"),
        Mirror::IndexMd => format!("{path}/index.md"),
        Mirror::AppendMd if dir => format!("{path}index.html.md"),
        Mirror::AppendMd => format!("{path}.md"),
    };
    url.set_path(&new_path);
    url
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirror_urls_follow_the_setting() {
        let url = |s: &str| Url::parse(s).unwrap();
        let cases = [
            (
                "https://a.org/docs/guide/",
                Mirror::Auto,
                "https://a.org/docs/guide/index.md",
            ),
            (
                "https://a.org/api/IMQService",
                Mirror::Auto,
                "https://a.org/api/IMQService.md",
            ),
            (
                "https://a.org/x.html",
                Mirror::Auto,
                "https://a.org/x.html.md",
            ),
            ("https://a.org/x.md", Mirror::Auto, "https://a.org/x.md"),
            (
                "https://a.org/x/#part",
                Mirror::Auto,
                "https://a.org/x/index.md",
            ),
            (
                "https://a.org/x?v=2",
                Mirror::Auto,
                "https://a.org/x.md?v=2",
            ),
            ("https://a.org/", Mirror::Auto, "https://a.org/index.md"),
            (
                "https://a.org/x",
                Mirror::IndexMd,
                "https://a.org/x/index.md",
            ),
            (
                "https://a.org/x/",
                Mirror::IndexMd,
                "https://a.org/x/index.md",
            ),
            ("https://a.org/x", Mirror::AppendMd, "https://a.org/x.md"),
            (
                "https://a.org/x/",
                Mirror::AppendMd,
                "https://a.org/x/index.html.md",
            ),
            ("https://a.org/x/", Mirror::None, "https://a.org/x/"),
            ("https://a.org/x.md", Mirror::None, "https://a.org/x.md"),
        ];
        for (page, mirror, want) in cases {
            assert_eq!(
                markdown_url(&url(page), mirror).as_str(),
                want,
                "{page} {mirror:?}"
            );
        }
    }
}
