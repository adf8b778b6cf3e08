#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps, about 200 s on an H100; any card): does the LATENT
# producers' start chain (about 2 us per dependent read) wait on DRAM?
# 1. tools/ab-patches builds main, `pf` (latent-write-prefetch.patch: the write kernel asks the
#    narrow kernel's first reads into L2) and `warm` (diag-warm-inputs.patch, bench only) at once;
#    the LATENT matrix in 4 shards and memcheck on pf; pa_bench_latent's 16-head rows twice each.
# 2. the warm tree's bench with the step's small inputs read into L2 just before each step
#    (PA_DIAG_WARM_INPUTS=1) against a decoy read of the same size (=2) and none (=0),
#    alternating: if 1 beats 2 by microseconds, the chain's reads wait on DRAM.
source .devdeps/env.sh
nvidia-smi -L
TESTS= TESTS_pf=latent SHARDS=4 RACECHECK=0 RUNS=2 BENCH_FIRST=1 \
  BENCHES="pa_bench_latent --quick --only 16h" \
  timeout 300 tools/ab-patches pf=doc/wip/latent-write-prefetch.patch \
  warm=doc/wip/diag-warm-inputs.patch > $OUT/ab.txt 2>&1
echo "ab rc $?"
tail -24 $OUT/ab.txt
B=/tmp/ab-warm/build-ab/bench/pa_bench_latent
for round in 1 2; do
  for w in 0 1 2; do
    for row in "16h 1x64k q1 block 64" "16h 64x4k q1 block 64"; do
      printf "warm %s round %s: " $w $round
      PA_DIAG_WARM_INPUTS=$w timeout 40 $B --quick --only "$row" | grep -E "LATENT  |FAIL" | cut -c1-60
    done
  done
done
