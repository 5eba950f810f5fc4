//! The `relay_line` fuzz target's body on its committed seed corpus
//! (`fuzz/corpus/relay_line/`), so stable `cargo test` exercises what the
//! fuzzer starts from.

use std::path::Path;

#[test]
fn the_seed_corpus_passes_the_fuzz_target() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/relay_line");
    let mut seeds: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .collect();
    seeds.sort();
    assert!(seeds.len() >= 12, "only {} seeds", seeds.len());
    for seed in seeds {
        let data = std::fs::read(&seed).unwrap();
        switchboard_relay::fuzzing::relay_line(&data);
    }
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
