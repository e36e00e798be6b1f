#!/usr/bin/env bash
# Where one request's microseconds go on the edge's durable path. The edge runs alone on
# CPU 0 (one tokio worker), wrk -t1 -c64 on CPU 1 sends the signed 1 KiB GitHub POSTs of
# edge-vs-nginx.sh; perf samples the edge for PERF_SECONDS while its CPU time and stored
# events are counted, and every sample is charged to the innermost frame of its stack
# that names a stage (lab/bench/profile_stages.py). Sampling slows the edge, so its CPU
# time per request is taken in a window before perf starts; the samples give the shares.
# Prints µs per request per stage; STACKS_OUT=FILE also keeps the samples' stacks.
# With PIN=0 the edge (one worker per CPU) and wrk -t2 share both CPUs, as in the
# whole-machine comparison.
#   PERF_SECONDS=6 EDGE=target/release/edge lab/bench/edge-profile.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
. lab/bench/lib.sh
PERF_SECONDS=${PERF_SECONDS:-6}
EDGE=${EDGE:-target/release/edge}
EDGE_PORT=18463 ADMIN_PORT=19200 CONNS=64 DURATION=$((2 * PERF_SECONDS + 3))s

bench_prepare profile
bench_identity "$work"
bench_edge_yaml ""

if [ "${PIN:-1}" = 1 ]; then
    bench_pin
else
    server_cpu=() client_cpu=() THREADS=2
fi
"${server_cpu[@]}" "$EDGE" run --config "$work/edge.yaml" 2>"$work/edge.log" &
edge_pid=$!
bench_pids+=("$edge_pid")
for _ in $(seq 100); do
    curl -sf "127.0.0.1:$ADMIN_PORT/readyz" >/dev/null && break
    sleep 0.1
done

bench_wrk edge "https://127.0.0.1:$EDGE_PORT/hooks/github" > "$work/wrk.txt" &
wrk_pid=$!
bench_pids+=("$wrk_pid")
sleep 2
stored0=$(bench_stored) ticks0=$(cpu_ticks "$edge_pid")
sleep "$PERF_SECONDS"
stored1=$(bench_stored) ticks1=$(cpu_ticks "$edge_pid")
"${client_cpu[@]}" perf record -F 999 -g --call-graph dwarf,8192 -p "$edge_pid" -o "$work/perf.data" \
    -- sleep "$PERF_SECONDS" >/dev/null 2>&1
wait "$wrk_pid"

requests=$(echo "$stored1 - $stored0" | bc)
cpu_us=$(echo "($ticks1 - $ticks0) * 1000000 / $(getconf CLK_TCK)" | bc)
cat "$work/wrk.txt"
echo "unsampled window: edge CPU ${cpu_us} µs over ${PERF_SECONDS} s for ${requests} stored events"
perf script -i "$work/perf.data" -F ip,sym 2>/dev/null | tee "${STACKS_OUT:-/dev/null}" \
    | python3 lab/bench/profile_stages.py --cpu-us "$cpu_us" --requests "$requests"
