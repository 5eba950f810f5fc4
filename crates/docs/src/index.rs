//! The search index: BM25F over the links of every source's llms.txt.
//!
//! Each entry has four fields: title (weight 3), section, notes and the URL
//! path (weight 1 each). Text is split into words at anything that is not a
//! letter or digit (so `/`, `-`, `_` and `.` separate URL words), camelCase
//! words also yield their parts (`IMQService` → `imqservice`, `imq`,
//! `service`), common English words are dropped and the rest stemmed with
//! the Snowball English stemmer. Scores are BM25F: per-field term
//! frequencies, normalised by field length, weighted, summed and saturated
//! once per term. Every (term, entry) score is computed when the index is
//! built, so a query only adds up posting lists.

use std::{
    collections::HashMap,
    hash::{BuildHasherDefault, Hasher},
};

use rust_stemmers::{Algorithm, Stemmer};

use crate::llms_txt::LlmsTxt;

/// One searchable link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The index of the source (in configuration order).
    pub source: usize,
    pub title: String,
    pub url: String,
    pub section: String,
    pub notes: String,
    /// From the llms.txt `Optional` section.
    pub optional: bool,
}

impl Entry {
    /// The entries of a parsed llms.txt, for source number `source`.
    pub fn all_of(source: usize, doc: &LlmsTxt) -> impl Iterator<Item = Entry> + '_ {
        doc.links().map(move |(section, link)| Entry {
            source,
            title: link.title.clone(),
            url: link.url.to_string(),
            section: section.name.clone(),
            notes: link.notes.clone(),
            optional: section.optional,
        })
    }
}

/// A search result: an entry and its score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit<'a> {
    pub entry: &'a Entry,
    pub score: f32,
}

const K1: f32 = 1.2;
/// Field weights: title, section, notes, url.
const WEIGHTS: [f32; FIELDS] = [3.0, 1.0, 1.0, 1.0];
/// Length normalisation, the same for every field (the usual BM25 value).
const B: f32 = 0.75;
const FIELDS: usize = 4;
/// Links under `Optional` rank a little lower, as the format intends.
const OPTIONAL_FACTOR: f32 = 0.85;
/// Query words beyond this are ignored.
const MAX_QUERY_TERMS: usize = 32;

/// An immutable BM25F index over [`Entry`]s.
pub struct Index {
    entries: Vec<Entry>,
    /// Per term: (entry, precomputed score), by entry.
    postings: Vec<Vec<(u32, f32)>>,
    analyzer: Analyzer,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("entries", &self.entries.len())
            .field("terms", &self.postings.len())
            .finish()
    }
}

impl Index {
    /// Indexes `entries`.
    pub fn build(entries: Vec<Entry>) -> Self {
        let mut analyzer = Analyzer::new();
        // All (term, per-field tf) pairs, entry after entry; `spans[i]` is
        // where entry i's pairs end.
        let mut pairs: Vec<(u32, [u16; FIELDS])> = Vec::new();
        let mut spans: Vec<usize> = Vec::with_capacity(entries.len());
        let mut lengths: Vec<[u32; FIELDS]> = Vec::with_capacity(entries.len());
        // Where a term's pair for the current entry is: (entry + 1, index).
        let mut slot: Vec<(u32, u32)> = Vec::new();
        // Section names repeat across many entries; analyse each once.
        let mut sections: HashMap<&str, Vec<u32>, FastHash> = HashMap::default();
        let mut scratch = Vec::new();
        for (doc, entry) in entries.iter().enumerate() {
            let stamp = doc as u32 + 1;
            let mut length = [0u32; FIELDS];
            let path = url_path(&entry.url);
            for (field, text) in [&entry.title, &entry.section, &entry.notes, path]
                .into_iter()
                .enumerate()
            {
                scratch.clear();
                if field == SECTION_FIELD {
                    let terms = sections.entry(text).or_insert_with(|| {
                        let mut terms = Vec::new();
                        analyzer.analyze(text, false, &mut terms);
                        terms
                    });
                    scratch.extend_from_slice(terms);
                } else {
                    analyzer.analyze(text, field == URL_FIELD, &mut scratch);
                }
                if field == URL_FIELD {
                    // A path repeats words (`/api/job/JobQueue/push`); count each once.
                    scratch.sort_unstable();
                    scratch.dedup();
                }
                length[field] = scratch.len() as u32;
                for &term in &scratch {
                    let t = term as usize;
                    if slot.len() <= t {
                        slot.resize(t + 1, (0, 0));
                    }
                    if slot[t].0 == stamp {
                        let tf = &mut pairs[slot[t].1 as usize].1[field];
                        *tf = tf.saturating_add(1);
                    } else {
                        slot[t] = (stamp, pairs.len() as u32);
                        let mut tf = [0u16; FIELDS];
                        tf[field] = 1;
                        pairs.push((term, tf));
                    }
                }
            }
            spans.push(pairs.len());
            lengths.push(length);
        }
        let n = entries.len().max(1) as f32;
        let mut average = [0f32; FIELDS];
        for length in &lengths {
            for (avg, len) in average.iter_mut().zip(length) {
                *avg += *len as f32;
            }
        }
        for avg in &mut average {
            *avg = (*avg / n).max(1.0);
        }
        let mut df = vec![0u32; analyzer.term_count()];
        for (term, _) in &pairs {
            df[*term as usize] += 1;
        }
        let idf: Vec<f32> = df
            .iter()
            .map(|&d| (1.0 + (n - d as f32 + 0.5) / (d as f32 + 0.5)).ln())
            .collect();
        let mut postings: Vec<Vec<(u32, f32)>> =
            df.iter().map(|&d| Vec::with_capacity(d as usize)).collect();
        let mut begin = 0;
        for (doc, &end) in spans.iter().enumerate() {
            let list = &pairs[begin..end];
            begin = end;
            let optional = if entries[doc].optional {
                OPTIONAL_FACTOR
            } else {
                1.0
            };
            // Weight over length norm, per field: one division per field
            // rather than per term.
            let scale: [f32; FIELDS] = std::array::from_fn(|f| {
                WEIGHTS[f] / (1.0 - B + B * lengths[doc][f] as f32 / average[f])
            });
            for (term, tf) in list {
                let weighted: f32 = (0..FIELDS).map(|f| f32::from(tf[f]) * scale[f]).sum();
                let score = idf[*term as usize] * weighted / (K1 + weighted) * optional;
                postings[*term as usize].push((doc as u32, score));
            }
        }
        Self {
            entries,
            postings,
            analyzer,
        }
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The best `limit` entries for `query`, best first; only entries of
    /// `source` if given. Ties keep llms.txt order.
    pub fn search(&self, query: &str, limit: usize, source: Option<usize>) -> Vec<Hit<'_>> {
        let terms = self.analyzer.query_terms(query);
        let mut scores = vec![0f32; self.entries.len()];
        let mut touched: Vec<u32> = Vec::new();
        for term in terms {
            for &(doc, score) in &self.postings[term as usize] {
                let slot = &mut scores[doc as usize];
                if *slot == 0.0 {
                    touched.push(doc);
                }
                *slot += score;
            }
        }
        if let Some(source) = source {
            touched.retain(|&d| self.entries[d as usize].source == source);
        }
        let better = |a: &u32, b: &u32| {
            scores[*b as usize]
                .total_cmp(&scores[*a as usize])
                .then(a.cmp(b))
        };
        if touched.len() > limit && limit > 0 {
            touched.select_nth_unstable_by(limit - 1, better);
            touched.truncate(limit);
        }
        touched.sort_unstable_by(better);
        touched.truncate(limit);
        touched
            .into_iter()
            .map(|d| Hit {
                entry: &self.entries[d as usize],
                score: scores[d as usize],
            })
            .collect()
    }

    /// Whether `query` has any word to search for (it is not only
    /// punctuation and common words); the word need not be in the index.
    pub fn has_terms(&self, query: &str) -> bool {
        let mut any = false;
        for_each_word(query, &mut String::new(), |_| any = true);
        any
    }
}

const SECTION_FIELD: usize = 1;
const URL_FIELD: usize = 3;

/// The path of a URL (what is worth indexing: the host is the same for a
/// whole source).
fn url_path(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.find('/').map_or("", |i| &rest[i..])
}

/// Words → term ids: split, camelCase parts, stop words, stemming.
struct Analyzer {
    stemmer: Stemmer,
    /// Every word seen while building → its term id (stemming is not free,
    /// and vocabularies are small).
    words: HashMap<String, u32, FastHash>,
    /// Stem → term id.
    stems: HashMap<String, u32, FastHash>,
    buffer: String,
}

/// FNV-1a: the maps are keyed by short words from our own index, where
/// SipHash's flooding resistance buys nothing and costs a third of the
/// build time.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut hash = self.0;
        for &b in bytes {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = hash;
    }
}

type FastHash = BuildHasherDefault<Fnv>;

impl Analyzer {
    fn new() -> Self {
        Self {
            stemmer: Stemmer::create(Algorithm::English),
            words: HashMap::default(),
            stems: HashMap::default(),
            buffer: String::new(),
        }
    }

    fn term_count(&self) -> usize {
        self.stems.len()
    }

    /// Appends the term ids of `text` to `out`, adding new terms.
    fn analyze(&mut self, text: &str, url: bool, out: &mut Vec<u32>) {
        let mut buffer = std::mem::take(&mut self.buffer);
        for_each_word(text, &mut buffer, |word| {
            if url && URL_NOISE.contains(&word) {
                return;
            }
            if let Some(&id) = self.words.get(word) {
                out.push(id);
                return;
            }
            let stem = stem_word(&self.stemmer, word);
            let next = self.stems.len() as u32;
            let id = *self.stems.entry(stem).or_insert(next);
            self.words.insert(word.to_owned(), id);
            out.push(id);
        });
        self.buffer = buffer;
    }

    /// The distinct ids of the query's terms that occur in the index.
    fn query_terms(&self, query: &str) -> Vec<u32> {
        let mut terms: Vec<u32> = Vec::new();
        let mut seen = 0;
        for_each_word(query, &mut String::new(), |word| {
            seen += 1;
            if seen > MAX_QUERY_TERMS {
                return;
            }
            let id = match self.words.get(word) {
                Some(&id) => Some(id),
                None => self.stems.get(&stem_word(&self.stemmer, word)).copied(),
            };
            if let Some(id) = id
                && !terms.contains(&id)
            {
                terms.push(id);
            }
        });
        terms
    }
}

fn stem_word(stemmer: &Stemmer, word: &str) -> String {
    if word.bytes().any(|b| b.is_ascii_digit()) {
        word.to_owned()
    } else {
        stemmer.stem(word).into_owned()
    }
}

/// Calls `f` with every lowercase, non-stop word of `text`, and with the
/// parts of camelCase words. `buffer` is scratch space, reused across calls.
fn for_each_word(text: &str, buffer: &mut String, mut f: impl FnMut(&str)) {
    if text.is_ascii() {
        // The common case, byte by byte: several times faster than `split`.
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if !bytes[i].is_ascii_alphanumeric() {
                i += 1;
                continue;
            }
            let start = i;
            while i < bytes.len() && bytes[i].is_ascii_alphanumeric() {
                i += 1;
            }
            word(&text[start..i], buffer, &mut f);
        }
    } else {
        for raw in text.split(|c: char| !c.is_alphanumeric()) {
            if !raw.is_empty() {
                word(raw, buffer, &mut f);
            }
        }
    }
}

/// One word of [`for_each_word`]: lowercased, then its camelCase parts.
fn word(raw: &str, lower: &mut String, f: &mut impl FnMut(&str)) {
    if !raw.bytes().any(|b| b.is_ascii_uppercase() || !b.is_ascii()) {
        // Already lowercase: no copy, no parts.
        if !is_stop_word(raw) {
            f(raw);
        }
        return;
    }
    set_lowercase(lower, raw);
    if !is_stop_word(lower) {
        f(lower);
    }
    let mixed_case =
        raw.chars().skip(1).any(char::is_uppercase) && raw.chars().any(char::is_lowercase);
    if mixed_case {
        let mut parts = 0;
        camel_parts(raw, |_| parts += 1);
        if parts > 1 {
            camel_parts(raw, |part| {
                set_lowercase(lower, part);
                if lower.chars().nth(1).is_some() && !is_stop_word(lower) {
                    f(lower);
                }
            });
        }
    }
}

fn set_lowercase(buffer: &mut String, raw: &str) {
    buffer.clear();
    if raw.is_ascii() {
        buffer.push_str(raw);
        buffer.make_ascii_lowercase();
    } else {
        buffer.extend(raw.chars().flat_map(char::to_lowercase));
    }
}

/// Words too common to tell pages apart: English function words and the
/// question words agents use.
fn is_stop_word(word: &str) -> bool {
    // None is longer than six letters or starts with a digit.
    if word.len() > 6 || word.as_bytes().first().is_none_or(u8::is_ascii_digit) {
        return false;
    }
    matches!(
        word,
        "a" | "about"
            | "an"
            | "and"
            | "are"
            | "as"
            | "at"
            | "be"
            | "but"
            | "by"
            | "can"
            | "could"
            | "did"
            | "do"
            | "does"
            | "for"
            | "from"
            | "had"
            | "has"
            | "have"
            | "how"
            | "i"
            | "if"
            | "in"
            | "into"
            | "is"
            | "it"
            | "its"
            | "me"
            | "my"
            | "no"
            | "not"
            | "of"
            | "on"
            | "or"
            | "our"
            | "should"
            | "so"
            | "that"
            | "the"
            | "their"
            | "them"
            | "then"
            | "there"
            | "these"
            | "this"
            | "those"
            | "to"
            | "was"
            | "we"
            | "were"
            | "what"
            | "when"
            | "where"
            | "which"
            | "who"
            | "why"
            | "will"
            | "with"
            | "would"
            | "you"
            | "your"
    )
}

/// Calls `f` with the camelCase parts of `word`: `IMQService` → `IMQ`,
/// `Service`; `onPop` → `on`, `Pop`; `v2` → `v2`.
fn camel_parts<'a>(word: &'a str, mut f: impl FnMut(&'a str)) {
    let mut start = 0;
    let mut chars = word.char_indices().peekable();
    let mut prev: Option<char> = None;
    while let Some((at, c)) = chars.next() {
        if let Some(p) = prev {
            let next_lower = chars.peek().is_some_and(|(_, n)| n.is_lowercase());
            let boundary = c.is_uppercase()
                && (p.is_lowercase() || p.is_ascii_digit() || (p.is_uppercase() && next_lower));
            if boundary {
                f(&word[start..at]);
                start = at;
            }
        }
        prev = Some(c);
    }
    f(&word[start..]);
}

/// URL words that say nothing about a page.
const URL_NOISE: &[&str] = &["md", "html", "htm", "txt", "index", "www"];

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(title: &str, url: &str, section: &str, notes: &str) -> Entry {
        Entry {
            source: 0,
            title: title.into(),
            url: url.into(),
            section: section.into(),
            notes: notes.into(),
            optional: false,
        }
    }

    fn words(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        for_each_word(text, &mut String::new(), |w| out.push(w.to_owned()));
        out
    }

    #[test]
    fn stop_words_are_dropped() {
        assert!(is_stop_word("how") && is_stop_word("the"));
        assert!(!is_stop_word("expose") && !is_stop_word("use"));
        assert!(words("What is the IMQ?").contains(&"imq".to_owned()));
    }

    #[test]
    fn words_split_on_punctuation_and_camel_case() {
        assert_eq!(
            words("IMQService.start() / pg-pubsub_v2"),
            [
                "imqservice",
                "imq",
                "service",
                "start",
                "pg",
                "pubsub",
                "v2"
            ]
        );
        assert_eq!(words("How do I use onPop?"), ["use", "onpop", "pop"]);
        let parts = |w| {
            let mut out = Vec::new();
            camel_parts(w, |p| out.push(p));
            out
        };
        assert_eq!(parts("JSONSchema"), ["JSON", "Schema"]);
        assert_eq!(parts("plain"), ["plain"]);
        assert_eq!(parts("onPop"), ["on", "Pop"]);
        assert_eq!(parts("v2Beta"), ["v2", "Beta"]);
        assert_eq!(parts("ÉtéRPC"), ["Été", "RPC"]);
    }

    #[test]
    fn stemming_matches_inflections() {
        let index = Index::build(vec![
            entry(
                "Scheduling delayed jobs",
                "https://x.org/jobs/delayed",
                "Guides",
                "",
            ),
            entry("Logging", "https://x.org/logging", "Guides", "Log levels"),
        ]);
        let hits = index.search("schedule a delay job", 5, None);
        assert_eq!(hits[0].entry.title, "Scheduling delayed jobs");
        assert_eq!(hits.len(), 1);
    }

    #[test]
    fn title_outweighs_notes_and_url_words_count() {
        let index = Index::build(vec![
            entry(
                "Caching",
                "https://x.org/a",
                "Guides",
                "Mentions clients once",
            ),
            entry("Clients", "https://x.org/b", "Guides", "Calling services"),
            entry("Other", "https://x.org/api/client-options", "API", ""),
        ]);
        let hits = index.search("clients", 5, None);
        assert_eq!(hits[0].entry.title, "Clients");
        assert_eq!(hits.len(), 3);
        assert_eq!(index.search("options", 5, None)[0].entry.title, "Other");
    }

    #[test]
    fn limit_source_and_empty_queries() {
        let mut entries: Vec<Entry> = (0..20)
            .map(|i| {
                entry(
                    &format!("Page {i} queue"),
                    &format!("https://x.org/{i}"),
                    "",
                    "",
                )
            })
            .collect();
        entries[3].source = 1;
        let index = Index::build(entries);
        assert_eq!(index.search("queue", 5, None).len(), 5);
        let only = index.search("queue", 5, Some(1));
        assert_eq!(only.len(), 1);
        assert_eq!(only[0].entry.title, "Page 3 queue");
        assert!(index.search("nothing matches", 5, None).is_empty());
        assert!(!index.has_terms("how do I ... ?"));
        assert!(index.has_terms("queue"));
        // Equal scores keep file order.
        let titles: Vec<_> = index
            .search("queue", 3, Some(0))
            .iter()
            .map(|h| h.entry.title.clone())
            .collect();
        assert_eq!(titles, ["Page 0 queue", "Page 1 queue", "Page 2 queue"]);
    }

    #[test]
    fn optional_entries_rank_below_equal_ones() {
        let mut a = entry("Redis", "https://x.org/a", "Optional", "");
        a.optional = true;
        let b = entry("Redis", "https://x.org/b", "Guides", "");
        let index = Index::build(vec![a, b]);
        assert_eq!(
            index.search("redis", 2, None)[0].entry.url,
            "https://x.org/b"
        );
    }
}
