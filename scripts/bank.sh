#!/usr/bin/env bash
# The long bank test (tests/bank.rs): money conserved over several proxy kills and a shard crash.
# Usage: scripts/bank.sh [seconds] [kill-every-seconds]   (defaults 300 and 30)
# Prints the run's tally and the test's verdict; BENCHMARKS.md records the last result.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/ensure-deps
BANK_SECONDS="${1:-300}" BANK_KILL_EVERY="${2:-30}" BANK_SHARD_CRASH=1 \
    cargo test --test bank -- --nocapture 2>&1 | grep -E '^bank:|^test |panicked|assert'
