#!/usr/bin/env python3
"""Per-function instruction counts from a callgrind output file, divided by a number of
transactions. Exclusive counts (the function's own instructions, inlined code included, calls
excluded), summed over every file the function's code came from. callgrind_annotate splits an
inlined function's cost by source file, which scatters Rust's async code over many lines.

    cg_functions.py CALLGRIND_OUT TRANSACTIONS [TOP]
"""
import collections
import sys

from callgrind import self_costs


def main():
    path, transactions = sys.argv[1], float(sys.argv[2])
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    own = collections.Counter()
    for _, function, _, cost in self_costs(path):
        if function is not None:
            own[function] += cost
    total = sum(own.values())
    print(f"{total / transactions:9.0f}  total instructions per transaction")
    for function, count in own.most_common(top):
        print(f"{count / transactions:9.0f}  {100 * count / total:5.1f}%  {function[:140]}")


if __name__ == "__main__":
    main()
