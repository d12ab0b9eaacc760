# Sourced by the bench scripts: starts a PostgreSQL cluster with pgbench's tables and writes the
# configurations of shardwire and PgBouncer (transaction mode) in front of it. Sets PGPORT,
# SWPORT, BOUNCERPORT, WORK, SW (the release binary) and PGBIN; cleans up at exit (extend
# `cleanup` with `on_exit`). Expects POOL; BENCH_NEEDS names further commands needed, each as
# `command` or `command:apt-package`; SW_WORKERS=N sets shardwire's [proxy] workers.
# `start_proxies` runs both proxies (plainly, not under a tool) and sets SWPID and BPID.

for need in pgbench:postgresql-client pgbouncer ${BENCH_NEEDS:-}; do
    command -v "${need%%:*}" >/dev/null || { echo "missing ${need%%:*}: apt-get install -y ${need#*:}" >&2; exit 1; }
done
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
cargo build --release --quiet
SW="$PWD/target/release/shardwire"

WORK=$(mktemp -d /tmp/swbench.XXXXXX)
chmod 755 "$WORK"
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" = 0 ] && chown postgres "$WORK"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PGPORT=$(free_port); SWPORT=$(free_port); BOUNCERPORT=$(free_port)

EXIT_HOOKS=()
on_exit() { EXIT_HOOKS+=("$1"); }
cleanup() {
    for hook in "${EXIT_HOOKS[@]}"; do eval "$hook" || true; done
    as_pg "$PGBIN/pg_ctl" -D "$WORK/pg" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

as_pg "$PGBIN/initdb" -D "$WORK/pg" -U postgres -A trust >/dev/null
as_pg "$PGBIN/pg_ctl" -D "$WORK/pg" -l "$WORK/pg.log" -w \
    -o "-p $PGPORT -k $WORK -c listen_addresses=127.0.0.1 -c max_connections=200 -c max_prepared_transactions=64 -c fsync=off" start >/dev/null
psql -qX -h 127.0.0.1 -p "$PGPORT" -U postgres -c "CREATE DATABASE app" >/dev/null
pgbench -q -i -s 10 -h 127.0.0.1 -p "$PGPORT" -U postgres app >/dev/null 2>&1

cat >"$WORK/sw.toml" <<TOML
[proxy]
listen = "127.0.0.1:$SWPORT"
database = "app"
workers = ${SW_WORKERS:-1}
[[users]]
name = "app"
password = "app"
[[shards]]
name = "s1"
url = "postgres://postgres@127.0.0.1:$PGPORT/app"
[pool]
size = $POOL
TOML

cat >"$WORK/bouncer.ini" <<INI
[databases]
app = host=127.0.0.1 port=$PGPORT dbname=app user=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $BOUNCERPORT
unix_socket_dir =
auth_type = plain
auth_file = $WORK/userlist.txt
pool_mode = transaction
default_pool_size = $POOL
max_client_conn = 500
logfile = $WORK/bouncer.log
INI
echo '"app" "app"' >"$WORK/userlist.txt"
[ "$(id -u)" = 0 ] && chown postgres "$WORK"/bouncer.ini "$WORK"/userlist.txt

# Waits until `port` answers a query as user app.
wait_ready() {
    for _ in $(seq 120); do
        PGPASSWORD=app psql -qX -h 127.0.0.1 -p "$1" -U app -Atc "SELECT 1" app >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    echo "nothing answers on port $1" >&2; exit 1
}

start_proxies() {
    RUST_LOG=warn "$SW" --config "$WORK/sw.toml" >"$WORK/sw.log" 2>&1 &
    SWPID=$!
    on_exit 'kill "$SWPID"'
    as_pg pgbouncer "$WORK/bouncer.ini" >/dev/null 2>&1 &
    wait_ready "$SWPORT"; wait_ready "$BOUNCERPORT"
    BPID=$(pgrep -n -f "pgbouncer $WORK/bouncer.ini")
    on_exit 'kill "$BPID"'
}

# bench/routed.sh's workload on one shard, for the callgrind scripts: a consistent-hash sharded
# table of 10,000 rows made through shardwire (at $SWPORT), and a pgbench script of keyed point
# reads on it in $WORK/routed.sql.
routed_workload() {
    local sw=(psql -qX -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$SWPORT" -U app app)
    PGPASSWORD=app "${sw[@]}" -c "CREATE SHARDED TABLE bench_accounts (aid int PRIMARY KEY,
        bid int, abalance int, filler char(84)) PARTITION BY CONSISTENT HASH (aid) PARTITIONS AUTO"
    PGPASSWORD=app "${sw[@]}" -c "INSERT INTO bench_accounts SELECT g, 1, 0, ''
        FROM generate_series(1, 10000) g" >/dev/null
    printf '%s\n' '\set aid random(1, 10000)' \
        'SELECT abalance FROM bench_accounts WHERE aid = :aid;' >"$WORK/routed.sql"
}
