#!/usr/bin/env bash
# the next device call (one `run`, carry .devdeps, about 400 s after the start; any card):
# latent-merge-in-kernel.patch against main (the LATENT matrix with memcheck and racecheck, and
# whether its plans merged in the kernel), beside the 16-head LATENT step's skeleton (no math,
# no loads), the same with no handshake between producer and consumer (the producer's pace
# alone), and that without the producer's block-table reads past a unit's first
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
skeleton=doc/wip/diag-nomath.patch+doc/wip/diag-noload.patch
OUT=/tmp/abs TESTS= TESTS_merge=latent SHARDS=4 BENCHES="pa_bench_latent --quick" RUNS=2 \
  BENCH_FIRST=1 timeout 450 tools/ab-patches merge=doc/wip/latent-merge-in-kernel.patch \
  skeleton=$skeleton nowait=$skeleton+doc/wip/diag-nowait.patch \
  nolookup=$skeleton+doc/wip/diag-nowait.patch+doc/wip/diag-onelookup.patch \
  > $O/abs.txt 2>&1
mkdir -p $O/abs && cp /tmp/abs/ab/bench*.log $O/abs/ 2>/dev/null
grep -l "FAIL\|rc=[1-9]" /tmp/abs/ab/*.log 2>/dev/null | xargs -r -I{} cp {} $O/abs/
echo "plans merged in the kernel (the quick LATENT matrix; the 64 x 4k row):"
PA_DEBUG=1 PA_GPU_TEST_QUICK=1 timeout 60 /tmp/ab-merge/build-ab/test/gpu/test_gpu_latent 2>&1 |
  grep -c "merged in the kernel"
PA_DEBUG=1 timeout 30 /tmp/ab-merge/build-ab/bench/pa_bench_latent --quick \
  --only "16h 64x4k q1 block 64" 2>&1 | grep -m1 "narrow"
tail -24 $O/abs.txt
