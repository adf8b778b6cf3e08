#!/usr/bin/env bash
# the next device call (one `run`, carry .devdeps, about 200 s after the start; any card):
# pa_bench_latent --quick on main, latent-early-tiles.patch, and that patch with no slot counted
# as written (diag-early-unchecked.patch: wrong outputs, the early loads' upper bound); on an
# H200 also main's parent without the first LATENT unit before the wait
# (latent-first-unit-revert.patch, next call 1 of doc/development.md)
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
variants=(early=doc/wip/latent-early-tiles.patch
          unchecked=doc/wip/latent-early-tiles.patch+doc/wip/diag-early-unchecked.patch)
nvidia-smi -L | grep -q H200 && variants+=(firstrev=doc/wip/latent-first-unit-revert.patch)
OUT=/tmp/abs TESTS= BENCHES="pa_bench_latent --quick" RUNS=2 timeout 400 \
  tools/ab-patches "${variants[@]}" > $O/abs.txt 2>&1
mkdir -p $O/abs && cp /tmp/abs/ab/bench0-*-1.log $O/abs/ 2>/dev/null
tail -16 $O/abs.txt
