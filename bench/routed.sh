#!/usr/bin/env bash
# Routed point reads: a pgbench custom script of keyed SELECTs with random keys on a sharded
# table over 2 shards through shardwire, against PgBouncer (transaction mode) in front of the
# same rows in one plain table, in one run; simple and extended protocol.
#
#   bench/routed.sh [seconds-per-run] [rounds] [clients]
#
# The second shard is a second PostgreSQL cluster on this machine, as shards usually are servers of
# their own.
# PgBouncer's table lives on the first. Prints
# median TPS and each proxy's CPU time per transaction, as bench/pgbench.sh does, and the
# proxy's parse count (plan cache misses) over the whole run. Needs what bench/pgbench.sh needs.
# SYSCALLS=1 also counts each proxy's system calls per transaction, by kind (perf tracepoints).
# PERF=1 also samples each proxy with `perf record -e cpu-clock` during its runs and prints, per
# run, the symbols with the most samples per transaction ([k] kernel, [.] user space).
# WHO=1 also prints the CPU time per transaction of every process on the machine during each run,
# by kind (each PostgreSQL server, the proxies; bench/cpu_by_process.py).
# UNSHARDED=1 also runs shardwire on PgBouncer's plain table (unsharded, on the first shard):
# the same proxy and catalog, one shard's server, to tell the second server's cost from routing's.
# PIN=1 keeps the proxies on the last CPU and everything else (both PostgreSQL servers with their
# backends, pgbench) on the others, so that neither proxy shares a core's caches and run queue
# with the servers' work: each proxy's own cost, not what the servers' load does to it.
set -euo pipefail

SECS=${1:-10}
ROUNDS=${2:-3}
CLIENTS=${3:-16}
POOL=20
ROWS=100000
cd "$(dirname "$0")/.."

source bench/setup.sh

PG2PORT=$(free_port)
as_pg "$PGBIN/initdb" -D "$WORK/pg2" -U postgres -A trust >/dev/null
as_pg "$PGBIN/pg_ctl" -D "$WORK/pg2" -l "$WORK/pg2.log" -w \
    -o "-p $PG2PORT -k $WORK -c listen_addresses=127.0.0.1 -c max_connections=200 -c max_prepared_transactions=64 -c fsync=off" start >/dev/null
on_exit 'as_pg "$PGBIN/pg_ctl" -D "$WORK/pg2" -m immediate stop >/dev/null 2>&1'
psql -qX -h 127.0.0.1 -p "$PG2PORT" -U postgres -c "CREATE DATABASE app" >/dev/null
METRICS=$(free_port)
cat >"$WORK/sw.toml" <<TOML
[proxy]
listen = "127.0.0.1:$SWPORT"
metrics_listen = "127.0.0.1:$METRICS"
database = "app"
workers = ${SW_WORKERS:-1}
[[users]]
name = "app"
password = "app"
[[shards]]
name = "s1"
url = "postgres://postgres@127.0.0.1:$PGPORT/app"
[[shards]]
name = "s2"
url = "postgres://postgres@127.0.0.1:$PG2PORT/app"
[pool]
size = $POOL
TOML

start_proxies

PGBENCH=(pgbench)
if [ -n "${PIN:-}" ]; then
    last=$(($(nproc) - 1))
    [ "$last" -gt 0 ] || { echo "PIN=1 needs two CPUs or more" >&2; exit 1; }
    taskset -acp "$last" "$SWPID" >/dev/null
    taskset -acp "$last" "$BPID" >/dev/null
    # Backends forked later inherit the postmasters' CPUs.
    for p in $(pgrep -x postgres); do taskset -acp "0-$((last - 1))" "$p" >/dev/null; done
    PGBENCH=(taskset -c "0-$((last - 1))" pgbench)
fi

sw() { PGPASSWORD=app psql -qX -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$SWPORT" -U app app "$@"; }
sw -c "CREATE SHARDED TABLE bench_accounts (aid int PRIMARY KEY, bid int, abalance int,
       filler char(84)) PARTITION BY CONSISTENT HASH (aid) PARTITIONS AUTO"
sw -c "INSERT INTO bench_accounts SELECT g, 1, 0, '' FROM generate_series(1, $ROWS) g" >/dev/null
psql -qX -h 127.0.0.1 -p "$PGPORT" -U postgres app -c "SELECT count(*) AS s1_rows FROM bench_accounts"
psql -qX -h 127.0.0.1 -p "$PG2PORT" -U postgres app -c "SELECT count(*) AS s2_rows FROM bench_accounts"

cat >"$WORK/routed.sql" <<SQL
\set aid random(1, $ROWS)
SELECT abalance FROM bench_accounts WHERE aid = :aid;
SQL
cat >"$WORK/plain.sql" <<SQL
\set aid random(1, $ROWS)
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
SQL

parses() { { curl -s "http://127.0.0.1:$METRICS/metrics" || true; } | awk '/^shardwire_statement_parses_total / {print $2} END {}' | head -1; }
cpu_ticks() { awk '{print $14, $14 + $15}' "/proc/$1/stat"; }
# Voluntary and involuntary context switches of a process's threads so far.
switches() { cat /proc/"$1"/task/*/status | awk '/^voluntary_ctxt_switches/ {v+=$2} /^nonvoluntary_ctxt_switches/ {n+=$2} END {print v, n}'; }
TICK=$(getconf CLK_TCK)
per_tx() { awk -v b="$1" -v a="$2" -v t="$3" -v k="$TICK" 'BEGIN {printf "%.2f", (a-b)/k/t*1e6}'; }

declare -A TPS CPU USR VCS NCS
run() { # target mode port script pid
    local target=$1 mode=$2 port=$3 script=$4 pid=$5 before after out tx tps
    before=$(cpu_ticks "$pid"); read -r bv bn <<<"$(switches "$pid")"
    if [ -n "${SYSCALLS:-}" ]; then
        perf stat -x, -e 'syscalls:sys_enter_*' -p "$pid" -o "$WORK/sys.$target.$mode" &
        PERFPID=$!
    fi
    if [ -n "${PERF:-}" ]; then
        perf record -q -e cpu-clock -F 4999 -p "$pid" -o "$WORK/perf.$target.$mode" >/dev/null 2>&1 &
        PERFREC=$!
    fi
    [ -n "${WHO:-}" ] && python3 bench/cpu_by_process.py snapshot >"$WORK/who.before"
    out=$(PGPASSWORD=app "${PGBENCH[@]}" -n -f "$script" -M "$mode" -c "$CLIENTS" -j 2 -T "$SECS" -h 127.0.0.1 -p "$port" -U app app 2>&1)
    tx=$(awk '/number of transactions actually processed/ {print $NF}' <<<"$out" | cut -d/ -f1)
    tps=$(awk '/^tps = / {print $3}' <<<"$out")
    after=$(cpu_ticks "$pid"); read -r av an <<<"$(switches "$pid")"
    if [ -n "${WHO:-}" ]; then
        python3 bench/cpu_by_process.py snapshot >"$WORK/who.after"
        echo "$target $mode, µs per transaction: $(python3 bench/cpu_by_process.py per-tx "$WORK/who.before" "$WORK/who.after" "$tx")" >&2
    fi
    if [ -n "${PERF:-}" ]; then
        kill -INT "$PERFREC"; wait "$PERFREC" || true
        perf report -i "$WORK/perf.$target.$mode" --no-children --sort sym --stdio -F overhead,sample,sym </dev/null 2>/dev/null |
            grep -E '^ +[0-9.]+%' | sort -k2 -nr | awk -v who="$target $mode" -v tx="$tx" '/^ +[0-9.]+%/ {if (++rows <= 15) printf "%s: %8.4f samples/tx %s\n", who, $2 / tx, $0}' >&2
    fi
    if [ -n "${SYSCALLS:-}" ]; then
        kill -INT "$PERFPID"; wait "$PERFPID" || true
        awk -F, -v tx="$tx" -v who="$target $mode" '$1 ~ /^[0-9]+$/ && $1 > 0 {sub("syscalls:sys_enter_", "", $3); printf "%s %s: %.2f per tx\n", who, $3, $1 / tx}' "$WORK/sys.$target.$mode" >&2
    fi
    read -r bu bc <<<"$before"; read -r au ac <<<"$after"
    TPS[$target.$mode]+="$tps "
    CPU[$target.$mode]+="$(per_tx "$bc" "$ac" "$tx") "
    USR[$target.$mode]+="$(per_tx "$bu" "$au" "$tx") "
    VCS[$target.$mode]+="$(awk -v d=$((av - bv)) -v t="$tx" 'BEGIN {printf "%.3f", d/t}') "
    NCS[$target.$mode]+="$(awk -v d=$((an - bn)) -v t="$tx" 'BEGIN {printf "%.3f", d/t}') "
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

parses_before=$(parses)
for r in $(seq "$ROUNDS"); do
    for mode in simple extended; do
        run shardwire "$mode" "$SWPORT" "$WORK/routed.sql" "$SWPID"
        if [ -n "${UNSHARDED:-}" ]; then
            run unsharded "$mode" "$SWPORT" "$WORK/plain.sql" "$SWPID"
        fi
        run pgbouncer "$mode" "$BOUNCERPORT" "$WORK/plain.sql" "$BPID"
    done
    echo "round $r of $ROUNDS done" >&2
done
parses_after=$(parses)

printf '\n%-10s %-9s %12s %12s %12s %14s\n' target mode "median TPS" "CPU µs/tx" "user µs/tx" "switches/tx v/i"
for mode in simple extended; do
    for target in shardwire ${UNSHARDED:+unsharded} pgbouncer; do
        printf '%-10s %-9s %12s %12s %12s %14s\n' "$target" "$mode" "$(median <<<"${TPS[$target.$mode]}")" \
            "$(median <<<"${CPU[$target.$mode]}")" "$(median <<<"${USR[$target.$mode]}")" \
            "$(median <<<"${VCS[$target.$mode]}")/$(median <<<"${NCS[$target.$mode]}")"
    done
    awk -v s="$(median <<<"${TPS[shardwire.$mode]}")" -v p="$(median <<<"${TPS[pgbouncer.$mode]}")" \
        -v sc="$(median <<<"${CPU[shardwire.$mode]}")" -v pc="$(median <<<"${CPU[pgbouncer.$mode]}")" \
        -v su="$(median <<<"${USR[shardwire.$mode]}")" -v pu="$(median <<<"${USR[pgbouncer.$mode]}")" -v m="$mode" \
        'BEGIN {printf "%s: routed shardwire/pgbouncer TPS %.2fx, CPU per tx %.2fx (user %.2fx)\n\n", m, s/p, sc/pc, su/pu}'
done
echo "router parses during the runs: $(awk -v a="${parses_after:-0}" -v b="${parses_before:-0}" 'BEGIN {print a-b}') (before: ${parses_before:-none}, after: ${parses_after:-none})"
echo "clients=$CLIENTS seconds=$SECS rounds=$ROUNDS pool=$POOL rows=$ROWS shards=2 cores=$(nproc)"
