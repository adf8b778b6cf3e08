#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps, about 350 s after the start; any card, the H200 for
# the bars): latent-units-by-index.patch against main (no schedule kernel where the plan's bound
# on units fits the grid: 16 heads x 64 x 4k and 1 x 64k, 128 heads x 64 x 4k), with the LATENT
# matrix (memcheck, racecheck), the unit tests' new plan check and pa_bench_latent --quick
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
OUT=/tmp/abu TESTS= TESTS_units=latent SHARDS=4 BENCHES="pa_bench_latent --quick" RUNS=2 \
  BENCH_FIRST=1 timeout 500 tools/ab-patches units=doc/wip/latent-units-by-index.patch \
  > $O/abu.txt 2>&1
mkdir -p $O/abu && cp /tmp/abu/ab/bench0-*-1.log $O/abu/ 2>/dev/null
grep -l "FAIL\|rc=[1-9]" /tmp/abu/ab/*.log 2>/dev/null | grep -v racecheck | head -3 |
  xargs -r -I{} cp {} $O/abu/
grep -h "RACECHECK SUMMARY" /tmp/abu/ab/*racecheck*.log
PA_DEBUG=1 timeout 30 /tmp/ab-units/build-ab/bench/pa_bench_latent --quick \
  --only "16h 1x64k q1 block 64" 2>&1 | grep -m1 "no schedule"
tail -20 $O/abu.txt
# main's own build (base): the written-past cases of DECODE, PREFILL and UNFUSED, not yet run on a
# GPU, in each quick matrix
for t in decode prefill unfused; do
  (PA_GPU_TEST_QUICK=1 PA_TEST_VERBOSE=1 timeout 150 build-ab/test/gpu/test_gpu_$t > $O/main-$t.txt 2>&1
   echo "main $t: rc $? $(tail -1 $O/main-$t.txt)") &
done
wait
grep -c "plan .*written_past" $O/main-*.txt; grep -h FAIL $O/main-*.txt | head
