#!/usr/bin/env bash
# The test command: installs what is missing, builds everything, runs every
# test (unit, multi-process, end-to-end). GPU tests skip without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd build
ctest --output-on-failure -j"$(nproc)" --timeout 900 "$@"
