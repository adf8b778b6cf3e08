#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps, about 300 s after the start; the H200 for the bars):
# units-and-merge-chunks.patch (units by CTA index in the narrow and whole-tile LATENT kernels
# only, and the merge a CTA per 128 value channels) against main: the LATENT matrix and memcheck,
# pa_bench_latent --quick twice each, the whole pa_bench_latent on the patch (the issue 17 bars),
# then diag-timeline-on-both.patch's timeline of 16h 1 x 64k on top of it.
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
OUT=/tmp/abm TESTS= TESTS_both=latent SHARDS=4 RACECHECK=0 BENCHES="pa_bench_latent --quick" \
  RUNS=2 BENCH_FIRST=1 timeout 400 tools/ab-patches both=doc/wip/units-and-merge-chunks.patch \
  > $O/abm.txt 2>&1
tail -22 $O/abm.txt
timeout 150 /tmp/ab-both/build-ab/bench/pa_bench_latent > $O/bars.txt 2>&1
grep -E "LATENT|UNFUSED|copy|GEMM" $O/bars.txt | head -40
cd /tmp/ab-both && git init -q . 2>/dev/null; git apply "$OLDPWD/doc/wip/diag-timeline-on-both.patch" &&
  ninja -C build-ab bench/pa_bench_latent > $O/tl-build.log 2>&1 &&
  for row in "16h 1x64k q1 block 64" "16h 64x4k q1 block 64"; do
    PA_DIAG_TIMELINE=1 timeout 30 build-ab/bench/pa_bench_latent --only "$row" 2>&1 |
      grep -E "LATENT  |timeline|error"
  done
