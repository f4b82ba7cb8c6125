#!/usr/bin/env bash
# One `strata worker` training through two servers over a link of a given
# rate: the whole cluster runs in a network namespace of its own whose
# loopback is held to WIRE_GBIT Gbit/s (default 2) by a token bucket (tc
# tbf), with payloads in gRPC messages (--shm false), as between hosts. Both
# directions share that one link. Needs root (ip netns, tc).
#
# Run from the repository root: bash bench/wire_train.sh. For the GPT-2 124M
# shape (L12 C768 H12, B4 T64), the sync settings one after the other:
#   pull_first_fp32    pull every weight, then compute; fp32 both ways
#   overlapped_fp32    forward over the pulls (the default); fp32
#   overlapped_bf16    the same with bf16 pushes and pulls (a GPU
#                      worker's default; error feedback on the pushes)
#   overlapped_bf16_no_ef   the same without error feedback (its cost)
#   overlapped_fp32_ucx     overlapped_fp32 on the bulk plane (--wire ucx,
#                      UCX on TCP)
#   overlapped_onebit  pushes and pulls compressed from step 1 on
#                      (--compress onebit: 1.25 bits an element)
#   overlapped_topk    the same with --compress topk:0.01
# RUNS picks some of them (default: all but the compressed ones).
# Prints
#   wire_Gbps <x>                            iperf3 through the link
#   wire_tokens_per_s <config> <t>
#   wire_step_s <config> <s>
#   wire_floor_s <config> <f>                the step's bytes over the link
#                                            rate (push + pull), no compute
#   wire_ratio_to_pull_first <config> <t / t(pull_first_fp32)>
#   wire_ucx_ratio_to_grpc <t(overlapped_fp32_ucx) / t(overlapped_fp32)>
#   wire_ratio_to_fp32 <config> <t / t(overlapped_fp32)>  (compressed runs)
#   wire_loss <config> <the last step's loss>
# STEPS (default 6) steps per run; figures over steps 2..STEPS-1.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
export WIRE_GBIT=${WIRE_GBIT:-2}
if [[ -z "${STRATA_WIRE_NS:-}" ]]; then
  bench_build strata
  need_cmd iperf3 iperf3
fi
in_wire_namespace "$0" "$@" && exit 0

dir=$(mktemp -d /tmp/strata-wire-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT

iperf3 -s -B 127.0.0.1 -p 5201 -1 >/dev/null 2>&1 & pids+=($!)
sleep 0.5
wire=$(iperf3 -c 127.0.0.1 -p 5201 -t 3 -J | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9)')
printf "wire_Gbps %.3f\n" "$wire"

layers=12 heads=12 width=768 context=64 batch=4 steps=${STEPS:-6}
params=$(( 50257 * width + context * width + layers * (12 * width * width + 13 * width) + 2 * width ))
declare -A rate
run() {  # config worker flags...
  local config=$1; shift
  local run_dir="$dir/$config"
  mkdir -p "$run_dir"
  pids=()
  start_cluster "$run_dir"
  ./build/cli/strata worker --scheduler "$addr" --workers 1 --layers $layers \
    --heads $heads --width $width --context $context --batch $batch \
    --vocab 50257 --steps "$steps" --eval_every 0 --shm false \
    --data /usr/share/common-licenses --metrics "$run_dir/metrics.jsonl" "$@" \
    2>"$run_dir/worker.log" || { tail -5 "$run_dir/worker.log" >&2; exit 1; }
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  local bytes=$(( params * 4 * 2 ))
  [[ "$*" == *bf16* ]] && bytes=$(( params * 2 * 2 ))
  # Compressed: ONEBIT's 10 bytes per 64 elements, TOPK's 8 per kept one.
  [[ "$*" == *onebit* ]] && bytes=$(( params * 10 / 64 * 2 ))
  [[ "$*" == *topk:0.01* ]] && bytes=$(( params * 8 / 100 * 2 ))
  python3 - "$run_dir/metrics.jsonl" "$config" $(( context * batch )) "$bytes" "$wire" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
t = [r["elapsed_s"] for r in rows]
step = (t[-1] - t[1]) / (len(t) - 2)
config, tokens, nbytes, gbps = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
print("wire_tokens_per_s %s %.1f" % (config, tokens / step))
print("wire_step_s %s %.3f" % (config, step))
print("wire_floor_s %s %.3f" % (config, nbytes * 8 / (gbps * 1e9)))
print("wire_loss %s %.4f" % (config, rows[-1]["loss"]))
PY
}
export UCX_TLS="${UCX_TLS:-tcp}"
out=$(
  for config in ${RUNS:-pull_first_fp32 overlapped_fp32 overlapped_bf16 overlapped_bf16_no_ef overlapped_fp32_ucx}; do
    case "$config" in
      pull_first_fp32) run "$config" --forward_during_pull false ;;
      overlapped_fp32) run "$config" ;;
      overlapped_bf16) run "$config" --push_bf16 --pull_bf16 ;;
      overlapped_bf16_no_ef)
        run "$config" --push_bf16 --pull_bf16 --error_feedback false ;;
      overlapped_fp32_ucx) run "$config" --wire ucx ;;
      overlapped_onebit) run "$config" --compress onebit --compress_from 1 ;;
      overlapped_topk) run "$config" --compress topk:0.01 --compress_from 1 ;;
      *) echo "unknown run $config" >&2; exit 2 ;;
    esac
  done
)
echo "$out"
grpc=$(awk '$1 == "wire_tokens_per_s" && $2 == "overlapped_fp32" {print $3}' <<<"$out")
ucx=$(awk '$1 == "wire_tokens_per_s" && $2 == "overlapped_fp32_ucx" {print $3}' <<<"$out")
if [[ -n "$grpc" && -n "$ucx" ]]; then
  python3 -c "print('wire_ucx_ratio_to_grpc %.3f' % ($ucx / $grpc))"
fi
if [[ -n "$grpc" ]]; then
  awk -v b="$grpc" '$1 == "wire_tokens_per_s" && ($2 ~ /onebit|topk/) {printf "wire_ratio_to_fp32 %s %.3f\n", $2, $3 / b}' <<<"$out"
fi
base=$(awk '$1 == "wire_tokens_per_s" && $2 == "pull_first_fp32" {print $3}' <<<"$out")
if [[ -n "$base" ]]; then
  awk -v b="$base" '$1 == "wire_tokens_per_s" {printf "wire_ratio_to_pull_first %s %.3f\n", $2, $3 / b}' <<<"$out"
fi
