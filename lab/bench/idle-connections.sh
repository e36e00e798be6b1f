#!/usr/bin/env bash
# Benchmark: memory per idle keep-alive connection, the edge against nginx side by side.
# N TLS 1.3 connections (HTTP/1.1, then HTTP/2), one signed 1 KiB GitHub POST on each,
# then idle; the server's RSS before and with them all open (nginx: its one worker).
# Each measurement runs on a fresh server process (freed memory is not returned to the
# kernel, so a second round would measure the first); rounds alternate who goes first;
# medians and the edge/nginx ratio are printed.
#   ROUNDS=3 N=5000 lab/bench/idle-connections.sh
# EDGE=/path/to/edge measures that build instead of target/release/edge.
set -euo pipefail
cd "$(dirname "$0")/../.."
. lab/bench/lib.sh
ROUNDS=${ROUNDS:-3}
N=${N:-5000}
EDGE=${EDGE:-target/release/edge}
EDGE_PORT=18643 ADMIN_PORT=19380 NGINX_PORT=18644
# The client holds N descriptors, each server N more.
ulimit -n "$(ulimit -Hn)"

bench_prepare idle

bench_identity "$work"
bench_bodies "$work/bodies.tsv" bench-secret

# Long deadlines, so that no connection ends while N are opened one after another (builds
# before the edge's own head clock also ended idle keep-alives at the head deadline).
bench_edge_yaml "" "connections: { max: $((N + 100)), per_source: $((N + 100)), per_trusted_source: $((N + 100)) }
http: { header_timeout: 300s, idle_timeout: 300s }"

mkdir -p "$work/nginx"
cat > "$work/nginx.conf" <<CONF
worker_processes 1;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections $((N + 100)); }
http {
    access_log off;
    client_body_temp_path $work/nginx;
    keepalive_timeout 300s;
    http2_idle_timeout 300s;
    server {
        listen 127.0.0.1:$NGINX_PORT ssl http2;
        ssl_protocols TLSv1.3;
        ssl_certificate $work/cert.pem;
        ssl_certificate_key $work/key.pem;
        location / { return 202; }
    }
}
CONF

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

# measure SERVER PROTOCOL: one fresh server, N idle connections; appends
# "SERVER PROTOCOL bytes_per_connection" to $results.
measure() {
    local server=$1 protocol=$2 pid port before after line answered
    if [ "$server" = edge ]; then
        rm -rf "$work/spool"
        "$EDGE" run --config "$work/edge.yaml" 2>>"$work/edge.log" &
        pid=$! port=$EDGE_PORT
        for _ in $(seq 100); do curl -sf "127.0.0.1:$ADMIN_PORT/readyz" >/dev/null && break; sleep 0.1; done
    else
        nginx -c "$work/nginx.conf" -g 'daemon off;' 2>>"$work/nginx/stderr.log" &
        pid=$! port=$NGINX_PORT
        for _ in $(seq 100); do curl -sfk -o /dev/null "https://127.0.0.1:$NGINX_PORT/" -X POST && break; sleep 0.1; done
    fi
    bench_pids+=("$pid")
    local measured=$pid
    [ "$server" = nginx ] && measured=$(pgrep -P "$pid" | head -1)
    before=$(rss_kib "$measured")
    coproc CLIENT { python3 lab/bench/idle_client.py "$N" "$port" "$protocol" "$work/bodies.tsv"; }
    local client_pid=$CLIENT_PID
    read -r line <&"${CLIENT[0]}" || { echo "the $protocol client failed against $server" >&2; exit 1; }
    sleep 1
    after=$(rss_kib "$measured")
    answered=$(echo "$line" | awk '{print $4}')
    if [ "$server" = edge ]; then answered="$answered, stored $(bench_stored)"; fi
    echo "$server $protocol $(( (after - before) * 1024 / N ))" >> "$results"
    printf '  %-6s %s: %s connections (answered %s), RSS %.1f -> %.1f MB, %d bytes per connection\n' \
        "$server" "$protocol" "$N" "$answered" "$(echo "$before / 1024" | bc -l)" "$(echo "$after / 1024" | bc -l)" \
        "$(( (after - before) * 1024 / N ))"
    echo >&"${CLIENT[1]}"
    wait "$client_pid" 2>/dev/null || true
    kill "$pid"
    wait "$pid" 2>/dev/null || true
}

results="$work/results.txt"
: > "$results"
for round in $(seq "$ROUNDS"); do
    echo "round $round:"
    if [ $((round % 2)) -eq 1 ]; then order="nginx edge"; else order="edge nginx"; fi
    for protocol in h1 h2; do
        for server in $order; do measure "$server" "$protocol"; done
    done
done

echo
echo "medians of $ROUNDS rounds, $N idle TLS 1.3 connections, bytes of RSS per connection:"
for protocol in h1 h2; do
    edge=$(grep "^edge $protocol " "$results" | awk '{print $3}' | median)
    nginx=$(grep "^nginx $protocol " "$results" | awk '{print $3}' | median)
    label=HTTP/1.1; [ "$protocol" = h2 ] && label=HTTP/2
    printf '  %-8s edge %6d  nginx %6d  ratio edge/nginx %.2f\n' "$label" "$edge" "$nginx" "$(echo "$edge / $nginx" | bc -l)"
done
