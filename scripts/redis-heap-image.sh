#!/usr/bin/env bash
# Captures a second real program's memory image for `zpage bench --image`: a
# redis-server (Debian's) holding a web application's kind of data (session
# hashes, JSON documents, log lines, counters in sorted sets), loaded through
# redis-cli --pipe.
#   scripts/redis-heap-image.sh OUT.img [KEYS]   (default 9,600,000 keys, ~2 GiB)
set -euo pipefail
out=${1:?usage: $0 OUT.img [KEYS]}
keys=${2:-9600000}
zpage=${ZPAGE:-target/release/zpage}
[ -x "$zpage" ] || cargo build --release -q -p zpage-cli
command -v redis-server >/dev/null || { echo "redis-server is missing: apt-get install redis-server" >&2; exit 1; }
dir=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
redis-server --port "$port" --dir "$dir" --save "" --appendonly no --daemonize no \
    --maxmemory 0 --protected-mode yes --bind 127.0.0.1 >"$dir/redis.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
python3 - "$keys" <<'PY' | redis-cli -p "$port" --pipe >/dev/null
import json, random, sys
n = int(sys.argv[1])
rng = random.Random(11)
words = ["alpha", "beta", "gamma", "delta", "error", "warning", "user", "order",
         "payment", "session", "timeout", "cache", "request", "response", "shipped",
         "checkout", "login", "logout", "cart", "search", "profile", "invoice"]
out = sys.stdout.buffer
def cmd(*args):
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
    out.write(b"".join(parts))
for i in range(n):
    kind = i % 4
    if kind == 0:
        cmd("HSET", "session:%d" % i, "user", "user%06d" % rng.randrange(300000),
            "ip", "10.%d.%d.%d" % (rng.randrange(256), rng.randrange(256), rng.randrange(256)),
            "agent", rng.choice(["Mozilla/5.0 (X11; Linux x86_64)", "Mozilla/5.0 (Macintosh)",
                                 "curl/8.5.0", "okhttp/4.12"]),
            "created", 1700000000 + i, "cart", rng.randrange(20))
    elif kind == 1:
        cmd("SET", "doc:%d" % i, json.dumps({
            "id": i, "title": " ".join(rng.choice(words) for _ in range(rng.randrange(3, 9))),
            "tags": rng.sample(words, rng.randrange(1, 6)),
            "price": round(rng.uniform(1, 500), 2), "stock": rng.randrange(1000),
            "description": " ".join(rng.choice(words) for _ in range(rng.randrange(20, 80)))}))
    elif kind == 2:
        cmd("RPUSH", "log:%d" % (i % 5000), "%d %s %s %s took %dms" % (
            1700000000 + i, rng.choice(["INFO", "WARN", "ERROR"]), rng.choice(words),
            "/api/%s/%d" % (rng.choice(words), rng.randrange(10000)), rng.randrange(2000)))
    else:
        cmd("ZADD", "scores:%d" % (i % 20000), rng.randrange(100000), "user%06d" % rng.randrange(300000))
PY
echo "redis-server $pid: $(redis-cli -p "$port" info memory | grep used_memory_human)"
"$zpage" analyze --pid "$pid" --save-image "$out"
ls -l "$out"
