#!/usr/bin/env bash
# Renders the README's architecture picture from its source (needs graphviz's dot).
set -euo pipefail
cd "$(dirname "$0")"
dot -Tsvg architecture.dot -o architecture.svg
