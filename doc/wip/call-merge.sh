#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps, about 250 s after the start; any card, the H200 for
# the bars), against main:
#   units = latent-units-by-index.patch (its producer's "no more units" now through the same
#           scratch word and barrier as main: the conditional barrier spilled 12 B more in the
#           64-row kernels, which measured 32h and 16h q2 1.5 % slower on an H100);
#   merge = merge-chunks.patch: split_merge_kernel (more than 8 split slots) a CTA per (token,
#           head, 128 value channels), 32 rows in flight per warp (LATENT 1 x 64k's merge took
#           9-10 us after the attention kernel, diag-timeline on an H100);
#   both  = units-and-merge-chunks.patch (the two together).
# Tests: the LATENT matrix on units and both, DECODE's (bitwise merge shapes) and PREFILL's on
# merge; memcheck of each; pa_bench_latent --quick.
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
OUT=/tmp/abm TESTS= TESTS_units=latent TESTS_merge="decode prefill" TESTS_both=latent SHARDS=4 \
  RACECHECK=0 BENCHES="pa_bench_latent --quick" RUNS=2 BENCH_FIRST=1 timeout 560 tools/ab-patches \
  units=doc/wip/latent-units-by-index.patch merge=doc/wip/merge-chunks.patch \
  both=doc/wip/units-and-merge-chunks.patch > $O/abm.txt 2>&1
mkdir -p $O/abm && cp /tmp/abm/ab/bench0-*-1.log $O/abm/ 2>/dev/null
grep -l "FAIL\|rc=[1-9]" /tmp/abm/ab/*.log 2>/dev/null | head -3 | xargs -r -I{} cp {} $O/abm/
tail -30 $O/abm.txt
