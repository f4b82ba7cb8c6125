#!/usr/bin/env bash
# Everything a lent GPU machine should run in one device call, from the
# bundle of scripts/gpu-bundle.sh (see docs/BENCHMARKS.md, "GPU"): the GPU
# tests, the training benchmark against PyTorch, the per-op profile, an
# Nsight Compute summary of one step's kernels, a GPU worker through
# servers (dense and MoE), and the RAM tier on the machine's disk. Logs go
# to $OUT (or ./gpu-session-out); the figures are printed last.
#
#   bench/gpu_session.sh [quick]     quick: 124M at batch 8 and 16 only;
#                                    SKIP_LARGE=1 skips the 1558M runs
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-session-out}"
mkdir -p "${out}"
[[ -d .gpu-bundle ]] || tar xJf .gpu-bundle.tar.xz
run=.gpu-bundle/run
nvidia-smi -L
"${run}" kernels_cuda_test --gtest_brief=1 >"${out}/tests.txt" 2>&1
"${run}" gpt_cuda_test --gtest_brief=1 >>"${out}/tests.txt" 2>&1
"${run}" gpt_cuda_moe_test --gtest_brief=1 >>"${out}/tests.txt" 2>&1
grep -E "PASSED|FAILED|SKIPPED" "${out}/tests.txt"

"${run}" gpu_train_bench --config gpt2_124M --batch 16 --steps 5 --profile \
  2>"${out}/profile.err" | tee "${out}/profile.txt" | grep -v '^gpu_profile' || true
sort -k5 -g -r "${out}/profile.txt" | grep '^gpu_profile' | head -20

if command -v ncu >/dev/null; then
  # One warm-up and one timed step of 124M at batch 8: each kernel's time.
  ncu --metrics gpu__time_duration.sum --print-summary per-kernel \
    "${run}" gpu_train_bench --batch 8 --warmup 1 --steps 1 \
    >"${out}/ncu.txt" 2>&1
  grep -E "sm75|align1" "${out}/ncu.txt" | head -5 || true
fi

configs=(gpt2_124M:8,16,32 gpt2_350M:8 gpt2_774M:8)
[[ "${1:-}" == quick ]] && configs=(gpt2_124M:8,16)
if [[ "${1:-}" != quick && "${SKIP_LARGE:-0}" != 1 ]]; then
  # The largest shape, with and without recomputing block activations (a
  # batch that does not fit prints its out-of-memory error).
  for rc in "" --recompute; do
    "${run}" gpu_train_bench --config gpt2_1558M --batch 8,16,32 --warmup 2 \
      --steps 3 ${rc} 2>>"${out}/large.err" | tee -a "${out}/large.txt"
  done
  grep -h "out of memory" "${out}/large.err" | sort -u | head -5
fi
for c in "${configs[@]}"; do
  GPU_TRAIN_BENCH="${run} gpu_train_bench" bash bench/gpu_train.sh \
    --config "${c%%:*}" --batch "${c##*:}" 2>>"${out}/bench.err" |
    tee -a "${out}/bench.txt"
done
# A GPU worker through two local servers against its resident speed
# (issue: >= 0.7 for 124M at batch 16, context 1024): with the defaults
# (fp32 through shared memory, forward over the pulls), then with bf16
# through shared memory too, then with payloads in messages (bf16, a GPU
# worker's default to servers on other hosts), then pulling first; then
# a mixture of experts (issue: >= 0.8x the dense model's tokens/s at equal
# active parameters: 8 experts of 2C features, top-2, in every block,
# against [default]). Each line of a variant is prefixed with its name;
# the runs through servers alone (THROUGH_SERVERS=only), their ratios to
# the resident B16 run above.
for variant in "default:" "bf16_shm:--push_bf16 --pull_bf16" \
    "messages_bf16:--shm false" "pull_first:--forward_during_pull false" \
    "moe8_top2:--experts 8 --top_k 2 --expert_hidden 1536 --moe_every 1"; do
  WORKER_FLAGS="${variant#*:}" THROUGH_SERVERS=only \
    GPU_TRAIN_BENCH="${run} gpu_train_bench" bash bench/gpu_train.sh \
    --config gpt2_124M --batch 16 2>>"${out}/bench.err" |
    sed "s/^/[${variant%%:*}] /" | tee -a "${out}/bench.txt"
done
awk '$1 == "gpu_tokens_per_s" {x[$2] = $3}
  $2 == "gpu_tokens_per_s_through_servers" {z[$1 " " $3] = $4; v[$1] = $4}
  END {for (k in z) {split(k, p, " "); if (x[p[2]])
         printf "%s ratio_to_resident %s %.3f\n", p[1], p[2], z[k] / x[p[2]]}
       if (v["[default]"] && v["[moe8_top2]"])
         printf "moe_speed_ratio_gpu %.3f\n", v["[moe8_top2]"] / v["[default]"]}' \
  "${out}/bench.txt"
# The servers' RAM tier on this machine's own disk (issue: tier_ratio_to_\
# disk_mixed >= 0.8): the directory's file system first, so a tmpfs shows.
tier_dir=/var/tmp/strata-tier-$$
mkdir -p "${tier_dir}"
findmnt -T "${tier_dir}" -no FSTYPE,SOURCE | sed 's/^/tier_dir_fs /' || true
timeout 120 "${run}" tier_bench --dir "${tier_dir}" 2>"${out}/tier.err" |
  tee "${out}/tier.txt" | grep -E "^tier_" || tail -3 "${out}/tier.err"
rm -rf "${tier_dir}"
# Did the GPU worker's host buffers go into the servers' shared region
# (pinned there), and were they pinned at all?
grep -hE "in shared memory|stays out of shared memory|host buffers stay unpinned" \
  "${out}/bench.err" | sed 's/^.*strata worker: //' | sort | uniq -c || true
