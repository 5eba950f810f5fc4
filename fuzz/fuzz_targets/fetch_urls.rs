//! Host lists, a URL and redirect `Location`s through the docs fetcher's
//! checks, differentially: every URL accepted parses with the `url` and
//! `http` crates to the same allowed host and port.
//! The body lives in the crate it tests, where stable tests replay the seed corpus.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    switchboard_docs::fuzzing::fetch_urls(data);
});
