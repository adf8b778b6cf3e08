#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps; any card; about 400 s): prefill-exp2-fma.patch (3 / 8
# of the PREFILL Hopper softmax's exponentials on the FMA pipe), 4 / 8 (the same patch with
# kExp2FmaEighths changed here; 2 / 8 is MUFU-bound by the arithmetic), 3 / 8 with
# softmax-max-chains.patch, and latent-exp2-fma.patch over it, against
# main: the timings first (pa_bench_prefill --quick and pa_bench_latent --quick, RUNS times per
# tree, default 2, alternating), then the PREFILL matrix in 4 shards (for `latent` the LATENT one
# too) with gpu_softmax_exp2, and memcheck of the quick matrices (RACECHECK=0: no shared-memory
# change). With less device time: BENCHES="pa_bench_prefill --quick --no-unfused" and e3 alone.
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
p=doc/wip/prefill-exp2-fma.patch
# (the variant's patch at the root, named build-* so that no variant's copy takes it)
sed 's/kExp2FmaEighths = kPingPong ? 3 : 0/kExp2FmaEighths = kPingPong ? 4 : 0/' $p > build-exp2-e4.patch
TESTS="prefill softmax_exp2" TESTS_latent="prefill latent softmax_exp2" SHARDS=4 RUNS=${RUNS:-2} \
  BENCH_FIRST=1 RACECHECK=${RACECHECK:-0} \
  BENCHES="${BENCHES-pa_bench_prefill --quick --no-unfused; pa_bench_latent --quick}" \
  timeout 560 tools/ab-patches e3=$p e4=build-exp2-e4.patch e3max=$p+doc/wip/softmax-max-chains.patch \
    latent=$p+doc/wip/latent-exp2-fma.patch > $O/ab.txt 2>&1
echo "ab rc $?"
sed -n '/^=== tests/,$p' $O/ab.txt | cut -c1-200 | grep -v "AUTO\|part:\|UNFUSED" | tail -50
