//! The `argv_template` fuzz target's body on its committed seed corpus
//! (`fuzz/corpus/argv_template/`), so stable `cargo test` exercises what
//! the fuzzer starts from.

#[path = "../../../fuzz/replay.rs"]
mod replay;

#[test]
fn the_seed_corpus_passes_the_fuzz_target() {
    replay::replay(
        "argv_template",
        12,
        switchboard_toolkit::fuzzing::argv_template,
    );
}
