#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps, about 250 s after the start): units-merge-final.patch
# (units by CTA index in the narrow and whole-tile LATENT kernels, a compile-time choice that
# leaves the half-stage kernel's PTX as main's; the merge a CTA per 128 value channels) against
# main: the LATENT, DECODE and PREFILL matrices and memcheck of each, pa_bench_latent --quick
# twice each, then the whole pa_bench_latent on the patch (the issue 17 bars)
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
OUT=/tmp/abf TESTS= TESTS_final="latent decode prefill" SHARDS=4 RACECHECK=0 \
  BENCHES="pa_bench_latent --quick" RUNS=2 BENCH_FIRST=1 timeout 420 tools/ab-patches \
  final=doc/wip/units-merge-final.patch > $O/abf.txt 2>&1
grep -l "FAIL\|rc=[1-9]" /tmp/abf/ab/*.log 2>/dev/null | head -3 | xargs -r -I{} cp {} $O/
tail -28 $O/abf.txt
timeout 150 /tmp/ab-final/build-ab/bench/pa_bench_latent > $O/bars.txt 2>&1
grep -E "device|LATENT  |UNFUSED  " $O/bars.txt | head -40
