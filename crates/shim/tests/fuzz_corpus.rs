//! The `shim_stdio` fuzz target's body on its committed seed corpus
//! (`fuzz/corpus/shim_stdio/`), so stable `cargo test` exercises what the
//! fuzzer starts from.

#[path = "../../../fuzz/replay.rs"]
mod replay;

use switchboard_shim::fuzzing::shim_stdio;

#[test]
fn the_seed_corpus_passes_the_fuzz_target() {
    replay::replay("shim_stdio", 12, shim_stdio);
}
