#!/usr/bin/env bash
# Packs the GPU tests and benchmarks, built here against Debian 12's
# libraries, into a folder that runs on a machine which has a CUDA driver
# and CUDA 13's runtime libraries but none of Debian's packages (the lent
# GPU machine: see docs/BENCHMARKS.md, "On a GPU machine").
#
#   scripts/gpu-bundle.sh [DIR]     (default .gpu-bundle, git-ignored)
#
# and DIR.tar.xz, the same compressed (about a third of the size) for the
# device tool's 64 MiB limit: carry it and start with `tar xJf DIR.tar.xz`.
#
# DIR/bin holds stripped binaries; DIR/lib every shared library they load
# except CUDA's own (libcudart, libcublas, libcublasLt, libcuda), with
# Debian's glibc and its loader, so the host's glibc does not matter;
# DIR/run starts one of them through that loader:
#   DIR/run kernels_cuda_test --gtest_brief=1
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-.gpu-bundle}"
build="${BUILD_DIR:-build-gpu}"
# The GPU tests, the GPU benchmark, the RAM tier's benchmark (that
# machine's own disk: `DIR/run tier_bench --dir /var/tmp/tier`, after
# `findmnt -T /var/tmp` shows a disk, not tmpfs), and the strata
# binary itself (so that `strata local --device cuda` runs a whole cluster
# there).
targets=(kernels_cuda_test gpt_cuda_test gpt_cuda_moe_test gpu_train_bench tier_bench strata)

if [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "gpu-bundle: no CUDA toolkit at /usr/local/cuda" >&2
  exit 1
fi
if [[ ! -f "${build}/build.ninja" ]]; then
  bash scripts/install-deps.sh
  cmake -S . -B "${build}" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSTRATA_CUDA=ON >/dev/null
fi
ninja -C "${build}" "${targets[@]}" >&2

rm -rf "${out}"
mkdir -p "${out}/bin" "${out}/lib"
for t in "${targets[@]}"; do
  # The newest: a folder a target moved out of may keep its old binary.
  bin="$(find "${build}" -name "${t}" -type f -perm -u+x -printf '%T@ %p\n' |
    sort -rn | head -1 | cut -d' ' -f2-)"
  strip -o "${out}/bin/${t}" "${bin}"
  # Every resolved library except CUDA's, which the GPU machine provides
  # in the version that matches its driver.
  ldd "${bin}" | awk '$3 ~ /^\// { print $3 }' |
    grep -Ev '/(libcudart|libcublas|libcublasLt|libcuda)\.so' |
    while read -r lib; do cp -Lu "${lib}" "${out}/lib/"; done
done
cp -L /lib64/ld-linux-x86-64.so.2 "${out}/lib/"

cat >"${out}/run" <<'RUN'
#!/usr/bin/env bash
# Runs DIR/bin/$1 through the bundled loader and libraries; CUDA's come
# from the host (the usual places, then CUDA_LIB_DIRS if set).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cuda_dirs="/usr/local/cuda/lib64:/usr/local/cuda/lib:/usr/local/nvidia/lib64"
cuda_dirs+=":/usr/lib/x86_64-linux-gnu:/usr/lib64"
# pip's CUDA wheels (the GPU machine's PyTorch image) keep them here.
for d in /usr/local/lib/python3*/dist-packages/nvidia/cu13/lib \
         /usr/local/lib/python3*/site-packages/nvidia/cu13/lib \
         /usr/local/lib/python3*/dist-packages/nvidia/cublas/lib; do
  [[ -d "$d" ]] && cuda_dirs+=":$d"
done
[[ -n "${CUDA_LIB_DIRS:-}" ]] && cuda_dirs="${CUDA_LIB_DIRS}:${cuda_dirs}"
prog="$1"; shift
cmd="${here}/lib/ld-linux-x86-64.so.2 --library-path ${here}/lib:${cuda_dirs} ${here}/bin/${prog}"
# `strata local` starts its processes the same way (cli/process.h); only
# strata is told, so no other program inherits it.
if [[ "${prog}" == strata ]]; then export STRATA_SELF_EXEC="${cmd}"; fi
exec ${cmd} "$@"
RUN
chmod +x "${out}/run"
tar cJf "${out}.tar.xz" "${out}"
du -sh "${out}" "${out}.tar.xz" >&2
