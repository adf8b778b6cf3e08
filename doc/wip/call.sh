#!/usr/bin/env bash
# session 30's second device call (one `run`, carry .devdeps): the staged split merge
# (doc/wip/merge-staged.patch) against main: the quick benches first, then the DECODE / PREFILL /
# LATENT matrices with memcheck and racecheck, then ncu kernel times of the 16-head LATENT steps
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
t0=$(date +%s)
OUT=/tmp/abm TESTS="decode prefill latent" SHARDS=4 RUNS=2 BENCH_FIRST=1 \
  BENCHES="pa_bench_latent --quick; pa_bench_prefill --quick; pa_bench_decode --quick" \
  timeout 420 tools/ab-patches staged=doc/wip/merge-staged.patch > $O/abm.txt 2>&1
mkdir -p $O/abm && cp /tmp/abm/ab/bench*.log $O/abm/ 2>/dev/null
grep -l "FAIL\|rc=[1-9]" /tmp/abm/ab/*.log | xargs -r -I{} cp {} $O/abm/
echo "A/B done at $(( $(date +%s) - t0 )) s"
for v in base:build-ab staged:/tmp/ab-staged/build-ab; do
  for row in "16h 1x64k q1 block 16" "16h 64x4k q1 block 64"; do
    [ $(( $(date +%s) - t0 )) -lt 540 ] || break
    echo "== ${v%%:*} $row"
    timeout 40 ncu --clock-control none -k 'regex:write|schedule|latent|merge' \
      --metrics gpu__time_duration.sum -c 4 ${v#*:}/bench/pa_bench_latent --quick --only "$row" \
      2>&1 | grep -E "^  [a-zA-Z_:]+.*\(|gpu__time_duration" | sed -E 's/ +/ /g' |
      sed -E 's/\((prefill|split_merge|write)_params.*//' | paste - - | cut -c1-120
  done
done
echo "=== A/B"; tail -45 $O/abm.txt
