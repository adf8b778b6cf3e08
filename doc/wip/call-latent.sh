#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps, about 4-6 min on an H100; any card), two patches
# against main at once:
#   pf    latent-write-prefetch.patch (session 51): the write kernel asks the narrow LATENT kernel's
#         first reads (lengths, block table, Q) into L2 before its own wait; session 34's warm
#         set-up bounds the gain at about 1.5 us at 1 x 64k;
#   codes latent-narrow-codes.patch (session 52): int8 / fp8 caches on the narrow wgmma kernel
#         (codes staged a tile ahead, converted to fp16 panels by the producer). Never run: each
#         test and bench process is time-limited in case it hangs.
# The LATENT matrix in 4 shards per patch, memcheck and racecheck of its quick matrix (the codes
# producer's new hand-offs), then pa_bench_latent's 16-head rows (bf16, and the 8-bit rows that
# codes moves off mma.sync) twice per tree.
source .devdeps/env.sh
nvidia-smi -L
TESTS= TESTS_pf=latent TESTS_codes=latent SHARDS=4 RACECHECK=1 RUNS=2 \
  TEST_TIMEOUT=300 BENCH_TIMEOUT=150 BENCHES="pa_bench_latent --quick --only 16h" \
  timeout 570 tools/ab-patches pf=doc/wip/latent-write-prefetch.patch \
  codes=doc/wip/latent-narrow-codes.patch > $OUT/ab.txt 2>&1
echo "ab rc $?"
tail -45 $OUT/ab.txt
