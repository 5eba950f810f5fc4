//! The `llms_txt` and `fetch_urls` fuzz targets' bodies on their committed
//! seed corpora (`fuzz/corpus/<target>/`), so stable `cargo test` exercises
//! what the fuzzer starts from.

#[path = "../../../fuzz/replay.rs"]
mod replay;

use switchboard_docs::fuzzing::{fetch_urls, llms_txt};

#[test]
fn the_llms_txt_seeds_pass_the_fuzz_target() {
    replay::replay("llms_txt", 12, llms_txt);
}

#[test]
fn the_fetch_url_seeds_pass_the_fuzz_target() {
    replay::replay("fetch_urls", 12, fetch_urls);
}
