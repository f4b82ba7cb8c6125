#!/usr/bin/env bash
# CPU training throughput of Strata's GPT (forward, backward, local AdamW),
# and of PyTorch on the same shapes when python3 can import torch.
#
# Run from the repository root of a clone: bench/cpu_train.sh [bench flags]
# (e.g. --steps 10). Builds into build/ (configuring it if needed; override
# with BUILD_DIR). Prints
#   cpu_tokens_per_s <config> <x>
# and, with torch,
#   torch_tokens_per_s <config> <y>
#   ratio_to_torch <config> <x/y>
set -euo pipefail
cd "$(dirname "$0")/.."
build="${BUILD_DIR:-build}"

if [[ ! -f "${build}/build.ninja" ]]; then
  cmake -S . -B "${build}" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >&2
fi
ninja -C "${build}" cpu_train_bench >&2

echo "load before: $(uptime)" >&2
ours="$("${build}/bench/cpu_train_bench" "$@")"
echo "${ours}"

if python3 -c 'import torch' 2>/dev/null; then
  theirs="$(python3 bench/torch_ref.py)"
  echo "${theirs}"
  while read -r _ config y; do
    x="$(awk -v c="${config}" '$1 == "cpu_tokens_per_s" && $2 == c { print $3 }' \
      <<<"${ours}")"
    if [[ -n "${x}" ]]; then
      awk -v c="${config}" -v x="${x}" -v y="${y}" \
        'BEGIN { printf "ratio_to_torch %s %.3f\n", c, x / y }'
    fi
  done <<<"${theirs}"
else
  echo "python3 cannot import torch: skipping the PyTorch reference" >&2
fi
echo "load after: $(uptime)" >&2
