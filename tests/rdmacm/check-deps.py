#!/usr/bin/env python3
"""For each .c of a folder: which other file's functions it calls; fails
(exit 1) if two files call each other, directly or through others.

    tests/rdmacm/check-deps.py verbs-provider/rdmacm

A function belongs to the file that defines it without 'static'; a call is
its name followed by '(' outside comments. Crude, but enough to keep
librdmacm's files in the order cm_internal.h lists them.
"""
import re, sys, pathlib
d = pathlib.Path(sys.argv[1])
files = sorted(d.glob('*.c'))
defs = {}
for f in files:
    src = f.read_text()
    for m in re.finditer(r'^(?!static)[A-Za-z_][\w \*]*?\b(\w+)\s*\([^;{]*\)\s*\{', src, re.M):
        defs.setdefault(m.group(1), f.name)
    # wcm global variable counts as "library"
edges = {}
for f in files:
    src = re.sub(r'/\*.*?\*/', '', f.read_text(), flags=re.S)
    for name, owner in defs.items():
        if owner != f.name and re.search(r'\b%s\s*\(' % re.escape(name), src):
            edges.setdefault(f.name, {}).setdefault(owner, []).append(name)
for f in files:
    for o, ns in sorted(edges.get(f.name, {}).items()):
        print(f"{f.name} -> {o}: {', '.join(sorted(ns))}")
# cycles
import itertools
g = {f.name: set(edges.get(f.name, {})) for f in files}
def reach(a):
    seen, st = set(), [a]
    while st:
        x = st.pop()
        for y in g.get(x, ()):
            if y not in seen: seen.add(y); st.append(y)
    return seen
cyc = sorted({tuple(sorted((a, b))) for a in g for b in g[a] if a in reach(b)})
for a, b in cyc: print(f"CYCLE: {a} <-> {b}")
sys.exit(1 if cyc else 0)
