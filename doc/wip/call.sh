#!/usr/bin/env bash
# session 30's last device call (one `run`, carry .devdeps): the 16-head LATENT step's skeleton
# (no math, no loads) against the same with no handshake between producer and consumer (the
# producer's pace alone), and that without the producer's block-table reads past a unit's first
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
skeleton=doc/wip/diag-nomath.patch+doc/wip/diag-noload.patch
OUT=/tmp/abs TESTS= BENCHES="pa_bench_latent --quick" RUNS=2 timeout 240 tools/ab-patches \
  skeleton=$skeleton nowait=$skeleton+doc/wip/diag-nowait.patch \
  nolookup=$skeleton+doc/wip/diag-nowait.patch+doc/wip/diag-onelookup.patch \
  > $O/abs.txt 2>&1
mkdir -p $O/abs && cp /tmp/abs/ab/bench*.log $O/abs/ 2>/dev/null
tail -16 $O/abs.txt
