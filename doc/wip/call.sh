#!/usr/bin/env bash
# session 30's second device call (one `run`, carry .devdeps): the staged split merge
# (doc/wip/merge-staged.patch) against main, and the 16-head LATENT diagnostics (no math; no math
# and no loads: the step's skeleton): the benches first, then the staged tree's DECODE / PREFILL /
# LATENT matrices with memcheck and racecheck
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
OUT=/tmp/abm TESTS= TESTS_staged="decode prefill latent" SHARDS=4 RUNS=2 BENCH_FIRST=1 \
  BENCHES="pa_bench_latent --quick; pa_bench_decode --quick --only 1x128k" \
  timeout 420 tools/ab-patches staged=doc/wip/merge-staged.patch nomath=doc/wip/diag-nomath.patch \
  skeleton=doc/wip/diag-nomath.patch+doc/wip/diag-noload.patch > $O/abm.txt 2>&1
mkdir -p $O/abm && cp /tmp/abm/ab/bench*.log $O/abm/ 2>/dev/null
grep -l "FAIL\|rc=[1-9]" /tmp/abm/ab/*.log 2>/dev/null | xargs -r -I{} cp {} $O/abm/
tail -45 $O/abm.txt
