#!/usr/bin/env bash
# Captures a real program's memory image for `zpage bench --image`: a Python
# process holding parsed JSON records (dicts, strings, floats, lists), the
# kind of heap the README's figures were measured on.
#   scripts/python-heap-image.sh OUT.img [RECORDS]   (default 1,350,000 records, ~2 GiB)
set -euo pipefail
out=${1:?usage: $0 OUT.img [RECORDS]}
records=${2:-1350000}
zpage=${ZPAGE:-target/release/zpage}
[ -x "$zpage" ] || cargo build --release -q -p zpage-cli
ready=$(mktemp -u)
python3 - "$records" "$ready" <<'PY' &
import json, random, sys, time
n, ready = int(sys.argv[1]), sys.argv[2]
rng = random.Random(7)
words = ["alpha", "beta", "gamma", "delta", "error", "warning", "user", "order",
         "payment", "session", "timeout", "cache", "request", "response", "shipped"]
records = []
for i in range(n):
    text = json.dumps({
        "id": i,
        "user": "user%06d" % rng.randrange(200000),
        "email": "u%d@example.%s" % (rng.randrange(10**6), rng.choice(["com", "org", "net"])),
        "ts": 1700000000 + i * 3 + rng.randrange(3),
        "amount": round(rng.uniform(0, 1000), 2),
        "tags": rng.sample(words, rng.randrange(1, 5)),
        "message": " ".join(rng.choice(words) for _ in range(rng.randrange(4, 16))),
        "nested": {"lat": rng.uniform(-90, 90), "lon": rng.uniform(-180, 180),
                   "ok": rng.random() < 0.9},
    })
    records.append(json.loads(text))
open(ready, "w").close()
time.sleep(3600)
PY
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -f "$ready"' EXIT
while [ ! -e "$ready" ]; do
    kill -0 $pid 2>/dev/null || { echo "python exited early" >&2; exit 1; }
    sleep 1
done
"$zpage" analyze --pid "$pid" --save-image "$out"
ls -l "$out"
