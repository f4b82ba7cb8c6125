#!/usr/bin/env bash
# Mixture of experts against the dense GPT with the same active parameters:
# 8 experts of 2C features each, top-2 (so 4C active, the dense MLP's), in
# every block, against the dense model, the same steps and tokens, through
# `strata local` (2 servers, one worker, CPU), on the Linux kernel's
# documentation (Debian's linux-doc-6.1, 24 MB: a run reads 3 MB of it, so
# the held-out loss measures what generalizes).
# Prints
#   moe_heldout <run> <held-out loss after the last step>
#   moe_tokens_per_s <run> <tokens/s over the run, steps 2..end>
#   moe_loss_ratio <moe / dense>     (target < 1)
#   moe_speed_ratio <moe / dense>    (target >= 0.8)
# Run from the repository root: bash bench/moe_train.sh (STEPS=1500).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_build strata
dir=$(mktemp -d /tmp/strata-moe-XXXXXX)
trap 'rm -rf "$dir"' EXIT
linux_doc_corpus "$dir/linux-doc.txt"
echo "# load: $(uptime)" >&2

steps=${STEPS:-1500}
run() {  # name flags...
  local name=$1; shift
  ./build/cli/strata local --dir "$dir/$name" --data "$dir/linux-doc.txt" \
    --servers 2 --workers 1 --layers 4 --heads 4 --width 128 --context 64 \
    --batch 8 --steps "$steps" --eval_every "$steps" --warmup 100 \
    --snapshot_every 0 "$@" >"$dir/$name.log" 2>&1 ||
    { tail -5 "$dir/$name.log" >&2; exit 1; }
  python3 - "$dir/$name/metrics-0.jsonl" "$name" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
name = sys.argv[2]
# The last row's time includes no eval (stamped before it); steps 2..end.
t = (rows[-1]["elapsed_s"] - rows[1]["elapsed_s"]) / (len(rows) - 2)
print("moe_heldout %s %.4f" % (name, rows[-1]["eval_loss"]))
print("moe_tokens_per_s %s %.0f" % (name, 8 * 64 / t))
if "moe_dropped" in rows[-1]:
    print("# %s: aux %.4f, dropped %.3f, load %s" % (
        name, rows[-1]["moe_aux_loss"], rows[-1]["moe_dropped"],
        rows[-1]["moe_load"]))
PY
}
out=$(
  run dense
  run moe --experts 8 --top_k 2 --expert_hidden 256 --moe_every 1
)
echo "$out"
awk '$1 == "moe_heldout" {l[$2] = $3} $1 == "moe_tokens_per_s" {s[$2] = $3}
  END {printf "moe_loss_ratio %.3f\nmoe_speed_ratio %.3f\n", l["moe"] / l["dense"], s["moe"] / s["dense"]}' <<<"$out"
