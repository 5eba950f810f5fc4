//! Arbitrary bytes as a fetched llms.txt: decoding and parsing, with
//! bounded titles and notes and no duplicate links.
//! The body lives in the crate it tests, where stable tests replay the seed corpus.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    switchboard_docs::fuzzing::llms_txt(data);
});
