#!/usr/bin/env bash
# The servers' RAM tier (ZeRO-Infinity style): Adam throughput of a shard
# whose state is 4x its RAM budget, against the same shard in RAM and
# against the disk's own read and write bandwidth, measured in the same run
# on the same directory (bench/tier_bench.cc says how). Prints
# tier_ratio_to_disk (target >= 0.8) and tier_ratio_to_inram.
# Run from the repository root:
#   bash bench/tier.sh [--budget_mib 256] [--state_ratio 4] [--chunk_mib 4]
# TIER_DIR picks the directory (default /var/tmp, which is on disk where
# /tmp may be tmpfs).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_build tier_bench
dir="${TIER_DIR:-/var/tmp}/strata-tier-$$"
trap 'rm -rf "$dir"' EXIT
echo "# load: $(uptime)" >&2
./build/bench/tier_bench --dir "$dir" "$@"
