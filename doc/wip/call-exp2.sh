#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps; any card): prefill-exp2-fma4.patch and
# prefill-exp2-fma2.patch against main: the timings first (pa_bench_prefill --quick and its 1 x 8k
# rows, RUNS times per tree, default 2, alternating), then the PREFILL matrix in 4 shards and
# memcheck of its quick matrix for each (RACECHECK=0: no shared-memory change).
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
TESTS=prefill SHARDS=4 RUNS=${RUNS:-2} BENCH_FIRST=1 RACECHECK=${RACECHECK:-0} \
  BENCHES="${BENCHES-pa_bench_prefill --quick --no-unfused; pa_bench_prefill --no-unfused --only 1x8k}" \
  timeout 540 tools/ab-patches fma4=doc/wip/prefill-exp2-fma4.patch fma2=doc/wip/prefill-exp2-fma2.patch > $O/ab.txt 2>&1
echo "ab rc $?"
sed -n '/^=== tests/,$p' $O/ab.txt | cut -c1-200 | grep -v "AUTO\|part:\|UNFUSED" | tail -40
