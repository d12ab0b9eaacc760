#!/usr/bin/env bash
# Multi-shard reads over 1,000,000 rows on 4 shards (four PostgreSQL clusters on this machine)
# against the slowest shard's own time for its part and against the same rows in one plain
# PostgreSQL (a fifth cluster):
#   count      SELECT count(*)                                (partial aggregation)
#   group_sum  SELECT grp, sum(v) … GROUP BY grp, 1,000 groups (partial aggregation)
#   top100     SELECT id, v … ORDER BY v DESC, id LIMIT 100     (streaming merge)
#   window     row_number() OVER (PARTITION BY grp …)          (general path, every row read)
# A shard's part is the SQL the proxy's EXPLAIN names for it, run on each shard alone; the
# slowest shard's time is what the proxy cannot go below.
#
#   bench/multishard.sh [runs]
#
# Prints the mean of `runs` (default 5) timings per query, in milliseconds, as psql's \timing
# measures them (client to server and back). Needs psql and a release build (made here).
set -euo pipefail

RUNS=${1:-5}
ROWS=1000000
cd "$(dirname "$0")/.."

source bench/big4.sh

declare -A QUERY=(
    [count]="SELECT count(*) FROM big"
    [group_sum]="SELECT grp, sum(v) FROM big GROUP BY grp"
    [top100]="SELECT id, v FROM big ORDER BY v DESC, id LIMIT 100"
    [window]="SELECT count(*) FROM (SELECT row_number() OVER (PARTITION BY grp ORDER BY v, id) AS r FROM big) s WHERE r = 1"
)

# Mean milliseconds of `runs` executions of a query by a psql command (after one warm-up), as
# psql's \timing reports them; the rows themselves go to /dev/null.
mean_ms() {
    local runner=$1 sql=$2
    { printf '\\timing on\n\\o /dev/null\n'; for _ in $(seq $((RUNS + 1))); do printf '%s;\n' "$sql"; done; } |
        $runner 2>/dev/null | grep '^Time:' | tail -n "$RUNS" |
        awk '{ s += $2 } END { printf "%.1f", s / NR }'
}
via_sw() { sw "$@"; }
# The four shards' parts at once, as the proxy runs them, from a fifth session that pulls their
# rows the way the proxy does (dblink in the plain cluster; each row as one text value): on
# this machine the shards share two cores, so this, not one shard's part alone, is the time no
# proxy can go below.
pg single -c "CREATE EXTENSION IF NOT EXISTS dblink" -c "CREATE OR REPLACE FUNCTION parts_at_once(part text) RETURNS bigint
    LANGUAGE plpgsql AS \$\$
    DECLARE c text; n bigint := 0; got bigint;
    BEGIN
        FOREACH c IN ARRAY ARRAY['s1', 's2', 's3', 's4'] LOOP
            PERFORM dblink_send_query(c, 'SELECT s::text FROM (' || part || ') s');
        END LOOP;
        FOREACH c IN ARRAY ARRAY['s1', 's2', 's3', 's4'] LOOP
            SELECT count(*) INTO got FROM dblink_get_result(c) AS t(row text);
            n := n + got;
            PERFORM * FROM dblink_get_result(c) AS t(row text);
        END LOOP;
        RETURN n;
    END \$\$"
at_once() {
    local conns=""
    for s in s1 s2 s3 s4; do
        conns+="SELECT dblink_connect('$s', 'host=127.0.0.1 port=${PORT[$s]} dbname=app user=postgres');"$'\n'
    done
    { printf '%s' "$conns"; cat; } | pg single "$@"
}
printf '%-10s %12s %14s %10s %14s %10s %12s\n' query shardwire_ms slowest_shard overhead shards_at_once overhead single_pg_ms
for q in count group_sum top100 window; do
    sql=${QUERY[$q]}
    # The shards' part, as EXPLAIN names it.
    part=$(sw -Atc "EXPLAIN $sql" | sed -n -e 's/^  Shard SQL: //p' -e 's/^  Rows of [^:]*: //p' | head -1)
    slowest=0
    for s in s1 s2 s3 s4; do
        ms=$(mean_ms "pg $s" "$part")
        slowest=$(awk -v a="$slowest" -v b="$ms" 'BEGIN { print (b > a) ? b : a }')
    done
    quoted=${part//\'/\'\'}
    together=$(mean_ms at_once "SELECT parts_at_once('$quoted')")
    through=$(mean_ms via_sw "$sql")
    single=$(mean_ms "pg single" "$sql")
    overhead=$(awk -v t="$through" -v s="$slowest" 'BEGIN { printf "%+.0f%%", (t / s - 1) * 100 }')
    over_together=$(awk -v t="$through" -v s="$together" 'BEGIN { printf "%+.0f%%", (t / s - 1) * 100 }')
    printf '%-10s %12s %14s %10s %14s %10s %12s\n' "$q" "$through" "$slowest" "$overhead" "$together" "$over_together" "$single"
done
