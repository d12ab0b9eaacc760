#!/usr/bin/env python3
"""CPU time of every process on the machine, summed by kind, for bench/routed.sh's WHO=1.

    cpu_by_process.py snapshot > FILE          ticks so far, as JSON
    cpu_by_process.py per-tx BEFORE AFTER TX   microseconds per transaction between two snapshots

PostgreSQL processes are summed by their postmaster's data directory (one line per server),
the proxies by name, threads included; the rest is "other". pgbench has exited by the second
snapshot and is not counted.
"""
import json
import os
import sys


def processes():
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline") as f:
                cmdline = f.read().split("\0")
            ticks = 0
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                ticks += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        yield int(pid), parent, name, cmdline, ticks


def snapshot():
    procs = list(processes())
    data_dir = {}
    for pid, _, _, cmdline, _ in procs:
        if "-D" in cmdline[:-1]:
            data_dir[pid] = cmdline[cmdline.index("-D") + 1]
    kinds = {}
    for pid, parent, name, _, ticks in procs:
        if pid in data_dir or (name == "postgres" and parent in data_dir):
            kind = "postgres " + data_dir.get(pid, data_dir.get(parent))
        elif name in ("shardwire", "pgbouncer"):
            kind = name
        else:
            kind = "other"
        kinds[kind] = kinds.get(kind, 0) + ticks
    return kinds


def main():
    if sys.argv[1] == "snapshot":
        print(json.dumps(snapshot()))
        return
    before, after = (json.load(open(p)) for p in sys.argv[2:4])
    tx = float(sys.argv[4])
    tick = os.sysconf("SC_CLK_TCK")
    used = {k: (after[k] - before.get(k, 0)) / tick / tx * 1e6 for k in after}
    print(", ".join(f"{k}: {v:.1f}" for k, v in sorted(used.items()) if v >= 0.05))


if __name__ == "__main__":
    main()
