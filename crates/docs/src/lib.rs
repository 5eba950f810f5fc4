//! Documentation for agents: search and read the sites that publish an
//! `llms.txt` (<https://llmstxt.org>), fetched from allow-listed hosts only.
//!
//! - [`tools`] — the docs toolset ([`DocsTools`]): `search_docs` and `get_doc`.
//! - [`resources`] — the same pages as MCP resources, for the server to list
//!   and read.
//! - [`config`] — the `[docs]` settings and their validation.
//! - [`library`] — sources, their index and pages, shared by tools and
//!   resources.
//! - [`llms_txt`] — the llms.txt parser.
//! - [`index`] — the BM25F search index with English stemming.
//! - [`fetch`] — the allow-listed HTTP fetcher.
//! - [`cache`] — the in-memory page cache with revalidation and stale copies.
//! - `fuzzing` — the bodies of the `llms_txt` and `fetch_urls` fuzz targets
//!   (feature `fuzzing`).

pub mod cache;
pub mod config;
pub mod fetch;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod index;
pub mod library;
pub mod llms_txt;
pub mod resources;
pub mod tools;

pub use config::{ConfigError, DocsConfig, Mirror, SourceConfig};
pub use library::{DocsError, Library, SetupError, SourceProbe};
pub use resources::{DocResource, DocResourceContents, DocResourceTemplate};
pub use tools::DocsTools;
