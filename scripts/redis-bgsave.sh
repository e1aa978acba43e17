#!/usr/bin/env bash
# redis-server under `zpage run` with a budget of a quarter of its data,
# beside a plain redis-server, once per transparent-huge-page mode:
#
#  - `zpage bench redis --connect` loads SIZE of text values (VALUE_SIZE
#    each), reads every one back while a first BGSAVE runs, then BGSAVEs
#    three more times in a row, each waited for; every RDB is loaded into a
#    plain redis-server, whose DEBUG DIGEST must equal the live server's;
#  - the zpage-run server's digest must equal the plain server's;
#  - SIGTERM (to `zpage run`, as a supervisor sends it) must end the server
#    within redis's own shutdown time (`shutdown-timeout`, 10 s), and
#    `zpage run` must print its summary.
#
# Prints, per THP mode, the load time, each BGSAVE's wall time and digest
# check, the server's own peak resident (VmHWM) and that of the server or
# any of its descendants (wait4's: a BGSAVE child's counts the pages it
# shares with the server), zpage's pool included, and the time from
# SIGTERM to exit. Exits 1 if a check fails.
#
#   scripts/redis-bgsave.sh [--size 1G] [--budget SIZE] [--value-size 2048]
#                           [--thp "madvise always" | --thp current]
#                           [--scratch-dir /var/tmp]
#
# --budget defaults to a quarter of --size. --thp sets
# /sys/kernel/mm/transparent_hugepage/enabled to each mode in turn (root)
# and puts the original value back on exit; `current` leaves it alone.
# ZPAGE names the zpage binary (default: the release build, made or
# brought up to date first, in $CARGO_TARGET_DIR or target); the preload
# library is found as `zpage run` finds it (ZPAGE_PRELOAD, or next to the
# binary). .ci/run runs it with --size 32M.
set -euo pipefail
cd "$(dirname "$0")/.."

size=1G
budget=
value_size=2048
thp_modes="madvise always"
scratch=/var/tmp
shutdown_limit=10
while [ $# -gt 0 ]; do
  case "$1" in
    --size) size=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --value-size) value_size=$2; shift 2 ;;
    --thp) thp_modes=$2; shift 2 ;;
    --scratch-dir) scratch=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

for tool in redis-server jq numfmt /usr/bin/time; do
  command -v "$tool" >/dev/null || { echo "$tool is missing (apt-get install redis-server jq coreutils time)" >&2; exit 2; }
done
if [ -z "${ZPAGE:-}" ]; then
  cargo build --release -q -p zpage-cli -p zpage-preload
fi
zpage=${ZPAGE:-${CARGO_TARGET_DIR:-target}/release/zpage}
size_bytes=$(numfmt --from=iec "$size")
[ -n "$budget" ] || budget=$((size_bytes / 4 / 1024))K

thp_file=/sys/kernel/mm/transparent_hugepage/enabled
thp_original=
if [ "$thp_modes" != current ]; then
  [ -w "$thp_file" ] || { echo "$thp_file is not writable (run as root, or --thp current)" >&2; exit 2; }
  thp_original=$(sed 's/.*\[\(.*\)\].*/\1/' "$thp_file")
fi

work=$(mktemp -d "$scratch/zpage-redis-bgsave.XXXXXX")
pids=()
bench_pid=
cleanup() {
  local pid n
  # The driver stops its own servers when asked to stop; those it started
  # are killed with it if it does not within ten seconds.
  if [ -n "$bench_pid" ] && kill -0 "$bench_pid" 2>/dev/null; then
    local checkers
    checkers=$(pgrep -P "$bench_pid" || true)
    kill -TERM "$bench_pid" 2>/dev/null || true
    for n in $(seq 200); do
      kill -0 "$bench_pid" 2>/dev/null || break
      sleep 0.05
    done
    for pid in $bench_pid $checkers; do
      kill -KILL "$pid" 2>/dev/null || true
    done
  fi
  # A server's BGSAVE child first, then the server and its wrapper.
  for pid in "${pids[@]}"; do
    pkill -KILL -P "$pid" -x redis-rdb-bgsave 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    kill -KILL "$pid" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  if [ -n "$thp_original" ]; then
    echo "$thp_original" >"$thp_file"
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

failed=0
fail() {
  echo "FAILED: $*" >&2
  failed=1
}

# The redis-server child of process $1, once it runs.
server_of() {
  local n pid
  for n in $(seq 200); do
    if pid=$(pgrep -P "$1" -x redis-server); then
      echo "$pid"
      return
    fi
    sleep 0.05
  done
  return 1
}

# run KIND: starts a server (KIND plain, or zpage: under zpage run), has
# `zpage bench redis` drive it, sends SIGTERM, and writes the figures to
# $work/KIND.json.
run() {
  local kind=$1 dir="$work/$1"
  mkdir -p "$dir"
  local server=(redis-server --port 0 --unixsocket "$dir/redis.sock" --unixsocketperm 700
    --dir "$dir" --save "" --appendonly no --enable-debug-command local)
  local wrapper_pid server_pid
  if [ "$kind" = zpage ]; then
    "$zpage" run --budget "$budget" --summary-json "$dir/summary.json" -- "${server[@]}" \
      >"$dir/stdout" 2>"$dir/stderr" &
  else
    /usr/bin/time -f %M -o "$dir/maxrss-kib" "${server[@]}" >"$dir/stdout" 2>"$dir/stderr" &
  fi
  wrapper_pid=$!
  pids+=("$wrapper_pid")
  server_pid=$(server_of "$wrapper_pid") || { fail "$kind: redis-server did not start: $(tail -5 "$dir/stderr")"; return; }
  pids+=("$server_pid")
  for _ in $(seq 200); do
    [ -S "$dir/redis.sock" ] && break
    sleep 0.05
  done
  # The first BGSAVE runs while every value is read back; the three after
  # it run one after another. The driver runs in the background, so that
  # SIGINT or SIGTERM to this script is handled at once (bash runs traps
  # only between foreground commands).
  "$zpage" bench redis --connect "unix://$dir/redis.sock" --size "$size" \
    --value-size "$value_size" --bgsaves 4 --gets 1000 --scratch-dir "$dir" \
    --label "$kind" --json >"$dir/bench.json" 2>"$dir/bench.stderr" &
  bench_pid=$!
  if ! wait "$bench_pid"; then
    fail "$kind: zpage bench redis failed: $(tail -5 "$dir/bench.stderr")"
  fi
  bench_pid=
  # The server's own peak resident (the pool included, under zpage).
  local hwm
  hwm=$(awk '/^VmHWM:/ { print $2 * 1024 }' "/proc/$server_pid/status" 2>/dev/null || echo 0)
  local sent ended status=0
  sent=$(date +%s.%N)
  if [ "$kind" = zpage ]; then
    kill -TERM "$wrapper_pid" 2>/dev/null || true
  else
    kill -TERM "$server_pid" 2>/dev/null || true
  fi
  # The wrapper ends when the server has.
  local waited=0
  while kill -0 "$wrapper_pid" 2>/dev/null; do
    if [ "$waited" -ge $((shutdown_limit * 20 + 20)) ]; then
      fail "$kind: still running $((shutdown_limit + 1)) s after SIGTERM"
      kill -KILL "$server_pid" 2>/dev/null || true
      break
    fi
    sleep 0.05
    waited=$((waited + 1))
  done
  wait "$wrapper_pid" || status=$?
  ended=$(date +%s.%N)
  pids=()
  local shutdown
  shutdown=$(awk -v a="$sent" -v b="$ended" 'BEGIN { printf "%.3f", b - a }')
  local peak summary=false evictions=0
  if [ "$kind" = zpage ]; then
    peak=$(jq -r '.peak_resident_bytes // 0' "$dir/summary.json" 2>/dev/null || echo 0)
    evictions=$(jq -r '.evictions // 0' "$dir/summary.json" 2>/dev/null || echo 0)
    grep -q "^	Exit status: " "$dir/stderr" && summary=true
    [ "$evictions" -gt 0 ] || fail "zpage: nothing was evicted: the run proves nothing"
  else
    peak=$(($(tail -1 "$dir/maxrss-kib") * 1024))
  fi
  jq -n --arg kind "$kind" --argjson status "$status" --arg shutdown "$shutdown" \
    --argjson peak "$peak" --argjson hwm "${hwm:-0}" --argjson summary "$summary" \
    --argjson evictions "$evictions" \
    --slurpfile bench <(cat "$dir/bench.json" 2>/dev/null || echo '{}') \
    '{kind: $kind, exit_status: $status, shutdown_seconds: ($shutdown | tonumber),
      peak_bytes: $peak, server_peak_bytes: $hwm, summary_printed: $summary,
      evictions: $evictions,
      bench: $bench[0]}' >"$work/$kind.json"
  [ "$status" = 0 ] || fail "$kind: exit status $status after SIGTERM ($(tail -3 "$dir/stderr"))"
  if [ "$kind" = zpage ] && [ "$summary" != true ]; then
    fail "zpage: no summary after SIGTERM: $(tail -5 "$dir/stderr")"
  fi
  awk -v s="$shutdown" -v l="$shutdown_limit" 'BEGIN { exit !(s <= l) }' ||
    fail "$kind: $shutdown s from SIGTERM to exit, over redis's shutdown-timeout ($shutdown_limit s)"
  rm -rf "$dir"
}

report() {
  local thp=$1 p="$work/plain.json" z="$work/zpage.json"
  local mib='(. / 1048576 | floor | tostring) + " MiB"'
  echo "THP $thp: $(jq -r '.bench.keys' "$z") keys, $(jq -r ".bench.value_bytes | $mib" "$z") of values; zpage run --budget $budget"
  printf '  %-34s %14s %14s\n' "" plain "zpage run"
  row() { printf '  %-34s %14s %14s\n' "$1" "$(jq -r "$2" "$p")" "$(jq -r "$2" "$z")"; }
  row "load (s)" '.bench.load_seconds * 100 | round / 100'
  row "BGSAVE 1, during read-back (s)" '.bench.bgsave.seconds * 100 | round / 100'
  local n
  for n in 0 1 2; do
    row "BGSAVE $((n + 2)) (s)" ".bench.later_bgsaves[$n].seconds * 100 | round / 100"
  done
  local match='[.bench.bgsave] + .bench.later_bgsaves | map(if .loaded_digest == $d and .loaded_keys == $k then "yes" else "NO" end) | join(" ")'
  printf '  %-34s %14s %14s\n' "RDB digest = server's (1-4)" \
    "$(jq -r --arg d "$(jq -r .bench.digest "$p")" --argjson k "$(jq .bench.keys "$p")" "$match" "$p")" \
    "$(jq -r --arg d "$(jq -r .bench.digest "$z")" --argjson k "$(jq .bench.keys "$z")" "$match" "$z")"
  row "wrong values" '.bench.wrong_values'
  row "server's peak resident (VmHWM)" ".server_peak_bytes | $mib"
  row "peak resident, with descendants" ".peak_bytes | $mib"
  row "SIGTERM to exit (s)" '.shutdown_seconds * 1000 | round / 1000'
  row "pages evicted" 'if .kind == "plain" then "-" else .evictions end'
  row "summary printed" 'if .kind == "plain" then "-" elif .summary_printed then "yes" else "NO" end'
  local dp dz
  dp=$(jq -r .bench.digest "$p")
  dz=$(jq -r .bench.digest "$z")
  echo "  digest: plain $dp, zpage run $dz: $([ "$dp" = "$dz" ] && echo same || echo DIFFERENT)"
  [ "$dp" = "$dz" ] || fail "THP $thp: the zpage-run server's digest differs from the plain one's"
  for f in "$p" "$z"; do
    jq -e '.bench.wrong_values == 0 and .bench.verified_keys == .bench.keys
      and .bench.digest == .bench.digest_after_reads
      and ([.bench.bgsave] + .bench.later_bgsaves | length == 4
           and all(.loaded_digest == $d and .loaded_keys == $k))' \
      --arg d "$(jq -r .bench.digest "$f")" --argjson k "$(jq .bench.keys "$f")" "$f" >/dev/null ||
      fail "THP $thp: $(jq -r .kind "$f"): a value or an RDB's digest is wrong"
  done
}

for thp in $thp_modes; do
  if [ "$thp" != current ]; then
    echo "$thp" >"$thp_file"
  else
    thp=$(sed 's/.*\[\(.*\)\].*/\1/' "$thp_file")
  fi
  run plain
  run zpage
  if [ -s "$work/plain.json" ] && [ -s "$work/zpage.json" ]; then
    report "$thp"
  fi
  rm -f "$work/plain.json" "$work/zpage.json"
done
exit "$failed"
