#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs a local cluster
# (scheduler, servers and workers as separate processes) that trains a model.
# Extra arguments go to `strata local` (see `build/cli/strata local --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh strata
exec ./build/cli/strata local "$@"
