#!/usr/bin/env bash
# Runs every fuzz target in fuzz/ for SECONDS each (default 300), starting
# from its committed seeds (fuzz/corpus/<target>/) and keeping what it finds
# in fuzz/target/corpus/<target>/ (ignored). A crash, a leak, a hang or a
# memory limit passed is saved under fuzz/artifacts/<target>/ (ignored) and
# reported with the target's name; the script then exits 1. At the end it
# prints each target's run time and executions (libFuzzer's final stats).
#
#     scripts/fuzz.sh [SECONDS]
#
# Needs a nightly toolchain and cargo-fuzz (cargo install --locked
# cargo-fuzz). FUZZ_JOBS=N runs N targets at a time (default 1); FUZZ_TARGETS
# (space-separated) runs only those; FUZZ_DEV=1 builds without optimizations
# (a quicker build for short smoke runs, such as CI's; slower executions).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../fuzz"

seconds=${1:-300}
jobs=${FUZZ_JOBS:-1}
# A line's worth of input never needs more; ASan's own overhead included.
rss_limit_mb=2048
malloc_limit_mb=64
# The slowest target (a loopback IRC connection) gives up after 10 s.
unit_timeout_s=30

# The fuzz workspace builds into its own target directory with nightly
# and sanitizer flags; a shared CARGO_TARGET_DIR would mix the two.
unset CARGO_TARGET_DIR
read -r -a targets <<<"${FUZZ_TARGETS:-$(cargo +nightly fuzz list | tr '\n' ' ')}"
profile=()
if [ "${FUZZ_DEV:-0}" = 1 ]; then profile=(--dev); fi
cargo +nightly fuzz build "${profile[@]}" >/dev/null

logs=target/fuzz-logs
mkdir -p "$logs"

run_target() {
    local target=$1
    local found="target/corpus/$target" artifacts="artifacts/$target/"
    mkdir -p "$found" "$artifacts"
    local start=$SECONDS status=0
    cargo +nightly fuzz run "${profile[@]}" "$target" "$found" "corpus/$target" -- \
        -max_total_time="$seconds" -rss_limit_mb="$rss_limit_mb" \
        -malloc_limit_mb="$malloc_limit_mb" -timeout="$unit_timeout_s" \
        -artifact_prefix="$artifacts" -print_final_stats=1 \
        >"$logs/$target.log" 2>&1 || status=$?
    echo "$((SECONDS - start))" >"$logs/$target.seconds"
    echo "$status" >"$logs/$target.status"
}

for target in "${targets[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
    echo "fuzzing $target for ${seconds}s" >&2
    run_target "$target" &
done
wait

stat() { sed -n "s/^stat::$1: *//p" "$logs/$2.log" | tail -1; }

crashed=()
printf '%-14s %8s %14s %10s %10s  %s\n' target seconds executions exec/s peak_MB result
for target in "${targets[@]}"; do
    status=$(cat "$logs/$target.status")
    result=ok
    if [ "$status" != 0 ]; then
        artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$logs/$target.log" | tail -1)
        result="CRASH (exit $status): ${artifact:-see fuzz/$logs/$target.log}"
        crashed+=("$target")
    fi
    printf '%-14s %8s %14s %10s %10s  %s\n' "$target" "$(cat "$logs/$target.seconds")" \
        "$(stat number_of_executed_units "$target")" "$(stat average_exec_per_sec "$target")" \
        "$(stat peak_rss_mb "$target")" "$result"
done

if [ "${#crashed[@]}" -gt 0 ]; then
    for target in "${crashed[@]}"; do
        echo "--- $target (fuzz/$logs/$target.log) ---" >&2
        grep -m1 -A25 -E 'panicked at|ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer)|==ERROR' \
            "$logs/$target.log" >&2 || tail -30 "$logs/$target.log" >&2
    done
    echo "fuzzing found crashes in: ${crashed[*]}" >&2
    exit 1
fi
