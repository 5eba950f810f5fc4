//! The `irc_lines` fuzz target's body on its committed seed corpus
//! (`fuzz/corpus/irc_lines/`), so stable `cargo test` exercises what the
//! fuzzer starts from.

#[path = "../../../fuzz/replay.rs"]
mod replay;

#[test]
fn the_seed_corpus_passes_the_fuzz_target() {
    replay::replay("irc_lines", 12, switchboard_chat::fuzzing::irc_lines);
}
