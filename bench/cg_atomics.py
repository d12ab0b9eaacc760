#!/usr/bin/env python3
"""Locked (atomic read-modify-write) instructions per transaction, by function, from a callgrind
output file recorded with --dump-instr=yes. Instruction counts treat a `lock cmpxchg` like an
`add`, but on x86 an uncontended one costs about twenty cycles: reference counts, mutexes and
the task state of an async runtime show up here and not in the instruction totals.

    cg_atomics.py CALLGRIND_OUT BINARY TRANSACTIONS [TOP]

Counts only BINARY's own code (the proxy's, with its statically linked crates).
"""
import collections
import re
import subprocess
import sys

from callgrind import self_costs

# objdump spells a locked instruction with a `lock` prefix; xchg with memory is locked implicitly.
LOCKED = re.compile(r"^\s*([0-9a-f]+):\s+(lock \w+|xchg\s+\S*\()")


def executions(path, binary):
    """Times each instruction address of `binary` ran, and the function it belongs to."""
    ran = collections.Counter()
    function_at = {}
    for obj, function, address, count in self_costs(path):
        if obj == binary and address is not None:
            ran[address] += count
            function_at[address] = function
    return ran, function_at


def locked_instructions(binary):
    listing = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", binary], capture_output=True, text=True, check=True
    ).stdout
    return {
        int(m.group(1), 16): " ".join(m.group(2).split()[:2]) if m.group(2)[0] == "l" else "xchg"
        for m in map(LOCKED.match, listing.splitlines())
        if m
    }


def main():
    path, binary, transactions = sys.argv[1], sys.argv[2], float(sys.argv[3])
    top = int(sys.argv[4]) if len(sys.argv) > 4 else 25
    ran, function_at = executions(path, binary)
    by_site = collections.Counter()
    for address, instruction in locked_instructions(binary).items():
        if ran[address]:
            by_site[(function_at[address], instruction)] += ran[address]
    print(f"{sum(by_site.values()) / transactions:9.1f}  locked instructions per transaction")
    for (function, instruction), count in by_site.most_common(top):
        print(f"{count / transactions:9.2f}  {instruction:14}  {function[:120]}")


if __name__ == "__main__":
    main()
