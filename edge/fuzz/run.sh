#!/usr/bin/env bash
# Builds every fuzz target once (nightly, no sanitizer) and runs each for SECONDS
# (default 10) over its corpus in the repository. No AddressSanitizer: the targets are
# safe Rust, where an out-of-bounds access is a panic already; without it the build is minutes
# shorter and each target runs 10-13x more inputs a second. What a run discovers goes to a scratch
# corpus under target/, so the repository stays as committed; a crash is saved under
# target/fuzz-artifacts/TARGET/ and fails the run (turn it into a regression test, and
# add the input to the corpus). Prints one line per target, then "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
out=$(cd .. && pwd)/target
scratch=$out/fuzz-corpus
artifacts=$out/fuzz-artifacts
# The same pinned nightly as the eBPF build (one place: xdp/ebpf/rust-toolchain.toml).
nightly=$(sed -n 's/^channel = "\(.*\)"$/\1/p' ../xdp/ebpf/rust-toolchain.toml)
targets=$(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^edge-fuzz$')

cargo "+$nightly" fuzz build --sanitizer none --target-dir "$out/fuzz" || { echo "0 passed, 1 failed: fuzz build"; exit 1; }
passed=0
failed=0
for target in $targets; do
    mkdir -p "$scratch/$target" "$artifacts/$target"
    log=$artifacts/$target.log
    if cargo "+$nightly" fuzz run --sanitizer none --target-dir "$out/fuzz" "$target" "$scratch/$target" "fuzz/corpus/$target" -- \
        -max_total_time="$seconds" -artifact_prefix="$artifacts/$target/" -print_final_stats=1 >"$log" 2>&1; then
        runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
        echo "fuzz $target: ${runs:-?} inputs in ${seconds}s, no crash"
        passed=$((passed + 1))
    else
        echo "fuzz $target: FAILED (see $log and $artifacts/$target/)"
        grep -E 'panicked|deadly signal|SUMMARY' "$log" | head -5
        failed=$((failed + 1))
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
