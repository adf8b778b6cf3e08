#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps, about 60 s after the start; any card): main with
# diag-timeline.patch (each kernel of a step records its CTAs' first and last start and end by
# %globaltimer; the benchmarks print three graph replays' timelines), on the LATENT rows whose step
# costs are in question and on PREFILL's causal 4 x 2k. The recording lengthens the steps (16h
# 1 x 64k by about 7 us): read the order and the gaps (thirty-first measurement). Per attention CTA
# the patch also records its start, first chained wait, first landed tile and end, printed as
# quantiles over the CTAs (thirty-second measurement).
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
git apply doc/wip/diag-timeline.patch || exit 1
# SETUP_TWICE=1: the LATENT producers run their first unit's setup once more first, discarded
# (diag-setup-twice.patch): whether the startup chain is cold code and lines or its reads
[ -n "${SETUP_TWICE:-}" ] && { git apply doc/wip/diag-setup-twice.patch || exit 1; }
# SETUP_STEPS=1: four more events inside the LATENT producers' first-unit set-up
# (diag-setup-steps.patch): the search's lengths landed, the unit's rows, the rows' key union, the
# unit slot written
[ -n "${SETUP_STEPS:-}" ] && { git apply doc/wip/diag-setup-steps.patch || exit 1; }
# CTA_SM=1 (with SETUP_STEPS=1): each attention CTA's multiprocessor beside its end
# (diag-cta-sm.patch): whether the CTAs that end last are the same multiprocessors in each replay
[ -n "${CTA_SM:-}" ] && { git apply doc/wip/diag-cta-sm.patch || exit 1; }
tail -1 cuda/common/diag_timeline.cuh | grep -q "namespace pa" || { echo "header cut"; exit 1; }
rm -rf build-d && meson setup build-d -Dgpu_archs=90a -Dbuildtype=release > $O/setup.log 2>&1 &&
  ninja -C build-d bench/pa_bench_latent bench/pa_bench_prefill > $O/build.log 2>&1 ||
  { tail -30 $O/build.log; exit 1; }
# its first run hung (thirtieth measurement, call 7): one quick row first, stop if it prints no
# timeline (rc 124: the timeout; 2: a CUDA error, in the log)
PA_DIAG_TIMELINE=1 timeout 25 build-d/bench/pa_bench_latent --quick --only "16h 1x64k q1 block 64" \
  > $O/first.txt 2>&1
rc=$?
grep -q timeline $O/first.txt || { echo "no timeline (rc $rc):"; tail -20 $O/first.txt; exit 1; }
n=0
for row in "16h 1x64k q1 block 64" "16h 64x4k q1 block 64" "128h 64x4k q1 block 64" \
           "128h 128x4k q1 block 64"; do
  n=$((n + 1))
  PA_DIAG_TIMELINE=1 timeout 60 build-d/bench/pa_bench_latent --only "$row" > $O/row$n.txt 2>&1
  echo "$row: rc $?"
  grep -E "LATENT  |timeline 0|error|FAIL" $O/row$n.txt | head -3
  grep -A16 "timeline 0" $O/row$n.txt | grep "^    cta" | cut -c1-140
  grep "cta end by sm" $O/row$n.txt
done | tee $O/latent.txt
[ -n "$NO_PREFILL" ] && exit 0
PA_DIAG_TIMELINE=1 timeout 120 build-d/bench/pa_bench_prefill --quick --no-unfused \
  --only "causal 4x2k" > $O/prefill.txt 2>&1
echo "prefill: rc $?"
grep -E "PREFILL|timeline|error|FAIL" $O/prefill.txt
