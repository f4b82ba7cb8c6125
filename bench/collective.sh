#!/usr/bin/env bash
# Gloo all-reduce and reduce-scatter bus bandwidth among 2 and 4 ranks
# (threads of one process, each rank its own TCP connections on
# 127.0.0.1), against iperf3's one-stream loopback TCP measured in the same
# run: allreduce_ratio_to_tcp; and against Gloo's own ring all-reduce on
# the same transport and ranks: allreduce_ratio_to_gloo_native. Every rank
# shares this machine's cores, as the iperf3 client and server do.
# Run from the repository root: bash bench/collective.sh
# CONFIGS="2:64 4:16" picks configurations (ranks:MiB).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_build collective_bench
need_cmd iperf3 iperf3

port=$((20000 + RANDOM % 20000))
iperf3 -s -B 127.0.0.1 -p $port -1 >/dev/null 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
sleep 0.5
tcp=$(iperf3 -c 127.0.0.1 -p $port -l 1M -t 5 -J | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8e9)')
printf "loopback_tcp_GBps %.3f\n" "$tcp"

for config in ${CONFIGS:-2:4 2:64 4:4 4:64}; do
  IFS=: read -r ranks mib <<<"$config"
  out=$(./build/bench/collective_bench --backend gloo --ranks "$ranks" \
    --mib "$mib" --iters "${ITERS:-20}")
  echo "$out"
  echo "$out" | awk -v tcp="$tcp" '/_busbw_GBps/ {printf "%s_ratio_to_tcp %s %.3f\n", substr($1, 1, index($1, "_busbw") - 1), $2, $3 / tcp}'
done
