#!/usr/bin/env bash
# Captures a third real program's memory image for `zpage analyze` and
# `zpage bench --image`: a Node.js process holding a service's kind of data
# (a Map of parsed records, their JSON text, a log buffer), its resident
# anonymous pages read from /proc/PID/maps, pagemap and mem.
#   scripts/node-heap-image.sh OUT.img [RECORDS]   (default 1,500,000 records, ~1.3 GiB)
set -euo pipefail
out=${1:?usage: $0 OUT.img [RECORDS]}
records=${2:-1500000}
zpage=${ZPAGE:-target/release/zpage}
[ -x "$zpage" ] || cargo build --release -q -p zpage-cli
command -v node >/dev/null || { echo "node is missing: apt-get install nodejs" >&2; exit 1; }
ready=$(mktemp -u)
node --max-old-space-size=8192 - "$records" "$ready" <<'JS' &
const fs = require("fs");
const [records, ready] = [Number(process.argv[2]), process.argv[3]];
let seed = 7;
const random = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const pick = (list) => list[Math.floor(random() * list.length)];
const words = ["alpha", "beta", "gamma", "delta", "error", "warning", "user", "order",
  "payment", "session", "timeout", "cache", "request", "response", "shipped"];
const byId = new Map();
const texts = [];
for (let i = 0; i < records; i++) {
  const record = {
    id: i,
    user: "user" + String(Math.floor(random() * 200000)).padStart(6, "0"),
    email: `u${Math.floor(random() * 1e6)}@example.${pick(["com", "org", "net"])}`,
    ts: 1700000000 + i * 3 + Math.floor(random() * 3),
    amount: Math.round(random() * 100000) / 100,
    tags: Array.from({ length: 1 + Math.floor(random() * 4) }, () => pick(words)),
    message: Array.from({ length: 4 + Math.floor(random() * 12) }, () => pick(words)).join(" "),
    nested: { lat: random() * 180 - 90, lon: random() * 360 - 180, ok: random() < 0.9 },
  };
  byId.set("order:" + i, record);
  if (i % 3 === 0) texts.push(JSON.stringify(record));
}
const log = Buffer.alloc(64 << 20);
for (let at = 0, i = 0; at < log.length; i++) {
  at += log.write(`${1700000000 + i} ${pick(["INFO", "WARN", "ERROR"])} /api/${pick(words)}/${i % 10000} took ${Math.floor(random() * 2000)}ms\n`, at);
}
fs.writeFileSync(ready, "");
globalThis.keep = [byId, texts, log];
setInterval(() => {}, 1 << 30);
JS
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -f "$ready"' EXIT
while [ ! -e "$ready" ]; do
    kill -0 $pid 2>/dev/null || { echo "node exited early" >&2; exit 1; }
    sleep 1
done
"$zpage" analyze --pid "$pid" --save-image "$out"
ls -l "$out"
