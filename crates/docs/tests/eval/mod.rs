//! The search evaluation of `eval/`: eight real llms.txt files, questions
//! with the pages that answer them, a textbook BM25 to compare against, and
//! the scores (precision@1, precision@3, MRR). Shared by the evaluation test
//! and the benchmark.

#![allow(dead_code)] // Each including binary uses a different part of it.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

use switchboard_docs::{
    index::{Entry, Index},
    llms_txt,
};
use url::Url;

/// Which half of the sites a ranking change may be checked against while
/// it is made (`Tuning`) and which is only reported (`HeldOut`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Half {
    Tuning,
    HeldOut,
}

/// (site, llms.txt URL, half), as in `eval/README.md`.
pub const SITES: &[(&str, &str, Half)] = &[
    ("fasthtml", "https://docs.fastht.ml/llms.txt", Half::Tuning),
    ("litellm", "https://docs.litellm.ai/llms.txt", Half::Tuning),
    (
        "agentflow",
        "https://agentflow.10xscale.ai/llms.txt",
        Half::Tuning,
    ),
    ("xquik", "https://docs.xquik.com/llms.txt", Half::Tuning),
    (
        "zustand",
        "https://zustand.docs.pmnd.rs/llms.txt",
        Half::HeldOut,
    ),
    (
        "intuition",
        "https://docs.intuition.systems/llms.txt",
        Half::HeldOut,
    ),
    (
        "hologram",
        "https://docs.hologram.zone/llms.txt",
        Half::HeldOut,
    ),
    (
        "mercury",
        "https://accenture.github.io/mercury-composable/llms.txt",
        Half::HeldOut,
    ),
];

pub fn eval_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/eval")
}

/// One site: its entries and its questions.
pub struct Site {
    pub name: &'static str,
    pub half: Half,
    pub entries: Vec<Entry>,
    pub queries: Vec<Query>,
}

/// A question and the URLs of the pages that answer it.
pub struct Query {
    pub text: String,
    pub relevant: Vec<String>,
}

/// Every site with its questions, in [`SITES`] order.
pub fn load() -> Vec<Site> {
    let root = eval_root();
    let mut queries: HashMap<String, Vec<Query>> = HashMap::new();
    let tsv = std::fs::read_to_string(root.join("queries.tsv")).expect("eval/queries.tsv");
    for (n, line) in tsv.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let mut fields = line.split('\t');
        let (Some(site), Some(text), Some(relevant), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            panic!("queries.tsv line {}: want site, query, relevant", n + 1);
        };
        let base = site_url(site);
        let relevant = relevant
            .split_whitespace()
            .map(|r| base.join(r).expect("relevant URL").to_string())
            .collect();
        queries.entry(site.to_owned()).or_default().push(Query {
            text: text.to_owned(),
            relevant,
        });
    }
    SITES
        .iter()
        .map(|&(name, url, half)| {
            let text = std::fs::read_to_string(root.join("sites").join(name).join("llms.txt"))
                .expect("site llms.txt");
            let doc = llms_txt::parse(&text, &Url::parse(url).unwrap()).expect("parses");
            Site {
                name,
                half,
                entries: Entry::all_of(0, &doc).collect(),
                queries: queries.remove(name).unwrap_or_default(),
            }
        })
        .collect()
}

fn site_url(site: &str) -> Url {
    let (_, url, _) = SITES
        .iter()
        .find(|(name, _, _)| *name == site)
        .unwrap_or_else(|| panic!("queries.tsv names an unknown site {site}"));
    Url::parse(url).unwrap()
}

/// A ranker: the URLs of the best `limit` entries for a query, best first.
pub trait Ranker {
    fn rank(&self, query: &str, limit: usize) -> Vec<&str>;
}

impl Ranker for Index {
    fn rank(&self, query: &str, limit: usize) -> Vec<&str> {
        self.search(query, limit, None)
            .into_iter()
            .map(|h| h.entry.url.as_str())
            .collect()
    }
}

/// Textbook BM25 (k1 = 1.2, b = 0.75, Robertson–Spärck Jones IDF) over
/// each entry's title, section, notes and URL path as one text, split into
/// lowercase letter-and-digit words: no stemming, no stop words, no fields.
pub struct Bm25 {
    urls: Vec<String>,
    /// Word → (entry, term frequency) postings.
    postings: HashMap<String, Vec<(usize, f32)>>,
    lengths: Vec<f32>,
    average: f32,
}

const K1: f32 = 1.2;
const B: f32 = 0.75;

fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

impl Bm25 {
    pub fn build(entries: &[Entry]) -> Self {
        let mut postings: HashMap<String, Vec<(usize, f32)>> = HashMap::new();
        let mut lengths = Vec::with_capacity(entries.len());
        for (doc, e) in entries.iter().enumerate() {
            let path = e
                .url
                .split_once("://")
                .map_or(e.url.as_str(), |(_, r)| r.find('/').map_or("", |i| &r[i..]));
            let text = format!("{} {} {} {}", e.title, e.section, e.notes, path);
            let mut length = 0.0;
            for w in words(&text) {
                length += 1.0;
                let list = postings.entry(w).or_default();
                match list.last_mut() {
                    Some((d, tf)) if *d == doc => *tf += 1.0,
                    _ => list.push((doc, 1.0)),
                }
            }
            lengths.push(length);
        }
        let average = lengths.iter().sum::<f32>() / lengths.len().max(1) as f32;
        Self {
            urls: entries.iter().map(|e| e.url.clone()).collect(),
            postings,
            lengths,
            average: average.max(1.0),
        }
    }
}

impl Ranker for Bm25 {
    fn rank(&self, query: &str, limit: usize) -> Vec<&str> {
        let n = self.urls.len() as f32;
        let mut scores = vec![0f32; self.urls.len()];
        let mut seen: Vec<String> = Vec::new();
        for w in words(query) {
            if seen.contains(&w) {
                continue;
            }
            if let Some(list) = self.postings.get(&w) {
                let df = list.len() as f32;
                let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                for &(doc, tf) in list {
                    let norm = K1 * (1.0 - B + B * self.lengths[doc] / self.average);
                    scores[doc] += idf * tf * (K1 + 1.0) / (tf + norm);
                }
            }
            seen.push(w);
        }
        let mut hits: Vec<usize> = (0..scores.len()).filter(|&d| scores[d] > 0.0).collect();
        hits.sort_by(|a, b| scores[*b].total_cmp(&scores[*a]).then(a.cmp(b)));
        hits.truncate(limit);
        hits.into_iter().map(|d| self.urls[d].as_str()).collect()
    }
}

/// Summed scores of some questions; [`Scores::mean`] divides by their count.
#[derive(Debug, Clone, Copy, Default)]
pub struct Scores {
    pub queries: usize,
    /// A right page first.
    pub p1: f64,
    /// Right pages among the top three, over three.
    pub p3: f64,
    /// One over the rank of the first right page in the top ten (0 if none).
    pub rr: f64,
    /// The most `p3` can be: min(right pages, 3) / 3.
    pub ideal_p3: f64,
}

impl Scores {
    pub fn of(ranked: &[&str], relevant: &[String]) -> Self {
        let is_relevant = |u: &str| relevant.iter().any(|r| r == u);
        let first = ranked.iter().take(10).position(|u| is_relevant(u));
        Self {
            queries: 1,
            p1: f64::from(u8::from(first == Some(0))),
            p3: ranked.iter().take(3).filter(|u| is_relevant(u)).count() as f64 / 3.0,
            rr: first.map_or(0.0, |r| 1.0 / (r + 1) as f64),
            ideal_p3: relevant.len().min(3) as f64 / 3.0,
        }
    }

    pub fn add(&mut self, other: Self) {
        self.queries += other.queries;
        self.p1 += other.p1;
        self.p3 += other.p3;
        self.rr += other.rr;
        self.ideal_p3 += other.ideal_p3;
    }

    /// (precision@1, precision@3, MRR, ideal precision@3), averaged.
    pub fn mean(&self) -> (f64, f64, f64, f64) {
        let n = self.queries.max(1) as f64;
        (self.p1 / n, self.p3 / n, self.rr / n, self.ideal_p3 / n)
    }
}

/// The summed scores of `ranker` over `site`'s questions.
pub fn score(site: &Site, ranker: &impl Ranker) -> Scores {
    let mut total = Scores::default();
    for q in &site.queries {
        total.add(Scores::of(&ranker.rank(&q.text, 10), &q.relevant));
    }
    total
}
