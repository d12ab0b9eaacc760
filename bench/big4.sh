# Sourced by the multi-shard benchmarks (multishard.sh, cursor.sh): four PostgreSQL clusters
# as shards s1..s4 and a fifth, `single`, on free ports in a temporary directory; shardwire's
# release build in front of the four; table `big` (id bigint PRIMARY KEY, grp int, v int,
# t text) with $ROWS rows, sharded on the four and whole in `single`. Defines `sw` and
# `pg <cluster>` (psql), PORT, SWPORT, SWPID; everything stops at exit.
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
command -v psql >/dev/null || { echo "missing psql: apt-get install -y postgresql-client" >&2; exit 1; }
cargo build --release --quiet
SW="$PWD/target/release/shardwire"
WORK=$(mktemp -d /tmp/swmulti.XXXXXX)
chmod 755 "$WORK"
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" = 0 ] && chown postgres "$WORK"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
CLUSTERS=(s1 s2 s3 s4 single)
declare -A PORT
for c in "${CLUSTERS[@]}"; do PORT[$c]=$(free_port); done
SWPORT=$(free_port)
cleanup() {
    [ -n "${SWPID:-}" ] && kill "$SWPID" 2>/dev/null || true
    for c in "${CLUSTERS[@]}"; do as_pg "$PGBIN/pg_ctl" -D "$WORK/$c" -m immediate stop >/dev/null 2>&1 || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
for c in "${CLUSTERS[@]}"; do
    as_pg "$PGBIN/initdb" -D "$WORK/$c" -U postgres -A trust >/dev/null
    as_pg "$PGBIN/pg_ctl" -D "$WORK/$c" -l "$WORK/$c.log" -w \
        -o "-p ${PORT[$c]} -k $WORK -c listen_addresses=127.0.0.1 -c max_prepared_transactions=64 -c fsync=off -c shared_buffers=256MB" \
        start >/dev/null
    psql -qX -h 127.0.0.1 -p "${PORT[$c]}" -U postgres -c "CREATE DATABASE app" >/dev/null
done
{
    printf '[proxy]\nlisten = "127.0.0.1:%s"\ndatabase = "app"\n' "$SWPORT"
    printf '[[users]]\nname = "app"\npassword = "app"\n'
    printf '[queries]\ncombine_row_limit = 2000000\n'
    for s in s1 s2 s3 s4; do
        printf '[[shards]]\nname = "%s"\nurl = "postgres://postgres@127.0.0.1:%s/app"\n' "$s" "${PORT[$s]}"
    done
} >"$WORK/sw.toml"
RUST_LOG=warn "$SW" --config "$WORK/sw.toml" >"$WORK/sw.log" 2>&1 &
SWPID=$!
sw() { PGPASSWORD=app psql -qX -h 127.0.0.1 -p "$SWPORT" -U app -d app -v ON_ERROR_STOP=1 "$@"; }
pg() { local c=$1; shift; psql -qX -h 127.0.0.1 -p "${PORT[$c]}" -U postgres -d app -v ON_ERROR_STOP=1 "$@"; }
for _ in $(seq 120); do sw -Atc "SELECT 1" >/dev/null 2>&1 && break; sleep 0.5; done

sw -c "CREATE SHARDED TABLE big (id bigint PRIMARY KEY, grp int, v int, t text) PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO"
ROW="g, g % 1000, (g::bigint * 7919) % 1000003, md5(g::text)"
# Each shard's chunks get their own rows, written there directly.
LOADS=()
for s in s1 s2 s3 s4; do
    pg "$s" -c "DO \$\$DECLARE p record; BEGIN
        FOR p IN SELECT c.oid::regclass AS part, pg_get_expr(c.relpartbound, c.oid) AS b
                 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                 WHERE i.inhparent = 'big'::regclass LOOP
          EXECUTE format('INSERT INTO %s SELECT ${ROW//%/%%} FROM generate_series(1, $ROWS) g
                          WHERE satisfies_hash_partition(''big''::regclass, %s, %s, g::bigint)',
                         p.part, substring(p.b from 'modulus (\d+)'), substring(p.b from 'remainder (\d+)'));
        END LOOP; END \$\$" -c "VACUUM ANALYZE big" &
    LOADS+=($!)
done
pg single -c "CREATE TABLE big (id bigint PRIMARY KEY, grp int, v int, t text);
              INSERT INTO big SELECT $ROW FROM generate_series(1, $ROWS) g" -c "VACUUM ANALYZE big" &
LOADS+=($!)
# Not a bare `wait`: the proxy runs in the background too.
for pid in "${LOADS[@]}"; do wait "$pid"; done
[ "$(sw -Atc 'SELECT count(*) FROM big')" = "$ROWS" ] || { echo "rows missing" >&2; exit 1; }
