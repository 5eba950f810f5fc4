//! The `switchboard` binary: the program is the library's
//! [`switchboard::run`].

use std::process::ExitCode;

/// glibc's malloc measured as a quarter of the server's CPU on the chat
/// workload (many short-lived JSON strings and maps, freed on other threads);
/// mimalloc's thread-local free lists cut that cost.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    switchboard::run()
}
