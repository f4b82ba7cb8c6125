# Shared by the bench scripts: build what a benchmark needs in build/.
# (Sourced, not run.)

# need_cmd CMD PACKAGE: installs PACKAGE from Debian when CMD is missing.
need_cmd() {
  command -v "$1" >/dev/null 2>&1 && return 0
  local sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get install -y -q "$2" >/dev/null
}

# bench_build TARGET...: configures build/ (Release flags) if needed, then
# builds only the named targets.
bench_build() {
  if [ ! -f build/build.ninja ]; then
    bash scripts/install-deps.sh
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  fi
  cmake --build build --target "$@" -- -j"$(nproc)" >/dev/null
}

# join_figures KEY OURS THEIRS NAME EXPR: for each line "<label> <config> <y>"
# of THEIRS, finds the line "KEY <config> <x>" of OURS and prints
# "NAME <config> <EXPR>", EXPR an awk expression of x and y (x / y, say).
join_figures() {
  local key=$1 ours=$2 theirs=$3 name=$4 expr=$5 config y x
  while read -r _ config y; do
    [[ -n "${config}" ]] || continue
    x="$(awk -v c="${config}" -v k="${key}" '$1 == k && $2 == c { print $3 }' <<<"${ours}")"
    [[ -n "${x}" ]] || continue
    awk -v c="${config}" -v x="${x}" -v y="${y}" -v n="${name}" \
      "BEGIN { printf \"%s %s %.3f\\n\", n, c, ${expr} }"
  done <<<"${theirs}"
}

# tls_flags ROLE: the TLS flags of ROLE with the certificates in $TLS_DIR;
# nothing when TLS_DIR is unset.
tls_flags() {
  [ -n "${TLS_DIR:-}" ] || return 0
  echo "--tls_cert $TLS_DIR/$1.pem --tls_key $TLS_DIR/$1.key --tls_ca $TLS_DIR/ca.pem"
}

# start_cluster DIR [SCHEDULER FLAGS...]: starts a scheduler (2 shard slots,
# plus the flags) and two servers from build/, logging into DIR; appends
# their pids to the array `pids`, sets `addr` to the scheduler's address and
# `server_pids` to the servers' pids. With SNAPSHOT_EVERY set, server s keeps
# snapshots every that many steps in DIR/server<s> (start_server starts it
# again on it). With TLS_DIR set (`strata certs --out TLS_DIR`), every
# channel is mutual TLS with its certificates.
start_cluster() {
  local dir=$1; shift
  ./build/cli/strata scheduler --listen 127.0.0.1:0 --num_shards 2 "$@" \
    $(tls_flags scheduler) \
    --address_file "$dir/addr" 2>"$dir/scheduler.log" & pids+=($!)
  for _ in $(seq 100); do [ -s "$dir/addr" ] && break; sleep 0.1; done
  addr=$(cat "$dir/addr")
  server_pids=()
  for s in 0 1; do start_server "$dir" $s; done
}

# start_server DIR S: (re)starts server S of start_cluster's cluster.
start_server() {
  local dir=$1 s=$2 flags=()
  if [ -n "${SNAPSHOT_EVERY:-}" ]; then
    flags=(--data_dir "$dir/server$s" --snapshot_every "$SNAPSHOT_EVERY")
  fi
  ./build/cli/strata server --scheduler "$addr" --shard "$s" "${flags[@]}" \
    $(tls_flags server) \
    2>>"$dir/server$s.log" & pids+=($!)
  server_pids[s]=$!
}

# in_wire_namespace SCRIPT ARGS...: when WIRE_GBIT is set and the script is
# not yet inside its namespace, runs SCRIPT again in a network namespace of
# its own whose loopback a token bucket (tc tbf) holds to WIRE_GBIT Gbit/s,
# so that everything the script starts on 127.0.0.1 shares one link of that
# rate in both directions, as between hosts; returns 0 after that run (the
# caller exits). Returns 1 when the caller should go on itself: no
# WIRE_GBIT, or already inside. Needs root (ip netns, tc).
in_wire_namespace() {
  [[ -n "${WIRE_GBIT:-}" && -z "${STRATA_WIRE_NS:-}" ]] || return 1
  [[ "$(id -u)" -eq 0 ]] || { echo "$1 with WIRE_GBIT needs root (ip netns, tc)" >&2; exit 1; }
  local ns="strata-wire-$$" status=0
  ip netns add "$ns"
  ip netns exec "$ns" ip link set lo up
  ip netns exec "$ns" tc qdisc add dev lo root tbf rate "${WIRE_GBIT}gbit" \
    burst 1mb latency 100ms
  echo "load before: $(uptime)" >&2
  STRATA_WIRE_NS="$ns" ip netns exec "$ns" bash "$@" || status=$?
  echo "load after: $(uptime)" >&2
  ip netns del "$ns" 2>/dev/null || true
  [[ $status -eq 0 ]] || exit $status
  return 0
}

# with_servers NAME LAYERS HEADS WIDTH CONTEXT BATCH [RATIO]: prints
# "cpu_tokens_per_s_with_servers NAME <tokens/s>" of that GPT shape trained
# by one `strata worker` through two servers on loopback (BSP, AdamW on
# the servers, the default settings: gradients clipped to norm 1 with
# pushes streamed during backward, payloads through shared memory). With
# RATIO, the servers' --ram_budget is 1/RATIO of their share of the state.
# With REPLICATE=N each slot has N servers (--replicas N), the figure named
# cpu_tokens_per_s_with_replicas.
# Knobs (bench/cpu_train.sh): WORKERS, MICRO_BATCHES, FIGURE, WORKER_FLAGS,
# SERVER_FLAGS, SCHEDULER_FLAGS, TIER_DIR; `build` names the build tree.
with_servers() {  # name layers heads width context batch [state ratio]
  local name=$1 build=${build:-build} dir pids=() server_flags=() figure=${FIGURE:-cpu_tokens_per_s_with_servers}
  local workers=${WORKERS:-1} micro=${MICRO_BATCHES:-1} batch
  batch=$(( $6 * micro ))
  [[ "${micro}" == 1 ]] || name="${name}_x${micro}"
  dir=$(mktemp -d "${TIER_DIR:-/var/tmp}/strata-cpu-train-XXXXXX")
  local replicas=${REPLICATE:-1}
  [[ "${replicas}" == 1 ]] || figure=cpu_tokens_per_s_with_replicas
  "${build}/cli/strata" scheduler --listen 127.0.0.1:0 --num_shards 2 --replicas "${replicas}" \
    ${SCHEDULER_FLAGS:-} --address_file "${dir}/addr" 2>"${dir}/scheduler.log" & pids+=($!)
  for _ in $(seq 100); do [[ -s "${dir}/addr" ]] && break; sleep 0.1; done
  local addr; addr=$(cat "${dir}/addr")
  if [[ -n "${7:-}" ]]; then
    # Each server's share of the state (12 bytes per parameter) / ratio.
    local params budget
    params=$(( 50257 * $4 + $5 * $4 + $2 * (12 * $4 * $4 + 13 * $4) + 2 * $4 ))
    budget=$(( params * 12 / 2 / $7 ))
    server_flags=(--ram_budget "${budget}")
    figure=cpu_tokens_per_s_with_tier
  fi
  local r
  for r in $(seq 0 $((replicas - 1))); do
    # A slot's first server is its primary: the first replicas register first.
    [[ "$r" == 0 ]] || sleep 1
    for s in 0 1; do
      "${build}/cli/strata" server --scheduler "${addr}" --shard $s \
        --data_dir "${dir}/server$s-$r" "${server_flags[@]}" ${SERVER_FLAGS:-} 2>"${dir}/server$s-$r.log" & pids+=($!)
    done
  done
  local worker_args=(--scheduler "${addr}" --workers "${workers}" --layers "$2" --heads "$3" \
    --width "$4" --context "$5" --batch "${batch}" --micro_batches "${micro}" --vocab 50257 --steps 6 --eval_every 0 \
    --data /usr/share/common-licenses)
  for w in $(seq 2 "${workers}"); do
    "${build}/cli/strata" worker "${worker_args[@]}" ${WORKER_FLAGS:-} \
      --metrics "${dir}/metrics-$w.jsonl" 2>"${dir}/worker$w.log" & pids+=($!)
  done
  "${build}/cli/strata" worker "${worker_args[@]}" ${WORKER_FLAGS:-} \
    --metrics "${dir}/metrics.jsonl" 2>"${dir}/worker.log"
  # Steps 2..5 (after warm-up), from the elapsed time in the metrics.
  python3 - "${dir}/metrics.jsonl" "$name" "$(( $5 * batch ))" "$figure" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
t = [r["elapsed_s"] for r in rows]
tokens = int(sys.argv[3])
print("%s %s %.1f" % (sys.argv[4], sys.argv[2], tokens * (len(t) - 2) / (t[-1] - t[1])))
PY
  if [[ -n "${7:-}" ]]; then
    "${build}/cli/strata" status --scheduler "${addr}" 2>/dev/null | grep -o 'ram [^m]*MiB  spilled [^M]*MiB  hit rate [0-9.]*' >&2 || true
  fi
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "${dir}"
}

# loopback_tcp_GBps SECONDS: TCP's rate on 127.0.0.1 (iperf3, 1 MiB
# writes) in GB/s, the bound a transfer to another host meets first.
loopback_tcp_GBps() {
  local port=$((20000 + RANDOM % 20000))
  iperf3 -s -B 127.0.0.1 -p $port -1 >/dev/null 2>&1 &
  sleep 0.5
  iperf3 -c 127.0.0.1 -p $port -l 1M -t "$1" -J |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8e9)'
}

# linux_doc_corpus OUT: writes the Linux kernel's documentation (Debian's
# linux-doc-6.1, about 24 MB of reStructuredText) to OUT as one text,
# installing the package first when it is missing.
linux_doc_corpus() {
  local docs=/usr/share/doc/linux-doc-6.1/Documentation
  [[ -d "$docs" ]] || bash scripts/install-deps.sh
  find "$docs" -name '*.rst.gz' | sort | xargs zcat >"$1"
}
