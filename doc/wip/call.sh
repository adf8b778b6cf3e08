#!/usr/bin/env bash
# the next device call (one `run`, carry .devdeps, about 450 s after the start; any card):
# latent-early-tiles.patch against main (the LATENT matrix and the write tests, memcheck,
# racecheck, pa_bench_latent --quick), and on an H200 also main's parent without the first
# LATENT unit before the wait (latent-first-unit-revert.patch, next call 1 of doc/development.md)
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
variants=(early=doc/wip/latent-early-tiles.patch)
nvidia-smi -L | grep -q H200 && variants+=(firstrev=doc/wip/latent-first-unit-revert.patch)
OUT=/tmp/abs TESTS= TESTS_early="latent write" SHARDS=4 BENCHES="pa_bench_latent --quick" \
  RUNS=2 BENCH_FIRST=1 timeout 520 tools/ab-patches "${variants[@]}" > $O/abs.txt 2>&1
mkdir -p $O/abs && cp /tmp/abs/ab/bench0-*-1.log $O/abs/ 2>/dev/null
grep -l "FAIL\|rc=[1-9]" /tmp/abs/ab/*.log 2>/dev/null | grep -v racecheck | head -3 |
  xargs -r -I{} cp {} $O/abs/
grep -h "Race reported\|RACECHECK SUMMARY" /tmp/abs/ab/*racecheck*.log | sort | uniq -c | head
tail -24 $O/abs.txt
