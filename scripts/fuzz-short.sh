#!/usr/bin/env bash
# A short pass of every cargo-fuzz target in fuzz/ (the codec's decoders and
# its round trip), as CI runs it: a crash, a hang or a leak fails the pass.
#
# cargo-fuzz builds with sanitizers, which only the nightly toolchain has:
# without nightly the pass is skipped, and says so. cargo-fuzz is installed
# when missing. FUZZ_SECONDS sets each target's time (default 20); for a long
# hunt run one target directly, e.g. `cargo +nightly fuzz run decode_zstd`.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${FUZZ_SECONDS:-20}"

if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  echo "fuzz pass skipped: no nightly Rust toolchain here (cargo-fuzz needs nightly's -Zsanitizer);" \
    "install one with 'rustup toolchain install nightly' to run it"
  exit 0
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

# The cc crate builds liblz4 and zstd with -fsanitize=address when rustc has
# it. Clang can also give libFuzzer coverage of that C code, without which the
# fuzzer is blind inside the decoders. GCC cannot, and its use-after-scope
# check misfires on zstd's compressor (zstd-sys builds it with
# -fmerge-all-constants, which moves a local table into static memory).
if command -v clang >/dev/null 2>&1; then
  export CC=clang CFLAGS="-fsanitize=fuzzer-no-link"
  echo "fuzz pass: liblz4 and zstd built with clang, coverage-guided and address-checked"
else
  export CFLAGS="-fno-sanitize-address-use-after-scope"
  echo "fuzz pass: no clang, so liblz4 and zstd are address-checked but give the fuzzer no coverage"
fi

# CI works in a fresh clone each run: keep the fuzz build (liblz4, zstd and
# libFuzzer with sanitizers take minutes) in one place on the machine.
target_dir=()
if [ -n "${CI:-}" ]; then
  target_dir=(--target-dir "${XDG_CACHE_HOME:-$HOME/.cache}/zpage-fuzz-target")
fi

cargo +nightly fuzz build "${target_dir[@]}"
passed=0
failed=()
for target in $(cargo +nightly fuzz list); do
  log="$(mktemp)"
  if cargo +nightly fuzz run "${target_dir[@]}" "$target" -- -max_total_time="$seconds" -timeout=10 \
    -print_final_stats=1 >"$log" 2>&1; then
    passed=$((passed + 1))
    echo "fuzz $target: ${seconds}s, $(sed -n 's/^stat::number_of_executed_units: *//p' "$log") executions, no crash"
  else
    failed+=("$target")
    tail -n 60 "$log"
    echo "fuzz $target: FAILED (the input is under fuzz/artifacts/$target/)"
  fi
  rm -f "$log"
done
echo "fuzz: $passed passed, ${#failed[@]} failed"
[ ${#failed[@]} -eq 0 ]
