//! Arbitrary bytes through the relay's line reader and decoder, and what
//! they decode to through the server's request parsing and argument
//! validation: no panic, never more than one line's worth of bytes held.
//! The body lives in the crate it tests, where stable tests replay the seed corpus.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    switchboard_relay::fuzzing::relay_line(data);
});
