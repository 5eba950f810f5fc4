//! The page cache: fetched text per URL, in memory, bounded in total bytes.
//!
//! A copy younger than the source's TTL is served as it is. An older one is
//! revalidated with a conditional GET (`If-None-Match` / `If-Modified-Since`);
//! `304` makes it fresh again, anything else replaces it. When the site is
//! down (no connection, timeout, 5xx) the old copy is served and marked
//! stale; with nothing cached the error names the URL and the cause. When
//! the total passes the byte cap, the least recently used copies go.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use url::Url;

use crate::fetch::{FetchError, Fetched, Fetcher, Validators, decode_text};

/// One cached page.
#[derive(Debug)]
pub struct CachedPage {
    /// The text, shared: pointer equality means "the same download".
    pub text: Arc<str>,
    /// The length of `text` in characters.
    pub chars: usize,
    /// The byte offset of every [`CHAR_MARK`]th character, so that a
    /// character offset is found without scanning the whole text.
    marks: Arc<[usize]>,
    /// The URL that answered, after redirects.
    pub final_url: Url,
    pub content_type: Option<String>,
    pub validators: Validators,
    /// When the site last confirmed this copy (downloaded or `304`).
    pub checked_at: Instant,
}

/// The spacing of [`CachedPage`]'s character marks.
const CHAR_MARK: usize = 4096;

impl CachedPage {
    fn new(text: String, body: crate::fetch::Body) -> Self {
        let mut marks = Vec::with_capacity(text.len() / CHAR_MARK + 1);
        let mut chars = 0;
        for (i, (byte, _)) in text.char_indices().enumerate() {
            if i % CHAR_MARK == 0 {
                marks.push(byte);
            }
            chars = i + 1;
        }
        Self {
            text: text.into(),
            chars,
            marks: marks.into(),
            final_url: body.final_url,
            content_type: body.content_type,
            validators: body.validators,
            checked_at: Instant::now(),
        }
    }

    /// The byte offset of character `offset` (the text's length if past it).
    pub fn byte_offset(&self, offset: usize) -> usize {
        let Some(&mark) = self.marks.get(offset / CHAR_MARK) else {
            return self.text.len();
        };
        self.text[mark..]
            .char_indices()
            .nth(offset % CHAR_MARK)
            .map_or(self.text.len(), |(b, _)| mark + b)
    }
}

/// How a lookup was served.
#[derive(Debug, Clone)]
pub enum Freshness {
    /// From memory, within the TTL.
    Hit,
    /// The site confirmed the cached copy (`304`).
    Revalidated,
    /// Downloaded now.
    Fetched,
    /// The site could not be reached; this is the last good copy.
    Stale(FetchError),
}

/// A page and how it was obtained.
#[derive(Debug, Clone)]
pub struct Lookup {
    pub page: Arc<CachedPage>,
    pub freshness: Freshness,
}

impl Lookup {
    /// For stale copies: a sentence saying so, for the agent.
    pub fn stale_note(&self) -> Option<String> {
        match &self.freshness {
            Freshness::Stale(error) => Some(format!(
                "stale copy: the site could not be reached ({error}); showing the copy checked {} ago",
                age(self.page.checked_at.elapsed())
            )),
            _ => None,
        }
    }

    pub fn is_stale(&self) -> bool {
        matches!(self.freshness, Freshness::Stale(_))
    }
}

fn age(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=119 => format!("{s} s"),
        120..=7199 => format!("{} min", s / 60),
        _ => format!("{} h", s / 3600),
    }
}

/// Fetched text by URL, bounded by total bytes.
#[derive(Debug)]
pub struct Cache {
    max_bytes: usize,
    retry_after: Duration,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    slots: HashMap<String, Slot>,
    bytes: usize,
    clock: u64,
    /// What just failed to answer, with when and how: not asked again for
    /// `Cache::retry_after`. A site that could not be reached (no
    /// connection, a timeout) is kept by its origin, so that none of its
    /// pages waits out the timeout again; a page that broke off or answered
    /// 5xx, by its URL.
    failures: HashMap<String, (Instant, FetchError)>,
}

/// How long a site that failed to answer (no connection, a timeout, a 5xx)
/// is left alone: meanwhile calls get its error, or the stale copy, at once
/// instead of each waiting out the source's timeout again.
pub const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(30);

#[derive(Debug)]
struct Slot {
    page: Arc<CachedPage>,
    last_used: u64,
}

impl Cache {
    pub fn new(max_bytes: usize) -> Self {
        Self {
            max_bytes,
            retry_after: RETRY_AFTER_FAILURE,
            inner: Mutex::default(),
        }
    }

    /// Leaves a site that failed to answer alone for `wait` rather than
    /// [`RETRY_AFTER_FAILURE`].
    #[must_use]
    pub fn retry_after(mut self, wait: Duration) -> Self {
        self.retry_after = wait;
        self
    }

    /// The bytes of text held now.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent data behind (each
        // update is one assignment), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The page at `url`: from memory if younger than `ttl`, else
    /// revalidated or fetched through `fetcher`.
    pub async fn get(
        &self,
        url: &Url,
        fetcher: &Fetcher,
        ttl: Duration,
    ) -> Result<Lookup, FetchError> {
        let key = url.as_str();
        let cached = {
            let mut inner = self.lock();
            inner.clock += 1;
            let clock = inner.clock;
            inner.slots.get_mut(key).map(|slot| {
                slot.last_used = clock;
                slot.page.clone()
            })
        };
        if let Some(page) = &cached
            && page.checked_at.elapsed() < ttl
        {
            return Ok(Lookup {
                page: page.clone(),
                freshness: Freshness::Hit,
            });
        }
        if let Some(error) = self.recent_failure(url) {
            return match cached {
                Some(page) => Ok(Lookup {
                    page,
                    freshness: Freshness::Stale(error),
                }),
                None => Err(error),
            };
        }
        let validators = cached
            .as_ref()
            .map(|p| p.validators.clone())
            .unwrap_or_default();
        let fetched = fetcher.get(url, &validators).await;
        {
            let mut inner = self.lock();
            match &fetched {
                Err(error) if error.is_unavailable() => {
                    let wait = self.retry_after;
                    inner.failures.retain(|_, (at, _)| at.elapsed() < wait);
                    let failed = match error {
                        FetchError::Connect { .. } | FetchError::Timeout { .. } => origin_key(url),
                        _ => key.to_owned(),
                    };
                    inner
                        .failures
                        .insert(failed, (Instant::now(), error.clone()));
                }
                _ => {
                    inner.failures.remove(key);
                    inner.failures.remove(&origin_key(url));
                }
            }
        }
        match fetched {
            Ok(Fetched::NotModified) => {
                let Some(old) = cached else {
                    // Only sent with validators, which only a cached copy has.
                    return Err(FetchError::Transport {
                        url: url.to_string(),
                        detail: "unexpected 304 Not Modified".into(),
                    });
                };
                let page = Arc::new(CachedPage {
                    text: old.text.clone(),
                    chars: old.chars,
                    marks: old.marks.clone(),
                    final_url: old.final_url.clone(),
                    content_type: old.content_type.clone(),
                    validators: old.validators.clone(),
                    checked_at: Instant::now(),
                });
                self.store(key, page.clone());
                Ok(Lookup {
                    page,
                    freshness: Freshness::Revalidated,
                })
            }
            Ok(Fetched::Body(body)) => {
                let text = decode_text(&body)?;
                let page = Arc::new(CachedPage::new(text, body));
                self.store(key, page.clone());
                Ok(Lookup {
                    page,
                    freshness: Freshness::Fetched,
                })
            }
            Err(error) => match cached {
                Some(page) if error.is_unavailable() => {
                    tracing::warn!(%url, %error, "docs: serving a stale copy");
                    Ok(Lookup {
                        page,
                        freshness: Freshness::Stale(error),
                    })
                }
                _ => Err(error),
            },
        }
    }

    /// Why `url` is not asked for now: its site could not be reached, or
    /// the page itself failed, within the last `retry_after`.
    fn recent_failure(&self, url: &Url) -> Option<FetchError> {
        let inner = self.lock();
        let fresh = |key: &str| {
            inner
                .failures
                .get(key)
                .filter(|(at, _)| at.elapsed() < self.retry_after)
                .map(|(at, error)| (at.elapsed(), error))
        };
        if let Some((_, error)) = fresh(url.as_str()) {
            return Some(error.clone());
        }
        let (ago, error) = fresh(&origin_key(url))?;
        Some(match error {
            FetchError::Connect { url: failed, .. } | FetchError::Timeout { url: failed, .. }
                if failed != url.as_str() =>
            {
                FetchError::Connect {
                    url: url.to_string(),
                    detail: format!(
                        "its site could not be reached {} s ago ({error}); it is asked again {} s after that",
                        ago.as_secs(),
                        self.retry_after.as_secs()
                    ),
                }
            }
            _ => error.clone(),
        })
    }

    fn store(&self, key: &str, page: Arc<CachedPage>) {
        let size = page.text.len();
        let mut inner = self.lock();
        if let Some(old) = inner.slots.remove(key) {
            inner.bytes -= old.page.text.len();
        }
        if size > self.max_bytes {
            return;
        }
        while inner.bytes + size > self.max_bytes {
            let Some(oldest) = inner
                .slots
                .iter()
                .min_by_key(|(_, slot)| slot.last_used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(slot) = inner.slots.remove(&oldest) {
                inner.bytes -= slot.page.text.len();
            }
        }
        inner.clock += 1;
        let last_used = inner.clock;
        inner.bytes += size;
        inner.slots.insert(key.to_owned(), Slot { page, last_used });
    }
}

/// The key under which a site that could not be reached is kept.
fn origin_key(url: &Url) -> String {
    format!("origin {}", url.origin().ascii_serialization())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fetch::Body;

    #[test]
    fn character_offsets_map_to_byte_offsets() {
        let text: String = (0..10_000)
            .map(|i| match i % 3 {
                0 => 'a',
                1 => 'é',
                _ => '€',
            })
            .collect();
        let body = Body {
            final_url: Url::parse("https://a.org/x.md").unwrap(),
            bytes: Vec::new(),
            content_type: None,
            validators: Validators::default(),
        };
        let page = CachedPage::new(text.clone(), body);
        assert_eq!(page.chars, 10_000);
        for offset in [0, 1, 2, 4095, 4096, 4097, 8191, 8192, 9999] {
            let want = text.char_indices().nth(offset).unwrap().0;
            assert_eq!(page.byte_offset(offset), want, "{offset}");
        }
        assert_eq!(page.byte_offset(10_000), text.len());
        assert_eq!(page.byte_offset(usize::MAX), text.len());
    }
}
