#!/usr/bin/env bash
# Runs one libFuzzer target of test/fuzz.
#   run.sh TARGET CORPUS           replays every input of the committed CORPUS once
#   run.sh TARGET CORPUS RUNS      fuzzes for RUNS inputs, starting from a scratch copy of CORPUS
#                                  (new inputs stay out of the tree); prints libFuzzer's summary
# Any crash, sanitizer report, leak, timeout (10 s an input) or out-of-memory (2 GB) exits
# non-zero; libFuzzer then writes the input to crash-* / timeout-* / oom-* in the current folder.
set -euo pipefail
target=$1 corpus=$2 runs=${3:-}
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
options=(-timeout=10 -rss_limit_mb=2048 -max_len=1024 -print_final_stats=1)
if [ -z "$runs" ]; then
  exec "$target" "${options[@]}" -runs=0 "$corpus"
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp -r "$corpus"/. "$scratch"/
"$target" "${options[@]}" -runs="$runs" -seed="${PA_FUZZ_SEED:-0}" "$scratch" "$corpus"
