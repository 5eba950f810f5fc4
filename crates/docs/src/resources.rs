//! Docs pages as MCP resources, in plain structs the server maps onto its
//! MCP types: one resource per llms.txt link (uri = the page URL, name = the
//! link title, description = its notes) plus each source's llms.txt itself,
//! a URI template per source for pages not listed, and `read` returning a
//! page's whole markdown.

use std::{future::Future, pin::Pin};

use serde::Serialize;
use switchboard_toolset::{ReadResourceResult, Resource, ResourceSource, ResourceTemplate};

use crate::{library::DocsError, tools::DocsTools};

/// The MIME type of every docs resource.
pub const MARKDOWN: &str = "text/markdown";

/// An entry of `resources/list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DocResource {
    pub uri: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub mime_type: String,
}

/// An entry of `resources/templates/list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DocResourceTemplate {
    /// An RFC 6570 template, e.g. `https://imqueue.org/{+path}`.
    pub uri_template: String,
    pub name: String,
    pub description: String,
    pub mime_type: String,
}

/// The answer to `resources/read`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DocResourceContents {
    pub uri: String,
    pub mime_type: String,
    pub text: String,
    /// The site could not be reached and this is an older copy.
    #[serde(skip)]
    pub stale: bool,
}

impl DocsTools {
    /// Every source's llms.txt and every page it links, loading the
    /// llms.txt files first (through the cache). A source that cannot be
    /// loaded contributes the pages of its last loaded copy, if any; the
    /// failure is logged, not returned, so that a client listing resources
    /// at start-up sees a working server (the tools report the failure).
    pub async fn list_resources(&self) -> Vec<DocResource> {
        let library = &self.library;
        let catalog = match library.load(None).await {
            Ok(loaded) => {
                for warning in &loaded.warnings {
                    tracing::warn!("docs resources: {warning}");
                }
                loaded.catalog
            }
            Err(error) => {
                tracing::warn!("docs resources: listing only cached pages: {error}");
                library.cached_catalog()
            }
        };
        let mut out: Vec<DocResource> = (0..library.source_names().len())
            .map(|i| DocResource {
                uri: library.source_llms_txt(i).to_string(),
                name: format!("{} llms.txt", library.source_name(i)),
                description: Some(format!(
                    "The index of the {} docs: every page with a one-line note",
                    library.source_name(i)
                )),
                mime_type: MARKDOWN.into(),
            })
            .collect();
        out.extend(catalog.index.entries().iter().map(|e| DocResource {
            uri: e.url.clone(),
            name: if e.title.is_empty() {
                e.url.clone()
            } else {
                e.title.clone()
            },
            description: (!e.notes.is_empty()).then(|| e.notes.clone()),
            mime_type: MARKDOWN.into(),
        }));
        out
    }

    /// One template per source: any URL under the origin of its llms.txt.
    pub fn resource_templates(&self) -> Vec<DocResourceTemplate> {
        let library = &self.library;
        (0..library.source_names().len())
            .map(|i| {
                let name = library.source_name(i);
                let origin = library.source_llms_txt(i).origin().ascii_serialization();
                DocResourceTemplate {
                    uri_template: format!("{origin}/{{+path}}"),
                    name: format!("{name} docs page"),
                    description: format!(
                        "Any page of the {name} docs by its URL; reads its markdown copy"
                    ),
                    mime_type: MARKDOWN.into(),
                }
            })
            .collect()
    }

    /// The whole markdown of the page at `uri` (the same resolution, host
    /// checks and cache as `get_doc`, without paging).
    pub async fn read_resource(&self, uri: &str) -> Result<DocResourceContents, DocsError> {
        let page = self.library.page(uri).await?;
        Ok(DocResourceContents {
            uri: uri.to_owned(),
            mime_type: MARKDOWN.into(),
            text: page.lookup.page.text.to_string(),
            stale: page.lookup.is_stale(),
        })
    }
}

/// Converts one of the plain structs above into its MCP model type (they
/// share the JSON shape).
fn to_model<T: Serialize, M: serde::de::DeserializeOwned>(value: &T) -> Result<M, String> {
    serde_json::to_value(value)
        .and_then(serde_json::from_value)
        .map_err(|e| format!("docs resource does not fit the MCP shape: {e}"))
}

impl ResourceSource for DocsTools {
    fn name(&self) -> &str {
        "docs"
    }

    fn list(&self) -> Pin<Box<dyn Future<Output = Result<Vec<Resource>, String>> + Send + '_>> {
        Box::pin(async move { self.list_resources().await.iter().map(to_model).collect() })
    }

    fn templates(&self) -> Vec<ResourceTemplate> {
        self.resource_templates()
            .iter()
            .filter_map(|t| to_model(t).ok())
            .collect()
    }

    fn read<'a>(
        &'a self,
        uri: &'a str,
    ) -> Pin<Box<dyn Future<Output = Option<Result<ReadResourceResult, String>>> + Send + 'a>> {
        Box::pin(async move {
            match self.read_resource(uri).await {
                // Not one of ours: another source may own it.
                Err(
                    DocsError::BadUrl { .. }
                    | DocsError::UrlTooLong { .. }
                    | DocsError::NotAllowed { .. },
                ) => None,
                Err(e) => Some(Err(e.to_string())),
                Ok(contents) => Some(to_model(&serde_json::json!({ "contents": [contents] }))),
            }
        })
    }
}
