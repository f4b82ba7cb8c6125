#!/usr/bin/env bash
# The bulk plane's transport alone (bench/ucx_bench.cc: UCX tagged sends
# over TCP between two workers of one process) for 4 and 64 MiB payloads,
# 1 and 4 under way, each against iperf3 on 127.0.0.1 measured in the
# same run (`ucx_ratio_to_tcp`). Run from the repository root:
# bash bench/ucx.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_build ucx_bench
need_cmd iperf3 iperf3
tcp=$(loopback_tcp_GBps 5)
printf "loopback_tcp_GBps %.3f\n" "$tcp"
for config in ${CONFIGS:-4:1 4:4 64:1 64:2}; do
  IFS=: read -r mib in_flight <<<"$config"
  gbps=$(./build/bench/ucx_bench --mib "$mib" --in_flight "$in_flight" |
    awk '/^ucx_GBps/ {print $2}')
  printf "ucx_GBps %sMiB_x%s %.3f\n" "$mib" "$in_flight" "$gbps"
  python3 -c "print('ucx_ratio_to_tcp ${mib}MiB_x$in_flight %.3f' % ($gbps / $tcp))"
done
