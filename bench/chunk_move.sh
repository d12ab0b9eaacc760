#!/usr/bin/env bash
# A chunk moved back and forth between two shards (two PostgreSQL clusters on this machine,
# wal_level = logical) while pgbench writes to it at a fixed rate through shardwire.
#
#   bench/chunk_move.sh [rows-in-the-chunk] [moves] [writes-per-second]
#
# WINDOW=seconds (default 15) is how long pgbench writes around each move, which starts 2 s in;
# a move must end inside it.
# For each move it prints how long MOVE CHUNK took, the cutover's pause (SHOW MOVES' pause_ms),
# the copy's rate, and the writers' p99 and longest latency during the move (pgbench's
# per-transaction log; each write is an UPDATE of a row of the moving chunk). It also times a plain
# COPY of the same rows from one shard to the other (psql COPY TO STDOUT | COPY FROM STDIN), the
# floor the issue's copy aim is measured against. Needs pgbench and a release build (made here).
set -euo pipefail

ROWS=${1:-200000}
MOVES=${2:-4}
RATE=${3:-1000}
cd "$(dirname "$0")/.."

PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
command -v pgbench >/dev/null || { echo "missing pgbench: apt-get install -y postgresql-client" >&2; exit 1; }
cargo build --release --quiet
SW="$PWD/target/release/shardwire"
WORK=$(mktemp -d /tmp/swchunk.XXXXXX)
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
for c in "pg1 $P1" "pg2 $P2"; do
    set -- $c
    as_pg "$PGBIN/initdb" -D "$WORK/$1" -U postgres -A trust >/dev/null
    as_pg "$PGBIN/pg_ctl" -D "$WORK/$1" -l "$WORK/$1.log" -w \
        -o "-p $2 -k $WORK -c listen_addresses=127.0.0.1 -c max_connections=200 -c max_prepared_transactions=64 -c wal_level=logical -c fsync=off" start >/dev/null
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
on() { psql -qX -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$1" -U postgres app "${@:2}"; }
port_of() { [ "$1" = s1 ] && echo "$P1" || echo "$P2"; }

# Four chunks, two per shard; chunk 1 moves. Its rows: the keys whose hash names chunk 1.
sw -c "CREATE SHARDED TABLE bench_moved (id bigint PRIMARY KEY, v bigint NOT NULL DEFAULT 0, pad text)
       PARTITION BY CONSISTENT HASH (id) PARTITIONS 4"
sw -c "INSERT INTO bench_moved SELECT g, 0, repeat('x', 100) FROM generate_series(1, $((4 * ROWS))) g" >/dev/null
SRC=$(sw -Atc "SHOW CHUNKS FOR bench_moved" | awk -F'|' '$3 == 1 {print $4}')
IN_CHUNK=$(on "$(port_of "$SRC")" -Atc "SELECT count(*) FROM bench_moved_c1")
on "$(port_of "$SRC")" -Atc "SELECT row_number() OVER (), id FROM bench_moved_c1" -F $'\t' >"$WORK/ids"
sw -c "CREATE TABLE bench_ids (i int PRIMARY KEY, id bigint)"
sw -c "\\copy bench_ids FROM '$WORK/ids'"
echo "chunk 1 holds $IN_CHUNK rows (of $((4 * ROWS))), on $SRC" >&2

cat >"$WORK/write.sql" <<SQL
\\set i random(1, $IN_CHUNK)
SELECT id FROM bench_ids WHERE i = :i \\gset
UPDATE bench_moved SET v = v + 1 WHERE id = :id;
SQL

# The floor: the chunk's rows copied between the shards by plain COPY.
DST=$([ "$SRC" = s1 ] && echo s2 || echo s1)
on "$(port_of "$DST")" -c "CREATE TABLE bench_copy (LIKE bench_moved)"
t0=$(date +%s.%N)
on "$(port_of "$SRC")" -c "COPY bench_moved_c1 TO STDOUT" | on "$(port_of "$DST")" -c "COPY bench_copy FROM STDIN"
t1=$(date +%s.%N)
COPY_RATE=$(awk -v n="$IN_CHUNK" -v a="$t0" -v b="$t1" 'BEGIN {printf "%.0f", n/(b-a)}')
on "$(port_of "$DST")" -c "DROP TABLE bench_copy"

printf '%-5s %-6s %10s %10s %12s %12s %12s\n' move to "seconds" "pause ms" "move rows/s" "p99 ms" "max ms"
from=$SRC
for m in $(seq "$MOVES"); do
    to=$([ "$from" = s1 ] && echo s2 || echo s1)
    rm -f "$WORK"/pgbench_log.*
    cd "$WORK"
    PGPASSWORD=app pgbench -n -f write.sql -c 4 -j 2 -R "$RATE" -T "${WINDOW:-15}" -l \
        -h 127.0.0.1 -p "$SWPORT" -U app app >"$WORK/pgbench.out" 2>&1 &
    BENCH=$!
    cd - >/dev/null
    sleep 2
    t0=$(date +%s.%N)
    sw -c "MOVE CHUNK 1 FOR bench_moved TO SHARD $to"
    t1=$(date +%s.%N)
    wait "$BENCH"
    pause=$(sw -Atc "SHOW MOVES" | tail -1 | awk -F'|' '{print $11}')
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b-a}')
    rate=$(awk -v n="$IN_CHUNK" -v s="$secs" -v p="$pause" 'BEGIN {printf "%.0f", n/(s-p/1000)}')
    # pgbench -l: field 3 is the latency in µs; only the writes made during the move.
    read -r p99 max < <(cat "$WORK"/pgbench_log.* | awk -v a="$t0" -v b="$t1" \
        '{t = $5 + $6/1e6; if (t >= a && t <= b + 1) print $3/1000}' | sort -g |
        awk '{v[NR]=$1} END {i=int(NR*0.99); if (i<1) i=1; printf "%.1f %.1f\n", v[i], v[NR]}')
    printf '%-5s %-6s %10s %10s %12s %12s %12s\n' "$m" "$to" "$secs" "$pause" "$rate" "$p99" "$max"
    from=$to
done
echo "plain COPY between the shards: $COPY_RATE rows/s"
sw -Atc "CHECK PLACEMENT FOR bench_moved" | awk -F'|' '{r += $4; m += $5} END {print "rows", r, "misplaced", m}'
