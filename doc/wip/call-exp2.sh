#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps; any card; about 250 s): prefill-exp2-fma4.patch,
# prefill-exp2-fma2.patch and, over the first, latent-exp2-fma.patch against main: the timings
# first (pa_bench_prefill --quick and pa_bench_latent --quick, RUNS times per tree, default 2,
# alternating), then the PREFILL matrix in 4 shards (and for `latent` the LATENT one) with
# gpu_softmax_exp2, and memcheck of the quick matrices (RACECHECK=0: no shared-memory change).
# With less device time: BENCHES="pa_bench_prefill --quick --no-unfused" and fma4 alone.
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
TESTS="prefill softmax_exp2" TESTS_latent="prefill latent softmax_exp2" SHARDS=4 RUNS=${RUNS:-2} \
  BENCH_FIRST=1 RACECHECK=${RACECHECK:-0} \
  BENCHES="${BENCHES-pa_bench_prefill --quick --no-unfused; pa_bench_latent --quick}" \
  timeout 560 tools/ab-patches fma4=doc/wip/prefill-exp2-fma4.patch \
    fma2=doc/wip/prefill-exp2-fma2.patch \
    latent=doc/wip/prefill-exp2-fma4.patch+doc/wip/latent-exp2-fma.patch > $O/ab.txt 2>&1
echo "ab rc $?"
sed -n '/^=== tests/,$p' $O/ab.txt | cut -c1-200 | grep -v "AUTO\|part:\|UNFUSED" | tail -50
