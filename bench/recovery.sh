#!/usr/bin/env bash
# Recovery from a worker killed with SIGKILL: a BSP job of toy workers
# (scheduler with the default lease, two servers, three workers) loses one
# worker KILLS times (a new worker joins after each kill). For each kill it
# measures the seconds from the kill to the first step the survivors
# complete after stalling on it, and prints the median as
# `worker_recovery_s <x>` with its ratio to the lease (the bound the design
# gives: the lease, plus the lease check, plus one redone step).
# Then recovery from a server killed with SIGKILL and started again at once
# on its data directory (snapshots every SNAPSHOT_EVERY steps), SERVER_KILLS
# times: the seconds from the kill to the first step the workers complete
# after the job rolled back, median as `server_recovery_s <y>`, with its
# ratio to the lease (which the restart does not wait for: it supersedes
# the old server's lease).
# Then the scheduler killed with SIGKILL and started again on its data
# directory OUTAGE_S seconds later: the workers train on with the steps
# they leased ahead (cluster/lease_ahead.h). It prints the steps a worker
# completed during the outage against the steps it completes in as long
# before it (`scheduler_outage_steps`, its ratio) and the longest stall of
# that worker's steps from the kill to the restart
# (`scheduler_outage_max_stall_s`; without leases ahead it is the outage).
# Last, failover: a second cluster whose two slots have a primary and two
# backups each (--replicas 3) and three workers; each slot's primary is
# killed with SIGKILL in turn. It prints the median seconds from a kill to
# the first step the workers complete after stalling on it
# (`server_failover_s`, with its ratio to the lease: a backup takes over
# when the primary's lease runs out), then the same for a backup stopped
# with SIGSTOP (`backup_lost_s`: its primary's forwards fail until the view
# drops it), a new server of slot 0 catching up while the workers train
# (`replica_catch_up_s`, `replica_catch_up_pause_s`: how long the primary
# paused the slot's changes to send its state), and the steps computed
# twice in the watched worker's log (`failover_steps_recomputed`: a
# rollback would redo the steps since a snapshot; the target is 0).
# Run from the repository root: bash bench/recovery.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_build strata
KILLS=${KILLS:-5}
SERVER_KILLS=${SERVER_KILLS:-3}
LEASE_MS=${LEASE_MS:-2500}
OUTAGE_S=${OUTAGE_S:-10}
# Emulated compute per sample (strata toy --sample_cost_us): 400 us makes a
# step of 48 samples over three workers about 10 ms, so the 2048 steps a
# worker may lease ahead (scheduler/ledger.h kMaxLeaseAhead) cover the
# outage.
SAMPLE_COST_US=${SAMPLE_COST_US:-400}
# A snapshot every 200 steps (about a second of these toy steps): the
# scheduler picks the rollback step from the servers' snapshot lists, which
# come with their heartbeats (a fifth of the lease); with the default 3
# kept, snapshots made faster than that would leave no step both servers
# are known to hold, and the job would roll back to step 0.
export SNAPSHOT_EVERY=${SNAPSHOT_EVERY:-200}

# median X...: the median of the numbers given.
median() { printf "%s\n" "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

dir=$(mktemp -d /tmp/strata-recovery-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; if [ -n "${KEEP:-}" ]; then rm -rf "$KEEP"; cp -r "$dir" "$KEEP"; fi; rm -rf "$dir"; }
trap cleanup EXIT

start_cluster "$dir" --lease_ms "$LEASE_MS" --data_dir "$dir/scheduler_state"
scheduler_pid=${pids[0]}

# start_worker N: a toy worker logging every step to $dir/workerN.log.
workers=()
start_worker() {
  ./build/cli/strata toy --scheduler "$addr" --workers 3 --steps 100000000 --batch 48 \
    --dim 64 --samples 960 --chunk_bytes 64 --log_every 1 \
    --sample_cost_us "$SAMPLE_COST_US" >"$dir/worker$1.log" 2>&1 &
  pids+=($!)
  workers+=($!)
  disown  # the kills are the point: no "Killed" notices
}
for w in 0 1 2; do start_worker $w; done

# Measures one kill: waits until a survivor's log (a file) grows steadily,
# kills the pid (with $SIGNAL, default SIGKILL), starts the command given after the log (if any: a
# restart; its stderr goes to $RESTART_LOG), then watches the log: the
# recovery is the time from the kill to the first line written after a
# stall of at least 0.3 s (or to the first line, if the survivors never
# stalled). Prints the seconds, and the restarted pid if any.
measure='
import os, signal, subprocess, sys, time
pid, log, restart = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
size = lambda: os.path.getsize(log)
s0 = size(); t = time.time()
while size() == s0:
    if time.time() - t > 60: sys.exit("the workers are not stepping")
    time.sleep(0.01)
time.sleep(0.5)
os.kill(pid, getattr(signal, os.environ.get("SIGNAL", "SIGKILL")))
t_kill = time.time()
if restart:
    restart = subprocess.Popen(restart, stdout=subprocess.DEVNULL,
                               stderr=open(os.environ["RESTART_LOG"], "a")).pid
last, last_t, stalled = size(), t_kill, False
while time.time() - t_kill < 120:
    now = size()
    if now != last:
        if stalled or time.time() - t_kill > 0.3:
            print("%.3f" % (time.time() - t_kill), restart or ""); sys.exit(0)
        last, last_t = now, time.time()
    elif time.time() - last_t >= 0.3:
        stalled = True
    time.sleep(0.005)
sys.exit("the survivors did not recover within 120 s")
'
times=()
# Before kill k (from 1) the live workers are k-1, k and k+1: kill k-1,
# watch k, then start k+2.
for k in $(seq "$KILLS"); do
  t=$(python3 -c "$measure" "${workers[$((k - 1))]}" "$dir/worker$k.log")
  t=${t% }
  echo "kill $k: ${t} s"
  times+=("$t")
  start_worker $((k + 2))
  sleep 1
done
median=$(median "${times[@]}")
echo "worker_recovery_s $median"
python3 -c "print('worker_recovery_ratio_to_lease %.3f' % ($median / ($LEASE_MS / 1000)))"

# Server kills: kill -9 server 1 and start it again at once; watch the
# newest worker's log as above (it stalls, then steps again from the
# snapshot the job rolled back to).
server_times=()
watch=$((KILLS + 1))  # a worker that is still alive
for k in $(seq "$SERVER_KILLS"); do
  out=$(RESTART_LOG="$dir/server1.log" python3 -c "$measure" "${server_pids[1]}" "$dir/worker$watch.log" \
    ./build/cli/strata server --scheduler "$addr" --shard 1 \
    --data_dir "$dir/server1" --snapshot_every "$SNAPSHOT_EVERY")
  t=${out% *}
  server_pids[1]=${out#* }
  pids+=("${server_pids[1]}")
  sleep 0.5
  rolled=$(grep -o "job's step [0-9]*\|restored snapshot of step [0-9]*" "$dir/server1.log" | tail -1)
  echo "server kill $k: ${t} s (${rolled:-no rollback logged})"
  server_times+=("$t")
  sleep 2
done
median=$(median "${server_times[@]}")
echo "server_recovery_s $median"
python3 -c "print('server_recovery_ratio_to_lease %.3f' % ($median / ($LEASE_MS / 1000)))"

# The scheduler's outage: kill it, start it again OUTAGE_S later on the same
# address and data directory; watch the newest live worker's log (a line a
# step) before and during the outage.
outage='
import os, signal, subprocess, sys, time
pid, log, outage, restart = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), sys.argv[4:]
lines = lambda: sum(1 for _ in open(log))
def watch(seconds):
    """Steps logged in `seconds`, and the longest gap between two of them."""
    t0 = time.time(); n0 = lines(); last_n, last_t, gap = n0, t0, 0.0
    while time.time() - t0 < seconds:
        n = lines()
        if n != last_n:
            gap = max(gap, time.time() - last_t); last_n, last_t = n, time.time()
        time.sleep(0.005)
    return lines() - n0, max(gap, time.time() - last_t)
before, _ = watch(outage)
os.kill(pid, signal.SIGKILL)
during, stall = watch(outage)
restarted = subprocess.Popen(restart, stdout=subprocess.DEVNULL,
                             stderr=open(os.environ["RESTART_LOG"], "a")).pid
print(before, during, "%.3f" % stall, restarted)
'
read -r before during stall scheduler_pid < <(RESTART_LOG="$dir/scheduler.log" \
  python3 -c "$outage" "$scheduler_pid" "$dir/worker$watch.log" "$OUTAGE_S" \
  ./build/cli/strata scheduler --listen "$addr" --num_shards 2 \
  --lease_ms "$LEASE_MS" --data_dir "$dir/scheduler_state")
pids+=("$scheduler_pid")
echo "scheduler_outage_steps $during (in ${OUTAGE_S} s before it: $before)"
python3 -c "print('scheduler_outage_steps_ratio %.3f' % ($during / max($before, 1)))"
echo "scheduler_outage_max_stall_s $stall (outage ${OUTAGE_S} s)"
sleep 2

# Failover: a replicated cluster of its own, three servers a slot (primaries
# registered first: a slot's oldest server is its primary), workers logging
# every step. Server n serves slot n % 2; 0 and 1 start as the primaries.
fdir="$dir/failover"
mkdir -p "$fdir"
./build/cli/strata scheduler --listen 127.0.0.1:0 --num_shards 2 --replicas 3 \
  --lease_ms "$LEASE_MS" --address_file "$fdir/addr" 2>"$fdir/scheduler.log" &
pids+=($!)
for _ in $(seq 100); do [ -s "$fdir/addr" ] && break; sleep 0.1; done
faddr=$(cat "$fdir/addr")
fservers=()
for n in 0 1 2 3 4 5; do
  ./build/cli/strata server --scheduler "$faddr" --shard $((n % 2)) \
    2>"$fdir/server$n.log" &
  pids+=($!)
  fservers+=($!)
  disown  # killed on purpose: no "Killed" notices
  for _ in $(seq 100); do grep -q "serving on" "$fdir/server$n.log" && break; sleep 0.1; done
done
for w in 0 1 2; do
  ./build/cli/strata toy --scheduler "$faddr" --workers 3 --steps 100000000 --batch 48 \
    --dim 64 --samples 960 --chunk_bytes 64 --log_every 1 \
    --sample_cost_us "$SAMPLE_COST_US" >"$fdir/worker$w.log" 2>&1 &
  pids+=($!)
  disown
done
failover_times=()
for s in 0 1; do
  t=$(python3 -c "$measure" "${fservers[$s]}" "$fdir/worker0.log")
  t=${t% }
  echo "primary of slot $s killed: ${t} s"
  failover_times+=("$t")
  sleep 2
done
median=$(median "${failover_times[@]}")
echo "server_failover_s $median"
python3 -c "print('server_failover_ratio_to_lease %.3f' % ($median / ($LEASE_MS / 1000)))"
# A backup whose host vanishes (SIGSTOP: it answers nothing; server 5, slot
# 1's last backup): the primary's forwards to it fail once the view drops
# it (cancelled, not left to their 30 s deadline) and the job goes on.
t=$(SIGNAL=SIGSTOP python3 -c "$measure" "${fservers[5]}" "$fdir/worker0.log")
t=${t% }
kill -CONT "${fservers[5]}" 2>/dev/null || true
echo "backup_lost_s $t (a backup stopped with SIGSTOP)"
# A new server of slot 0 joins while the workers train: it catches up from
# the slot's primary, which pauses the slot's changes while it sends its
# state (`replica_catch_up_pause_s`, its ratio to the lease: a failover
# stalls the workers about a lease), and becomes a backup
# (`replica_catch_up_s`: from its start to its state installed).
start=$(date +%s.%N)
./build/cli/strata server --scheduler "$faddr" --shard 0 2>"$fdir/server6.log" &
pids+=($!)
disown
for _ in $(seq 600); do
  grep -q "installed the state of member" "$fdir/server6.log" && break
  sleep 0.05
done
end=$(date +%s.%N)
caught=$(grep -ho "caught member [0-9]* up: .* paused [0-9.]*" "$fdir"/server*.log | tail -1)
pause=${caught##* }
echo "replica_catch_up_s $(python3 -c "print('%.3f' % ($end - $start))") ($caught s)"
echo "replica_catch_up_pause_s $pause"
python3 -c "print('replica_catch_up_pause_ratio_to_lease %.4f' % ($pause / ($LEASE_MS / 1000)))"
sleep 1
recomputed=$(grep -o "step [0-9]* batch_loss" "$fdir/worker0.log" | sort | uniq -d | wc -l)
rollbacks=$(grep -c "rolls back" "$fdir/scheduler.log" || true)
echo "failover_steps_recomputed $recomputed (rollbacks: $rollbacks; steps logged: $(grep -c 'batch_loss' "$fdir/worker0.log"))"
