//! Arbitrary bytes as the stdin of `switchboard shim` (MCP stdio framing
//! and JSON-RPC classification) with no application behind it: every
//! request answered once, nothing but JSON-RPC replies on stdout.
//! The body lives in the crate it tests, where stable tests replay the seed corpus.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    switchboard_shim::fuzzing::shim_stdio(data);
});
