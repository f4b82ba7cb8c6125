#!/usr/bin/env bash
# Push+pull of GPT-2 124M's parameters (124,439,808 floats, 4 MiB chunks)
# from Python (strata.Client, bench/python_pushpull.py) against the C++
# client (pushpull_bench) in the same run, both one client through
# shared-memory slots to two servers on this host, then both in gRPC
# messages. Prints each figure and python_pushpull_ratio_to_cpp (target:
# >= 0.9). Run from the repository root: bash bench/python_pushpull.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_build strata pushpull_bench strata_python
numel=124439808
mib=$(( (numel * 4 + (1 << 20) - 1) >> 20 ))
dir=$(mktemp -d /tmp/strata-pypushpull-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
start_cluster "$dir" --consistency asp
for shm in 1 0; do
  kind=$([ $shm = 1 ] && echo shm || echo grpc)
  ./build/bench/pushpull_bench --scheduler "$addr" --model_mib "$mib" \
    --chunk_mib 4 --workers 1 --shm $shm --rounds "${ROUNDS:-4}" \
    --repeats 3 >"$dir/cpp.out" 2>"$dir/cpp.err" || { cat "$dir/cpp.err" >&2; exit 1; }
  cpp=$(awk '/^pushpull_GBps/ {print $2}' "$dir/cpp.out")
  PYTHONPATH=build/python /usr/bin/python3 bench/python_pushpull.py \
    --scheduler "$addr" --numel $numel --chunk_mib 4 --shm $shm \
    --rounds "${ROUNDS:-4}" --repeats 3 >"$dir/py.out" || exit 1
  py=$(awk '/^python_pushpull_GBps/ {print $2}' "$dir/py.out")
  printf "cpp_pushpull_GBps %s %.3f\n" "$kind" "$cpp"
  printf "python_pushpull_GBps %s %.3f\n" "$kind" "$py"
  python3 -c "print('python_pushpull_ratio_to_cpp $kind %.3f' % ($py / $cpp))"
done
