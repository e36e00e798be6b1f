#!/bin/sh
# lab-rules.sh RULES OUT: the lab's copy of the fleet's rules. The expressions are the
# production ones; every `for:` is divided by 6 (1m -> 10s, 2m -> 20s), so that an alert
# scenario takes seconds, not minutes, and the holds keep their order against the lab
# agents' timings (a 5 s hold-down stays under the 20 s of "withdrawn while ready").
set -eu
awk '
  match($0, /^ *for: [0-9]+[smh]$/) {
    amount = substr($2, 1, length($2) - 1)
    unit = substr($2, length($2))
    seconds = amount * (unit == "h" ? 3600 : (unit == "m" ? 60 : 1))
    sub(/for: .*/, "for: " int(seconds / 6) "s")
  }
  { print }
' "$1" > "$2"
