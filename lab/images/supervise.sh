#!/bin/bash
# systemd's Restart=always plus ExecStopPost= for lab nodes, which have no systemd:
# runs COMMAND and, after every exit of it (clean, panic, OOM kill, kill -9), runs POST
# (the agent's out-of-band withdraw) before starting COMMAND again one second later.
# SIGTERM or SIGINT is passed on to COMMAND; POST runs once more and the script ends.
#
#   supervise.sh 'POST COMMAND LINE' COMMAND [ARG ...]
set -u
post=$1
shift
child=
stopping=
stop() {
    stopping=1
    [ -n "$child" ] && kill -TERM "$child" 2>/dev/null
}
trap stop TERM INT
while :; do
    "$@" &
    child=$!
    # A trapped signal interrupts `wait`; keep waiting until the child is really gone.
    wait "$child"
    status=$?
    while kill -0 "$child" 2>/dev/null; do
        wait "$child"
        status=$?
    done
    child=
    echo "supervise: $1 exited with status $status; running: $post" >&2
    sh -c "$post" >&2 || echo "supervise: post command failed with status $?" >&2
    [ -n "$stopping" ] && exit 0
    sleep 1 &
    wait $!
    [ -n "$stopping" ] && exit 0
    echo "supervise: restarting $1" >&2
done
