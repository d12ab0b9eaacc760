#!/usr/bin/env python3
"""The code footprint of a transaction by function: the 64-byte instruction cache lines each
function executes at least once per transaction on average, from a callgrind output file written
with --dump-instr=yes. Each such line has to come back into the first-level cache after the
kernel's own code evicted it, so their sum, not the instruction count, is what a wake-up of the
proxy costs in cache misses.

    cg_lines.py CALLGRIND_OUT TRANSACTIONS [TOP]
"""
import collections
import sys

from callgrind import self_costs

LINE = 64


def main():
    path, transactions = sys.argv[1], float(sys.argv[2])
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    per_line = collections.Counter()
    owner = {}
    for _, function, address, cost in self_costs(path):
        if address is None:
            sys.exit("no instruction addresses: run callgrind with --dump-instr=yes")
        line = address // LINE
        per_line[line] += cost
        owner.setdefault(line, function or "?")
    # A line counts when its instructions ran at least once per transaction on average (a line
    # holds ~16 instructions, so this keeps lines run once per transaction, drops cold ones).
    hot = collections.Counter()
    for line, cost in per_line.items():
        if cost >= transactions:
            hot[owner[line]] += 1
    print(f"{sum(hot.values()):6d}  code lines run per transaction")
    for function, lines in hot.most_common(top):
        print(f"{lines:6d}  {function[:150]}")


if __name__ == "__main__":
    main()
