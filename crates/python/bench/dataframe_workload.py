"""A NumPy/pandas job for comparing memory: unconstrained, under
``zpage.budget``, or inside a memory cgroup.

    python dataframe_workload.py --rows 20000000 [--budget 400M] [--json]

The data are generated (deterministic, seed 7), shaped like a city's taxi
trip records: a pickup time (seconds, sorted), a zone, a distance in
hundredths of a mile and a fare in cents (integers, as such records store
them), a passenger count. The job adds derived columns, groups by zone and by hour,
sorts by fare, joins the zone totals back, and prints a SHA-256 of every
result, so runs can be compared byte for byte.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import resource
import sys
import time


def job(rows: int) -> str:
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(7)
    frame = pd.DataFrame(
        {
            "pickup_s": np.sort(rng.integers(0, 86400 * 30, rows, dtype=np.int64)),
            "zone": rng.integers(0, 265, rows, dtype=np.int32),
            "distance": (rng.gamma(2.0, 1.6, rows) * 100).astype(np.int32),
            "passengers": rng.integers(1, 7, rows, dtype=np.int8),
        }
    )
    frame["fare"] = (250 + frame["distance"] * 1.75 + rng.normal(0, 50, rows)).astype(np.int32)
    frame["hour"] = (frame["pickup_s"] // 3600 % 24).astype(np.int8)
    frame["per_mile"] = frame["fare"] / frame["distance"].clip(lower=0.1)
    digest = hashlib.sha256()
    by_zone = frame.groupby("zone").agg(
        trips=("fare", "size"), fare=("fare", "sum"), distance=("distance", "mean")
    )
    digest.update(by_zone.to_numpy().tobytes())
    by_hour = frame.groupby(["hour", "passengers"])["per_mile"].median()
    digest.update(by_hour.to_numpy().tobytes())
    top = frame.sort_values("fare", kind="stable").tail(1000)
    digest.update(top.to_numpy(dtype=np.float64).tobytes())
    joined = frame.merge(by_zone[["fare"]].rename(columns={"fare": "zone_fare"}), left_on="zone", right_index=True)
    share = (joined["fare"] / joined["zone_fare"]).to_numpy()
    digest.update(np.sort(share)[:: max(1, rows // 100000)].tobytes())
    return digest.hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--budget", help="run inside zpage.budget(SIZE)")
    parser.add_argument("--codec", default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    if args.budget:
        import zpage

        block = zpage.budget(args.budget, args.codec)
    else:
        block = contextlib.nullcontext()
    start = time.monotonic()
    with block as state:
        checksum = job(args.rows)
    seconds = time.monotonic() - start
    result = {
        "rows": args.rows,
        "budget": args.budget,
        "seconds": round(seconds, 2),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "sha256": checksum,
    }
    if state is not None:
        result["zpage"] = state.stats()
    print(json.dumps(result) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
