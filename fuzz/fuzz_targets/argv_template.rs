//! A command's `argv` template and a call's parameters through compiling,
//! validation and rendering: no NUL, no placeholder left, no element or
//! option the template and its `allow` lists did not provide for.
//! The body lives in the crate it tests, where stable tests replay the seed corpus.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    switchboard_toolkit::fuzzing::argv_template(data);
});
