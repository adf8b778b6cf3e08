#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps, about 5-7 min on an H100; any card), against main:
#   pf     latent-write-prefetch.patch (session 51): the write kernel asks the narrow LATENT
#          kernel's first reads (lengths, block table, Q) into L2 before its own wait; session
#          34's warm set-up bounds the gain at about 1.5 us at 1 x 64k;
#   codes8 latent-narrow-codes.patch + latent-whole-codes.patch (session 52): int8 / fp8 caches
#          on the narrow (16 rows) and whole-tile (above 32 rows) wgmma kernels. Never run: each
#          test and bench process is time-limited in case it hangs; a failing case's name tells
#          which kernel (16 heads of one token: narrow; 128 heads: whole).
# The LATENT matrix in 4 shards per variant (codes8: PREFILL's too, whose 8-bit producer now calls
# hopper_q_codes_to_half), memcheck of each quick matrix and racecheck of LATENT's (the producers' new
# hand-offs), then pa_bench_latent's 16-head rows and its 8-bit rows (16h, 128h)
# twice per tree.
source .devdeps/env.sh
nvidia-smi -L
TESTS= TESTS_pf=latent TESTS_codes8="latent prefill" SHARDS=4 RACECHECK=1 RUNS=2 \
  TEST_TIMEOUT=300 BENCH_TIMEOUT=150 \
  BENCHES="pa_bench_latent --quick --only 16h; pa_bench_latent --quick --only fp8" \
  timeout 570 tools/ab-patches pf=doc/wip/latent-write-prefetch.patch \
  codes8=doc/wip/latent-narrow-codes.patch+doc/wip/latent-whole-codes.patch > $OUT/ab.txt 2>&1
echo "ab rc $?"
tail -50 $OUT/ab.txt
