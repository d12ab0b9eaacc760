#!/usr/bin/env bash
# The least a cross-shard key move can cost PostgreSQL under DESIGN.md's two-phase commit,
# against a plain UPDATE, with no proxy at all: pgbench straight on one PostgreSQL cluster.
#   plain  the pick of bench/movement.sh, then UPDATE … SET v = v + 1 WHERE id = :a
#   move   the same pick, then each participant's part as tersely as SQL allows, one after the
#          other on this one server: DELETE … RETURNING on the source, INSERT on the target,
#          each PREPARE TRANSACTION, the decision record's INSERT, both COMMIT PREPAREDs and the
#          record's DELETE (the statements no implementation of that design can leave out)
# A move here moves a row between two tables of one server: the same work the two shards and
# the catalog do for it, none of a proxy's. Their TPS ratio is the floor for bench/movement.sh's
# "cross_shard vs plain" on this machine.
#
#   bench/movement_floor.sh [seconds-per-run] [rounds] [clients]
set -euo pipefail

SECS=${1:-10}
ROUNDS=${2:-3}
CLIENTS=${3:-8}
ROWS=10000
cd "$(dirname "$0")/.."

PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
command -v pgbench >/dev/null || { echo "missing pgbench: apt-get install -y postgresql-client" >&2; exit 1; }
WORK=$(mktemp -d /tmp/swfloor.XXXXXX)
chmod 755 "$WORK"
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" = 0 ] && chown postgres "$WORK"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cleanup() {
    as_pg "$PGBIN/pg_ctl" -D "$WORK/pg" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT
as_pg "$PGBIN/initdb" -D "$WORK/pg" -U postgres -A trust >/dev/null
as_pg "$PGBIN/pg_ctl" -D "$WORK/pg" -l "$WORK/pg.log" -w \
    -o "-p $PORT -k $WORK -c listen_addresses=127.0.0.1 -c max_prepared_transactions=64 -c fsync=off" start >/dev/null
pg() { psql -qX -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U postgres postgres "$@"; }
pg <<SQL
CREATE TABLE pairs (i int PRIMARY KEY, a bigint, b bigint);
INSERT INTO pairs SELECT g, g, g + $ROWS FROM generate_series(1, $ROWS) g;
CREATE TABLE t (id bigint PRIMARY KEY, v bigint NOT NULL DEFAULT 0);
INSERT INTO t (id) SELECT g FROM generate_series(1, $ROWS) g;
CREATE TABLE decision (gid text PRIMARY KEY, at timestamptz NOT NULL DEFAULT now());
VACUUM ANALYZE;
SQL

# Each client keeps to its own pairs (i ≡ client_id mod clients), so no two clients move one
# row at once; the row goes from whichever key of its pair it has to the other.
pick="\\set i random(0, $ROWS / $CLIENTS - 1) * $CLIENTS + :client_id + 1
SELECT a, b FROM pairs WHERE i = :i \\gset"
cat >"$WORK/plain.sql" <<SQL
$pick
UPDATE t SET v = v + 1 WHERE id IN (:a, :b);
SQL
cat >"$WORK/move.sql" <<SQL
$pick
BEGIN;
DELETE FROM t WHERE id IN (:a, :b) RETURNING CASE id WHEN :a THEN :b ELSE :a END AS new_id, v \\gset
PREPARE TRANSACTION 'src_:client_id';
BEGIN;
INSERT INTO t (id, v) VALUES (:new_id, :v);
PREPARE TRANSACTION 'dst_:client_id';
INSERT INTO decision (gid) VALUES ('move_:client_id');
COMMIT PREPARED 'src_:client_id';
COMMIT PREPARED 'dst_:client_id';
DELETE FROM decision WHERE gid = 'move_:client_id';
SQL

declare -A TPS
for r in $(seq "$ROUNDS"); do
    for s in plain move; do
        out=$(pgbench -n -f "$WORK/$s.sql" -c "$CLIENTS" -j 2 -T "$SECS" -h 127.0.0.1 -p "$PORT" -U postgres postgres 2>&1) || true
        tps=$(awk '/^tps = / {print $3}' <<<"$out")
        [ -n "$tps" ] || { echo "$s failed:"; echo "$out"; exit 1; }
        TPS[$s]+="$tps "
        echo "round $r: $s $tps tps" >&2
    done
done
mean() { tr ' ' '\n' | grep -v '^$' | awk '{s+=$1; n++} END {printf "%.0f", s/n}'; }
plain=$(mean <<<"${TPS[plain]}")
move=$(mean <<<"${TPS[move]}")
echo "plain $plain tps, move $move tps: a move costs PostgreSQL alone ${plain}/${move} = $(awk -v p="$plain" -v m="$move" 'BEGIN {printf "%.2f", p/m}')x a plain UPDATE"
echo "rows still there: $(pg -Atc "SELECT count(*) FROM t") of $ROWS; prepared left: $(pg -Atc "SELECT count(*) FROM pg_prepared_xacts")"
echo "clients=$CLIENTS seconds=$SECS rounds=$ROUNDS cores=$(nproc)"
