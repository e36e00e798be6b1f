# Shared by the benchmark scripts (sourced): a self-signed identity for localhost, and a
# 1 KiB GitHub push body with its X-Hub-Signature-256.

# bench_identity DIR: DIR/cert.pem and DIR/key.pem (P-256, valid for localhost and 127.0.0.1).
bench_identity() {
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
        -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout "$1/key.pem" -out "$1/cert.pem" 2>/dev/null
}

# bench_edge_yaml SPOOL_EXTRA [SECTIONS]: $work/edge.yaml for an edge on $EDGE_PORT (admin
# $ADMIN_PORT), TLS 1.3 with bench_identity's certificate, the spool under $work with
# segments preallocated as the Ansible role deploys a PoP's (PREALLOCATE=false: not) and
# SPOOL_EXTRA added (e.g. ", max_batch_delay: 1ms"), one GitHub route signed with
# bench-secret, then SECTIONS (YAML lines such as "http: { ... }").
bench_edge_yaml() {
    cat > "$work/edge.yaml" <<YAML
pop: bench
listen: ["127.0.0.1:$EDGE_PORT"]
admin_listen: 127.0.0.1:$ADMIN_PORT
drain_grace: 0s
tls: { cert: $work/cert.pem, key: $work/key.pem, min_version: "1.3" }
spool: { dir: $work/spool, max_bytes: 16GiB, segment_bytes: 64MiB, preallocate: ${PREALLOCATE:-true}$1 }
routes:
  - { path: /hooks/github, provider: github, secrets: ["bench-secret"] }
${2:-}
YAML
}

# bench_nginx_conf WORKERS: $work/nginx.conf, nginx answering `return 202;` over TLS 1.3
# on $NGINX_PORT with bench_identity's certificate, keep-alive without a request limit;
# with H2=1 it offers HTTP/2 by ALPN.
bench_nginx_conf() {
    mkdir -p "$work/nginx"
    cat > "$work/nginx.conf" <<CONF
worker_processes $1;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $work/nginx;
    keepalive_requests 1000000;
    server {
        listen 127.0.0.1:$NGINX_PORT ssl$([ "${H2:-0}" = 1 ] && echo " http2");
        ssl_protocols TLSv1.3;
        ssl_certificate $work/cert.pem;
        ssl_certificate_key $work/key.pem;
        location / { return 202; }
    }
}
CONF
}

# cpu_ticks PID...: user + system CPU of the processes so far, in clock ticks
# (/proc/PID/stat fields 14 and 15; getconf CLK_TCK a second).
cpu_ticks() {
    local pid total=0
    for pid in "$@"; do
        total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
    done
    echo "$total"
}

# tree_ticks [PID]: cpu_ticks of PID and its children (nginx's workers); 0 without PID.
tree_ticks() {
    [ -n "${1:-}" ] || { echo 0; return; }
    # shellcheck disable=SC2046  # one PID per word
    cpu_ticks "$1" $(ps -o pid= --ppid "$1")
}

# bench_bodies FILE SECRET [SALT]: FILE gets "signature<TAB>body" lines, distinct 1 KiB
# GitHub push bodies (SALT makes them differ from another call's) each with its
# X-Hub-Signature-256 under SECRET: 70,000 a wrk thread (THREADS), more than a route's
# de-duplication window (65,536), so that each request is a distinct delivery however
# long the run (github.lua).
bench_bodies() {
    python3 - "$1" "$2" "$((70000 * ${THREADS:-2}))" "${3:-}" <<'PY'
import hashlib, hmac, json, sys
path, secret, count, salt = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3]), sys.argv[4]
with open(path, "w") as out:
    for i in range(count):
        body = {"ref": "refs/heads/main", "after": f"{salt}{i:040x}", "repository": {"full_name": "acme/webhooks"}, "pusher": {"name": "bench"}}
        body["padding"] = "x" * (1024 - len(json.dumps({**body, "padding": ""})))
        text = json.dumps(body)
        sig = hmac.new(secret, text.encode(), hashlib.sha256).hexdigest()
        out.write(f"sha256={sig}\t{text}\n")
PY
}

# bench_prepare NAME: setup, the release edge and lab binaries, and $work (on disk, not tmpfs: the edge's
# fdatasync must be real), removed on exit after every PID in $bench_pids is stopped.
bench_prepare() {
    lab/setup.sh >/dev/null
    cargo build --release -p edge -p lab >/dev/null 2>&1 || cargo build --release -p edge -p lab
    work=$(mktemp -d "/var/tmp/edge-$1.XXXXXX")
    bench_pids=()
    trap bench_cleanup EXIT
}

bench_cleanup() {
    for pid in "${bench_pids[@]}"; do
        kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    done
    rm -rf "$work"
}

# bench_wrk LABEL URL [PID]: one wrk run (THREADS, CONNS, DURATION) of distinct signed
# GitHub deliveries (a pool of bodies of its own from bench_bodies; REPLAY=1: one body
# under fresh ids); with H2=1, `lab h2-load` sends them over CONNS HTTP/2 connections
# with STREAMS (100) requests in flight on each instead of wrk;
# prints "LABEL rps=.. p50_us=.. ..". The load runs under the command in the array
# client_cpu if it is set (e.g. taskset -c 1), wrk with the extra options in the array
# wrk_args. With
# PID, the line also has cpu_us: the CPU time PID and its children spent per request
# (user + system, from /proc), which a busy host's stolen time does not inflate; and
# syscalls: their system calls per request (perf's raw_syscalls:sys_enter count).
bench_wrk() {
    local run="$1-$RANDOM$RANDOM" before line perf_pid=""
    bench_bodies "$work/bodies.tsv" bench-secret "$run"
    before=$(tree_ticks "${3:-}")
    if [ -n "${3:-}" ]; then
        # shellcheck disable=SC2046  # one PID per word
        perf stat -x, -e raw_syscalls:sys_enter -o "$work/syscalls.txt" \
            -p "$(echo "$3" $(ps -o pid= --ppid "$3") | tr -s ' ' ',')" 2>/dev/null &
        perf_pid=$!
    fi
    if [ "${H2:-0}" = 1 ]; then
        local replay=()
        [ "${REPLAY:-0}" = 1 ] && replay=(--replay)
        line=$(${client_cpu[@]+"${client_cpu[@]}"} target/release/lab h2-load --url "$2" \
            --bodies "$work/bodies.tsv" --run "$run" --connections "$CONNS" \
            --streams "${STREAMS:-100}" --duration "$DURATION" \
            ${replay[@]+"${replay[@]}"})
    else
        line=$(BODIES="$work/bodies.tsv" THREADS="${THREADS:-2}" RUN="$run" \
            ${client_cpu[@]+"${client_cpu[@]}"} wrk -t"${THREADS:-2}" -c"$CONNS" -d"$DURATION" \
            ${wrk_args[@]+"${wrk_args[@]}"} -s lab/bench/github.lua "$2")
    fi
    line=$(echo "$line" | grep '^RESULT' | sed "s/^RESULT/$1/")
    if [ -n "${3:-}" ]; then
        kill -INT "$perf_pid" 2>/dev/null
        wait "$perf_pid" 2>/dev/null || true
        line=$(echo "$line" | awk -v ticks=$(($(tree_ticks "$3") - before)) -v hz="$(getconf CLK_TCK)" \
            -v calls="$(awk -F, '/raw_syscalls/ {print $1}' "$work/syscalls.txt" 2>/dev/null)" '{
            for (i = 2; i <= NF; i++) if ($i ~ /^requests=/) { split($i, kv, "="); n = kv[2] }
            printf "%s cpu_us=%.1f syscalls=%.2f\n", $0, n ? ticks / hz * 1e6 / n : 0, n ? calls / n : 0 }')
    fi
    echo "$line"
}

# bench_stored: events the edge on $ADMIN_PORT has stored durably (0 before the first).
bench_stored() {
    curl -s "127.0.0.1:$ADMIN_PORT/metrics" |
        awk '/^edge_spool_appends_total.*reason="stored"/ {s += $NF} END {print s + 0}'
}

# bench_pin: the per-core layout. Servers start under "${server_cpu[@]}" (CPU 0, where
# the edge starts one worker), bench_wrk runs wrk on CPU 1 with one thread.
bench_pin() {
    server_cpu=(taskset -c 0) client_cpu=(taskset -c 1) THREADS=1
}

# median: of the numbers on stdin. field LABEL KEY: KEY's values on LABEL's lines of $results.
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
field() { grep "^$1 " "$results" | grep -o "$2=[0-9.]*" | cut -d= -f2; }
