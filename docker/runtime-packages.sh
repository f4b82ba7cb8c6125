#!/usr/bin/env bash
# Prints the Debian packages that hold the shared libraries BINARY links
# (one per line), so the runtime image installs exactly those. Libraries
# outside any package (the CUDA toolkit's) are skipped.
set -euo pipefail
binary="$1"
ldd "${binary}" | awk '$3 ~ /^\// { print $3 }' | while read -r lib; do
  dpkg -S "$(readlink -f "${lib}")" 2>/dev/null ||
    dpkg -S "${lib}" 2>/dev/null || true
done | cut -d: -f1 | sort -u
