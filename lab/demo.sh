#!/usr/bin/env bash
# The one-command demo (run as root on a fresh machine): installs what it needs, builds,
# brings the lab topology up as network namespaces (router with ECMP, two anycast PoPs,
# origin, client, attacker), sends signed webhooks to the anycast address, fails a PoP
# under load, and shows the failover and the zero-loss count at the origin. The lab
# stays up afterwards for you to poke at; `target/release/lab down` removes it.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "demo: run as root (network namespaces, XDP)" >&2; exit 1; }

lab/setup.sh
echo "demo: building (release)"
cargo build --release --workspace --quiet
lab=target/release/lab
summary() { # outcomes.jsonl: totals by PoP and status, and the failure window
    python3 - "$1" "${2:-0}" <<'PY'
import collections, json, sys
outcomes = [json.loads(line) for line in open(sys.argv[1])]
kill_ms = int(sys.argv[2])
by = collections.Counter((o["pop"] or "no answer", o["status"] or "-") for o in outcomes)
acked = sum(1 for o in outcomes if o["status"] and 200 <= o["status"] < 300)
print(f"  {acked}/{len(outcomes)} acknowledged;", ", ".join(f"{pop} {status}: {n}" for (pop, status), n in sorted(by.items(), key=str)))
failed = [o for o in outcomes if not (o["status"] and 200 <= o["status"] < 300)]
if kill_ms and failed:
    last = max(o["sent_ms"] for o in failed) - kill_ms
    print(f"  {len(failed)} failed, the last one sent {last} ms after the kill")
PY
}

echo "demo: lab up (BGP sessions come up, the agents announce 192.0.2.10/32 after their rise)"
$lab up >/dev/null
for _ in $(seq 300); do
    [ "$($lab exec rtr -- ip -4 route show 192.0.2.10 | grep -c via)" -ge 2 ] && break
    sleep 0.1
done
$lab status

work=$(mktemp -d)
echo; echo "demo: 200 signed GitHub webhooks from the client to https://192.0.2.10 (a new connection each)"
$lab exec client -- "$PWD/$lab" send --rate 50 --duration 4s --id-prefix demo-reach > "$work/reach.jsonl"
summary "$work/reach.jsonl"

echo; echo "demo: kill -9 pop-a's edge under load; its agent withdraws the route, traffic moves to pop-b"
$lab exec client -- "$PWD/$lab" send --rate 50 --duration 8s --id-prefix demo-failover > "$work/failover.jsonl" &
sender=$!
sleep 3
kill_ms=$(date +%s%3N)
$lab stop pop-a edge --kill
wait "$sender"
summary "$work/failover.jsonl" "$kill_ms"
echo "  router: $($lab exec rtr -- ip -4 route show 192.0.2.10 | tr -s ' \n' ' ')"

echo; echo "demo: restart pop-a's edge: what it acknowledged before dying is in its spool and goes to the origin"
$lab start pop-a edge
acked=$(cat "$work/reach.jsonl" "$work/failover.jsonl" | python3 -c '
import json, sys
print("\n".join(o["id"] for o in map(json.loads, sys.stdin) if o["status"] and 200 <= o["status"] < 300))' | sort -u)
for _ in $(seq 60); do
    $lab exec client -- "$PWD/$lab" origin > "$work/origin.jsonl"
    missing=$(comm -23 <(echo "$acked") <(python3 -c '
import json, sys
print("\n".join(json.loads(l)["id"] for l in open(sys.argv[1])))' "$work/origin.jsonl" | sort -u) | wc -l)
    [ "$missing" -eq 0 ] && break
    sleep 0.5
done
echo "  acknowledged: $(echo "$acked" | wc -l), at the origin (JetStream): $(wc -l < "$work/origin.jsonl"), missing: $missing"
rm -rf "$work"

cat <<EOF

demo: the lab is still up. Poke at it:
  $lab status                                   services, BGP sessions, ECMP next hops
  $lab exec client -- curl -sk https://192.0.2.10/hooks/github -X POST -i   (401: unsigned)
  $lab exec pop-a -- curl -s 10.0.1.2:9180/metrics       the edge's metrics (9181 agent, 9182 XDP)
  $lab exec pop-b -- /usr/local/bin/bgp-agent drain --config /etc/edge/agent.yaml
  logs: /run/webhook-lab/<node>/logs/<service>.log
  cargo test --release -p lab --test scenarios -- --nocapture     every scenario
Tear it down: $lab down
EOF
