#!/usr/bin/env bash
# Benchmark: a handshake flood. Each request on a new TLS 1.3 connection (wrk with
# `Connection: close`), so the server's work is dominated by the full handshake; the
# edge (one tokio worker, stores each delivery) against nginx `return 202;` (one worker),
# each alone on CPU 0 with wrk alone on CPU 1, both with the same ECDSA P-256
# certificate. Rounds alternate which server goes first; prints medians of new
# connections/s and CPU µs per connection (from /proc/PID/stat), and the edge/nginx ratio.
#   ROUNDS=5 DURATION=10s CONNS=64 lab/bench/handshakes.sh
# KEY=rsa prices an RSA-2048 certificate instead, the reason P-256 is the default.
set -euo pipefail
cd "$(dirname "$0")/../.."
. lab/bench/lib.sh
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-10s}
CONNS=${CONNS:-64}
bench_pin
wrk_args=(-H "Connection: close")
EDGE_PORT=18453 ADMIN_PORT=19190 NGINX_PORT=18454

bench_prepare handshakes
if [ "${KEY:-ec}" = rsa ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
        -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null
else
    bench_identity "$work"
fi
bench_edge_yaml ""
bench_nginx_conf 1

"${server_cpu[@]}" target/release/edge run --config "$work/edge.yaml" 2>"$work/edge.log" &
edge_pid=$!
bench_pids+=("$edge_pid")
"${server_cpu[@]}" nginx -c "$work/nginx.conf" -g 'daemon off;' 2>"$work/nginx/stderr.log" &
nginx_pid=$!
bench_pids+=("$nginx_pid")
for _ in $(seq 100); do
    curl -sf "127.0.0.1:$ADMIN_PORT/readyz" >/dev/null &&
        curl -sfk -o /dev/null "https://127.0.0.1:$NGINX_PORT/" -X POST && break
    sleep 0.1
done
nginx_processes=("$nginx_pid" $(pgrep -P "$nginx_pid"))
ticks_per_second=$(getconf CLK_TCK)

results="$work/results.txt"
for round in $(seq "$ROUNDS"); do
    if [ $((round % 2)) -eq 1 ]; then order="nginx edge"; else order="edge nginx"; fi
    for name in $order; do
        if [ "$name" = edge ]; then port=$EDGE_PORT pids=("$edge_pid"); else port=$NGINX_PORT pids=("${nginx_processes[@]}"); fi
        before=$(cpu_ticks "${pids[@]}")
        line=$(bench_wrk "$name" "https://127.0.0.1:$port/hooks/github")
        after=$(cpu_ticks "${pids[@]}")
        requests=$(echo "$line" | awk -v d="${DURATION%s}" '{for (i = 1; i <= NF; i++) if ($i ~ /^rps=/) {split($i, kv, "="); print kv[2] * d}}')
        cpu_us=$(awk -v t=$((after - before)) -v hz="$ticks_per_second" -v n="$requests" 'BEGIN {printf "%.1f", n ? t / hz * 1e6 / n : 0}')
        line="$line cpu_us=$cpu_us"
        echo "round $round: $line"
        echo "$line" >> "$results"
    done
done

edge_rps=$(field edge rps | median); nginx_rps=$(field nginx rps | median)
edge_cpu=$(field edge cpu_us | median); nginx_cpu=$(field nginx cpu_us | median)
handshakes=$(curl -s "127.0.0.1:$ADMIN_PORT/metrics" | awk '/^edge_tls_handshakes_total/ {s += $NF} END {print s + 0}')
awk -v er="$edge_rps" -v nr="$nginx_rps" -v ec="$edge_cpu" -v nc="$nginx_cpu" -v key="${KEY:-ec}" -v rounds="$ROUNDS" -v hs="$handshakes" 'BEGIN {
    printf "\nmedians of %d alternating rounds (a new TLS 1.3 connection per request, %s certificate; server alone on CPU 0, wrk on CPU 1)\n", rounds, key == "rsa" ? "RSA-2048" : "ECDSA P-256"
    printf "edge  (handshake + verify + fsync + 202): %8.0f connections/s  %7.1f µs CPU each\n", er, ec
    printf "nginx (handshake + return 202):          %8.0f connections/s  %7.1f µs CPU each\n", nr, nc
    printf "ratio edge/nginx: connections/s %.2f  CPU per connection %.2f; edge_tls_handshakes_total %d\n", er / nr, ec / nc, hs
}'
