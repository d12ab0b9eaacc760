#!/usr/bin/env bash
# pgbench select-only through nothing, shardwire and PgBouncer (transaction mode), in one run.
#
#   bench/pgbench.sh [seconds-per-run] [rounds] [clients]
#
# Starts its own PostgreSQL cluster, shardwire (release build) and PgBouncer on free ports, then
# alternates the three targets and both protocols (simple, extended) for several rounds and prints
# median TPS, the ratios, and each proxy's CPU time per transaction (user+sys of the proxy process
# divided by transactions), with its user-space part on its own. SW_WORKERS=N sets shardwire's [proxy] workers (default 1). Needs:
# postgresql, pgbouncer (apt), cargo. Debian 12 ships PgBouncer 1.18, which has no
# prepared-statement support in transaction mode, hence no -M prepared here.
set -euo pipefail

SECS=${1:-10}
ROUNDS=${2:-3}
CLIENTS=${3:-16}
POOL=20
cd "$(dirname "$0")/.."

source bench/setup.sh

start_proxies

cpu_ticks() { awk '{print $14, $14 + $15}' "/proc/$1/stat"; } # user, user+sys
TICK=$(getconf CLK_TCK)
per_tx() { awk -v b="$1" -v a="$2" -v t="$3" -v k="$TICK" 'BEGIN {printf "%.2f", (a-b)/k/t*1e6}'; } # ticks-before ticks-after transactions

declare -A TPS CPU USR
run() { # target mode port user pid
    local target=$1 mode=$2 port=$3 user=$4 pid=${5:-} before after out tx tps
    [ -n "$pid" ] && before=$(cpu_ticks "$pid")
    out=$(PGPASSWORD=app pgbench -n -S -M "$mode" -c "$CLIENTS" -j 2 -T "$SECS" -h 127.0.0.1 -p "$port" -U "$user" app 2>&1)
    tx=$(awk '/number of transactions actually processed/ {print $NF}' <<<"$out" | cut -d/ -f1)
    tps=$(awk '/^tps = / {print $3}' <<<"$out")
    TPS[$target.$mode]+="$tps "
    if [ -n "$pid" ]; then
        after=$(cpu_ticks "$pid")
        read -r bu bc <<<"$before"; read -r au ac <<<"$after"
        CPU[$target.$mode]+="$(per_tx "$bc" "$ac" "$tx") "
        USR[$target.$mode]+="$(per_tx "$bu" "$au" "$tx") "
    fi
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

for r in $(seq "$ROUNDS"); do
    for mode in simple extended; do
        run direct "$mode" "$PGPORT" postgres
        run shardwire "$mode" "$SWPORT" app "$SWPID"
        run pgbouncer "$mode" "$BOUNCERPORT" app "$BPID"
    done
    echo "round $r of $ROUNDS done" >&2
done

printf '\n%-10s %-9s %12s %12s %12s\n' target mode "median TPS" "CPU µs/tx" "user µs/tx"
for mode in simple extended; do
    for target in direct shardwire pgbouncer; do
        tps=$(median <<<"${TPS[$target.$mode]}")
        cpu=$([ -n "${CPU[$target.$mode]:-}" ] && median <<<"${CPU[$target.$mode]}" || echo "-")
        usr=$([ -n "${USR[$target.$mode]:-}" ] && median <<<"${USR[$target.$mode]}" || echo "-")
        printf '%-10s %-9s %12s %12s %12s\n' "$target" "$mode" "$tps" "$cpu" "$usr"
    done
    sw=$(median <<<"${TPS[shardwire.$mode]}"); pb=$(median <<<"${TPS[pgbouncer.$mode]}")
    swc=$(median <<<"${CPU[shardwire.$mode]}"); pbc=$(median <<<"${CPU[pgbouncer.$mode]}")
    swu=$(median <<<"${USR[shardwire.$mode]}"); pbu=$(median <<<"${USR[pgbouncer.$mode]}")
    awk -v s="$sw" -v p="$pb" -v sc="$swc" -v pc="$pbc" -v su="$swu" -v pu="$pbu" -v m="$mode" \
        'BEGIN {printf "%s: shardwire/pgbouncer TPS %.2fx, CPU per tx %.2fx (user %.2fx)\n\n", m, s/p, sc/pc, su/pu}'
done
echo "clients=$CLIENTS seconds=$SECS rounds=$ROUNDS pool=$POOL cores=$(nproc)"
