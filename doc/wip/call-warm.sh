#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps, about 150 s; any card): diag-warm-inputs.patch on main,
# the two 16-head rows with the step's small inputs read into L2 just before each step
# (PA_DIAG_WARM_INPUTS=1) against a decoy read of the same size (=2) and none (=0), alternating.
# If 1 beats 2 by microseconds, the start chain's reads wait on DRAM (the previous step's stream
# evicted them from L2) and the write kernel could ask them into L2 for the attention kernel.
source .devdeps/env.sh
nvidia-smi -L
git apply doc/wip/diag-warm-inputs.patch || exit 1
(meson setup build-w -Dgpu_archs=90a -Dbuildtype=release && ninja -C build-w bench/pa_bench_latent) \
  > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
B=build-w/bench/pa_bench_latent
for round in 1 2; do
  for w in 0 1 2; do
    for row in "16h 1x64k q1 block 64" "16h 64x4k q1 block 64"; do
      printf "warm %s round %s: " $w $round
      PA_DIAG_WARM_INPUTS=$w timeout 40 $B --quick --only "$row" | grep -E "LATENT  |FAIL" | cut -c1-60
    done
  done
done
