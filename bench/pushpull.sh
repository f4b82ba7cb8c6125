#!/usr/bin/env bash
# Push+pull throughput against two servers on loopback, a 256 MiB model, for
# chunks (values) of 4 and 64 MiB, 1 and 2 workers, with payloads through
# shared memory (the default for processes on one host) and in gRPC
# messages; each against iperf3 on 127.0.0.1 measured in the same run.
# Run from the repository root: bash bench/pushpull.sh
# CONFIGS="4:1:1 64:2:0" picks configurations (chunk MiB:workers:shm).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_build strata pushpull_bench
need_cmd iperf3 iperf3

dir=$(mktemp -d /tmp/strata-pushpull-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT

port=$((20000 + RANDOM % 20000))
iperf3 -s -B 127.0.0.1 -p $port -1 >/dev/null 2>&1 & pids+=($!)
sleep 0.5
tcp=$(iperf3 -c 127.0.0.1 -p $port -l 1M -t 5 -J | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8e9)')
printf "loopback_tcp_GBps %.3f\n" "$tcp"

start_cluster "$dir" --consistency asp

for config in ${CONFIGS:-4:1:1 4:1:0 4:2:1 4:2:0 64:1:1 64:1:0 64:2:1 64:2:0}; do
  IFS=: read -r chunk workers shm <<<"$config"
  name="chunk${chunk}MiB_workers${workers}_$([ "$shm" = 1 ] && echo shm || echo grpc)"
  ./build/bench/pushpull_bench --scheduler "$addr" --model_mib "${MODEL_MIB:-256}" \
    --chunk_mib "$chunk" --workers "$workers" --shm "$shm" \
    --rounds "${ROUNDS:-4}" --repeats 3 >"$dir/pp.out" 2>"$dir/pp.err" ||
    { cat "$dir/pp.err" >&2; exit 1; }
  pp=$(awk '/^pushpull_GBps/ {print $2}' "$dir/pp.out")
  printf "pushpull_GBps %s %.3f\n" "$name" "$pp"
  python3 -c "print('pushpull_ratio_to_tcp $name %.3f' % ($pp / $tcp))"
done
