#!/usr/bin/env bash
# Benchmark: legitimate keep-alive throughput (wrk, TLS 1.3, 1 KiB signed GitHub POSTs)
# while slowhttptest holds 2,000 slowloris connections open, as a ratio of the
# throughput without the attack, in the same run. The head deadline is raised to 60 s so
# the attack is really held during the measurement (the worst moment: before the
# deadline fires). Rounds alternate which case goes first; medians are printed.
#   ROUNDS=3 DURATION=8s CONNS=32 lab/bench/slowloris-throughput.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
. lab/bench/lib.sh
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-8s}
CONNS=${CONNS:-32}
ATTACK=2000
EDGE_PORT=18453 ADMIN_PORT=19190

bench_prepare slowloris
bench_identity "$work"
bench_edge_yaml "" "http: { header_timeout: 60s }
connections: { max: 20000, per_source: 5000 }"

target/release/edge run --config "$work/edge.yaml" 2>"$work/edge.log" &
edge_pid=$!
bench_pids+=("$edge_pid")
for _ in $(seq 100); do curl -sf "127.0.0.1:$ADMIN_PORT/readyz" >/dev/null && break; sleep 0.1; done

open_connections() { curl -s "127.0.0.1:$ADMIN_PORT/metrics" | awk '/^edge_open_connections/ {print $NF}'; }
start_attack() {
    # slowhttptest busy-polls a whole core while it holds its connections; at nice 19
    # it still holds them, and the measurement prices the edge, not the attacker's loop.
    nice -n 19 slowhttptest -H -c "$ATTACK" -r 1000 -i 5 -l 120 -p 3 \
        -u "https://127.0.0.1:$EDGE_PORT/hooks/github" >/dev/null 2>&1 &
    attack_pid=$!
    bench_pids+=("$attack_pid")
    for _ in $(seq 300); do
        [ "$(open_connections)" -ge $((ATTACK * 95 / 100)) ] && return
        sleep 0.1
    done
    echo "slowloris reached only $(open_connections) connections" >&2
}
stop_attack() {
    kill "$attack_pid" 2>/dev/null; wait "$attack_pid" 2>/dev/null || true
    attack_pid=""
    for _ in $(seq 100); do [ "$(open_connections)" -le 1 ] && break; sleep 0.1; done
}

results="$work/results.txt"
for round in $(seq "$ROUNDS"); do
    if [ $((round % 2)) -eq 1 ]; then order="quiet attacked"; else order="attacked quiet"; fi
    for case in $order; do
        if [ "$case" = attacked ]; then start_attack; held=$(open_connections); fi
        line=$(bench_wrk "$case" "https://127.0.0.1:$EDGE_PORT/hooks/github")
        if [ "$case" = attacked ]; then line="$line held=$held"; stop_attack; fi
        echo "round $round: $line"
        echo "$line" >> "$results"
    done
done

quiet=$(field quiet rps | median); attacked=$(field attacked rps | median)
quiet_p99=$(field quiet p99_us | median); attacked_p99=$(field attacked p99_us | median)
rss_kb=$(awk '/VmHWM/ {print $2}' "/proc/$edge_pid/status")
awk -v q="$quiet" -v a="$attacked" -v qp="$quiet_p99" -v ap="$attacked_p99" -v rss="$rss_kb" -v rounds="$ROUNDS" 'BEGIN {
    printf "\nmedians of %d alternating rounds\n", rounds
    printf "no attack:                 %8.0f req/s  p99 %6.2f ms\n", q, qp / 1000
    printf "2000 slowloris conns held: %8.0f req/s  p99 %6.2f ms\n", a, ap / 1000
    printf "ratio attacked/quiet: %.2f; edge peak RSS %.1f MB\n", a / q, rss / 1024
}'
