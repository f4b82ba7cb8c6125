#!/usr/bin/env bash
# Sync overhead of a PyTorch worker against Strata's C++ worker, same GPT
# shape (GPT-2 124M's layers and width, batch 4, context 64), same run:
#   python: bench/python_train.py in one process (torch AdamW) and through
#           two servers (strata.torch), sync_overhead = 1 - servers/local;
#   C++:    cpu_train_bench (pure compute) and `strata worker` through two
#           servers (with_servers in bench/common.sh).
# Prints both overheads and python_sync_overhead_minus_cpp (target: <=
# 0.05). Run from the repository root: bash bench/python_train.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_build strata cpu_train_bench strata_python
config=L12_C768_H12_B4_T64
py=/usr/bin/python3
export PYTHONPATH=build/python
local_py=$($py bench/python_train.py --mode local --config $config | awk '{print $3}')
dir=$(mktemp -d /tmp/strata-pytrain-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
start_cluster "$dir"
servers_py=$($py bench/python_train.py --mode servers --scheduler "$addr" --config $config | awk '{print $3}')
cleanup; pids=()
local_cpp=$(./build/bench/cpu_train_bench --config $config --steps 5 | awk '{print $3}')
servers_cpp=$(with_servers $config 12 12 768 64 4 | awk '{print $3}')
printf "python_tokens_per_s_local %s %s\n" $config "$local_py"
printf "python_tokens_per_s_servers %s %s\n" $config "$servers_py"
printf "cpp_tokens_per_s_local %s %s\n" $config "$local_cpp"
printf "cpp_tokens_per_s_servers %s %s\n" $config "$servers_cpp"
python3 - "$local_py" "$servers_py" "$local_cpp" "$servers_cpp" <<'PY'
import sys
lp, sp, lc, sc = map(float, sys.argv[1:])
op, oc = 1 - sp / lp, 1 - sc / lc
print(f"python_sync_overhead L12_C768_H12_B4_T64 {op:.3f}")
print(f"cpp_sync_overhead L12_C768_H12_B4_T64 {oc:.3f}")
print(f"python_sync_overhead_minus_cpp L12_C768_H12_B4_T64 {op - oc:.3f}")
PY
