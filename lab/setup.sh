#!/usr/bin/env bash
# Installs what the tests and benchmarks need, idempotently: Debian packages that are
# missing, and the Rust components the checks use. Safe to run again and again.
set -euo pipefail

packages=(curl openssl ca-certificates iproute2 procps python3 wrk nginx-light bird2 exabgp nats-server)

missing=()
for pkg in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# These packages start system services; the tests and benchmarks run their own instances.
if command -v systemctl >/dev/null 2>&1; then
    systemctl disable --now nginx bird exabgp nats-server >/dev/null 2>&1 || true
fi

if ! command -v cargo >/dev/null 2>&1; then
    echo "setup: cargo not found: install a Rust toolchain (rustup) first" >&2
    exit 1
fi
for component in rustfmt clippy; do
    if ! rustup component list --installed 2>/dev/null | grep -q "^$component"; then
        echo "setup: adding rustup component $component"
        rustup component add "$component"
    fi
done
echo "setup: ok"
