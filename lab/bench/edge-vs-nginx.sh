#!/usr/bin/env bash
# Benchmark: the edge's full path (verify + group-commit fdatasync + 202) against nginx
# answering `return 202;`, side by side in one run: TLS 1.3, keep-alive, 1 KiB signed
# GitHub POSTs, each a distinct delivery (its own id and signed body), wrk -t2 -c64, and
# once the replay path (one body under fresh ids). Rounds alternate which server
# goes first; medians and the edge/nginx ratios are printed (requests per second, p99,
# CPU time and system calls per request), plus the edge's peak RSS.
#   ROUNDS=5 DURATION=10s CONNS=64 THREADS=2 BATCH_DELAY=1ms lab/bench/edge-vs-nginx.sh
# With ANCHOR_EDGE=/path/to/edge the anchor is that other edge build on the same config
# instead of nginx (e.g. to price a change against the commit before it).
# With PIN=1 the comparison is per core: each server runs alone on CPU 0 (the edge with
# one worker, nginx with one worker process) and wrk alone on CPU 1 (one thread),
# so neither server's ratio is decided by how many of wrk's cycles it steals.
# With H2=1 the same deliveries go over HTTP/2 (`lab h2-load`: CONNS connections, default
# 4, with STREAMS requests in flight on each, default 100) to both servers.
set -euo pipefail
cd "$(dirname "$0")/../.."
. lab/bench/lib.sh
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-10s}
if [ "${H2:-0}" = 1 ]; then CONNS=${CONNS:-4}; else CONNS=${CONNS:-64}; fi
THREADS=${THREADS:-2}
PIN=${PIN:-0}
if [ "$PIN" = 1 ]; then
    bench_pin
    nginx_workers=1
else
    server_cpu=() client_cpu=() nginx_workers=auto
fi
EDGE_PORT=18443 ADMIN_PORT=19180 NGINX_PORT=18444

bench_prepare bench

bench_identity "$work"

bench_edge_yaml ", max_batch_delay: ${BATCH_DELAY:-1ms}"

bench_nginx_conf "$nginx_workers"


"${server_cpu[@]}" target/release/edge run --config "$work/edge.yaml" 2>"$work/edge.log" &
edge_pid=$!
bench_pids+=("$edge_pid")
if [ -n "${ANCHOR_EDGE:-}" ]; then
    anchor=baseline anchor_label="baseline edge build:"
    sed -e "s/$EDGE_PORT/$NGINX_PORT/; s/$ADMIN_PORT/$((ADMIN_PORT + 1))/; s#$work/spool#$work/spool-baseline#" \
        "$work/edge.yaml" > "$work/baseline.yaml"
    "${server_cpu[@]}" "$ANCHOR_EDGE" run --config "$work/baseline.yaml" 2>"$work/baseline.log" &
    anchor_probe() { curl -sf "127.0.0.1:$((ADMIN_PORT + 1))/readyz" >/dev/null; }
else
    anchor=nginx anchor_label="nginx (return 202):"
    "${server_cpu[@]}" nginx -c "$work/nginx.conf" -g 'daemon off;' 2>"$work/nginx/stderr.log" &
    anchor_probe() { curl -sfk -o /dev/null "https://127.0.0.1:$NGINX_PORT/" -X POST; }
fi
anchor_pid=$!
bench_pids+=("$anchor_pid")
for _ in $(seq 100); do
    curl -sf "127.0.0.1:$ADMIN_PORT/readyz" >/dev/null && anchor_probe && break
    sleep 0.1
done

results="$work/results.txt"
for round in $(seq "$ROUNDS"); do
    if [ $((round % 2)) -eq 1 ]; then order="$anchor edge"; else order="edge $anchor"; fi
    for name in $order; do
        if [ "$name" = edge ]; then port=$EDGE_PORT pid=$edge_pid; else port=$NGINX_PORT pid=$anchor_pid; fi
        line=$(bench_wrk "$name" "https://127.0.0.1:$port/hooks/github" "$pid")
        echo "round $round: $line"
        echo "$line" >> "$results"
    done
done

# The replay path, once: one captured body under fresh ids, acknowledged, not stored.
replay_line=$(REPLAY=1 bench_wrk edge-replay "https://127.0.0.1:$EDGE_PORT/hooks/github")
echo "replays: $replay_line"

edge_rps=$(field edge rps | median); nginx_rps=$(field "$anchor" rps | median)
edge_p99=$(field edge p99_us | median); nginx_p99=$(field "$anchor" p99_us | median)
edge_cpu=$(field edge cpu_us | median); nginx_cpu=$(field "$anchor" cpu_us | median)
edge_calls=$(field edge syscalls | median); nginx_calls=$(field "$anchor" syscalls | median)
edge_bad=$(field edge non2xx | awk '{s+=$1} END {print s+0}')
rss_kb=$(awk '/VmHWM/ {print $2}' "/proc/$edge_pid/status")
stored=$(bench_stored)
metrics=$(curl -s "127.0.0.1:$ADMIN_PORT/metrics")
mean_of() { echo "$metrics" | awk -v m="$1" -v k="$2" '$1 ~ "^"m"_sum" {s=$NF} $1 ~ "^"m"_count" {c=$NF} END {if (c) printf "%.2f", s/c*k}'; }
mean_batch=$(mean_of edge_spool_batch_records 1)
mean_fsync=$(mean_of edge_spool_fsync_seconds 1000)

replay=$(echo "$replay_line" | grep -o 'rps=[0-9.]*' | cut -d= -f2)
awk -v label="$anchor_label" -v replay="${replay:-?} req/s" -v er="$edge_rps" -v nr="$nginx_rps" -v ep="$edge_p99" -v np="$nginx_p99" -v bad="$edge_bad" -v ec="$edge_cpu" -v nc="$nginx_cpu" -v es="$edge_calls" -v ns="$nginx_calls" \
    -v rss="$rss_kb" -v stored="${stored:-?}" -v batch="${mean_batch:-?}" -v fsync="${mean_fsync:-?}" -v rounds="$ROUNDS" \
    -v mode="$([ "${H2:-0}" = 1 ] && echo "HTTP/2, $CONNS connections x ${STREAMS:-100} streams; ")$([ "$PIN" = 1 ] && echo "per core: server alone on CPU 0, the load on CPU 1" || echo "whole machine, unpinned")" 'BEGIN {
    printf "\nmedians of %d alternating rounds (%s)\n", rounds, mode
    printf "edge  (verify + fsync + 202): %8.0f req/s  p99 %6.2f ms  CPU %5.1f us/request  %5.2f syscalls/request  non-2xx %d\n", er, ep / 1000, ec, es, bad
    printf "%-30s%8.0f req/s  p99 %6.2f ms  CPU %5.1f us/request  %5.2f syscalls/request\n", label, nr, np / 1000, nc, ns
    printf "ratio edge/anchor: req/s %.2f  p99 %.2f  CPU per request %.2f\n", er / nr, ep / np, ec / nc
    printf "edge replays (one body under fresh ids, not stored): %s\n", replay
    printf "edge peak RSS %.1f MB; events stored durably %s; mean group-commit batch %s records, mean fdatasync %s ms\n", rss / 1024, stored, batch, fsync
}'
