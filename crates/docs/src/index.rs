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
//!
//! On top of BM25F, an entry whose name (its title, or the last segment of
//! its URL path, `get-tweet`) is all in the query ranks higher: its score is
//! multiplied by 1 + 0.5 × (share of the name's terms in the query)². Query
//! words the index lacks still find something: two adjacent words written
//! as one (`fine tuning` → `finetuning`), the initials of three or four
//! (`retrieval augmented generation` → `rag`), and, at a lower weight, the
//! index words a misspelt or cut word nearly spells (`websokets`,
//! `kewyord`, `pick` → `picker`). Verbs of one operation also stand in for
//! each other at a lower weight (`post` → `create`, `remove` → `delete`).
//! `cargo test -p switchboard-docs --test
//! search_eval -- --nocapture` measures all this against a plain BM25 on
//! real llms.txt files (`eval/`).

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
/// The weight of an index word found for a query word the index lacks.
const FUZZY_WEIGHT: f32 = 0.7;
/// The most index words one unknown query word stands for.
const MAX_NEAR_TERMS: usize = 4;
/// The weight of a query word's verb synonyms (see [`VERBS`]).
const SYNONYM_WEIGHT: f32 = 0.6;

/// Verbs that name the same operation: API references title their pages
/// with one (`create-tweet`, `drafts/create`) while people ask with
/// another (`post a tweet`, `new draft`). A query word also searches for
/// the others of its class, below the word itself.
const VERBS: &[&[&str]] = &[
    &["create", "add", "new", "make", "post", "insert"],
    &["get", "fetch", "retrieve", "read", "show", "view"],
    &["update", "change", "edit", "modify"],
    &["delete", "remove", "erase", "destroy"],
    &["search", "find", "lookup", "query"],
    &["list", "enumerate", "browse"],
];

/// The other verbs of `word`'s classes in [`VERBS`].
fn verb_synonyms(word: &str) -> impl Iterator<Item = &'static str> + '_ {
    VERBS
        .iter()
        .filter(move |class| class.contains(&word))
        .flat_map(move |class| class.iter().copied().filter(move |w| *w != word))
}

/// The first pass of [`Index::build`]: every entry's terms counted per
/// field, and the names kept for [`coverage`].
struct Counts {
    analyzer: Analyzer,
    /// All (term, per-field tf) pairs, entry after entry; `spans[i]` is
    /// where entry i's pairs end.
    pairs: Vec<(u32, [u16; FIELDS])>,
    spans: Vec<usize>,
    lengths: Vec<[u32; FIELDS]>,
    /// Where a term's pair for the entry being counted is: (entry + 1, index).
    slot: Vec<(u32, u32)>,
    name_terms: Vec<u32>,
    name_spans: Vec<(u32, u32)>,
}

impl Counts {
    fn of(entries: &[Entry]) -> Self {
        let mut counts = Self {
            analyzer: Analyzer::new(),
            pairs: Vec::new(),
            spans: Vec::with_capacity(entries.len()),
            lengths: Vec::with_capacity(entries.len()),
            slot: Vec::new(),
            name_terms: Vec::new(),
            name_spans: Vec::with_capacity(entries.len()),
        };
        // Section names repeat across many entries; analyse each once.
        let mut sections: HashMap<&str, Vec<u32>, FastHash> = HashMap::default();
        let mut scratch = Vec::new();
        for (doc, entry) in entries.iter().enumerate() {
            let stamp = doc as u32 + 1;
            let mut length = [0u32; FIELDS];
            let path = url_path(&entry.url);
            let segment = last_segment(path);
            // `segment` is a slice of `path`: what comes before and after it.
            let at = segment.as_ptr() as usize - path.as_ptr() as usize;
            let (folders, rest) = (&path[..at], &path[at + segment.len()..]);
            for (field, text) in [&entry.title, &entry.section, &entry.notes, path]
                .into_iter()
                .enumerate()
            {
                scratch.clear();
                let analyzer = &mut counts.analyzer;
                if field == SECTION_FIELD {
                    let terms = sections.entry(text).or_insert_with(|| {
                        let mut terms = Vec::new();
                        analyzer.analyze(text, false, &mut terms);
                        terms
                    });
                    scratch.extend_from_slice(terms);
                } else if field == URL_FIELD {
                    // The last segment apart, to keep its terms as a name too.
                    analyzer.analyze(folders, true, &mut scratch);
                    let start = scratch.len();
                    analyzer.analyze(segment, true, &mut scratch);
                    push_name(&mut counts.name_terms, &scratch[start..]);
                    analyzer.analyze(rest, true, &mut scratch);
                    // A path repeats words (`/api/job/JobQueue/push`); count each once.
                    scratch.sort_unstable();
                    scratch.dedup();
                } else {
                    analyzer.analyze(text, false, &mut scratch);
                }
                length[field] = scratch.len() as u32;
                if field == TITLE_FIELD {
                    push_name(&mut counts.name_terms, &scratch);
                    counts.name_spans.push((counts.name_terms.len() as u32, 0));
                }
                counts.add(stamp, field, &scratch);
            }
            counts.spans.push(counts.pairs.len());
            counts.lengths.push(length);
            counts.name_spans[doc].1 = counts.name_terms.len() as u32;
        }
        counts
    }

    /// Counts `terms` in `field` of the entry `stamp` (its index + 1).
    fn add(&mut self, stamp: u32, field: usize, terms: &[u32]) {
        for &term in terms {
            let t = term as usize;
            if self.slot.len() <= t {
                self.slot.resize(t + 1, (0, 0));
            }
            if self.slot[t].0 == stamp {
                let tf = &mut self.pairs[self.slot[t].1 as usize].1[field];
                *tf = tf.saturating_add(1);
            } else {
                self.slot[t] = (stamp, self.pairs.len() as u32);
                let mut tf = [0u16; FIELDS];
                tf[field] = 1;
                self.pairs.push((term, tf));
            }
        }
    }

    /// The second pass: per term, each entry's BM25F score, by entry.
    fn postings(&self, entries: &[Entry]) -> Vec<Vec<(u32, f32)>> {
        let n = entries.len().max(1) as f32;
        let mut average = [0f32; FIELDS];
        for length in &self.lengths {
            for (avg, len) in average.iter_mut().zip(length) {
                *avg += *len as f32;
            }
        }
        for avg in &mut average {
            *avg = (*avg / n).max(1.0);
        }
        let mut df = vec![0u32; self.analyzer.term_count()];
        for (term, _) in &self.pairs {
            df[*term as usize] += 1;
        }
        let idf: Vec<f32> = df
            .iter()
            .map(|&d| (1.0 + (n - d as f32 + 0.5) / (d as f32 + 0.5)).ln())
            .collect();
        let mut postings: Vec<Vec<(u32, f32)>> =
            df.iter().map(|&d| Vec::with_capacity(d as usize)).collect();
        let mut begin = 0;
        for (doc, &end) in self.spans.iter().enumerate() {
            let list = &self.pairs[begin..end];
            begin = end;
            let optional = if entries[doc].optional {
                OPTIONAL_FACTOR
            } else {
                1.0
            };
            // Weight over length norm, per field: one division per field
            // rather than per term.
            let scale: [f32; FIELDS] = std::array::from_fn(|f| {
                WEIGHTS[f] / (1.0 - B + B * self.lengths[doc][f] as f32 / average[f])
            });
            for (term, tf) in list {
                let weighted: f32 = (0..FIELDS).map(|f| f32::from(tf[f]) * scale[f]).sum();
                let score = idf[*term as usize] * weighted / (K1 + weighted) * optional;
                postings[*term as usize].push((doc as u32, score));
            }
        }
        postings
    }
}

/// An immutable BM25F index over [`Entry`]s.
pub struct Index {
    entries: Vec<Entry>,
    /// Per term: (entry, precomputed score), by entry.
    postings: Vec<Vec<(u32, f32)>>,
    /// The distinct terms of every entry's title, then of its URL's last
    /// path segment, each run sorted (for [`coverage`]); `name_spans[i]`
    /// is where entry i's title run ends and its segment run ends.
    name_terms: Vec<u32>,
    name_spans: Vec<(u32, u32)>,
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
        let counts = Counts::of(&entries);
        let postings = counts.postings(&entries);
        Self {
            entries,
            postings,
            name_terms: counts.name_terms,
            name_spans: counts.name_spans,
            analyzer: counts.analyzer,
        }
    }

    /// The title terms and the last-segment terms of entry `doc`.
    fn names(&self, doc: u32) -> (&[u32], &[u32]) {
        let start = match doc.checked_sub(1) {
            Some(before) => self.name_spans[before as usize].1,
            None => 0,
        } as usize;
        let (title_end, end) = self.name_spans[doc as usize];
        (
            &self.name_terms[start..title_end as usize],
            &self.name_terms[title_end as usize..end as usize],
        )
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// How many entries come from `source` (all of them for `None`).
    pub fn len_of(&self, source: Option<usize>) -> usize {
        match source {
            Some(source) => self.entries.iter().filter(|e| e.source == source).count(),
            None => self.entries.len(),
        }
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
        for &(term, weight) in &terms {
            for &(doc, score) in &self.postings[term as usize] {
                let slot = &mut scores[doc as usize];
                if *slot == 0.0 {
                    touched.push(doc);
                }
                *slot += score * weight;
            }
        }
        if let Some(source) = source {
            touched.retain(|&d| self.entries[d as usize].source == source);
        }
        // The name boost at most multiplies a score by `most`, so entries
        // below the limit-th score divided by that cannot reach the top.
        let most = 1.0 + NAME_BOOST;
        if limit > 0 && touched.len() > limit {
            let (_, kth, _) = touched.select_nth_unstable_by(limit - 1, by_score(&scores));
            let floor = scores[*kth as usize];
            touched.retain(|&d| scores[d as usize] * most >= floor);
        }
        let mut query_ids: Vec<u32> = terms.iter().map(|&(t, _)| t).collect();
        query_ids.sort_unstable();
        for &doc in &touched {
            let (title, slug) = self.names(doc);
            let covered = coverage(title, &query_ids).max(coverage(slug, &query_ids));
            scores[doc as usize] *= 1.0 + NAME_BOOST * covered * covered;
        }
        let better = by_score(&scores);
        if touched.len() > limit && limit > 0 {
            touched.select_nth_unstable_by(limit - 1, &better);
            touched.truncate(limit);
        }
        touched.sort_unstable_by(&better);
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

const TITLE_FIELD: usize = 0;
const SECTION_FIELD: usize = 1;
const URL_FIELD: usize = 3;

/// How much an entry whose whole name (title or last URL segment) is in
/// the query gains over its BM25F score; a partly named one gains by the
/// square of the share named.
const NAME_BOOST: f32 = 0.5;

/// Appends the distinct terms of `terms`, sorted, to `out`.
fn push_name(out: &mut Vec<u32>, terms: &[u32]) {
    let start = out.len();
    out.extend_from_slice(terms);
    out[start..].sort_unstable();
    let mut kept = start;
    for i in start..out.len() {
        if kept == start || out[i] != out[kept - 1] {
            out[kept] = out[i];
            kept += 1;
        }
    }
    out.truncate(kept);
}

/// Orders entry numbers best score first, then in file order.
fn by_score(scores: &[f32]) -> impl Fn(&u32, &u32) -> std::cmp::Ordering + '_ {
    |a, b| {
        scores[*b as usize]
            .total_cmp(&scores[*a as usize])
            .then(a.cmp(b))
    }
}

/// The share of `name`'s terms that are among `query`'s (both sorted).
fn coverage(name: &[u32], query: &[u32]) -> f32 {
    if name.is_empty() {
        return 0.0;
    }
    let found = name
        .iter()
        .filter(|t| query.binary_search(t).is_ok())
        .count();
    found as f32 / name.len() as f32
}

/// The last non-empty segment of a URL path: `/api/x/get-tweet/` →
/// `get-tweet`.
fn last_segment(path: &str) -> &str {
    let end = path.find(['?', '#']).unwrap_or(path.len());
    let trimmed = path[..end].trim_end_matches('/');
    &trimmed[trimmed.rfind('/').map_or(0, |i| i + 1)..]
}

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

    /// The distinct ids of the query's terms that occur in the index, each
    /// with its weight: 1 for a word of the index (as it is or stemmed),
    /// for two adjacent words written as one (`fine tuning` → `finetuning`)
    /// and for the initials of three or four (`retrieval augmented
    /// generation` → `rag`); [`FUZZY_WEIGHT`] for index words that a word
    /// not in the index starts or nearly spells (`websokets` → `websockets`);
    /// [`SYNONYM_WEIGHT`] for the other verbs of a word's operation.
    fn query_terms(&self, query: &str) -> Vec<(u32, f32)> {
        let mut words: Vec<String> = Vec::new();
        for_each_word(query, &mut String::new(), |word| {
            if words.len() < MAX_QUERY_TERMS {
                words.push(word.to_owned());
            }
        });
        let mut terms: Vec<(u32, f32)> = Vec::new();
        let mut add = |id: u32, weight: f32| match terms.iter_mut().find(|(t, _)| *t == id) {
            Some((_, w)) => *w = w.max(weight),
            None => terms.push((id, weight)),
        };
        for word in &words {
            match self.term_of(word) {
                Some(id) => add(id, 1.0),
                None => {
                    for id in self.near_terms(word) {
                        add(id, FUZZY_WEIGHT);
                    }
                }
            }
            for other in verb_synonyms(word) {
                if let Some(id) = self.term_of(other) {
                    add(id, SYNONYM_WEIGHT);
                }
            }
        }
        for pair in words.windows(2) {
            if let Some(&id) = self.words.get(&format!("{}{}", pair[0], pair[1])) {
                add(id, 1.0);
            }
        }
        for len in 3..=4 {
            for run in words.windows(len) {
                let initials: String = run.iter().filter_map(|w| w.chars().next()).collect();
                if let Some(&id) = self.words.get(&initials) {
                    add(id, 1.0);
                }
            }
        }
        terms
    }

    /// The term of `word` as it is or stemmed, if the index has it.
    fn term_of(&self, word: &str) -> Option<u32> {
        self.words
            .get(word)
            .or_else(|| self.stems.get(&stem_word(&self.stemmer, word)))
            .copied()
    }

    /// The terms of the index words closest to `word`, which the index
    /// lacks: the words it starts and at most three letters longer (`pick`
    /// → `picker`; the word has at least four letters), else those one
    /// edit away (two for words of eight letters or more; a swap of
    /// neighbours is one edit). At most [`MAX_NEAR_TERMS`].
    fn near_terms(&self, word: &str) -> Vec<u32> {
        let letters = word.chars().count();
        if letters < 4 || word.bytes().any(|b| b.is_ascii_digit()) {
            return Vec::new();
        }
        let most = if letters >= 8 { 2 } else { 1 };
        let ascii = word.is_ascii();
        let chars: Vec<char> = word.chars().collect();
        let mut rows = EditRows::default();
        let mut best: Vec<(usize, &str, u32)> = Vec::new();
        for (candidate, &id) in &self.words {
            let longer = candidate.len() > word.len() && candidate.len() <= word.len() + 3;
            let distance = if longer && candidate.starts_with(word) {
                Some(1)
            } else if ascii && candidate.is_ascii() {
                rows.distance(word.as_bytes(), candidate.as_bytes(), most)
            } else {
                let other: Vec<char> = candidate.chars().collect();
                rows.distance(&chars, &other, most)
            };
            if let Some(distance) = distance {
                best.push((distance, candidate, id));
            }
        }
        // Closest first, then shortest, then alphabetical: the same answer
        // whatever the map's order.
        best.sort_unstable_by(|a, b| (a.0, a.1.len(), a.1).cmp(&(b.0, b.1.len(), b.1)));
        let closest = best.first().map_or(0, |b| b.0);
        let mut ids: Vec<u32> = Vec::new();
        for (_, _, id) in best.into_iter().take_while(|b| b.0 == closest) {
            if !ids.contains(&id) && ids.len() < MAX_NEAR_TERMS {
                ids.push(id);
            }
        }
        ids
    }
}

/// Three rows of the optimal-string-alignment distance table (insertions,
/// deletions, substitutions and swaps of neighbours; two rows back, one
/// back, current), kept between calls so that scanning a vocabulary
/// allocates nothing.
#[derive(Default)]
struct EditRows([Vec<usize>; 3]);

impl EditRows {
    /// The distance between `a` and `b`, if at most `most`.
    fn distance<T: PartialEq>(&mut self, a: &[T], b: &[T], most: usize) -> Option<usize> {
        if a.len().abs_diff(b.len()) > most {
            return None;
        }
        let [two, one, row] = &mut self.0;
        for r in [&mut *two, &mut *one, &mut *row] {
            r.clear();
            r.resize(b.len() + 1, 0);
        }
        for (j, cell) in one.iter_mut().enumerate() {
            *cell = j;
        }
        for i in 1..=a.len() {
            row[0] = i;
            let mut lowest = i;
            for j in 1..=b.len() {
                let cost = usize::from(a[i - 1] != b[j - 1]);
                let mut d = (one[j] + 1).min(row[j - 1] + 1).min(one[j - 1] + cost);
                if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                    d = d.min(two[j - 2] + 1);
                }
                row[j] = d;
                lowest = lowest.min(d);
            }
            if lowest > most {
                return None;
            }
            std::mem::swap(two, one);
            std::mem::swap(one, row);
        }
        Some(one[b.len()]).filter(|&d| d <= most)
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

    fn titles<'a>(hits: &[Hit<'a>]) -> Vec<&'a str> {
        hits.iter().map(|h| h.entry.title.as_str()).collect()
    }

    #[test]
    fn an_entry_named_by_the_query_ranks_first() {
        let index = Index::build(vec![
            entry(
                "Tweet search and filtering",
                "https://x.org/guides/tweet-search-filters",
                "Guides",
                "Search tweets: search tweets by date, search tweets by user, search tweets with operators",
            ),
            entry(
                "Search Tweets",
                "https://x.org/api/search-tweets",
                "API",
                "",
            ),
            entry(
                "Get user timeline",
                "https://x.org/api/user-tweets",
                "API",
                "",
            ),
            entry("Get user likes", "https://x.org/api/user-likes", "API", ""),
        ]);
        // The first entry says "search" more often; the second is named by the query.
        assert_eq!(
            titles(&index.search("search tweets", 3, None))[0],
            "Search Tweets"
        );
        // The last URL segment names a page as well as its title does.
        assert_eq!(
            titles(&index.search("user tweets", 3, None))[0],
            "Get user timeline"
        );
    }

    #[test]
    fn a_verb_finds_the_page_named_with_another_verb_of_its_operation() {
        let index = Index::build(vec![
            entry("Get tweet", "https://x.org/api/get-tweet", "API", ""),
            entry("Create tweet", "https://x.org/api/create-tweet", "API", ""),
            entry("Delete tweet", "https://x.org/api/delete-tweet", "API", ""),
            entry(
                "Tweet scheduling",
                "https://x.org/guides/schedule",
                "Guides",
                "",
            ),
        ]);
        assert_eq!(
            titles(&index.search("post a tweet", 1, None)),
            ["Create tweet"]
        );
        assert_eq!(
            titles(&index.search("remove a tweet", 1, None)),
            ["Delete tweet"]
        );
        // A word of no operation stands for nothing else.
        assert_eq!(
            titles(&index.search("schedule", 4, None)),
            ["Tweet scheduling"]
        );
        // The word itself outranks another verb of its operation.
        let index = Index::build(vec![
            entry("Delete tweet", "https://x.org/api/delete-tweet", "API", ""),
            entry("Remove tweet", "https://x.org/api/remove-tweet", "API", ""),
        ]);
        assert_eq!(
            titles(&index.search("remove a tweet", 2, None)),
            ["Remove tweet", "Delete tweet"]
        );
    }

    #[test]
    fn misspelt_words_find_the_word_they_nearly_spell() {
        let index = Index::build(vec![
            entry(
                "WebSockets",
                "https://x.org/ws",
                "Guides",
                "Realtime updates",
            ),
            entry("Keyword monitors", "https://x.org/kw", "API", "Alerts"),
            entry("Giveaway picker", "https://x.org/draw", "API", ""),
            entry(
                "Routes",
                "https://x.org/routes",
                "Guides",
                "Path parameters",
            ),
        ]);
        for (query, want) in [
            ("websokets", "WebSockets"),
            ("kewyord monitor", "Keyword monitors"),
            ("pick a winner", "Giveaway picker"),
        ] {
            let hits = index.search(query, 4, None);
            assert_eq!(titles(&hits).first(), Some(&want), "{query}");
        }
        // Words of the index are taken as they are, never as near misses.
        assert_eq!(index.search("route", 4, None).len(), 1);
        // Short and unrelated words find nothing.
        assert!(index.search("wbs", 4, None).is_empty());
        assert!(index.search("zzzzzzzz", 4, None).is_empty());
    }

    #[test]
    fn split_compounds_and_spelt_out_acronyms_match() {
        let index = Index::build(vec![
            entry("Finetuning updates", "https://x.org/finetuning", "", ""),
            entry("RAG agent", "https://x.org/rag-agent", "", ""),
            entry("Coding agent", "https://x.org/coding-agent", "", ""),
        ]);
        assert_eq!(
            titles(&index.search("fine tuning jobs", 3, None)),
            ["Finetuning updates"]
        );
        assert_eq!(
            titles(&index.search("retrieval augmented generation agent", 3, None))[0],
            "RAG agent"
        );
    }

    fn edit_distance(a: &str, b: &str, most: usize) -> Option<usize> {
        let a: Vec<char> = a.chars().collect();
        let b: Vec<char> = b.chars().collect();
        EditRows::default().distance(&a, &b, most)
    }

    #[test]
    fn last_segments_of_paths() {
        assert_eq!(last_segment("/api/x/get-tweet"), "get-tweet");
        assert_eq!(last_segment("/docs/guides/jobs/"), "jobs");
        assert_eq!(last_segment("/a/b.md?x=1#top"), "b.md");
        assert_eq!(last_segment("/"), "");
        assert_eq!(last_segment(""), "");
    }

    #[test]
    fn edit_distance_counts_swaps_as_one_edit() {
        assert_eq!(edit_distance("keyword", "kewyord", 1), Some(1));
        assert_eq!(edit_distance("search", "serch", 1), Some(1));
        assert_eq!(edit_distance("kubernetes", "kuberentes", 2), Some(1));
        assert_eq!(edit_distance("abc", "abc", 0), Some(0));
        assert_eq!(edit_distance("monitor", "mentor", 1), None);
        assert_eq!(edit_distance("été", "ete", 2), Some(2));
    }
}
