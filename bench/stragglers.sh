#!/usr/bin/env bash
# Stragglers: one job under bsp, ssp:2, asp and auto (--consistency auto:
# the scheduler switches it live by its rule), through simulated
# stragglers. 4 CPU GPT workers (2 layers, C64, T64, 16 sequences a step)
# through 2 servers on linux-doc, STEPS steps (600):
#   phase A, steps [STEPS/6, STEPS/2): worker 1 computes 3x as long;
#   phase B, steps [STEPS/2, end): worker 2 computes 1.5x, jittering +-50%
#     (--slowdown 1.5 --jitter 0.5).
# Before phase A every worker runs at its own speed. ROUNDS rounds (3), the
# modes interleaved within each. Prints per run
#   stragglers_run <mode> <round> <wall s> <final held-out> <switches>
# and per mode the medians over its rounds:
#   stragglers_wall_s <mode> <median wall time of the job>
#   stragglers_phase_s <mode> <A|B> <median wall time of the phase>
#   stragglers_to_target_s <mode> <median wall time to the held-out target>
#   stragglers_final_loss <mode> <median final held-out loss>
# The target is the highest held-out loss every run reached (so each run
# has a time to it). Wall times are worker 0's; held-out losses come from
# whichever worker evaluates (rank 0, every 50 of its steps).
# ASYNC_LR=share gives every worker --async_lr share (SSP/ASP pushes at
# the learning rate times the worker's share of the batch; BSP unchanged).
# Run from the repository root: bash bench/stragglers.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_build strata
root=$(mktemp -d /tmp/strata-stragglers-XXXXXX)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$root"' EXIT
linux_doc_corpus "$root/linux-doc.txt"
echo "# load: $(uptime)" >&2

steps=${STEPS:-600} rounds=${ROUNDS:-3}
a_from=$((steps / 6)) a_to=$((steps / 2))
model=(--layers 2 --heads 4 --width 64 --context 64 --data "$root/linux-doc.txt"
  --batch 16 --steps "$steps" --seed 3 --lr 0.003 --warmup 20
  --eval_every 50 --log_every 100000 --device cpu
  --async_lr "${ASYNC_LR:-full}")

run() {  # mode round
  local mode=$1 round=$2 dir="$root/${1/:/}-$2" workers=()
  mkdir -p "$dir"
  pids=()
  start_cluster "$dir" --consistency "$mode"
  for w in 0 1 2 3; do
    local extra=()
    [[ $w == 1 ]] && extra=(--slowdown 3 --slowdown_steps "$a_from:$a_to")
    [[ $w == 2 ]] && extra=(--slowdown 1.5 --jitter 0.5 --slowdown_steps "$a_to:-1")
    ./build/cli/strata worker --scheduler "$addr" --workers 4 "${model[@]}" \
      --metrics "$dir/metrics-$w.jsonl" "${extra[@]}" \
      2>"$dir/worker$w.log" & workers+=($!)
  done
  local failed=0
  for p in "${workers[@]}"; do wait "$p" || failed=1; done
  local switches
  switches=$(grep -c "ledger: switched from" "$dir/scheduler.log" || true)
  kill "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  if [[ $failed == 1 ]]; then
    tail -n 5 "$dir"/worker*.log "$dir/scheduler.log" >&2
    exit 1
  fi
  python3 - "$dir" "$mode" "$round" "$a_from" "$a_to" "$switches" <<'PY'
import glob, json, sys
d, mode, rnd, a_from, a_to, switches = sys.argv[1:]
a_from, a_to = int(a_from), int(a_to)
rows = [json.loads(l) for l in open(d + "/metrics-0.jsonl")]
at = {r["step"]: r["elapsed_s"] for r in rows}
wall = rows[-1]["elapsed_s"]
evals = []
for f in glob.glob(d + "/metrics-*.jsonl"):
    evals += [(r["elapsed_s"], r["eval_loss"]) for r in map(json.loads, open(f))
              if "eval_loss" in r]
evals.sort()
steps = sorted(at)
def when(step):  # worker 0's elapsed at its first step >= step
    return next(at[s] for s in steps if s >= step) if step <= steps[-1] else wall
print("stragglers_run %s %s %.2f %.4f %s" % (mode, rnd, wall, evals[-1][1], switches))
print("stragglers_raw %s %s A %.2f B %.2f evals %s" % (
    mode, rnd, when(a_to) - when(a_from), wall - when(a_to),
    " ".join("%.2f:%.4f" % e for e in evals)))
PY
}

out=$(
  for round in $(seq "$rounds"); do
    for mode in bsp ssp:2 asp auto; do run "$mode" "$round"; done
  done
)
grep "^stragglers_run" <<<"$out"
python3 - <<PY
import statistics as st
raw = [l.split() for l in """$out""".splitlines() if l.startswith("stragglers_raw")]
runs = {}
for f in raw:
    mode = f[1]
    evals = [tuple(map(float, e.split(":"))) for e in f[8:]]
    runs.setdefault(mode, []).append(dict(A=float(f[4]), B=float(f[6]), evals=evals))
target = max(min(l for _, l in r["evals"]) for rs in runs.values() for r in rs)
print("stragglers_target %.4f" % target)
for mode, rs in runs.items():
    to = [next(t for t, l in r["evals"] if l <= target) for r in rs]
    print("stragglers_phase_s %s A %.2f" % (mode, st.median(r["A"] for r in rs)))
    print("stragglers_phase_s %s B %.2f" % (mode, st.median(r["B"] for r in rs)))
    print("stragglers_to_target_s %s %.2f" % (mode, st.median(to)))
    print("stragglers_final_loss %s %.4f" % (mode, st.median(r["evals"][-1][1] for r in rs)))
PY
