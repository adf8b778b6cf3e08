#!/usr/bin/env bash
# Profiles one kernel launch with ncu's source counters and writes its SASS, instruction by
# instruction, with the warp-stall samples and execution counts, as CSV (for reading where a
# kernel's warps wait on a machine without ncu):
#
#   tools/ncu-sass.sh BUILD OUTDIR NAME KERNEL_REGEX BENCH [ARGS...]
#
# KERNEL_REGEX is matched against the kernel function's name without its template arguments.
# Skips the first three matching launches (the bench's check and warm-up), profiles the fourth with
# `--set full` and SourceCounters, `--clock-control none`; writes OUTDIR/NAME.ncu-rep and
# OUTDIR/NAME-sass.csv (ncu's source page) and prints the kernel's time.
set -eu
build=$1 outdir=$2 name=$3 kernel=$4
shift 4
bench=$1
shift
mkdir -p "$outdir"
ncu --clock-control none --set full --section SourceCounters --import-source no \
  -k "regex:$kernel" -s 3 -c 1 -f -o "$outdir/$name" "$build/bench/$bench" "$@" \
  >"$outdir/$name.log" 2>&1
ncu -i "$outdir/$name.ncu-rep" --page source --csv --print-source sass >"$outdir/$name-sass.csv"
ncu -i "$outdir/$name.ncu-rep" --page raw --csv --metrics gpu__time_duration.sum |
  tail -n 1 | sed "s/^/$name: /"
