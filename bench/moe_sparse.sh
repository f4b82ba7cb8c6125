#!/usr/bin/env bash
# Sparse experts (--sparse_experts, the default) against a dense sync of
# every expert (--sparse_experts false), the same job: 2 BSP workers
# through 2 servers (`strata local`, CPU), a 2-layer C128 GPT whose second
# block has 64 experts of 128 features, top-1, 2 x 32 tokens a worker a
# step, on Debian's linux-doc. A worker pulls ahead the experts its last
# step used and pushes only those its tokens reached; the others travel as
# zero pushes without payload.
# Prints
#   moe_sparse_pulled <share of a dense sync's expert bytes pulled a step>
#   moe_sparse_pushed <the same, pushed>
#   moe_sparse_uniform <1 - (1 - k/E)^N: the share of experts N tokens
#                       reach if routed uniformly, what pushes approach>
#   moe_sparse_tokens_per_s <run> <tokens/s of worker 0, steps 2..end>
#   moe_sparse_speed_ratio <sparse / dense>
# Run from the repository root: bash bench/moe_sparse.sh (STEPS=200).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_build strata
dir=$(mktemp -d /tmp/strata-moe-sparse-XXXXXX)
trap 'rm -rf "$dir"' EXIT
linux_doc_corpus "$dir/linux-doc.txt"
echo "# load: $(uptime)" >&2

steps=${STEPS:-200}
experts=64 top_k=1 batch=4 context=32
run() {  # name flags...
  local name=$1; shift
  ./build/cli/strata local --dir "$dir/$name" --data "$dir/linux-doc.txt" \
    --servers 2 --workers 2 --layers 2 --heads 4 --width 128 \
    --context "$context" --batch "$batch" --steps "$steps" --eval_every 0 \
    --warmup 20 --snapshot_every 0 --experts "$experts" --top_k "$top_k" \
    --moe_every 2 --expert_hidden 128 "$@" >"$dir/$name.log" 2>&1 ||
    { tail -5 "$dir/$name.log" >&2; exit 1; }
  python3 - "$dir/$name/metrics-0.jsonl" "$name" "$batch" "$context" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
name, batch, context = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
t = (rows[-1]["elapsed_s"] - rows[1]["elapsed_s"]) / (len(rows) - 2)
# Worker 0 computes half of each step's samples.
print("moe_sparse_tokens_per_s %s %.0f" % (name, batch // 2 * context / t))
if "moe_experts_pulled" in rows[-1]:
    later = rows[1:]
    for key in ("pulled", "pushed"):
        mean = sum(r["moe_experts_" + key] for r in later) / len(later)
        print("moe_sparse_%s %.3f" % (key, mean))
PY
}
out=$(
  run sparse
  run dense --sparse_experts false
)
echo "$out"
python3 -c "print('moe_sparse_uniform %.3f' % (1 - (1 - $top_k / $experts) ** ($batch // 2 * $context)))"
awk '$1 == "moe_sparse_tokens_per_s" {s[$2] = $3}
  END {printf "moe_sparse_speed_ratio %.3f\n", s["sparse"] / s["dense"]}' <<<"$out"
