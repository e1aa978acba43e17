#!/usr/bin/env bash
# Checks the README's promise on this machine, as a new user meets it:
#  1. the install line of README's "Install" section, run as written with a
#     home of its own (so ~/.local starts empty), gives a `zpage` whose
#     `zpage run` works from any directory, and README's first command
#     (`zpage analyze`) runs (the second, `cargo test --workspace`, is what
#     .ci/run runs anyway);
#  2. the Debian package built from the same release build installs with
#     `dpkg -i` (root only), puts a working `zpage run` on the machine, and
#     `pkg-config --cflags --libs zpage` compiles and links examples/c
#     against it; the package is removed again afterwards, unless it was
#     installed before.
# Run from anywhere; .ci/run runs it after the test suite.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
scratch=$(mktemp -d -t zpage-install-XXXXXX)
cleanup() { rm -rf "$scratch"; }
trap cleanup EXIT

# The first command line of the Install section: 4-space indented, comment cut.
line=$(awk '/^## /{section=$0} section=="## Install" && /^    [^ ]/{print; exit}' "$repo/README.md" |
    sed -e 's/^    //' -e 's/[[:space:]]*#.*$//')
if [ -z "$line" ]; then
    echo "test-install.sh: no install line under README's '## Install'" >&2
    exit 1
fi
echo "README's install line: $line"

# A new home, but the same Rust toolchain and crate cache.
export CARGO_HOME=${CARGO_HOME:-$HOME/.cargo} RUSTUP_HOME=${RUSTUP_HOME:-$HOME/.rustup}
home="$scratch/home"
mkdir -p "$home"
(cd "$repo" && HOME="$home" bash -c "$line")

zpage="$home/.local/bin/zpage"
[ -x "$zpage" ] || { echo "test-install.sh: the install line left no $zpage" >&2; exit 1; }

# `zpage run` from an unrelated directory: the preload library is found
# where the install put it, and a program's memory goes into regions.
check_run() {
    local zpage=$1 out="$scratch/run.err"
    (cd "$scratch" && env -u ZPAGE_PRELOAD "$zpage" run --budget 16M -- \
        python3 -c 'b = bytearray(64 << 20); b[::4096] = b"x" * (len(b) // 4096); assert b.count(b"x") == len(b) // 4096' \
        2>"$out") || { cat "$out" >&2; echo "test-install.sh: $zpage run failed" >&2; exit 1; }
    grep -Eq 'Processes: [1-9][0-9]* \(0 without zpage\)' "$out" || { cat "$out" >&2; exit 1; }
    grep -Eq 'evictions: [1-9]' "$out" || { cat "$out" >&2; echo "test-install.sh: nothing was evicted" >&2; exit 1; }
    echo "$zpage run: $(grep -E 'Regions made|evictions' "$out" | tr -d '\t' | tr '\n' ' ')"
}
check_run "$zpage"
(cd "$scratch" && HOME="$home" PATH="$home/.local/bin:$PATH" zpage analyze >"$scratch/analyze.txt")
echo "zpage analyze: $(wc -l < "$scratch/analyze.txt") lines"
[ -s "$home/.local/share/man/man1/zpage-run.1" ] || { echo "no man page installed" >&2; exit 1; }
[ -s "$home/.local/share/bash-completion/completions/zpage" ] || { echo "no completion installed" >&2; exit 1; }

if [ "$(id -u)" != 0 ]; then
    echo "test-install.sh: not root: the Debian package is built but not installed"
    bash "$repo/scripts/build-deb.sh" --no-build
    exit 0
fi
deb=$(bash "$repo/scripts/build-deb.sh" --no-build | tail -n 1)
echo "package: $deb ($(du -h "$deb" | cut -f1))"
if dpkg -s zpage >/dev/null 2>&1; then
    installed_before=1
else
    installed_before=0
fi
remove_package() {
    if [ "$installed_before" = 0 ]; then dpkg -r zpage >/dev/null; fi
    cleanup
}
trap remove_package EXIT
dpkg -i "$deb" >/dev/null
dpkg -L zpage | grep -q '^/usr/lib/zpage/libzpage_preload.so$'
check_run /usr/bin/zpage
pkg-config --exists zpage
cc "$repo/examples/c/bench_region.c" -o "$scratch/bench_region" $(pkg-config --cflags --libs zpage)
"$scratch/bench_region" 16 4 >"$scratch/bench.txt"
echo "examples/c/bench_region.c against the package: $(tail -n 1 "$scratch/bench.txt")"
[ -f /usr/share/man/man1/zpage.1.gz ] && [ -f /usr/lib/systemd/system/zpage-exporter.service ]
grep -q '^ExecStart=/usr/bin/zpage ' /usr/lib/systemd/system/zpage-exporter.service
echo "test-install.sh: install line, zpage run, zpage analyze, Debian package and pkg-config all work"
