#!/usr/bin/env bash
# Prints the path of a Debian bookworm root filesystem, as a zstd tarball, that boots
# under systemd-nspawn as a PoP machine: systemd, sshd, python3 for Ansible, and the
# Debian packages the roles install (present already, so a machine needs no mirror;
# the roles still declare them). Built once with debootstrap (about 2 minutes) and
# cached outside the clone; rebuilt when missing or when this list changes.
set -euo pipefail

cache=${LAB_CACHE:-/var/cache/webhook-edge-lab}
base=(systemd-sysv dbus python3 python3-apt openssh-server procps iproute2 ca-certificates curl)
roles=(bird2 exabgp prometheus-node-exporter nftables)
key=$(printf '%s\n' bookworm "${base[@]}" "${roles[@]}" networkd-off | sha256sum | cut -c1-12)
tarball="$cache/bookworm-$key.tar.zst"
if [ -s "$tarball" ]; then
    echo "$tarball"
    exit 0
fi

mkdir -p "$cache"
work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
mirror=${mirror:-http://deb.debian.org/debian}
echo "rootfs: debootstrap bookworm from $mirror (cached as $tarball)" >&2
include=$(IFS=,; echo "${base[*]}")
debootstrap --variant=minbase --include="$include" bookworm "$work/root" "$mirror" >"$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
# Packages installed the way a PoP gets them, with no service started in the chroot.
printf '#!/bin/sh\nexit 101\n' >"$work/root/usr/sbin/policy-rc.d"
chmod +x "$work/root/usr/sbin/policy-rc.d"
chroot "$work/root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${roles[@]}" \
    >"$work/apt.log" 2>&1 || { tail -20 "$work/apt.log" >&2; exit 1; }
rm -f "$work/root/usr/sbin/policy-rc.d" "$work/root/etc/machine-id"
# The lab configures a machine's network from outside (it boots into a namespace that
# has its links and addresses): networkd would manage nothing, and waiting for it to
# call the network online would hold every unit ordered after network-online.target.
chroot "$work/root" systemctl disable --quiet systemd-networkd.service systemd-networkd.socket 2>/dev/null || true
chroot "$work/root" systemctl mask --quiet systemd-networkd-wait-online.service
chroot "$work/root" apt-get clean
# Each machine gets its own identity and host keys when it is unpacked.
rm -f "$work/root"/etc/ssh/ssh_host_*
tar -C "$work/root" --zstd -cf "$work/rootfs.tar.zst" .
mv "$work/rootfs.tar.zst" "$tarball"
find "$cache" -maxdepth 1 -name 'bookworm-*.tar.zst' ! -path "$tarball" -delete
echo "$tarball"
