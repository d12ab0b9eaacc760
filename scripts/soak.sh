#!/usr/bin/env bash
# The soak (issue 14): the bank workload of tests/bank.rs — keyed reads, reads over every shard,
# transfers between shards (two-phase commits), accounts moved with their ledger rows — for 30
# minutes, with the proxy killed (SIGKILL) and a shard crashed (`pg_ctl stop -m immediate`) and
# restarted at random intervals; then the bank's invariants are checked on the shards.
# Usage: scripts/soak.sh [seconds] [mean-seconds-between-kills] [seed]   (defaults 1800 60 and
# the time). docs/robustness.md records the last result.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/ensure-deps
seed="${3:-$(date +%s)}"
echo "soak: seed $seed"
BANK_SECONDS="${1:-1800}" BANK_KILL_EVERY="${2:-60}" BANK_SEED="$seed" BANK_SHARD_CRASH=every \
    cargo test --test bank -- --nocapture 2>&1 | grep -E '^bank:|^test |panicked|assert'
