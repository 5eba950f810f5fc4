#!/usr/bin/env bash
# The whole test suite: unit, integration and end-to-end tests (release build,
# so the interop check reuses the same binary), then the third-party client
# checks (MCP conformance suite, MCP Inspector).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cargo test --workspace --release --locked
cargo build --release --locked -p switchboard
scripts/interop.sh "${CARGO_TARGET_DIR:-target}/release/switchboard"
