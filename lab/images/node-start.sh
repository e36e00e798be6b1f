#!/bin/bash
# Container entrypoint for the lab's nodes: waits until containerlab has attached the
# node's links and run its `exec` commands (an address on eth1), then starts the
# services named in LAB_START, each from its LAB_SERVICE_<NAME> command line (upper
# case, - as _), and stays up as long as they do. Nodes without services just sleep.
set -euo pipefail
for _ in $(seq 600); do
    ip -4 -o addr show dev eth1 2>/dev/null | grep -q inet && break
    sleep 0.1
done
mkdir -p /var/lib/edge /var/lib/bgp-agent /var/lib/nats
# A bind whose name ends in .tmpl is a template: its ${NAME}s come from this node's
# environment (the fleet's PoPs share one set of files), as the namespace runner does.
find /etc -name '*.tmpl' -type f | while read -r template; do
    envsubst < "$template" > "${template%.tmpl}"
done
pids=""
for service in ${LAB_START:-}; do
    variable="LAB_SERVICE_$(echo "$service" | tr 'a-z-' 'A-Z_')"
    command=$(printenv "$variable") || { echo "node-start: $variable is not set" >&2; exit 1; }
    echo "node-start: $service: $command"
    sh -c "exec $command" &
    pids="$pids $!"
done
[ -n "$pids" ] || exec sleep infinity
# One service gone ends the node: containerlab shows it, the anycast agent withdraws.
# shellcheck disable=SC2086
wait -n $pids
