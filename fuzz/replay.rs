//! Replays a fuzz target's committed seed corpus (`fuzz/corpus/<target>/`)
//! through its body on a stable toolchain. Included with `#[path]` by each
//! crate's `fuzz_corpus` test, so every crate replays its seeds the same way.

use std::path::{Path, PathBuf};

/// Runs `body` on every seed of `target`, naming the seed if it panics;
/// fails if the corpus has fewer than `min_seeds` files.
pub fn replay(target: &str, min_seeds: usize, body: impl Fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut seeds: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a readable corpus directory").path())
        .filter(|path| path.is_file())
        .collect();
    seeds.sort();
    assert!(
        seeds.len() >= min_seeds,
        "{} has {} seeds; expected at least {min_seeds}",
        dir.display(),
        seeds.len()
    );
    for seed in seeds {
        let data = std::fs::read(&seed).unwrap_or_else(|e| panic!("{}: {e}", seed.display()));
        eprintln!("{target}: {}", seed.display());
        body(&data);
    }
}
