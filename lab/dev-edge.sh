#!/usr/bin/env bash
# Runs a local edge for a dev box: self-signed certificate, spool under ./var/dev, HTTPS on
# 127.0.0.1:8443, admin on 127.0.0.1:9180, one GitHub route with the secret "dev-secret".
# Prints a curl command that sends a correctly signed webhook. Ctrl-C stops it cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."
lab/setup.sh >/dev/null
cargo build --release -p edge

dev=var/dev
mkdir -p "$dev"
cat > "$dev/edge.yaml" <<YAML
pop: dev1
listen: ["127.0.0.1:8443"]
admin_listen: 127.0.0.1:9180
drain_grace: 1s
tls:
  self_signed: true
spool:
  dir: $PWD/$dev/spool
  max_bytes: 1GiB
  segment_bytes: 16MiB
routes:
  - path: /hooks/github
    provider: github
    secrets: ["dev-secret"]
YAML
target/release/edge check-config --config "$dev/edge.yaml"

body='{"zen":"Keep it logically awesome.","hook_id":1}'
sig=$(printf '%s' "$body" | openssl dgst -sha256 -hmac dev-secret | awk '{print $NF}')
cat <<TXT

Edge starting. In another terminal, send a signed webhook:

  curl -sk https://127.0.0.1:8443/hooks/github \\
    -H 'X-GitHub-Event: ping' -H "X-GitHub-Delivery: \$(cat /proc/sys/kernel/random/uuid)" \\
    -H 'X-Hub-Signature-256: sha256=$sig' \\
    --data-binary '$body'

  curl -s 127.0.0.1:9180/readyz; curl -s 127.0.0.1:9180/metrics | grep edge_requests
  target/release/edge spool-dump --dir $dev/spool --bodies

TXT
exec target/release/edge run --config "$dev/edge.yaml"
