#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what it needs, checks formatting and
# lints, builds once in release and runs every test (unit, integration, crash, the lab's
# end-to-end scenarios in network namespaces) with it.
# Ends with one summary line: "N passed, N failed, N skipped" (CI, which runs as root,
# fails a root-only test that would be skipped).
set -uo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
# "name seconds" of each phase, printed at the end.
phases=()
mark=$started
phase() {
    local now
    now=$(date +%s)
    phases+=("$1 $((now - mark))s")
    mark=$now
}

lab/setup.sh || exit 1
# Compiled crates cached outside the clone (lab/setup.sh installs sccache): its server
# started here, detached from this script's pipes, and stopped at the end.
sccache=/var/cache/webhook-edge-lab/sccache/bin/sccache
if "$sccache" --version >/dev/null 2>&1; then
    export RUSTC_WRAPPER=$sccache SCCACHE_DIR=/var/cache/webhook-edge-lab/sccache/cache SCCACHE_CACHE_SIZE=20G \
        SCCACHE_IDLE_TIMEOUT=0
    "$sccache" --start-server >/dev/null 2>&1 </dev/null \
        || "$sccache" --show-stats >/dev/null 2>&1 || unset RUSTC_WRAPPER
fi
phase setup
cargo fmt --all -- --check || { echo "0 passed, 1 failed: cargo fmt --check"; exit 1; }
cargo clippy --release --workspace --all-targets -- -D warnings || { echo "0 passed, 1 failed: clippy"; exit 1; }
# The XDP program as the kernel gets it: its code exists only for the BPF target.
(cd xdp/ebpf && cargo clippy --target bpfel-unknown-none -Z build-std=core --release \
    --target-dir ../../target/ebpf-clippy -- -D warnings) \
    || { echo "0 passed, 1 failed: clippy (eBPF)"; exit 1; }
phase lint

mkdir -p target
log=target/test.log
cargo test --release --workspace --exclude lab 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
phase "workspace tests"
# Every parser that faces the internet, fuzzed for a bounded time each.
if [ "$status" -eq 0 ]; then
    edge/fuzz/run.sh "${FUZZ_SECONDS:-10}" 2>&1 | tee -a "$log"
    status=${PIPESTATUS[0]}
    phase fuzz
fi
# The lab's own tests, then each end-to-end binary (every scenario prints one result
# line); a failing one does not keep the others from running.
if [ "$status" -eq 0 ]; then
    lab_targets=("--lib --bins" --doc)
    for test in lab/runner/tests/*.rs; do lab_targets+=("--test $(basename "$test" .rs)"); done
    for target in "${lab_targets[@]}"; do
        # shellcheck disable=SC2086 # the target is one or two cargo options
        cargo test --release -p lab $target -- --nocapture 2>&1 | tee -a "$log"
        [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
        case $target in
            --test*) phase "lab ${target#--test }" ;;
            *) phase "lab ${target//--/}" ;;
        esac
    done
fi

sum() { grep -Eo 'test result: .*' "$log" | grep -Eo "[0-9]+ $1" | awk '{s+=$1} END {print s+0}'; }
passed=$(sum passed)
failed=$(sum failed)
# A root-only test run without root returns at once, and libtest counts it as passed:
# it says so on stderr ("skipped NAME: needs root"), and counts here as skipped.
# (The line can land in the middle of libtest's own "test NAME ... ok" line.)
root_skipped=$(grep -Eo 'skipped [A-Za-z0-9_:]+: needs root' "$log" | wc -l)
passed=$((passed - root_skipped + $(grep -c '^fuzz .*no crash$' "$log")))
skipped=$((root_skipped + $(sum ignored)))
failed=$((failed + $(grep -c '^fuzz .*FAILED' "$log")))
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
echo; grep -E '^(scenario|lab:|fuzz) ' "$log"; grep -Eo 'skipped [A-Za-z0-9_:]+: needs root.*' "$log"
if [ -n "${RUSTC_WRAPPER:-}" ]; then
    echo "compiler cache: $("$sccache" --show-stats 2>/dev/null | grep -E '^Cache hits rate +[0-9]' | tr -s ' ')"
    "$sccache" --stop-server >/dev/null 2>&1
fi
echo "phases: $(IFS=,; echo "${phases[*]}" | sed 's/,/, /g')"
echo "tests finished in $(( $(date +%s) - started ))s"
echo "$passed passed, $failed failed, $skipped skipped"
exit "$status"
