#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps, about 300 s on an H100; any card, the H200 the one
# that matters) for issue 17's 16-head rows:
# 1. latent-guess-l2.patch against main: the LATENT matrix in 4 shards and memcheck on the patch,
#    pa_bench_latent --quick three times each (the 16-head rows print their read-alone floor);
# 2. diag-latent-splits.patch on main: the 16-head rows at forced split counts
#    (PA_DIAG_LATENT_SPLITS=N: N splits of the table's capacity, units claimed from the schedule
#    kernel's counter; 0: the plan's own, units by CTA index). Does finer, dynamically claimed
#    work shorten 16 heads x 64 x 4k, whose CTAs end 13-17 us apart for the same 32 tiles? What
#    does the schedule path cost at 1 x 64k (128: the plan's split, claimed)?
source .devdeps/env.sh
nvidia-smi -L
TESTS= TESTS_guess=latent SHARDS=4 RACECHECK=0 RUNS=3 BENCH_FIRST=1 \
  BENCHES="pa_bench_latent --quick" \
  timeout 330 tools/ab-patches guess=doc/wip/latent-guess-l2.patch > $OUT/ab.txt 2>&1
echo "ab rc $?"
tail -32 $OUT/ab.txt | grep -v "UNFUSED\|^128h .*fp8"
git apply doc/wip/diag-latent-splits.patch || exit 1
(meson setup build-v -Dgpu_archs=90a -Dbuildtype=release && ninja -C build-v bench/pa_bench_latent) \
  > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
B=build-v/bench/pa_bench_latent
for n in 0 2 3 4 8 16 0; do
  echo "== splits $n"
  PA_DIAG_LATENT_SPLITS=$n timeout 30 $B --quick --only "16h 64x4k q1 block 64" |
    grep -E "LATENT |FAIL"
done
for n in 0 128 256 64 0; do
  echo "== splits $n"
  PA_DIAG_LATENT_SPLITS=$n timeout 30 $B --quick --only "16h 1x64k q1 block 64" | grep -E "LATENT |FAIL"
done
