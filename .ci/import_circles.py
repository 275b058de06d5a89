#!/usr/bin/env python3
"""List the `crate::…` edges between the modules of src/, report every circle, and hold every
top-level module to its floor.

Two views: top-level modules (`config`, `api`, `dispatcher`, …) and files (each `.rs` file is
one module). A circle is a strongly connected component of more than one module. In-file test
modules (`#[cfg(test)] mod tests { … }` to the end of the file) are left out by default: a test
reaching into a sibling does not make the code depend on it; `--with-tests` counts them.

The floors (`FLOORS`): what each top-level module may import. An import of anything else runs
up a floor (or into a store from below the modules that hold one); each is printed with the
file it is in. A module missing from the table is one too: give it a floor.

Usage: .ci/import_circles.py [--with-tests] [--edges] [--files]
Exit status 1 when a top-level circle or a floor violation remains (or, with --files, a
file-level circle).
"""

import os
import re
import sys

# What each top-level module of src/ may import (`crate::…`), floor by floor from the ground up,
# as src/lib.rs says in words. Anything else runs up a floor, or reaches the store from below the
# modules that hold one.
_BASICS = {"clock", "ids", "model", "setting"}
_MECHANISMS = {"admission", "delivery", "destinations", "egress", "metrics", "traces"}
_UNDER_ORCHESTRATION = (
    _BASICS
    | {"fairness", "pem", "retry", "shutdown", "signing", "sizing", "stats", "store"}
    | _MECHANISMS
)
FLOORS = {
    # 1. The ground: leaves.
    "clock": set(),
    "ids": {"clock"},
    "setting": set(),
    "pem": set(),
    "web": set(),
    "shutdown": set(),
    # 2. The nouns.
    "model": {"clock", "ids"},
    # 3. Pure arithmetic: no I/O module.
    "fairness": {"model"},
    "retry": {"setting"},
    "signing": set(),
    "stats": {"clock", "model", "setting"},
    "sizing": {"clock", "model", "setting", "stats"},
    # 4. The store keeps the nouns; its claim applies the fair shares.
    "store": {"clock", "fairness", "ids", "model"},
    # 5. The mechanisms, the listeners, `sluice receive`: none of them holds a store.
    "egress": {"pem", "setting"},
    "admission": _BASICS | {"shutdown", "sizing", "stats"},
    "delivery": _BASICS | {"admission", "egress", "pem", "retry", "signing", "stats"},
    "destinations": _BASICS | {"delivery", "egress", "signing"},
    "metrics": _BASICS | {"delivery", "stats"},
    "traces": {"model", "setting"},
    "listener": _BASICS | {"metrics", "web"},
    "demo_receiver": {"clock", "signing"},
    # 6. Orchestration and the edges, the only modules that hold a store; start-up on top.
    "operational_webhooks": _BASICS | {"store"},
    "dispatcher": _UNDER_ORCHESTRATION | {"operational_webhooks"},
    "plan": _UNDER_ORCHESTRATION | {"dispatcher"},
    "api": _UNDER_ORCHESTRATION | {"dispatcher", "operational_webhooks", "web"},
    "console": _UNDER_ORCHESTRATION | {"api", "dispatcher", "plan", "web"},
    "ingest": _UNDER_ORCHESTRATION | {"api", "dispatcher", "web"},
    "config": _UNDER_ORCHESTRATION | {"console", "dispatcher", "ingest", "listener"},
    "serve": _UNDER_ORCHESTRATION
    | {
        "api",
        "config",
        "console",
        "dispatcher",
        "ingest",
        "listener",
        "operational_webhooks",
        "web",
    },
    "cli": _UNDER_ORCHESTRATION | {"config", "demo_receiver", "plan", "serve"},
}

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
ROOT = os.path.join(REPO, "src")
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def module_of(path):
    rel = os.path.relpath(path, ROOT)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return tuple(rel)


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def strip_tests(text):
    m = re.search(r"#\[cfg\(test\)\]\s*(pub(\([a-z]+\))?\s+)?mod\s+" + IDENT + r"\s*\{", text)
    return text[: m.start()] if m else text


def paths_after(text, prefix):
    """Every path written after `prefix::`, braces expanded one level deep at a time."""
    out = []
    for m in re.finditer(r"\b" + prefix + r"::", text):
        out.extend(expand(text, m.end()))
    return out


def expand(text, i):
    if i < len(text) and text[i] == "{":
        depth, j = 0, i
        while j < len(text):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                break
            j += 1
        inner = text[i + 1 : j]
        parts, depth, start = [], 0, 0
        for k, c in enumerate(inner):
            depth += {"{": 1, "}": -1}.get(c, 0)
            if c == "," and depth == 0:
                parts.append(inner[start:k])
                start = k + 1
        parts.append(inner[start:])
        result = []
        for p in parts:
            p = p.strip()
            if not p:
                continue
            head = re.match(r"(" + IDENT + r"(?:::" + IDENT + r")*)(::\{)?", p)
            if head and head.group(2):
                for tail in expand(p, head.end() - 1):
                    result.append(head.group(1) + "::" + tail)
            elif head:
                result.append(head.group(1))
        return result
    m = re.match(IDENT + r"(?:::" + IDENT + r")*(::\{)?", text[i:])
    if not m:
        return []
    if m.group(1):
        base = m.group(0)[: -len("::{")]
        return [base + "::" + t for t in expand(text, i + m.end() - 1)]
    return [m.group(0)]


def main():
    with_tests = "--with-tests" in sys.argv
    files = {}
    for dirpath, _, names in os.walk(ROOT):
        for n in names:
            if n.endswith(".rs"):
                p = os.path.join(dirpath, n)
                files[module_of(p)] = p
    modules = set(files)

    def resolve(segments):
        """The deepest module file a path names."""
        for k in range(len(segments), 0, -1):
            if tuple(segments[:k]) in modules:
                return tuple(segments[:k])
        return None

    file_edges = {}
    for mod, path in files.items():
        if mod == ("main",) or mod == ():
            continue
        text = strip_comments(open(path, encoding="utf-8").read())
        if not with_tests:
            text = strip_tests(text)
        targets = set()
        for p in paths_after(text, "crate"):
            t = resolve(p.split("::"))
            if t:
                targets.add(t)
        # `super::x` (and `super::super::x`) relative to the file's module.
        for m in re.finditer(r"(?<!::)\b((?:super::)+)", text):
            up = m.group(1).count("super::")
            parent = mod[: len(mod) - up]
            tails = expand(text, m.end()) or [""]
            for p in tails:
                t = resolve(list(parent) + [s for s in p.split("::") if s])
                if t:
                    targets.add(t)
        targets.discard(mod)
        file_edges[mod] = targets

    def tarjan(graph):
        index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

        def visit(v):
            index[v] = low[v] = counter[0]
            counter[0] += 1
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
                if len(comp) > 1:
                    comps.append(sorted(comp))

        sys.setrecursionlimit(10000)
        for v in sorted(graph):
            if v not in index:
                visit(v)
        return comps

    top = {}
    for a, ts in file_edges.items():
        for b in ts:
            if a[0] != b[0]:
                top.setdefault(a[0], set()).add(b[0])
    if "--edges" in sys.argv:
        for a in sorted(top):
            print(f"{a} -> {', '.join(sorted(top[a]))}")
    failed = False
    top_circles = tarjan(top)
    print(f"top-level circles: {len(top_circles)}")
    for comp in top_circles:
        failed = True
        members = set(comp)
        print("  " + " <-> ".join(comp))
        for a, ts in sorted(file_edges.items()):
            for b in sorted(ts):
                if a[0] in members and b[0] in members and a[0] != b[0]:
                    print(f"    {'::'.join(a)} -> {'::'.join(b)}")
    violations = []
    for a, ts in sorted(file_edges.items()):
        allowed = FLOORS.get(a[0])
        for b in sorted(ts):
            if a[0] != b[0] and allowed is not None and b[0] not in allowed:
                violations.append((a, b))
    no_floor = sorted({m[0] for m in file_edges} - set(FLOORS))
    print(f"floor violations: {len(violations) + len(no_floor)}")
    for m in no_floor:
        failed = True
        print(f"  {m}: no floor (add it to FLOORS in .ci/import_circles.py)")
    for a, b in violations:
        failed = True
        print(f"  {a[0]} -> {b[0]}: {os.path.relpath(files[a], REPO)} imports {'::'.join(b)}")
    file_circles = tarjan(file_edges)
    print(f"file-level circles: {len(file_circles)}")
    for comp in file_circles:
        print("  " + " <-> ".join("::".join(m) for m in comp))
        members = set(comp)
        for a in sorted(members):
            for b in sorted(file_edges[a] & members):
                print(f"    {'::'.join(a)} -> {'::'.join(b)}")
        if "--files" in sys.argv:
            failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
