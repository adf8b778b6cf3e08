#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps, about 200 s after the start; any card):
# merge-loads-first.patch (split_merge_kernel's loads of a round unconditional, rows added by a
# select: one basic block, so ptxas issues every row before the adds; 160 registers against 118)
# against main: the DECODE (bitwise merge shapes), LATENT and PREFILL matrices with memcheck,
# pa_bench_latent --quick twice each, and the SASS order of the merge's loads
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
OUT=/tmp/abl TESTS= TESTS_loads="decode latent prefill" SHARDS=4 RACECHECK=0 \
  BENCHES="pa_bench_latent --quick" RUNS=2 BENCH_FIRST=1 timeout 400 tools/ab-patches \
  loads=doc/wip/merge-loads-first.patch > $O/abl.txt 2>&1
grep -l "FAIL\|rc=[1-9]" /tmp/abl/ab/*.log 2>/dev/null | head -3 | xargs -r -I{} cp {} $O/
tail -24 $O/abl.txt
f=$(ls /tmp/ab-loads/build-ab/libpagedattn.so* 2>/dev/null | head -1)
cuobjdump -sass "$f" | awk '/Function : .*split_merge_kernelI13__nv_bfloat16/{p=1} p{print} p&&/EXIT/&&++n>2{exit}' > $O/merge.sass
grep -nE "LDG.E.128|FFMA" $O/merge.sass | head -40 | awk '{print $1, $2, $3}'
