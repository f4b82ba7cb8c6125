#!/usr/bin/env bash
# A replica catching up a large shard while a worker trains: one slot with
# --replicas 2, its primary holding a toy model of DIM floats with AdamW
# (weights and two moments: 12 bytes a parameter), one toy worker pushing
# it. Once the worker has trained a few steps the backup is killed and,
# once the view dropped it, a new server joins the slot; the primary pauses the slot's changes while it sends its state
# (server/replica_catch_up.h). Prints the state's bytes, the pause
# (`catch_up_pause_s`), the transfer's rate (`catch_up_GBps`: bytes over
# the pause) and its ratio to loopback TCP measured by iperf3 in the same
# run (`catch_up_ratio_to_tcp`), which bounds a transfer to another host.
# Run from the repository root: bash bench/catch_up.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
need_cmd iperf3 iperf3
bench_build strata
DIM=${DIM:-8388608}  # 32 MiB of weights, 96 MiB of state
CHUNK_BYTES=${CHUNK_BYTES:-4194304}

dir=$(mktemp -d /tmp/strata-catch-up-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT

tcp=$(loopback_tcp_GBps 3)
printf "loopback_tcp_GBps %.3f\n" "$tcp"

./build/cli/strata scheduler --listen 127.0.0.1:0 --num_shards 1 --replicas 2 \
  --address_file "$dir/addr" 2>"$dir/scheduler.log" &
pids+=($!)
for _ in $(seq 100); do [ -s "$dir/addr" ] && break; sleep 0.1; done
addr=$(cat "$dir/addr")
wait_for() {  # wait_for FILE TEXT [TRIES]
  for _ in $(seq "${3:-600}"); do grep -q "$2" "$1" && return 0; sleep 0.1; done
  echo "no '$2' in $1" >&2; tail -5 "$1" >&2; return 1
}
./build/cli/strata server --scheduler "$addr" --shard 0 2>"$dir/primary.log" &
pids+=($!)
wait_for "$dir/primary.log" "serving on"
# The job starts with both replicas (a slot's first registration waits for
# them); the backup is then killed, and the joiner takes its place.
./build/cli/strata server --scheduler "$addr" --shard 0 2>"$dir/backup.log" &
backup=$!
pids+=($backup)
disown
wait_for "$dir/backup.log" "slot 0 backup of member"
./build/cli/strata toy --scheduler "$addr" --workers 1 --steps 100000000 --batch 8 \
  --dim "$DIM" --samples 16 --optimizer adamw --lr 0.001 \
  --chunk_bytes "$CHUNK_BYTES" --log_every 1 >"$dir/worker.log" 2>&1 &
pids+=($!)
wait_for "$dir/worker.log" "step 3 " 1200
kill -9 "$backup"
# The primary forwarded to no backup at its start too: wait for the second.
for _ in $(seq 100); do
  [ "$(grep -c "forwarding to 0" "$dir/primary.log")" -ge 2 ] && break
  sleep 0.1
done
./build/cli/strata server --scheduler "$addr" --shard 0 2>"$dir/joiner.log" &
pids+=($!)
wait_for "$dir/joiner.log" "installed the state of member" 1200
wait_for "$dir/primary.log" "caught member"
steps_before=$(grep -c "batch_loss" "$dir/worker.log")
sleep 2
steps_after=$(grep -c "batch_loss" "$dir/worker.log")
line=$(grep -o "caught member [0-9]* up: .* paused [0-9.]*" "$dir/primary.log" | tail -1)
echo "$line s"
bytes=$(echo "$line" | sed -E 's/.* ([0-9]+) bytes.*/\1/')
pause=${line##* }
echo "catch_up_state_bytes $bytes"
echo "catch_up_pause_s $pause"
python3 - "$bytes" "$pause" "$tcp" <<'EOF'
import sys
b, p, tcp = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
rate = b / p / 1e9
print("catch_up_GBps %.3f" % rate)
print("catch_up_ratio_to_tcp %.3f" % (rate / tcp))
EOF
echo "worker steps in the 2 s after the catch-up: $((steps_after - steps_before))"
grep -q "slot 0 backup of member" "$dir/joiner.log" && echo "joiner is the slot's backup"
