#!/usr/bin/env bash
# LAMB's large-batch claim (You et al. 2019), on the servers: LAMB at a 4x
# larger batch, with its learning rate scaled by the square root of the
# batch ratio, reaches AdamW's held-out loss at the same token count.
# `strata local`, 2 servers (every tensor's trust ratio summed over both),
# one worker, a 2-layer GPT (C64, T64, byte-level) on the Linux kernel's
# documentation (Debian's linux-doc-6.1, 24 MB: the base run reads 4 MB of
# it, so the held-out loss measures what generalizes).
#
# Runs, each once per seed, interleaved (seed 1 of every run, then seed 2):
#   adamw_b8     AdamW, batch 8, lr 3e-3 (Strata's default), STEPS steps
#   lamb_b32     LAMB, batch 32, lr 2 x LAMB_LR, STEPS/4 steps
#   adamw_b32    AdamW the same way (batch 32, lr 2 x 3e-3): what LAMB is for
#   lamb_b128, adamw_b128   the same at 16x (lr 4x), STEPS/16 steps
# Warm-up is 5% of each run's steps; cosine decay to the end.
# LAMB_LR (default 6e-3) is LAMB's rate at batch 8, picked by a sweep at
# batch 8 and STEPS steps (docs/BENCHMARKS.md gives it).
# Prints
#   lamb_heldout <run> <seed> <held-out loss after the last step>
#   lamb_median <run> <median over the seeds>
#   lamb_ratio_to_adamw_b8 <run> <median / median(adamw_b8)>  (target for
#       lamb_b32: <= 1.0)
# Run from the repository root: bash bench/lamb_batch.sh
# (SEEDS="1 2 3", STEPS=8000, RUNS to pick runs).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_build strata
dir=$(mktemp -d /tmp/strata-lamb-XXXXXX)
trap 'rm -rf "$dir"' EXIT
linux_doc_corpus "$dir/linux-doc.txt"
echo "# load: $(uptime)" >&2

steps=${STEPS:-8000} lamb_lr=${LAMB_LR:-0.006} adamw_lr=0.003
run() {  # name seed batch steps optimizer lr
  local name=$1 seed=$2 batch=$3 n=$4 optimizer=$5 lr=$6
  local run_dir="$dir/$name-$seed"
  ./build/cli/strata local --dir "$run_dir" --data "$dir/linux-doc.txt" \
    --servers 2 --workers 1 --layers 2 --heads 2 --width 64 --context 64 \
    --shm false --snapshot_every 0 --seed "$seed" --batch "$batch" \
    --steps "$n" --eval_every "$n" --warmup $((n / 20)) \
    --optimizer "$optimizer" --lr "$lr" >"$run_dir.log" 2>&1 ||
    { tail -5 "$run_dir.log" >&2; exit 1; }
  python3 - "$run_dir/metrics-0.jsonl" "$name" "$seed" <<'PY'
import json, sys
loss = [json.loads(l)["eval_loss"] for l in open(sys.argv[1]) if "eval_loss" in l]
print("lamb_heldout %s %s %.4f" % (sys.argv[2], sys.argv[3], loss[-1]))
PY
}
scaled() { python3 -c "print($1 * $2)"; }
out=$(
  for seed in ${SEEDS:-1 2 3}; do
    for name in ${RUNS:-adamw_b8 lamb_b32 adamw_b32 lamb_b128 adamw_b128}; do
      case "$name" in
        adamw_b8) run "$name" "$seed" 8 "$steps" adamw "$adamw_lr" ;;
        lamb_b32)
          run "$name" "$seed" 32 $((steps / 4)) lamb "$(scaled "$lamb_lr" 2)" ;;
        adamw_b32)
          run "$name" "$seed" 32 $((steps / 4)) adamw "$(scaled "$adamw_lr" 2)" ;;
        lamb_b128)
          run "$name" "$seed" 128 $((steps / 16)) lamb "$(scaled "$lamb_lr" 4)" ;;
        adamw_b128)
          run "$name" "$seed" 128 $((steps / 16)) adamw "$(scaled "$adamw_lr" 4)" ;;
        *) echo "unknown run $name" >&2; exit 2 ;;
      esac
    done
  done
)
echo "$out"
python3 - <<PY
import statistics
rows = [l.split() for l in """$out""".splitlines() if l.startswith("lamb_heldout")]
runs = {}
for _, name, _, loss in rows:
    runs.setdefault(name, []).append(float(loss))
med = {name: statistics.median(v) for name, v in runs.items()}
for name, m in med.items():
    print("lamb_median %s %.4f" % (name, m))
if "adamw_b8" in med:
    for name, m in med.items():
        if name != "adamw_b8":
            print("lamb_ratio_to_adamw_b8 %s %.3f" % (name, m / med["adamw_b8"]))
PY
