#!/usr/bin/env bash
# User-space instructions per transaction of shardwire and of PgBouncer, counted by callgrind:
# unlike seconds, the count repeats exactly whatever else the machine does, so it shows the
# effect of a change to the hot path that timing noise hides. Kernel time is not counted.
#
#   bench/instructions.sh [clients] [transactions-per-client]
#
# CG_CACHE=1 adds callgrind's cache simulation and prints the first-level instruction and data
# cache misses (data: reads and writes) per transaction beside the instructions: buffers or state
# touched at a new place every transaction show up there. The simulation sees user space only;
# the kernel's own traffic, which evicts far more between two wake-ups, comes on top in reality.
# CG_CACHE=footprint simulates that eviction instead: with first-level caches of 8 KiB, fully
# associative, little survives from one client's transaction to its next, so the misses count
# the code and data lines a transaction touches (its footprint), which each wake-up has to
# bring back into the cache.
#
# Each proxy runs under valgrind --tool=callgrind in front of its own PostgreSQL; pgbench
# select-only (simple, then extended protocol) runs twice, with few and with many transactions
# per client, and the difference of the two counts divided by the difference of transactions
# cancels connection setup. ROUTED=1 runs bench/routed.sh's keyed point reads on a sharded table
# (one shard here) through shardwire instead, against PgBouncer's same read of a plain table: the
# comparison the routing issue's aim makes, without the noise of timing. Needs: valgrind,
# postgresql, pgbouncer (apt), cargo.
set -euo pipefail

CLIENTS=${1:-8}
TX=${2:-1000}
POOL=20
cd "$(dirname "$0")/.."
BENCH_NEEDS=valgrind source bench/setup.sh
chmod 777 "$WORK"

# Instructions the process with callgrind output prefix $1 executed during `pgbench … -t $3`,
# and its first-level instruction and data cache misses (0 without CG_CACHE).
count() { # out-prefix port tx mode as-user
    local out=$1 port=$2 tx=$3 mode=$4 as=$5 pid file
    pid=$(pgrep -n -f "callgrind-out-file=$out")
    $as callgrind_control -z "$pid" >/dev/null 2>&1
    PGPASSWORD=app pgbench -n "${WORKLOAD[@]}" -M "$mode" -c "$CLIENTS" -j 1 -t "$tx" -h 127.0.0.1 -p "$port" -U app app >/dev/null
    $as callgrind_control -d "$pid" >/dev/null 2>&1
    sleep 0.5
    file=$(ls -t "$out".* | head -1)
    awk '/^(summary|totals):/ {print $2, $5 + 0, $6 + $7; exit}' "$file"
}

measure() { # name port as-user
    local name=$1 port=$2 as=$3 few many
    wait_ready "$port"
    for mode in simple extended; do
        # A warm-up, so caches and pools are in their steady state.
        PGPASSWORD=app pgbench -n "${WORKLOAD[@]}" -M "$mode" -c "$CLIENTS" -j 1 -t 50 -h 127.0.0.1 -p "$port" -U app app >/dev/null
        few=$(count "$WORK/cg.$name" "$port" 100 "$mode" "$as")
        many=$(count "$WORK/cg.$name" "$port" "$TX" "$mode" "$as")
        awk -v a="$few" -v b="$many" -v n="$((CLIENTS * (TX - 100)))" -v m="$mode" -v s="$name" \
            -v cache="${CG_CACHE:-}" 'BEGIN {
                split(a, x, " "); split(b, y, " ")
                printf "%-10s %-9s %8.0f instructions/tx", s, m, (y[1] - x[1]) / n
                if (cache) printf "  %6.1f I1 %6.1f D1 misses/tx", (y[2] - x[2]) / n, (y[3] - x[3]) / n
                printf "\n"
            }'
    done
}

CG=(valgrind --tool=callgrind --dump-line=no --dump-instr=no)
case "${CG_CACHE:-}" in
    "") ;;
    footprint) CG+=(--cache-sim=yes --I1=8192,128,64 --D1=8192,128,64 --LL=262144,8,64) ;;
    *) CG+=(--cache-sim=yes) ;;
esac
RUST_LOG=warn "${CG[@]}" --callgrind-out-file="$WORK/cg.shardwire.%p" "$SW" --config "$WORK/sw.toml" >/dev/null 2>&1 &
SWPID=$!
WORKLOAD=(-S)
if [ -n "${ROUTED:-}" ]; then
    wait_ready "$SWPORT"
    routed_workload
    WORKLOAD=(-f "$WORK/routed.sql")
fi
measure shardwire "$SWPORT" ""
kill "$SWPID"
WORKLOAD=(-S)

AS_PG=""
[ "$(id -u)" = 0 ] && AS_PG="runuser -u postgres --"
$AS_PG "${CG[@]}" --callgrind-out-file="$WORK/cg.pgbouncer.%p" pgbouncer "$WORK/bouncer.ini" >/dev/null 2>&1 &
on_exit 'pkill -f "callgrind-out-file=$WORK/cg.pgbouncer"'
measure pgbouncer "$BOUNCERPORT" "$AS_PG"
echo "clients=$CLIENTS transactions-per-client=$TX workers=${SW_WORKERS:-1}"
