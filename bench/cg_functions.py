#!/usr/bin/env python3
"""Per-function instruction counts from a callgrind output file, divided by a number of
transactions. Exclusive counts (the function's own instructions, inlined code included, calls
excluded), summed over every file the function's code came from. callgrind_annotate splits an
inlined function's cost by source file, which scatters Rust's async code over many lines.

    cg_functions.py CALLGRIND_OUT TRANSACTIONS [TOP]
"""
import collections
import re
import sys

NAMED = re.compile(r"\((\d+)\)(?: (.*))?")


def main():
    path, transactions = sys.argv[1], float(sys.argv[2])
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    names = {}
    own = collections.Counter()
    current = None
    cost_is_a_call = False

    def name_of(spec):
        m = NAMED.match(spec)
        if m.group(2):
            names[m.group(1)] = m.group(2)
        return names[m.group(1)]

    with open(path) as f:
        for line in f:
            if line.startswith("fn="):
                current = name_of(line[3:].rstrip("\n"))
            elif line.startswith("cfn="):
                name_of(line[4:].rstrip("\n"))
            elif line.startswith("calls="):
                # The next cost line is the inclusive cost of that call, not this function's own.
                cost_is_a_call = True
            elif line[:1].isdigit() or line[:1] in "+-*":
                fields = line.split()
                if cost_is_a_call:
                    cost_is_a_call = False
                elif len(fields) >= 2 and current is not None:
                    own[current] += int(fields[1])
    total = sum(own.values())
    print(f"{total / transactions:9.0f}  total instructions per transaction")
    for function, count in own.most_common(top):
        print(f"{count / transactions:9.0f}  {100 * count / total:5.1f}%  {function[:140]}")


if __name__ == "__main__":
    main()
