#!/usr/bin/env bash
# Push+pull throughput: one client, two servers on loopback, a 256 MiB model
# in 4 MiB chunks, against iperf3 on 127.0.0.1 measured in the same run.
# Run from the repository root: bash bench/pushpull.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_build strata pushpull_bench
need_cmd iperf3 iperf3

dir=$(mktemp -d /tmp/strata-pushpull-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT

start_cluster "$dir" --consistency asp

./build/bench/pushpull_bench --scheduler "$addr" --model_mib "${MODEL_MIB:-256}" --chunk_mib 4 \
  --rounds "${ROUNDS:-4}" --repeats 3 | tee "$dir/pp.out"
pp=$(awk '/^pushpull_GBps/ {print $2}' "$dir/pp.out")

port=$((20000 + RANDOM % 20000))
iperf3 -s -B 127.0.0.1 -p $port -1 >/dev/null 2>&1 & pids+=($!)
sleep 0.5
tcp=$(iperf3 -c 127.0.0.1 -p $port -l 1M -t 5 -J | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8e9)')
printf "loopback_tcp_GBps %.3f\n" "$tcp"
python3 -c "print('pushpull_ratio_to_tcp %.3f' % ($pp / $tcp))"
