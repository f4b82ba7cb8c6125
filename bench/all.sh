#!/usr/bin/env bash
# Runs the CPU benchmarks of docs/BENCHMARKS.md one after another, each with
# the command its row gives, and prints their summary lines (the
# `name [config] value ...` lines the scripts print on stdout), each
# prefixed with the benchmark's name, under a header with its command and
# the machine's load. Full output (stdout and stderr) of each goes to
# $LOG_DIR/NAME.log (default: a new directory under /tmp, named at the end).
#
#   bash bench/all.sh              every benchmark, in the order of --list
#   bash bench/all.sh NAME...      only those (a NAME that is no entry but
#                                  begins entries, as model_parallel, picks
#                                  them all: model_parallel_small, _124M)
#   bash bench/all.sh --list       the names and commands, running nothing
#
# Run from the repository root of a clone; the scripts build what they
# need into build/. The entries marked (root) need root (ip netns, tc) and
# are skipped without it. Other load on the machine lowers the figures:
# each header gives `uptime`'s load at its start.
#
# Not run here: the GPU rows (docs/BENCHMARKS.md, "GPU") come from
# `bash bench/gpu_session.sh` on a machine with a CUDA GPU, from the bundle
# that `bash scripts/gpu-bundle.sh` makes (docs/BENCHMARKS.md, "On a GPU
# machine").
set -uo pipefail
cd "$(dirname "$0")/.."

# name|build target (for build/bench/ commands, else empty)|root?|command
entries=(
  "pushpull||no|bash bench/pushpull.sh"
  "pushpull_region||no|CONFIGS=\"4:1:2 4:1:1 64:1:2 64:1:1\" BF16_CONFIGS=\" \" TLS_CONFIGS=\" \" bash bench/pushpull.sh"
  "pushpull_wire10||yes|WIRE_GBIT=10 bash bench/pushpull.sh"
  "ucx||no|bash bench/ucx.sh"
  "pushpull_wire25||yes|WIRE_GBIT=25 CONFIGS=\"4:1:0 4:1:3 64:1:0 64:1:3\" BF16_CONFIGS=\" \" TLS_CONFIGS=\" \" REPLICA_CONFIGS=\" \" bash bench/pushpull.sh"
  "wire_train_ucx||yes|WIRE_GBIT=10 RUNS=\"overlapped_fp32 overlapped_fp32_ucx\" STEPS=8 bash bench/wire_train.sh"
  "wire_train||yes|bash bench/wire_train.sh"
  "wire_train_8||yes|WIRE_GBIT=8 bash bench/wire_train.sh"
  "wire_train_compress||yes|WIRE_GBIT=1 RUNS=\"overlapped_fp32 overlapped_bf16 overlapped_onebit overlapped_topk\" bash bench/wire_train.sh"
  "recovery||no|bash bench/recovery.sh"
  "tier||no|bash bench/tier.sh"
  "tier_train||no|TIER=4 bash bench/cpu_train.sh"
  "tier_train_x8||no|TIER=4 MICRO_BATCHES=8 bash bench/cpu_train.sh"
  "optimizer||no|bash bench/optimizer.sh"
  "compress||no|bash bench/compress.sh"
  "lamb_batch||no|bash bench/lamb_batch.sh"
  "crc32c||no|bash bench/crc32c.sh"
  "collective||no|bash bench/collective.sh"
  "allreduce||no|ALLREDUCE=1 bash bench/cpu_train.sh"
  "grad_buckets_small|grad_buckets_bench|no|build/bench/grad_buckets_bench --repeats 5"
  "grad_buckets_124M|grad_buckets_bench|no|build/bench/grad_buckets_bench --repeats 5 --layers 12 --width 768 --heads 12 --context 1024"
  "pipeline|pipeline_bench|no|build/bench/pipeline_bench"
  "model_parallel_small|model_parallel_bench|no|build/bench/model_parallel_bench --steps 5"
  "model_parallel_124M|model_parallel_bench|no|build/bench/model_parallel_bench --layers 12 --width 768 --heads 12 --context 64 --vocab 50257 --batch 4 --splits 2:1:1,4:1:1,1:2:1,1:2:4,1:4:4,2:2:4"
  "cpu_train||no|bash bench/cpu_train.sh"
  "grad_norm|grad_norm_bench|no|build/bench/grad_norm_bench"
  "moe|moe_bench|no|build/bench/moe_bench"
  "moe_train||no|bash bench/moe_train.sh"
  "moe_sparse||no|bash bench/moe_sparse.sh"
  "stragglers||no|bash bench/stragglers.sh"
  "tokenizer||no|bash bench/tokenizer.sh"
  "python_pushpull||no|bash bench/python_pushpull.sh"
  "python_train||no|bash bench/python_train.sh"
)

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

list=0
picked=()
for arg in "$@"; do
  case "$arg" in
    --list) list=1 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "unknown option $arg (see --help)" >&2; exit 2 ;;
    *) picked+=("$arg") ;;
  esac
done

# The entries to run: all, or those named (exactly, or by a name that
# begins them followed by "_").
selected=()
if [[ ${#picked[@]} -eq 0 ]]; then
  selected=("${entries[@]}")
else
  for want in "${picked[@]}"; do
    found=0
    for e in "${entries[@]}"; do
      [[ "${e%%|*}" == "$want" ]] && { selected+=("$e"); found=1; }
    done
    if [[ $found == 0 ]]; then
      for e in "${entries[@]}"; do
        [[ "${e%%|*}" == "${want}_"* ]] && { selected+=("$e"); found=1; }
      done
    fi
    [[ $found == 1 ]] || { echo "no benchmark named $want (see --list)" >&2; exit 2; }
  done
fi

if [[ $list == 1 ]]; then
  for e in "${selected[@]}"; do
    IFS='|' read -r name target root cmd <<<"$e"
    note=""
    [[ $root == yes ]] && note="  (root)"
    printf "%-22s %s%s\n" "$name" "$cmd" "$note"
  done
  echo "# GPU rows: bash bench/gpu_session.sh on a GPU machine (not run here)"
  exit 0
fi

log_dir="${LOG_DIR:-$(mktemp -d /tmp/strata-bench-all-XXXXXX)}"
mkdir -p "$log_dir"
source bench/common.sh
failed=()
for e in "${selected[@]}"; do
  IFS='|' read -r name target root cmd <<<"$e"
  echo "# ${name}: ${cmd}"
  echo "# $(date -u +%Y-%m-%d) $(nproc) cores, load:$(uptime | sed 's/.*load average://')"
  if [[ $root == yes && "$(id -u)" -ne 0 ]]; then
    echo "# skipped: needs root (ip netns, tc)"
    continue
  fi
  log="$log_dir/${name}.log"
  if [[ -n "$target" ]] && ! bench_build "$target" >"$log" 2>&1; then
    echo "# ${name}: building ${target} failed (see ${log})"
    failed+=("$name")
    continue
  fi
  # The summary lines: a lower-case name, then at least one field; not the
  # per-kill lines of bench/recovery.sh nor build tools' chatter.
  bash -c "$cmd" >"$log.out" 2>>"$log"
  rc=$?
  cat "$log.out" >>"$log"
  awk -v n="$name" '
    $1 ~ /^[a-z][A-Za-z0-9_]*$/ && NF >= 2 && $1 != "kill" && !($1 == "server" && $2 == "kill") {
      print "[" n "] " $0
    }' "$log.out"
  rm -f "$log.out"
  if [[ $rc -ne 0 ]]; then
    echo "# ${name} failed (exit ${rc}; see ${log})"
    failed+=("$name")
  fi
done
echo "# logs: ${log_dir}"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "# failed: ${failed[*]}"
  exit 1
fi
