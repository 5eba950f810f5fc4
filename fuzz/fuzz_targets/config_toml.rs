//! Arbitrary bytes as switchboard's config file (alone or over the
//! `imqueue` profile) through loading, validation and building the
//! toolkit: it loads or fails with an error naming the key, never panics.
//! The body lives in the binary crate (`crates/switchboard/src/fuzzing.rs`), where stable tests replay the seed corpus.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    switchboard::fuzzing::config_toml(data);
});
