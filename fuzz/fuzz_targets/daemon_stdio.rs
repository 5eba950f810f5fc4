//! Arbitrary bytes as the stdin of `switchboard serve --stdio` (framing,
//! classification, rmcp and the direct `tools/call` path): well-formed
//! replies to ids the client sent, at most one a line, and the session ends
//! with stdin.
//! The body lives in the binary crate (`crates/switchboard/src/fuzzing.rs`), where stable tests replay the seed corpus.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    switchboard::fuzzing::daemon_stdio(data);
});
