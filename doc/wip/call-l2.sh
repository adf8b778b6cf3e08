#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps; any card, the H200 the one that matters): two changes
# to the narrow LATENT kernel (16-head rows) against main, alone and together:
# latent-l2-ahead.patch (each run's rows asked into L2 four tiles ahead of the panel ring; over it
# latent-l2-ahead-2.patch: two tiles, about half the L2 footprint at 1 x 64k) and
# latent-grid-merge.patch (more than 4 split slots merged by the row block's units in the kernel,
# no merge kernel: 1 x 64k). pa_bench_latent --quick twice each, variants alternating (its
# memory-bound rows print their read-alone floor), then the LATENT matrix in 4 shards and memcheck
# of its quick matrix in each patched tree.
source .devdeps/env.sh
nvidia-smi -L
TESTS=latent SHARDS=4 RACECHECK=0 RUNS=2 BENCH_FIRST=1 BENCHES="pa_bench_latent --quick" \
  timeout 570 tools/ab-patches ahead=doc/wip/latent-l2-ahead.patch \
  ahead2=doc/wip/latent-l2-ahead.patch+doc/wip/latent-l2-ahead-2.patch \
  grid=doc/wip/latent-grid-merge.patch \
  both=doc/wip/latent-l2-ahead.patch+doc/wip/latent-grid-merge.patch > $OUT/ab.txt 2>&1
echo "rc $?"
grep -h "read alone" $OUT/ab/bench0-base-1.log | head -4
tail -75 $OUT/ab.txt
