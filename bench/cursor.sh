#!/usr/bin/env bash
# A cursor over several shards: DECLARE … ORDER BY a non-key column, then 1,000 FETCHes of
# 1,000 rows (1,000,000 rows, every one), through shardwire over 4 shards and from one plain
# PostgreSQL holding the same rows; and shardwire's resident memory before, at its peak during,
# and after the fetches.
#
#   bench/cursor.sh [runs]
#
# Prints the mean seconds of `runs` (default 3) full reads each way, their ratio, and the
# proxy's RSS in MiB. Needs psql and a release build (made here).
set -euo pipefail

RUNS=${1:-3}
ROWS=1000000
cd "$(dirname "$0")/.."
source bench/big4.sh

script() {
    printf 'BEGIN;\nDECLARE c CURSOR FOR SELECT id, v, t FROM big ORDER BY v, id;\n'
    for _ in $(seq 1000); do printf 'FETCH 1000 FROM c;\n'; done
    printf 'COMMIT;\n'
}
script >"$WORK/fetch.sql"
rss_mib() { awk '/^VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$SWPID/status"; }
seconds() { # runner…
    local start end
    start=$(date +%s.%N)
    "$@" -f "$WORK/fetch.sql" >/dev/null
    end=$(date +%s.%N)
    awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", b - a }'
}
rows=$(sw -At -f "$WORK/fetch.sql" | grep -c .)
[ "$rows" = "$ROWS" ] || { echo "the cursor gave $rows rows, not $ROWS" >&2; exit 1; }
before=$(rss_mib)
peak=$before
through=0
single=0
for _ in $(seq "$RUNS"); do
    sw -f "$WORK/fetch.sql" >/dev/null &
    reader=$!
    while kill -0 "$reader" 2>/dev/null; do
        now=$(rss_mib)
        peak=$(awk -v a="$peak" -v b="$now" 'BEGIN { print (b > a) ? b : a }')
        sleep 0.2
    done
    wait "$reader"
    through=$(awk -v a="$through" -v b="$(seconds sw)" 'BEGIN { print a + b }')
    single=$(awk -v a="$single" -v b="$(seconds pg single)" 'BEGIN { print a + b }')
done
after=$(rss_mib)
awk -v t="$through" -v s="$single" -v n="$RUNS" 'BEGIN {
    printf "shardwire %.3f s, one PostgreSQL %.3f s (mean of %d), ratio %.2fx\n", t / n, s / n, n, t / s }'
echo "shardwire RSS: ${before} MiB before, ${peak} MiB at most during, ${after} MiB after"
