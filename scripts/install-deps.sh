#!/usr/bin/env bash
# Installs the Debian 12 packages Strata builds and tests with, when any is
# missing. Nothing else is downloaded. Safe to run again.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config ccache git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  librocksdb-dev libabsl-dev libgtest-dev libgmock-dev
  libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev
  libopenblas-dev libcpp-httplib-dev libssl-dev iperf3 python3 yamllint
  clang libclang-rt-dev libgloo-dev libpcre2-dev libicu-dev libucx-dev
  python3-torch python3-numpy python3-dev pybind11-dev python3-venv
  python3-pip python3-setuptools python3-wheel
  # 24 MB of text for tests/compress_quality_test.cc
  linux-doc-6.1
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "Installing: ${missing[*]}" >&2
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}"
fi
