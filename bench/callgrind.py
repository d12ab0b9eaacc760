"""Reads a callgrind output file: the self cost of every cost line, with the object and function
it belongs to. Shared by cg_functions.py and cg_atomics.py.

Callgrind compresses names (`fn=(12) name` once, `fn=(12)` after) and positions (absolute, `+n`
/ `-n` relative to the previous one, `*` the same); a `calls=` line is followed by the inclusive
cost of that call, which is not the caller's own. With --dump-instr=yes a position is an
instruction address followed by a line number, otherwise a line number alone.
"""
import re

NAMED = re.compile(r"\((\d+)\)(?: (.*))?")


def self_costs(path):
    """Yields (object, function, address, instructions) for every line of self cost. `address`
    is None unless the file was written with --dump-instr=yes."""
    names = {"ob": {}, "fn": {}}
    current = {"ob": None, "fn": None}
    positions = 1
    with_addresses = False
    address = 0
    cost_is_a_call = False

    def name_of(kind, spec):
        m = NAMED.match(spec)
        if m.group(2):
            names[kind][m.group(1)] = m.group(2)
        return names[kind][m.group(1)]

    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("positions:"):
                kinds = line.split()[1:]
                positions = len(kinds)
                with_addresses = kinds[0] == "instr"
            elif line.startswith(("ob=", "fn=")):
                kind = line[:2]
                current[kind] = name_of(kind, line[3:])
            elif line.startswith(("cob=", "cfn=")):
                name_of(line[1:3], line[4:])
            elif line.startswith("calls="):
                cost_is_a_call = True
            elif line and (line[0].isdigit() or line[0] in "+-*"):
                fields = line.split()
                if with_addresses:
                    spec = fields[0]
                    if spec.startswith("0x"):
                        address = int(spec, 16)
                    elif spec[0] in "+-":
                        address += int(spec)
                if cost_is_a_call:
                    cost_is_a_call = False
                elif len(fields) > positions:
                    yield (
                        current["ob"],
                        current["fn"],
                        address if with_addresses else None,
                        int(fields[positions]),
                    )
