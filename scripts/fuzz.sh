#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer in build-fuzz/, and runs each for SECONDS
# (default 10; scripts/test.sh runs this short pass, a longer hunt is e.g.
# `bash scripts/fuzz.sh 3600`). Each starts from its corpus in
# fuzz/corpus/<target>/ (read only); inputs it finds new go to a temporary
# folder, a crash's input to build-fuzz/crashes/. Exit 1 on any crash.
#   bash scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-10}"
shift || true
targets=("$@")
[[ ${#targets[@]} -eq 0 ]] &&
  targets=(chunk_record_fuzz token_shard_fuzz ps_request_fuzz scheduler_request_fuzz
    safetensors_fuzz)
if ! command -v clang++ > /dev/null; then
  echo "fuzz: clang++ is not installed (scripts/install-deps.sh installs it)" >&2
  exit 1
fi
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
if [[ ! -f build-fuzz/build.ninja ]]; then
  flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DSTRATA_CUDA=OFF -DSTRATA_FUZZ=ON -DCMAKE_CXX_FLAGS="${flags}" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    "${launcher[@]}" > /dev/null
fi
cmake --build build-fuzz -- -j"$(nproc)" "${targets[@]}"
mkdir -p build-fuzz/crashes
failed=0
for t in "${targets[@]}"; do
  found="$(mktemp -d)"
  mkdir -p "fuzz/corpus/${t}"
  if ! "build-fuzz/fuzz/${t}" -max_total_time="${seconds}" -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="build-fuzz/crashes/${t}-" \
      "${found}" "fuzz/corpus/${t}" > "build-fuzz/${t}.log" 2>&1; then
    echo "fuzz: ${t} FAILED (input in build-fuzz/crashes/, log in build-fuzz/${t}.log)" >&2
    tail -40 "build-fuzz/${t}.log" >&2
    failed=1
  else
    runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "build-fuzz/${t}.log")"
    echo "fuzz: ${t}: ${runs:-?} inputs in ${seconds}s, no crash (new inputs: $(ls "${found}" | wc -l))" >&2
  fi
  rm -rf "${found}"
done
exit "${failed}"
