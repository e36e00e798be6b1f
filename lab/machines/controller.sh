#!/usr/bin/env bash
# Prints the bin directory of an Ansible controller (ansible-core, the community
# collections, ansible-lint) in a virtualenv cached outside the clone; made once (about
# 50 s) and again when the pinned versions change.
set -euo pipefail

cache=${LAB_CACHE:-/var/cache/webhook-edge-lab}
pins=(ansible==12.3.0 ansible-core==2.19.14 ansible-lint==26.10.1)
key=$(printf '%s\n' "${pins[@]}" | sha256sum | cut -c1-12)
venv="$cache/ansible-$key"
if [ -x "$venv/bin/ansible-playbook" ] && [ -x "$venv/bin/ansible-lint" ]; then
    echo "$venv/bin"
    exit 0
fi
mkdir -p "$cache"
rm -rf "$venv"
echo "controller: installing ${pins[*]} into $venv" >&2
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet "${pins[@]}" >&2
find "$cache" -maxdepth 1 -name 'ansible-*' ! -path "$venv" -exec rm -rf {} +
echo "$venv/bin"
