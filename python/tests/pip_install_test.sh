#!/usr/bin/env bash
# The README's install: a virtual environment over Debian's Python and
# `pip install --no-build-isolation` of python/ (a copy, so the source tree
# stays clean), with nothing from a registry (--no-index); then the
# installed package imports and runs shuffled_index from outside the tree.
# Usage: pip_install_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
tmp=$(mktemp -d /tmp/strata-pip-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 -m venv --system-site-packages "$tmp/venv"
cp -r "$src/python" "$tmp/python"
rm -rf "$tmp/python/build" "$tmp/python/"*.egg-info
STRATA_BUILD_DIR="$build" "$tmp/venv/bin/pip" install -q --no-index \
  --no-build-isolation "$tmp/python"
cd "$tmp"
"$tmp/venv/bin/python" - <<'PY'
import strata, strata.torch
assert strata.__file__.startswith(__import__("sys").prefix), strata.__file__
order = [strata.shuffled_index(g, 10, 1) for g in range(10)]
assert sorted(order) == list(range(10)), order
print("installed", strata.__file__)
PY
