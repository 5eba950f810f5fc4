//! Ranking quality of `search_docs` on real llms.txt files (`eval/`):
//! precision@1, precision@3 and MRR of our index next to a textbook BM25
//! over the same entries, per site, per half and overall. Run with
//! `--nocapture` to see the table; with `SEARCH_EVAL_MISSES=tuning` (or
//! `held-out`, or `all`) it also lists that half's questions whose first
//! result is not a right page.

mod eval;

use eval::{Bm25, Half, Scores, load, score};
use switchboard_docs::index::Index;

#[test]
fn every_right_page_is_a_link_of_its_site() {
    let sites = load();
    assert_eq!(sites.len(), 8);
    let mut total = 0;
    for site in &sites {
        assert!(
            site.entries.len() >= 20,
            "{}: {}",
            site.name,
            site.entries.len()
        );
        assert!(
            site.queries.len() >= 30,
            "{}: {}",
            site.name,
            site.queries.len()
        );
        total += site.queries.len();
        println!(
            "{}: {} links, {} questions",
            site.name,
            site.entries.len(),
            site.queries.len()
        );
        for q in &site.queries {
            assert!(!q.relevant.is_empty(), "{}: {}", site.name, q.text);
            for url in &q.relevant {
                assert!(
                    site.entries.iter().any(|e| &e.url == url),
                    "{}: {:?} names {url}, which is not a link of the site",
                    site.name,
                    q.text
                );
            }
        }
    }
    assert!(total >= 300, "{total} questions");
}

fn show_misses(half: Half) -> bool {
    match std::env::var("SEARCH_EVAL_MISSES").as_deref() {
        Ok("all") => true,
        Ok("tuning") => half == Half::Tuning,
        Ok("held-out") => half == Half::HeldOut,
        _ => false,
    }
}

fn print_misses(site: &eval::Site, index: &Index) {
    use eval::Ranker;
    for q in &site.queries {
        let ranked = index.rank(&q.text, 3);
        if ranked
            .first()
            .is_none_or(|u| !q.relevant.iter().any(|r| r == u))
        {
            println!(
                "  {}: {:?}\n    got  {ranked:?}\n    want {:?}",
                site.name, q.text, q.relevant
            );
        }
    }
}

fn row(name: &str, n: usize, ours: &Scores, bm25: &Scores) {
    let (o1, o3, orr, ideal) = ours.mean();
    let (b1, b3, brr, _) = bm25.mean();
    println!(
        "{name:<22} {n:>4} {ideal:>6.3} | {o1:>6.3} {o3:>6.3} {orr:>6.3} | {b1:>6.3} {b3:>6.3} {brr:>6.3}"
    );
}

#[test]
fn ranking_beats_bm25_on_real_sites() {
    let sites = load();
    println!(
        "precision@1: a right page first; precision@3: right pages in the top three / 3; \
         MRR: mean of 1 / rank of the first right page in the top ten"
    );
    println!(
        "{:<22} {:>4} {:>6} | {:>6} {:>6} {:>6} | {:>6} {:>6} {:>6}",
        "site", "qs", "ideal3", "P@1", "P@3", "MRR", "bm25@1", "bm25@3", "MRR"
    );
    let mut halves = [(Scores::default(), Scores::default()); 2];
    let mut all = (Scores::default(), Scores::default());
    for site in &sites {
        let index = Index::build(site.entries.clone());
        if show_misses(site.half) {
            print_misses(site, &index);
        }
        let ours = score(site, &index);
        let bm25 = score(site, &Bm25::build(&site.entries));
        let label = format!(
            "{} ({})",
            site.name,
            if site.half == Half::Tuning {
                "tune"
            } else {
                "held"
            }
        );
        row(&label, ours.queries, &ours, &bm25);
        let half = &mut halves[usize::from(site.half == Half::HeldOut)];
        half.0.add(ours);
        half.1.add(bm25);
        all.0.add(ours);
        all.1.add(bm25);
    }
    println!();
    row(
        "tuning half",
        halves[0].0.queries,
        &halves[0].0,
        &halves[0].1,
    );
    row(
        "held-out half",
        halves[1].0.queries,
        &halves[1].0,
        &halves[1].1,
    );
    row("all", all.0.queries, &all.0, &all.1);
}
