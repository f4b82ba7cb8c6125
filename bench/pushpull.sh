#!/usr/bin/env bash
# Push+pull throughput against two servers on loopback, a 256 MiB model, for
# chunks (values) of 4 and 64 MiB, 1 and 2 workers, with payloads through
# shared memory (the default for processes on one host) and in gRPC
# messages; each against iperf3 on 127.0.0.1 measured in the same run.
# Run from the repository root: bash bench/pushpull.sh
# CONFIGS="4:1:1 64:2:0" picks configurations (chunk MiB:workers:shm), shm
# 0 for gRPC messages, 1 for shared-memory slots, 2 for the client's
# buffers in a region the servers map (a worker's model: PsClient::
# ShareTensors), 3 for the bulk plane (--wire ucx, shared memory off; UCX
# on its TCP transport, UCX_TLS=tcp, as between hosts), each also against
# its gRPC-message figure (pushpull_ucx_ratio_to_grpc).
# Then the gRPC and bulk-plane configurations (TLS_CONFIGS) again on a
# second cluster with mutual TLS on every channel, each against its
# plaintext figure (pushpull_tls_ratio_to_plaintext): on the bulk plane
# that is the cost of sealing each payload with AES-256-GCM. Shared memory
# carries payloads outside the channel, so TLS does not touch them.
# Then SMALL_CONFIGS (chunk KiB:path, path 0 gRPC, 1 shared-memory slots,
# 2 the tensor region): a 2 MiB model in small chunks, each op its own
# call against ops sharing calls (--batch_kib 64; in place in the tensor
# region a 128 KiB chunk shares them too) (pushpull_batch_speedup).
# Then BF16_CONFIGS with gradients pushed and weights pulled as bf16 (a GPU
# worker's default), counted in the model's fp32 bytes, each against its
# fp32 figure (pushpull_bf16_speedup).
# Then REPLICA_CONFIGS on a cluster whose slots have a primary and a
# backup each (--replicas 2: every push goes on to the backup before it is
# answered), each against its figure with one server per slot
# (pushpull_replicas_ratio; target >= 0.8).
# With WIRE_GBIT=N everything runs in a network namespace whose loopback a
# token bucket holds to N Gbit/s (bench/common.sh, in_wire_namespace), as
# between hosts: iperf3 then measures that link, and the ratios say how
# close the sync path comes to it where the link, not the CPU, is the
# limit. Shared memory does not cross the link, so CONFIGS and BF16_CONFIGS
# default to gRPC configurations there. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
if [[ -z "${STRATA_WIRE_NS:-}" ]]; then
  bench_build strata pushpull_bench
  need_cmd iperf3 iperf3
fi
in_wire_namespace "$0" "$@" && exit 0
default_configs="4:1:2 4:1:1 4:1:0 4:1:3 4:2:1 4:2:0 4:2:3 64:1:2 64:1:1 64:1:0 64:1:3 64:2:1 64:2:0 64:2:3"
bf16_default_configs="4:1:1 4:1:0 64:1:0"
if [[ -n "${WIRE_GBIT:-}" ]]; then
  default_configs="4:1:0 4:1:3 4:2:0 4:2:3 64:1:0 64:1:3 64:2:0 64:2:3"
  bf16_default_configs="4:1:0 64:1:0"
fi

# The bulk plane's UCX, servers' and workers' alike, on TCP: on one host
# it would pick shared memory, which is not what crosses hosts.
export UCX_TLS="${UCX_TLS:-tcp}"
dir=$(mktemp -d /tmp/strata-pushpull-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT

tcp=$(loopback_tcp_GBps 5)
printf "loopback_tcp_GBps %.3f\n" "$tcp"

# run_config CONFIG [BENCH FLAGS...]: one configuration against the
# cluster at $addr; sets `name` and `pp`.
run_config() {
  local chunk workers shm
  IFS=: read -r chunk workers shm <<<"$1"; shift
  local kinds=(grpc shm tensors ucx)
  name="chunk${chunk}MiB_workers${workers}_${kinds[$shm]}"
  local wire=grpc
  [ "$shm" = 3 ] && wire=ucx
  ./build/bench/pushpull_bench --scheduler "$addr" --model_mib "${MODEL_MIB:-256}" \
    --chunk_mib "$chunk" --workers "$workers" --shm "$((shm == 1 || shm == 2))" \
    --tensors "$((shm == 2))" --wire "$wire" \
    --rounds "${ROUNDS:-4}" --repeats 3 "$@" >"$dir/pp.out" 2>"$dir/pp.err" ||
    { cat "$dir/pp.err" >&2; exit 1; }
  pp=$(awk '/^pushpull_GBps/ {print $2}' "$dir/pp.out")
}

start_cluster "$dir" --consistency asp
declare -A plain
for config in ${CONFIGS:-$default_configs}; do
  run_config "$config"
  plain[$name]=$pp
  printf "pushpull_GBps %s %.3f\n" "$name" "$pp"
  python3 -c "print('pushpull_ratio_to_tcp $name %.3f' % ($pp / $tcp))"
  grpc_name=${name%_ucx}_grpc
  if [[ "$name" == *_ucx && -n "${plain[$grpc_name]:-}" ]]; then
    python3 -c "print('pushpull_ucx_ratio_to_grpc $name %.3f' % ($pp / ${plain[$grpc_name]}))"
  fi
done

# Small chunks: a 2 MiB model in 16 KiB chunks (64 a server), where each
# call's own cost, not the bytes, sets the pace: every op its own call
# against queued ops sharing calls (PushBatch/PullBatch), for messages,
# shared-memory slots and the tensor region, 1 worker, 4 calls a server
# (a worker's default).
for small in ${SMALL_CONFIGS:-16:0 16:1 16:2 128:2}; do
  IFS=: read -r kib shm <<<"$small"
  kinds=(grpc shm tensors)
  name=chunk${kib}KiB_${kinds[$shm]}
  for batch in 0 64; do
    ./build/bench/pushpull_bench --scheduler "$addr" --model_mib 2 \
      --chunk_kib "$kib" --batch_kib "$batch" --in_flight 4 --shm "$((shm >= 1))" \
      --tensors "$((shm == 2))" --rounds 20 --repeats 3 \
      >"$dir/pp.out" 2>"$dir/pp.err" || { cat "$dir/pp.err" >&2; exit 1; }
    us[$batch]=$(awk '/^pushpull_us_per_op/ {print $2}' "$dir/pp.out")
    printf "pushpull_us_per_op %s_batch%s %s\n" "$name" "$batch" "${us[$batch]}"
  done
  python3 -c "print('pushpull_batch_speedup $name %.3f' % (${us[0]} / ${us[64]}))"
done

for config in ${BF16_CONFIGS:-$bf16_default_configs}; do
  run_config "$config" --bf16 1
  printf "pushpull_GBps bf16_%s %.3f\n" "$name" "$pp"
  python3 -c "print('pushpull_ratio_to_tcp bf16_$name %.3f' % ($pp / $tcp))"
  if [ -n "${plain[$name]:-}" ]; then
    python3 -c "print('pushpull_bf16_speedup $name %.3f' % ($pp / ${plain[$name]}))"
  fi
done

# The same through mutual TLS: a second cluster with `strata certs` files.
for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
wait 2>/dev/null || true
pids=()
export TLS_DIR="$dir/certs"
./build/cli/strata certs --out "$TLS_DIR" >/dev/null
mkdir -p "$dir/tls" && start_cluster "$dir/tls" --consistency asp
for config in ${TLS_CONFIGS:-4:1:0 4:2:0 64:1:0 64:2:0 4:1:3 4:2:3 64:1:3}; do
  run_config "$config" $(tls_flags worker)
  printf "pushpull_GBps tls_%s %.3f\n" "$name" "$pp"
  python3 -c "print('pushpull_ratio_to_tcp tls_$name %.3f' % ($pp / $tcp))"
  if [ -n "${plain[$name]:-}" ]; then
    python3 -c "print('pushpull_tls_ratio_to_plaintext $name %.3f' % ($pp / ${plain[$name]}))"
  fi
done

# Replicated slots: a primary and a backup per slot, plaintext.
for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
wait 2>/dev/null || true
pids=()
unset TLS_DIR
mkdir -p "$dir/replicas" && start_cluster "$dir/replicas" --consistency asp --replicas 2
sleep 1  # the primaries first: a slot's oldest server is its primary
for s in 0 1; do start_server "$dir/replicas" $s; done
for config in ${REPLICA_CONFIGS:-4:1:1 4:1:0 64:1:0 4:2:0}; do
  run_config "$config"
  printf "pushpull_GBps replicas2_%s %.3f\n" "$name" "$pp"
  python3 -c "print('pushpull_ratio_to_tcp replicas2_$name %.3f' % ($pp / $tcp))"
  if [ -n "${plain[$name]:-}" ]; then
    python3 -c "print('pushpull_replicas_ratio $name %.3f' % ($pp / ${plain[$name]}))"
  fi
done
