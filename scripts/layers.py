#!/usr/bin/env python3
"""Import layers of a Rust crate: which top-level modules of src/ use which, and every cycle among them.

    scripts/layers.py [SRC_DIR] [--files] [--order]

Reads `crate::a::…` paths (in `use` items and in code) of every .rs file under SRC_DIR (default: src) and
draws an edge from the file's top-level module to `a`. Prints the modules in an order where each uses
only those below it, as far as one exists, then every strongly connected group of modules (a cycle:
none of its members can be understood or changed without the others) with the lines that tie it.
--files does the same per file instead of per top-level module. --order also checks the module map in
SRC_DIR/lib.rs: each module it names (as [`name`], in order) may use only modules named before it.
Exit status 1 when there is a cycle or, with --order, a use that reaches up the map.

(Copied from ../shared/tools/layers.py; --order is ours.)
"""
import re
import sys
from collections import defaultdict
from pathlib import Path

PATH = re.compile(r"\bcrate::((?:[a-z_][a-z0-9_]*::)*[A-Za-z_][A-Za-z0-9_]*)")
USE_GROUP = re.compile(r"\buse\s+crate::\{([^;]*)\};", re.S)


def module_of(src: Path, f: Path, per_file: bool) -> str:
    rel = f.relative_to(src)
    if per_file:
        return str(rel)
    return rel.parts[0].removesuffix(".rs") if len(rel.parts) > 1 else rel.stem


def targets(src: Path, text: str, per_file: bool) -> list[tuple[str, int]]:
    """(target, line) for every crate path in the text; nested `use crate::{a, b::c}` groups included."""
    found = []
    for m in PATH.finditer(text):
        found.append((m.group(1), text.count("\n", 0, m.start()) + 1))
    for m in USE_GROUP.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        for part in re.split(r",(?![^{]*\})", m.group(1)):
            head = part.strip().split("::")[0].strip("{} \n")
            if head and head not in ("self",):
                found.append((head, line))
    out = []
    for path, line in found:
        parts = path.split("::")
        if per_file:
            # the longest prefix that is a file or folder of src
            best = None
            for i in range(len(parts), 0, -1):
                cand = src.joinpath(*parts[:i])
                for f in (cand.with_suffix(".rs"), cand / "mod.rs"):
                    if f.exists():
                        best = str(f.relative_to(src))
                        break
                if best:
                    break
            if best:
                out.append((best, line))
        else:
            head = parts[0]
            if (src / f"{head}.rs").exists() or (src / head).is_dir():
                out.append((head, line))
    return out


def sccs(graph: dict[str, set[str]]) -> list[list[str]]:
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def map_order(src: Path) -> list[str]:
    """Top-level modules in the order lib.rs's module map first names them."""
    order = []
    for line in (src / "lib.rs").read_text().splitlines():
        if not line.startswith("//!"):
            continue
        for name in re.findall(r"\[`([a-z_][a-z0-9_]*)`\]", line):
            if name not in order and ((src / f"{name}.rs").exists() or (src / name).is_dir()):
                order.append(name)
    return order


def doc_order(src: Path) -> list[str] | None:
    """The modules in docs/architecture.md's table of layers, in its order (None: no such doc)."""
    doc = src.parent / "docs" / "architecture.md"
    if not doc.exists():
        return None
    order = []
    for line in doc.read_text().splitlines():
        m = re.match(r"^\|\s*[^|]+\|\s*([a-z_, ]+?)\s*\|$", line)
        if m:
            order += [n.strip() for n in m.group(1).split(",") if n.strip()]
    return order


def upward_uses(src: Path, graph, why) -> int:
    order = map_order(src)
    documented = doc_order(src)
    if documented is not None:
        documented = [m for m in documented if m != "main"]
        if documented != order:
            print(f"docs/architecture.md's layers {documented} differ from lib.rs's map {order}")
            return 1
    rank = {m: i for i, m in enumerate(order)}
    bad = 0
    for a in sorted(graph):
        if a in ("lib", "main"):
            continue
        if a not in rank:
            print(f"lib.rs's module map does not name {a}")
            bad += 1
            continue
        for b in sorted(graph[a]):
            if rank.get(b, -1) > rank[a]:
                print(f"{a} uses {b}, which lib.rs's map lists after it: {', '.join(why[(a, b)][:4])}")
                bad += 1
    return bad


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    per_file = "--files" in sys.argv
    src = Path(args[0] if args else "src")
    graph: dict[str, set[str]] = defaultdict(set)
    why: dict[tuple[str, str], list[str]] = defaultdict(list)
    for f in sorted(src.rglob("*.rs")):
        a = module_of(src, f, per_file)
        graph.setdefault(a, set())
        for b, line in targets(src, f.read_text(errors="replace"), per_file):
            if b != a:
                graph[a].add(b)
                why[(a, b)].append(f"{f.relative_to(src.parent)}:{line}")
    if "--order" in sys.argv and upward_uses(src, graph, why):
        return 1
    comps = sccs(graph)
    cycles = [c for c in comps if len(c) > 1]
    print("layers, lowest first (each uses only what stands before it, where no cycle intervenes):")
    for c in comps:
        print("  " + " + ".join(c))
    if not cycles:
        print("no cycles")
        return 0
    for c in cycles:
        members = set(c)
        print(f"\ncycle of {len(c)}: {', '.join(c)}")
        for a in c:
            for b in sorted(graph[a] & members):
                sites = why[(a, b)]
                print(f"  {a} -> {b}: {', '.join(sites[:4])}{' …' if len(sites) > 4 else ''} ({len(sites)})")
    print(f"\n{len(cycles)} cycle(s) among {sum(len(c) for c in cycles)} {'files' if per_file else 'modules'}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
