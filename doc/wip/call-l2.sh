#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps; any card, the H200 the one that matters): three changes
# for issue 17's 16-head rows against main: latent-l2-ahead.patch (the narrow kernel's producer
# asks each run's rows into L2 four tiles ahead of its panel ring; latent-l2-ahead-2.patch over it:
# two tiles, about half the L2 footprint), latent-grid-merge.patch (more than 4 split slots merged
# by the row block's units inside the narrow kernel, no merge kernel: 1 x 64k) and
# latent-span-reuse.patch (a CTA's first unit keeps the lengths its search loaded); five trees
# (main, each change alone, the prefetch at two tiles, all three together). Every tree
# runs pa_bench_latent --quick twice, the trees alternating (its memory-bound rows print their
# read-alone floor); then the tree with all three runs the LATENT matrix in 4 shards and memcheck
# and racecheck of its quick matrix (the other trees add only a constant or a subset of its code;
# racecheck: main reports the whole-tile kernel's known P-panel hazards, compare the count).
source .devdeps/env.sh
nvidia-smi -L
TESTS= TESTS_all=latent SHARDS=4 RACECHECK=1 RUNS=2 BENCH_FIRST=1 \
  BENCHES="pa_bench_latent --quick" \
  timeout 570 tools/ab-patches ahead=doc/wip/latent-l2-ahead.patch \
  ahead2=doc/wip/latent-l2-ahead.patch+doc/wip/latent-l2-ahead-2.patch \
  grid=doc/wip/latent-grid-merge.patch \
  all=doc/wip/latent-l2-ahead.patch+doc/wip/latent-grid-merge.patch+doc/wip/latent-span-reuse.patch \
  > $OUT/ab.txt 2>&1
echo "rc $?"
grep -h "read alone" $OUT/ab/bench0-base-1.log | head -4
tail -75 $OUT/ab.txt
