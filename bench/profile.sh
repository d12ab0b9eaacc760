#!/usr/bin/env bash
# Where shardwire's user-space instructions go per transaction: runs the proxy under callgrind
# in front of its own PostgreSQL, zeroes the counters after a warm-up, runs pgbench select-only
# and prints the functions with the most instructions per transaction (bench/cg_functions.py).
#
#   bench/profile.sh [simple|extended] [clients] [transactions-per-client]
#
# CG_KEEP=FILE keeps the callgrind output (for callgrind_annotate or a per-line look).
# CG_LINES=1 prints the code lines (64 bytes) each function runs per transaction instead
# (cg_lines.py): the footprint that bench/instructions.sh's CG_CACHE=footprint totals.
# CG_ATOMICS=1 prints the locked (atomic) instructions per transaction instead (cg_atomics.py).
# ROUTED=1 profiles bench/routed.sh's keyed point reads on a sharded table (one shard here: the
# routing work per statement is the same) instead of pass-through select-only.
set -euo pipefail

MODE=${1:-extended}
CLIENTS=${2:-8}
TX=${3:-1000}
POOL=20
cd "$(dirname "$0")/.."
BENCH_NEEDS=valgrind source bench/setup.sh

OUT="$WORK/callgrind.out"
CG=(valgrind --tool=callgrind --callgrind-out-file="$OUT")
[ -n "${CG_ATOMICS:-}${CG_LINES:-}" ] && CG+=(--dump-instr=yes)
RUST_LOG=warn "${CG[@]}" "$SW" --config "$WORK/sw.toml" >/dev/null 2>&1 &
CGPID=$!
on_exit 'kill "$CGPID" 2>/dev/null'
wait_ready "$SWPORT"
WORKLOAD=(-S)
if [ -n "${ROUTED:-}" ]; then
    routed_workload
    WORKLOAD=(-f "$WORK/routed.sql")
fi
PGPASSWORD=app pgbench -n "${WORKLOAD[@]}" -M "$MODE" -c "$CLIENTS" -j 1 -t 50 -h 127.0.0.1 -p "$SWPORT" -U app app >/dev/null
callgrind_control -z "$CGPID" >/dev/null 2>&1
PGPASSWORD=app pgbench -n "${WORKLOAD[@]}" -M "$MODE" -c "$CLIENTS" -j 1 -t "$TX" -h 127.0.0.1 -p "$SWPORT" -U app app >/dev/null
kill "$CGPID"
wait "$CGPID" || true
if [ -n "${CG_ATOMICS:-}" ]; then
    python3 bench/cg_atomics.py "$OUT" "$SW" "$((CLIENTS * TX))"
elif [ -n "${CG_LINES:-}" ]; then
    python3 bench/cg_lines.py "$OUT" "$((CLIENTS * TX))" 60
else
    python3 bench/cg_functions.py "$OUT" "$((CLIENTS * TX))" "${CG_TOP:-40}"
fi
[ -n "${CG_KEEP:-}" ] && cp "$OUT" "$CG_KEEP"
