//! The `relay_line` fuzz target's body on its committed seed corpus
//! (`fuzz/corpus/relay_line/`), so stable `cargo test` exercises what the
//! fuzzer starts from.

#[path = "../../../fuzz/replay.rs"]
mod replay;

#[test]
fn the_seed_corpus_passes_the_fuzz_target() {
    replay::replay("relay_line", 12, switchboard_relay::fuzzing::relay_line);
}

#[test]
fn edge_inputs_pass_the_fuzz_target() {
    for data in [
        &b""[..],
        b"\n",
        b"\xff",
        b"\xff\n",
        b"\r\n\r\n",
        b"{",
        b"{\"type\":\"request\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"set_session_title\",\"arguments\":{\"title\":17}}}",
    ] {
        switchboard_relay::fuzzing::relay_line(data);
    }
}
