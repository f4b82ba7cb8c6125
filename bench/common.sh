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
