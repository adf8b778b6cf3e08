#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps, about 120 s on an H100; any card):
# latent-write-prefetch.patch (the write kernel asks the narrow LATENT kernel's first reads, the
# lengths, the block table and Q, into L2 before its own wait) against main: the LATENT matrix in
# 4 shards and memcheck on it, then pa_bench_latent's 16-head rows three times per tree. Session
# 34's warm set-up (thirty-third measurement) bounds the gain: about 1.5 µs at 1 x 64k.
source .devdeps/env.sh
nvidia-smi -L
TESTS= TESTS_pf=latent SHARDS=4 RACECHECK=0 RUNS=3 BENCH_FIRST=1 \
  BENCHES="pa_bench_latent --quick --only 16h" \
  timeout 300 tools/ab-patches pf=doc/wip/latent-write-prefetch.patch > $OUT/ab.txt 2>&1
echo "ab rc $?"
tail -20 $OUT/ab.txt
