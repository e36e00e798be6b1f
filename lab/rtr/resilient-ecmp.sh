#!/usr/bin/env bash
# Resilient ECMP for the lab's router: mirrors every multipath route BIRD installs into a
# kernel resilient nexthop group (Linux >= 5.13) and a route to that group with a lower
# metric than BIRD's, so the kernel forwards by the group while this runs and by BIRD's
# own route again once it stops (it removes what it made).
#
# Why: BIRD 2 and FRR install BGP multipath routes with the kernel's hash-threshold
# algorithm, which moves part of every flow's hash range whenever a path is added, so a
# PoP that comes back (undrain, restart) is sent packets of connections it never saw and
# resets them. A resilient group moves only buckets that have been idle for idle_timer;
# neither daemon can put BGP routes in one (FRR's resilient groups are static named
# groups for sharpd and PBR), hence this mirror.
#
# idle_timer should exceed the edge's keep-alive idle timeout (http.idle_timeout, 60 s
# by default) so no connection the edge still holds is moved; unbalanced_timer bounds how
# long a returning PoP may get less than its share.
set -euo pipefail

buckets=${RESILIENT_ECMP_BUCKETS:-1024}
idle_timer=${RESILIENT_ECMP_IDLE_TIMER:-65}
unbalanced_timer=${RESILIENT_ECMP_UNBALANCED_TIMER:-600}
metric=${RESILIENT_ECMP_METRIC:-10}
first_id=${RESILIENT_ECMP_FIRST_ID:-7000}

declare -A member_ids=() group_ids=() group_members=()
next_id=$first_id

# Every route BIRD installed: "family prefix gateway@dev ..." per line.
bird_routes() {
    local family
    for family in -4 -6; do
        ip -o "$family" route show proto bird | while read -r -a words; do
            local prefix=${words[0]} members=() i
            for ((i = 1; i < ${#words[@]} - 3; i++)); do
                if [ "${words[i]}" = via ] && [ "${words[i + 2]}" = dev ]; then
                    members+=("${words[i + 1]}@${words[i + 3]}")
                fi
            done
            [ ${#members[@]} -gt 0 ] && echo "$family $prefix $(printf '%s\n' "${members[@]}" | sort | tr '\n' ' ')"
        done
    done
}

# Makes nexthop object number `copy` for "gateway@dev" once; its id is then
# member_ids[gateway@dev#copy].
add_member() {
    local family=$1 member=$2 copy=$3
    local key="$member#$copy"
    [ -n "${member_ids[$key]:-}" ] && return
    member_ids[$key]=$next_id
    next_id=$((next_id + 1))
    ip "$family" nexthop replace id "${member_ids[$key]}" via "${member%@*}" dev "${member#*@}"
}

sync_routes() {
    local -A seen=()
    local family prefix members
    while read -r family prefix members; do
        seen[$prefix]=1
        [ "${group_members[$prefix]:-}" = "$members" ] && continue
        # Each path twice: the kernel skips path selection for a group of one entry,
        # and with it the record of which buckets are in use, so a PoP returning to a
        # group that had one path would get every bucket, live flows and all.
        local ids=() member copy
        for member in $members; do
            for copy in 1 2; do
                add_member "$family" "$member" "$copy"
                ids+=("${member_ids[$member#$copy]}")
            done
        done
        local group
        group=$(IFS=/; echo "${ids[*]}")
        if [ -z "${group_ids[$prefix]:-}" ]; then
            group_ids[$prefix]=$next_id
            next_id=$((next_id + 1))
            ip nexthop add id "${group_ids[$prefix]}" group "$group" type resilient \
                buckets "$buckets" idle_timer "$idle_timer" unbalanced_timer "$unbalanced_timer"
            ip "$family" route replace "$prefix" nhid "${group_ids[$prefix]}" metric "$metric" proto static
        else
            ip nexthop replace id "${group_ids[$prefix]}" group "$group" type resilient \
                idle_timer "$idle_timer" unbalanced_timer "$unbalanced_timer"
        fi
        group_members[$prefix]=$members
        echo "resilient-ecmp: $prefix via group ${group_ids[$prefix]}: $members"
    done < <(bird_routes)
    for prefix in "${!group_ids[@]}"; do
        [ -n "${seen[$prefix]:-}" ] && continue
        # Deleting the group deletes the route that uses it.
        ip nexthop del id "${group_ids[$prefix]}"
        unset "group_ids[$prefix]" "group_members[$prefix]"
        echo "resilient-ecmp: $prefix withdrawn"
    done
}

# On any exit: what this made goes, so BIRD's own routes forward again.
remove_all() {
    local id
    kill "$monitor" 2>/dev/null || true
    for id in "${group_ids[@]}" "${member_ids[@]}"; do
        ip nexthop del id "$id" 2>/dev/null || true
    done
}

# Nexthop objects of an earlier run that was killed: ours are numbered from first_id.
ip -o nexthop show | while read -r _ id _; do
    if [ "$id" -ge "$first_id" ]; then ip nexthop del id "$id" 2>/dev/null || true; fi
done
# Listening before the first sync, so no change between the two is missed.
exec {events}< <(exec ip monitor route)
monitor=$!
trap remove_all EXIT
trap 'exit 0' TERM INT
sync_routes
# Any route change may be BIRD's; a change of our own finds nothing new to do.
while read -r -u "$events" _; do
    sync_routes
done
