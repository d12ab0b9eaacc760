#!/usr/bin/env bash
# pgbench select-only through nothing, shardwire and PgBouncer (transaction mode), in one run.
#
#   bench/pgbench.sh [seconds-per-run] [rounds] [clients]
#
# Starts its own PostgreSQL cluster, shardwire (release build) and PgBouncer on free ports, then
# alternates the three targets and both protocols (simple, extended) for several rounds and prints
# median TPS, the ratios, and each proxy's CPU time per transaction (user+sys of the proxy process
# divided by transactions). Needs: postgresql, pgbouncer (apt), cargo. Debian 12 ships PgBouncer
# 1.18, which has no prepared-statement support in transaction mode, hence no -M prepared here.
set -euo pipefail

SECS=${1:-10}
ROUNDS=${2:-3}
CLIENTS=${3:-16}
POOL=20
cd "$(dirname "$0")/.."

for bin in pgbench pgbouncer; do
    command -v "$bin" >/dev/null || { echo "missing $bin: apt-get install -y postgresql-client pgbouncer" >&2; exit 1; }
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

cleanup() {
    [ -n "${SWPID:-}" ] && kill "$SWPID" 2>/dev/null || true
    [ -n "${BPID:-}" ] && kill "$BPID" 2>/dev/null || true
    as_pg "$PGBIN/pg_ctl" -D "$WORK/pg" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

as_pg "$PGBIN/initdb" -D "$WORK/pg" -U postgres -A trust >/dev/null
as_pg "$PGBIN/pg_ctl" -D "$WORK/pg" -l "$WORK/pg.log" -w \
    -o "-p $PGPORT -k $WORK -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off" start >/dev/null
psql -qX -h 127.0.0.1 -p "$PGPORT" -U postgres -c "CREATE DATABASE app" >/dev/null
pgbench -q -i -s 10 -h 127.0.0.1 -p "$PGPORT" -U postgres app >/dev/null 2>&1

cat >"$WORK/sw.toml" <<TOML
[proxy]
listen = "127.0.0.1:$SWPORT"
database = "app"
[[users]]
name = "app"
password = "app"
[[shards]]
name = "s1"
url = "postgres://postgres@127.0.0.1:$PGPORT/app"
[pool]
size = $POOL
TOML
# SW_WORKERS=N sets [proxy] workers (default 1: one thread, as PgBouncer runs).
[ -n "${SW_WORKERS:-}" ] && sed -i "s/^database = \"app\"/database = \"app\"\nworkers = $SW_WORKERS/" "$WORK/sw.toml"
RUST_LOG=warn "$SW" --config "$WORK/sw.toml" >"$WORK/sw.log" 2>&1 &
SWPID=$!

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
as_pg pgbouncer "$WORK/bouncer.ini" >/dev/null 2>&1 &
sleep 1
BPID=$(pgrep -n -f "pgbouncer $WORK/bouncer.ini")

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK=$(getconf CLK_TCK)

declare -A TPS CPU
run() { # target mode port user pid
    local target=$1 mode=$2 port=$3 user=$4 pid=${5:-} before after out tx tps
    [ -n "$pid" ] && before=$(cpu_ticks "$pid")
    out=$(PGPASSWORD=app pgbench -n -S -M "$mode" -c "$CLIENTS" -j 2 -T "$SECS" -h 127.0.0.1 -p "$port" -U "$user" app 2>&1)
    tx=$(awk '/number of transactions actually processed/ {print $NF}' <<<"$out" | cut -d/ -f1)
    tps=$(awk '/^tps = / {print $3}' <<<"$out")
    TPS[$target.$mode]+="$tps "
    if [ -n "$pid" ]; then
        after=$(cpu_ticks "$pid")
        CPU[$target.$mode]+="$(awk -v b="$before" -v a="$after" -v t="$tx" -v k="$TICK" 'BEGIN {printf "%.2f", (a-b)/k/t*1e6}') "
    fi
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

for r in $(seq "$ROUNDS"); do
    for mode in simple extended; do
        run direct "$mode" "$PGPORT" postgres
        run shardwire "$mode" "$SWPORT" app "$SWPID"
        run pgbouncer "$mode" "$BOUNCERPORT" app "$BPID"
    done
    echo "round $r of $ROUNDS done" >&2
done

printf '\n%-10s %-9s %12s %16s\n' target mode "median TPS" "CPU µs/tx"
for mode in simple extended; do
    for target in direct shardwire pgbouncer; do
        tps=$(median <<<"${TPS[$target.$mode]}")
        cpu=$([ -n "${CPU[$target.$mode]:-}" ] && median <<<"${CPU[$target.$mode]}" || echo "-")
        printf '%-10s %-9s %12s %16s\n' "$target" "$mode" "$tps" "$cpu"
    done
    sw=$(median <<<"${TPS[shardwire.$mode]}"); pb=$(median <<<"${TPS[pgbouncer.$mode]}")
    swc=$(median <<<"${CPU[shardwire.$mode]}"); pbc=$(median <<<"${CPU[pgbouncer.$mode]}")
    awk -v s="$sw" -v p="$pb" -v sc="$swc" -v pc="$pbc" -v m="$mode" \
        'BEGIN {printf "%s: shardwire/pgbouncer TPS %.2fx, CPU per tx %.2fx\n\n", m, s/p, sc/pc}'
done
echo "clients=$CLIENTS seconds=$SECS rounds=$ROUNDS pool=$POOL cores=$(nproc)"
