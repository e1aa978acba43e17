"""CPython workload: many pure-Python objects, held and revisited.

Parses the standard library's own sources (in a fixed order, again and again
until SOURCE_MB megabytes have been parsed, so every pass makes new objects),
keeps every tree, then walks all of them in an order drawn from SEED and
prints a digest of what it saw. The trees are small objects in CPython's own
allocator: the memory a Python program of this kind actually has.

Usage: python3 python_ast.py SOURCE_MB SEED
"""

from __future__ import annotations

import ast
import hashlib
import os
import random
import sys
import sysconfig


def stdlib_sources() -> list[str]:
    """Every .py file of the standard library, sorted so the order is fixed."""
    root = sysconfig.get_paths()["stdlib"]
    files = []
    for directory, subdirs, names in os.walk(root):
        # site-packages differs from one machine to the next; the stdlib does not.
        subdirs[:] = sorted(d for d in subdirs if d not in ("site-packages", "dist-packages"))
        files.extend(os.path.join(directory, n) for n in sorted(names) if n.endswith(".py"))
    return files


def main() -> None:
    target = float(sys.argv[1]) * 1e6
    seed = int(sys.argv[2])
    files = stdlib_sources()
    trees: list[ast.AST] = []
    parsed = 0
    while parsed < target:
        for path in files:
            with open(path, "rb") as f:
                source = f.read()
            try:
                trees.append(ast.parse(source))
            except (SyntaxError, ValueError):
                # A few test files are broken on purpose; they fail the same way every time.
                continue
            parsed += len(source)
            if parsed >= target:
                break
    order = list(range(len(trees)))
    random.Random(seed).shuffle(order)
    digest = hashlib.sha256()
    nodes = 0
    for i in order:
        for node in ast.walk(trees[i]):
            nodes += 1
            digest.update(type(node).__name__.encode())
            digest.update(str(getattr(node, "lineno", -1)).encode())
    print(f"trees {len(trees)} nodes {nodes} source_bytes {parsed}")
    print(f"digest {digest.hexdigest()}")


if __name__ == "__main__":
    main()
