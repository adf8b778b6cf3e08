#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps; any card; about 450 s): softmax-rescale-first.patch
# (`always`: the rescale before the exponentials everywhere, unconditional in the Hopper PREFILL
# kernels), `first` (the same with the Hopper PREFILL rescale's branch kept: the reorder alone)
# and `chains` (always + softmax-max-chains.patch) against main: the timings first
# (pa_bench_prefill --quick, its 8k rows and pa_bench_latent --quick, RUNS times per tree,
# default 2, alternating), then the PREFILL matrix in 4 shards (for `always` the LATENT one too,
# whose kernels take the reorder) and memcheck of the quick matrices (RACECHECK=0: no shared-memory
# change).
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
p=doc/wip/softmax-rescale-first.patch
# (the variant's patch at the root, named build-* so that no variant's copy takes it)
sed 's/prefill_softmax_step<true>(score\[0\]/prefill_softmax_step<false>(score[0]/' $p > build-rescale-first.patch
grep -q "prefill_softmax_step<false>(score\[0\]" build-rescale-first.patch || { echo "sed missed"; exit 1; }
TESTS="prefill" TESTS_always="prefill latent" SHARDS=4 RUNS=${RUNS:-2} \
  BENCH_FIRST=1 RACECHECK=${RACECHECK:-0} \
  BENCHES="${BENCHES-pa_bench_prefill --quick --no-unfused; pa_bench_prefill --no-unfused --only 8k; pa_bench_latent --quick}" \
  timeout 560 tools/ab-patches always=$p first=build-rescale-first.patch \
    chains=$p+doc/wip/softmax-max-chains.patch > $O/ab.txt 2>&1
echo "ab rc $?"
sed -n '/^=== tests/,$p' $O/ab.txt | cut -c1-200 | grep -v "AUTO\|part:\|UNFUSED\|read alone" | tail -50
