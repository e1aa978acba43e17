"""What the hook on Python's raw memory domain costs code outside any block.

    python raw_hook_overhead.py [--rounds 7] [--json]

Times an allocation-heavy pure-Python loop (dicts, strings and lists, many
of them larger than 512 bytes, so they take CPython's raw domain) in two
fresh interpreters, each of which entered and left a ``zpage.budget(...)``
block first: one with ``python_objects=False``, one with the default, which
installs the hook for the rest of the process. Each interpreter reports its best CPU time of five runs;
the rounds alternate between the two, and the figure is the median of the
rounds' ratios, so a busy machine slows both alike.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import sys, time
import zpage
with zpage.budget("64M", python_objects=sys.argv[1] == "hooked"):
    pass

def work():
    kept = []
    for i in range(20000):
        d = {j: j for j in range(i % 64)}
        s = "x" * (i % 3000)
        l = list(range(i % 300))
        kept.append((d, s, l))
        if len(kept) > 500:
            kept.clear()

work()
best = float("inf")
for _ in range(5):
    start = time.process_time()
    work()
    best = min(best, time.process_time() - start)
print(best)
"""


def run(mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], check=True, capture_output=True, text=True)
    return float(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    plain, hooked = [], []
    for _ in range(args.rounds):
        plain.append(run("plain"))
        hooked.append(run("hooked"))
    ratios = sorted(h / p for p, h in zip(plain, hooked))
    result = {
        "plain_seconds": min(plain),
        "hooked_seconds": min(hooked),
        "overhead_percent": 100.0 * (ratios[len(ratios) // 2] - 1.0),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"plain {result['plain_seconds']:.4f} s, hook installed {result['hooked_seconds']:.4f} s: "
            f"median overhead {result['overhead_percent']:+.1f}%"
        )


if __name__ == "__main__":
    main()
