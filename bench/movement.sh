#!/usr/bin/env bash
# Row movement against plain writes, in one run through shardwire over 2 shards (two PostgreSQL
# clusters on this machine): pgbench custom scripts, each transaction one statement (or block)
# on a random pair of keys:
#   plain        UPDATE … SET v = v + 1 WHERE id = :a            (one row, one shard)
#   same_shard   UPDATE … SET id = <the pair's other key> …      (both keys on one shard: the
#                proxy reads and locks the row, then PostgreSQL moves it between chunks)
#   cross_shard  the same with the keys on different shards      (deleted on one, inserted on
#                the other: a distributed transaction with two-phase commit)
#   txn_single   BEGIN; two single-row UPDATEs on one shard; COMMIT
#   txn_multi    BEGIN; two single-row UPDATEs on two shards; COMMIT   (two-phase commit)
# Every script first reads its pair from a small unsharded table (\gset), so all pay that alike.
#
#   bench/movement.sh [seconds-per-run] [rounds] [clients]
#
# Prints mean TPS per script over the rounds, the CPU each costs PostgreSQL, the proxy and the
# whole machine per transaction, and the ratios the issue's aim is about (cross_shard costs at
# most 4x a plain UPDATE). PG_STATEMENTS=1 also prints the shards' costliest statements with
# their planning time (pg_stat_statements, which slows every statement a little). SCRIPTS="…"
# runs only the scripts named (the ratios are printed for the full set only).
# Needs pgbench and a release build (made here).
set -euo pipefail

SECS=${1:-10}
ROUNDS=${2:-3}
CLIENTS=${3:-8}
PAIRS=10000
cd "$(dirname "$0")/.."

PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
command -v pgbench >/dev/null || { echo "missing pgbench: apt-get install -y postgresql-client" >&2; exit 1; }
cargo build --release --quiet
SW="$PWD/target/release/shardwire"
WORK=$(mktemp -d /tmp/swmove.XXXXXX)
chmod 755 "$WORK"
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" = 0 ] && chown postgres "$WORK"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
P1=$(free_port); P2=$(free_port); SWPORT=$(free_port)
cleanup() {
    [ -n "${SWPID:-}" ] && kill "$SWPID" 2>/dev/null || true
    for c in pg1 pg2; do as_pg "$PGBIN/pg_ctl" -D "$WORK/$c" -m immediate stop >/dev/null 2>&1 || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
STATEMENT_OPTS=""
[ -n "${PG_STATEMENTS:-}" ] && STATEMENT_OPTS="-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track_planning=on"
for c in "pg1 $P1" "pg2 $P2"; do
    set -- $c
    as_pg "$PGBIN/initdb" -D "$WORK/$1" -U postgres -A trust >/dev/null
    as_pg "$PGBIN/pg_ctl" -D "$WORK/$1" -l "$WORK/$1.log" -w \
        -o "-p $2 -k $WORK -c listen_addresses=127.0.0.1 -c max_connections=200 -c max_prepared_transactions=64 -c fsync=off $STATEMENT_OPTS" start >/dev/null
    psql -qX -h 127.0.0.1 -p "$2" -U postgres -c "CREATE DATABASE app" >/dev/null
done
cat >"$WORK/sw.toml" <<TOML
[proxy]
listen = "127.0.0.1:$SWPORT"
database = "app"
[[users]]
name = "app"
password = "app"
[[shards]]
name = "s1"
url = "postgres://postgres@127.0.0.1:$P1/app"
[[shards]]
name = "s2"
url = "postgres://postgres@127.0.0.1:$P2/app"
TOML
RUST_LOG=warn "$SW" --config "$WORK/sw.toml" >"$WORK/sw.log" 2>&1 &
SWPID=$!
for _ in $(seq 120); do
    PGPASSWORD=app psql -qX -h 127.0.0.1 -p "$SWPORT" -U app -Atc "SELECT 1" app >/dev/null 2>&1 && break
    sleep 0.5
done

sw() { PGPASSWORD=app psql -qX -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$SWPORT" -U app app "$@"; }
s1() { psql -qX -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$P1" -U postgres app "$@"; }
s2() { psql -qX -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$P2" -U postgres app "$@"; }

# Which shard each key lives on, read from the shards after placing 4 * PAIRS keys.
sw -c "CREATE SHARDED TABLE bench_probe (id bigint PRIMARY KEY) PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO"
sw -c "INSERT INTO bench_probe SELECT g FROM generate_series(1, $((4 * PAIRS))) g" >/dev/null
sw -c "CREATE TABLE bench_pairs (i int PRIMARY KEY, a bigint, b bigint, c bigint)"
s2 -Atc "SELECT id FROM bench_probe ORDER BY id LIMIT $PAIRS" >"$WORK/s2_ids"
s1 <<SQL
CREATE TEMP TABLE s2_ids (id bigint);
\copy s2_ids FROM '$WORK/s2_ids'
INSERT INTO bench_pairs
SELECT row_number() OVER (ORDER BY a), a, b, c FROM
  (SELECT row_number() OVER (ORDER BY id) AS n, id AS a, lead(id) OVER (ORDER BY id) AS c
     FROM bench_probe) one
  JOIN (SELECT row_number() OVER (ORDER BY id) * 2 - 1 AS n2, id AS b FROM s2_ids) two
    ON one.n = two.n2
WHERE one.n % 2 = 1 AND c IS NOT NULL;
SQL
NPAIRS=$(s1 -Atc "SELECT count(*) FROM bench_pairs")
for t in bench_plain bench_same bench_cross; do
    sw -c "CREATE SHARDED TABLE $t (id bigint PRIMARY KEY, v bigint NOT NULL DEFAULT 0)
           PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO ENABLE ROW MOVEMENT"
done
# Each pair's row starts at its key a; plain also holds b and c for the blocks.
s1 -Atc "COPY (SELECT a FROM bench_pairs) TO STDOUT" >"$WORK/a"
s1 -Atc "COPY (SELECT b FROM bench_pairs UNION ALL SELECT c FROM bench_pairs) TO STDOUT" >"$WORK/bc"
for t in bench_plain bench_same bench_cross; do
    sw -c "\\copy $t (id) FROM '$WORK/a'"
done
sw -c "\\copy bench_plain (id) FROM '$WORK/bc'"

pick="\\set i random(1, $NPAIRS)
SELECT a, b, c FROM bench_pairs WHERE i = :i \\gset"
cat >"$WORK/plain.sql" <<SQL
$pick
UPDATE bench_plain SET v = v + 1 WHERE id = :a;
SQL
cat >"$WORK/same_shard.sql" <<SQL
$pick
UPDATE bench_same SET id = CASE id WHEN :a THEN :c::bigint ELSE :a::bigint END WHERE id IN (:a, :c);
SQL
cat >"$WORK/cross_shard.sql" <<SQL
$pick
UPDATE bench_cross SET id = CASE id WHEN :a THEN :b::bigint ELSE :a::bigint END WHERE id IN (:a, :b);
SQL
cat >"$WORK/txn_single.sql" <<SQL
$pick
BEGIN;
UPDATE bench_plain SET v = v + 1 WHERE id = :a;
UPDATE bench_plain SET v = v + 1 WHERE id = :c;
COMMIT;
SQL
cat >"$WORK/txn_multi.sql" <<SQL
$pick
BEGIN;
UPDATE bench_plain SET v = v + 1 WHERE id = :a;
UPDATE bench_plain SET v = v + 1 WHERE id = :b;
COMMIT;
SQL

# CPU time in clock ticks: of a process and its reaped children; of both PostgreSQL clusters
# (postmasters and every backend); of the whole machine (busy, not idle or waiting).
ticks_of() { awk '{print $14 + $15 + $16 + $17}' "/proc/$1/stat" 2>/dev/null || echo 0; }
pg_ticks() {
    local total=0 pm p
    for c in pg1 pg2; do
        pm=$(head -1 "$WORK/$c/postmaster.pid")
        for p in "$pm" $(pgrep -P "$pm"); do total=$((total + $(ticks_of "$p"))); done
    done
    echo "$total"
}
busy_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9; exit}' /proc/stat; }
US_PER_TICK=$((1000000 / $(getconf CLK_TCK)))

SCRIPTS=${SCRIPTS:-"plain same_shard cross_shard txn_single txn_multi"}
declare -A TPS PGUS SWUS ALLUS
for r in $(seq "$ROUNDS"); do
    for s in $SCRIPTS; do
        pg0=$(pg_ticks); sw0=$(ticks_of "$SWPID"); all0=$(busy_ticks)
        out=$(PGPASSWORD=app pgbench -n -f "$WORK/$s.sql" -M prepared -c "$CLIENTS" -j 2 -T "$SECS" \
            -h 127.0.0.1 -p "$SWPORT" -U app app 2>&1) || true
        pg1=$(pg_ticks); sw1=$(ticks_of "$SWPID"); all1=$(busy_ticks)
        tps=$(awk '/^tps = / {print $3}' <<<"$out")
        txs=$(awk '/number of transactions actually processed/ {print $6}' <<<"$out")
        failed=$(awk '/number of failed transactions/ {print $5}' <<<"$out")
        [ -n "$tps" ] && [ "${txs%%/*}" -gt 0 ] || { echo "$s failed:"; echo "$out"; exit 1; }
        txs=${txs%%/*}
        TPS[$s]+="$tps "
        PGUS[$s]+="$(( (pg1 - pg0) * US_PER_TICK / txs )) "
        SWUS[$s]+="$(( (sw1 - sw0) * US_PER_TICK / txs )) "
        ALLUS[$s]+="$(( (all1 - all0) * US_PER_TICK / txs )) "
        echo "round $r: $s $tps tps (failed: ${failed:-0})" >&2
    done
done
if [ -n "${PG_STATEMENTS:-}" ]; then
    for c in s1 s2; do
        echo "$c: statements by total time (µs per call, of which planning)"
        $c -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" -c "SELECT calls,
                 round(((total_plan_time + total_exec_time) / NULLIF(calls, 0) * 1000)::numeric) AS us,
                 round((total_plan_time / NULLIF(calls, 0) * 1000)::numeric) AS plan_us,
                 left(regexp_replace(query, '\s+', ' ', 'g'), 110) AS query
               FROM pg_stat_statements ORDER BY total_plan_time + total_exec_time DESC LIMIT 10"
    done
fi
mean() { tr ' ' '\n' | grep -v '^$' | awk '{s+=$1; n++} END {printf "%.0f", s/n}'; }
printf '\n%-12s %10s %18s %18s %18s\n' script "mean TPS" "PostgreSQL us/tx" "shardwire us/tx" "machine us/tx"
for s in $SCRIPTS; do
    printf '%-12s %10s %18s %18s %18s\n' "$s" "$(mean <<<"${TPS[$s]}")" "$(mean <<<"${PGUS[$s]}")" \
        "$(mean <<<"${SWUS[$s]}")" "$(mean <<<"${ALLUS[$s]}")"
done
if [ "$SCRIPTS" = "plain same_shard cross_shard txn_single txn_multi" ]; then
# What the aim can reach at best: the shards' own work for one move (which no proxy can take
# away) against everything one plain UPDATE costs the machine.
awk -v pgmove="$(mean <<<"${PGUS[cross_shard]}")" -v plain="$(mean <<<"${ALLUS[plain]}")" 'BEGIN {
    printf "PostgreSQL CPU of one cross-shard move alone / machine CPU of one plain UPDATE: %.2fx\n", pgmove/plain }'
plain=$(mean <<<"${TPS[plain]}")
cross=$(mean <<<"${TPS[cross_shard]}")
same=$(mean <<<"${TPS[same_shard]}")
single=$(mean <<<"${TPS[txn_single]}")
multi=$(mean <<<"${TPS[txn_multi]}")
awk -v p="$plain" -v c="$cross" -v s="$same" -v ts="$single" -v tm="$multi" 'BEGIN {
    printf "cost per statement vs a plain UPDATE: same_shard %.2fx, cross_shard %.2fx (aim: cross_shard <= 4x)\n", p/s, p/c
    printf "multi-shard block vs single-shard block: %.2fx\n", ts/tm }'
fi
echo "moves checked: $(s1 -Atc "SELECT count(*) FROM bench_cross") + $(s2 -Atc "SELECT count(*) FROM bench_cross") rows of $NPAIRS (must be equal)"
echo "clients=$CLIENTS seconds=$SECS rounds=$ROUNDS pairs=$NPAIRS shards=2 cores=$(nproc)"
