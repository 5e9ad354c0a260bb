#!/usr/bin/env python3
"""The code's shape, checked in the test command's gates (issue 37):

1. no Rust file in src/ or crates/*/src is over 700 lines, not counting the tests beside the
   code (files named tests*.rs, and everything from a file's `#[cfg(test)]` on);
2. no two modules of a crate import each other, directly or through others: the graph of
   `crate::`, `super::` and `self::` paths between a crate's files has no cycle (a file's own
   parent module, the crate root or a `mod.rs`, does not count: `super::*` is how a child
   module reads its parent).

Prints each problem and exits 1 when there is one. Usage: scripts/check_structure.py [ROOT]
"""
import os
import re
import sys

LIMIT = 700


def crates(root):
    yield os.path.join(root, "src")
    base = os.path.join(root, "crates")
    for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        if os.path.isdir(os.path.join(base, name, "src")):
            yield os.path.join(base, name, "src")


def modules(src):
    """{module path tuple: file}; a.rs and a/mod.rs are module ('a',); lib.rs is ()."""
    out = {}
    for d, _, files in os.walk(src):
        for f in files:
            if f.endswith(".rs"):
                rel = os.path.relpath(os.path.join(d, f), src)[:-3].split(os.sep)
                if rel[-1] in ("mod", "lib", "main"):
                    rel = rel[:-1]
                out[tuple(rel)] = os.path.join(d, f)
    return out


def code(path):
    """The file without comments and without its tests."""
    s = open(path, encoding="utf-8").read()
    if "#[cfg(test)]" in s:
        s = s[: s.index("#[cfg(test)]")]
    return re.sub(r"//[^\n]*", "", s)


def edges(mods):
    def resolve(path):
        for i in range(len(path), 0, -1):
            if tuple(path[:i]) in mods:
                return tuple(path[:i])
        return None

    out = {m: set() for m in mods}
    for mod, path in mods.items():
        if mod and mod[-1].startswith("tests"):
            continue
        s = code(path)
        refs = [m.group(1).split("::") for m in re.finditer(r"\b((?:crate|super|self)(?:::\w+)+)", s)]
        for m in re.finditer(r"\buse\s+((?:crate|super|self)(?:::\w+)*)::\{([^}]*)\}", s):
            refs += [m.group(1).split("::") + [n] for n in re.findall(r"\b(\w+)\b", m.group(2))]
        for parts in refs:
            if parts[0] == "crate":
                base = []
            else:  # self:: and super:: are relative to the module itself
                base = list(mod)
            rest = parts[1:] if parts[0] == "self" else parts
            while rest and rest[0] == "super":
                base, rest = base[:-1], rest[1:]
            if parts[0] == "crate":
                rest = parts[1:]
            t = resolve(base + rest)
            if t is not None and t != mod and t != mod[: len(t)]:
                out[mod].add(t)
    return out


def cycles(graph):
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

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
                found.append(comp)

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def main(root):
    problems = 0
    files = 0
    for src in crates(root):
        mods = modules(src)
        for mod, path in sorted(mods.items()):
            if mod and mod[-1].startswith("tests"):
                continue
            files += 1
            s = open(path, encoding="utf-8").read()
            if "#[cfg(test)]" in s:
                s = s[: s.index("#[cfg(test)]")]
            n = s.count("\n")
            if n > LIMIT:
                print(f"{os.path.relpath(path, root)}: {n} lines (at most {LIMIT}, tests beside the code not counted)")
                problems += 1
        g = edges(mods)
        for comp in cycles(g):
            names = sorted("::".join(m) or "crate root" for m in comp)
            links = [f"{'::'.join(a)} -> {'::'.join(b)}" for a in comp for b in sorted(g[a]) if b in comp]
            print(f"{os.path.relpath(src, root)}: modules that import each other: {', '.join(names)} ({'; '.join(links)})")
            problems += 1
    print(f"{files} files checked: {problems} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")))
