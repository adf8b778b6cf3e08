#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps, about 450 s after the start; any card, the H200 for
# the bars): the narrow LATENT kernel's two orders of freeing a tile's panels against main, each
# with the LATENT matrix (memcheck, racecheck) and pa_bench_latent --quick:
#   release = latent-narrow-release-first.patch: P V waited and its panels freed before waiting
#             for the next tile (the tensor cores drain between P V and the next scores);
#   iflate  = latent-narrow-release-if-late.patch: the same only when the next tile has not landed
#             (each consumer thread tests its last panel, a barrier votes), else main's order
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
OUT=/tmp/abr TESTS= TESTS_release=latent TESTS_iflate=latent SHARDS=4 \
  BENCHES="pa_bench_latent --quick" RUNS=2 BENCH_FIRST=1 timeout 540 tools/ab-patches \
  release=doc/wip/latent-narrow-release-first.patch \
  iflate=doc/wip/latent-narrow-release-if-late.patch > $O/abr.txt 2>&1
mkdir -p $O/abr && cp /tmp/abr/ab/bench0-*-1.log $O/abr/ 2>/dev/null
grep -l "FAIL\|rc=[1-9]" /tmp/abr/ab/*.log 2>/dev/null | grep -v racecheck | head -3 |
  xargs -r -I{} cp {} $O/abr/
grep -h "RACECHECK SUMMARY" /tmp/abr/ab/*racecheck*.log
tail -24 $O/abr.txt
