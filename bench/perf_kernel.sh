#!/usr/bin/env bash
# Where each proxy's CPU time goes, kernel included: samples shardwire and PgBouncer with
# `perf record -e cpu-clock` during the same pgbench select-only run through each, and prints the
# symbols with the most samples ([k] kernel, [.] user space) and the share of kernel samples.
#
#   bench/perf_kernel.sh [simple|extended] [seconds] [clients]
#
# On a VM without a PMU, cpu-clock samples land where interrupts are enabled again, so time spent
# with them off shows up in finish_task_switch and _raw_spin_unlock_irqrestore: read those two as
# "switching tasks" and "waking a task". Needs: linux-perf, postgresql, pgbouncer (apt), cargo.
set -euo pipefail

MODE=${1:-simple}
SECS=${2:-8}
CLIENTS=${3:-16}
POOL=20
cd "$(dirname "$0")/.."
BENCH_NEEDS=perf:linux-perf source bench/setup.sh

start_proxies

profile() { # name pid port
    local name=$1 pid=$2 port=$3
    perf record -q -e cpu-clock -F 4999 -p "$pid" -o "$WORK/perf.$name" -- sleep "$((SECS + 1))" >/dev/null 2>&1 &
    local perfpid=$!
    sleep 0.5
    PGPASSWORD=app pgbench -n -S -M "$MODE" -c "$CLIENTS" -j 2 -T "$SECS" -h 127.0.0.1 -p "$port" -U app app >/dev/null 2>&1
    wait "$perfpid" || true
    perf report -i "$WORK/perf.$name" --no-children --sort sym --stdio </dev/null 2>/dev/null |
        awk -v n="$name" '/^ +[0-9.]+%/ {share=$1; sub("%", "", share); if ($2 == "[k]") k += share;
                                         if (++rows <= 12) print n, $0} END {printf "%s kernel share: %.1f%%\n\n", n, k}'
}
profile shardwire "$SWPID" "$SWPORT"
profile pgbouncer "$BPID" "$BOUNCERPORT"
