//! Arbitrary bytes from an IRC server: the bounded line reader, parsing,
//! ISUPPORT, NAMES and membership, history batches, CTCP, and a real
//! connection's registration (CAP, SASL) and session on loopback. The
//! client never writes a command the server could have smuggled in.
//! The body lives in the crate it tests, where stable tests replay the seed corpus.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    switchboard_chat::fuzzing::irc_lines(data);
});
