#!/usr/bin/env bash
# Benchmarks the Adam update against a STREAM triad (bench/optimizer_bench.cc
# explains the byte counts). Run from the repository root:
#   bench/optimizer.sh [--params N] [--threads T] [--reps R]
# Configures build/ if needed, builds only the benchmark, and runs it. Other
# load on the machine lowers both figures: check `uptime` and repeat when the
# load is low.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -f build/build.ninja ]]; then
  cmake -S . -B build -G Ninja
fi
ninja -C build optimizer_bench
echo "# load: $(uptime)" >&2
exec build/bench/optimizer_bench --threads 2 "$@"
