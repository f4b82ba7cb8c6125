#!/usr/bin/env bash
# CRC-32C on one thread over a 12 MiB tile against a plain read of it and
# against one stream at a time (bench/crc32c_bench.cc says how). Run from
# the repository root: bash bench/crc32c.sh [--mib 12] [--reps 20]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_build crc32c_bench
echo "# load: $(uptime)" >&2
exec ./build/bench/crc32c_bench "$@"
