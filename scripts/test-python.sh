#!/usr/bin/env bash
# Builds the Python package the way the README installs it
# (`pip install ./crates/python`), into a fresh virtual environment, and runs
# its pytest suite. ZPAGE_PY_TEST_SCALE grows the suite's data (1 in CI).
# CARGO_TARGET_DIR is honoured, as cargo honours it.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
venv=$(mktemp -d -t zpage-python-XXXXXX)
trap 'rm -rf "$venv"' EXIT

"$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q numpy pandas pytest
"$venv/bin/python" -m pip install -q ./crates/python
"$venv/bin/python" -c "import zpage"
# The CLI, for the tests that compare zpage.analyze/kernel_status with its
# --json documents (already built by `cargo test --workspace` in CI).
cargo build -q -p zpage-cli
export ZPAGE_CLI="${CARGO_TARGET_DIR:-$PWD/target}/debug/zpage"
# Run from the tests' directory so `import zpage` is the installed package.
cd crates/python/tests
"$venv/bin/python" -m pytest -q -p no:cacheprovider .
