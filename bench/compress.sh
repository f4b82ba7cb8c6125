#!/usr/bin/env bash
# Compressed pushes' bytes per step of GPT-2 124M against fp32, and their
# encoding time against bf16's (bench/compress_bench.cc says how). Run from
# the repository root: bash bench/compress.sh [--reps 3]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_build compress_bench
echo "# load: $(uptime)" >&2
exec ./build/bench/compress_bench "$@"
