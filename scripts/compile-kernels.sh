#!/usr/bin/env bash
# The last step of setup: compile the engine's kernels once, into numba's on-disk cache, by
# running the demo at the tiny scale (a YSB dataset of ~30k rows, a kill recovered, push-up,
# the codecs).  Every later run loads the compiled code instead of compiling it: `make demo`
# and the first query then start at once.  Not fatal: without it kernels compile on first use.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
out=$(mktemp -d)
start=$(date +%s)
echo "setup: compiling the kernels (numba's cache; a tiny demo run, about 2-4 minutes) ..."
if "$VENV/bin/scabbard" demo --scale tiny --output "$out" > "$out/log" 2>&1; then
  echo "setup: kernels compiled in $(( $(date +%s) - start )) s"
else
  echo "setup: compiling ahead failed (they compile on first use instead); its log:" >&2
  tail -5 "$out/log" >&2
fi
rm -rf "$out"
exit 0
