#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps; any card; about 240 s): latent-softmax-speculative.patch
# (the LATENT whole-tile kernel's own-tile softmax through prefill_softmax_to_p) against main:
# pa_bench_latent --quick twice per tree first, then the LATENT matrix in 4 shards and memcheck.
source .devdeps/env.sh
nvidia-smi -L
TESTS=latent SHARDS=4 RUNS=2 BENCH_FIRST=1 RACECHECK=0 BENCHES="pa_bench_latent --quick" \
  timeout ${LIMIT:-230} tools/ab-patches spec=doc/wip/latent-softmax-speculative.patch > $OUT/ab.txt 2>&1
echo "ab rc $?"
sed -n '/^=== tests/,$p' $OUT/ab.txt | cut -c1-170
