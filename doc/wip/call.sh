#!/usr/bin/env bash
# session 30's first device call (one `run`, carry .devdeps): call 0 (LATENT first-unit A/B and the
# no-math diagnostic; on an H200 only) and call 1 (the two Hopper PREFILL patches: quick bench
# first, then the prefill matrix with sanitizers, then ncu SASS profiles of causal 4x2k)
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
t0=$(date +%s)
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  OUT=/tmp/abo TESTS= BENCHES="pa_bench_latent --quick" RUNS=3 timeout 200 tools/ab-patches \
    parent=doc/wip/latent-first-unit-revert.patch nomath=doc/wip/diag-nomath.patch > $O/ab.txt 2>&1
  mkdir -p $O/abo && cp /tmp/abo/ab/*.log $O/abo/ 2>/dev/null
fi
echo "latent A/B done at $(( $(date +%s) - t0 )) s"
OUT=/tmp/abp TESTS=prefill SHARDS=4 BENCHES="pa_bench_prefill --quick" RUNS=2 BENCH_FIRST=1 \
  timeout 300 tools/ab-patches overlap=doc/wip/prefill-hopper-overlap.patch \
  both=doc/wip/prefill-hopper-overlap.patch+doc/wip/prefill-hopper-k-ahead.patch > $O/abp.txt 2>&1
mkdir -p $O/abp && cp /tmp/abp/ab/*.log $O/abp/ 2>/dev/null
echo "prefill A/B done at $(( $(date +%s) - t0 )) s"
for v in base:build-ab both:/tmp/ab-both/build-ab; do
  [ $(( $(date +%s) - t0 )) -lt 540 ] || break
  timeout 45 tools/ncu-sass.sh ${v#*:} $O/ncu ${v%%:*}4x2k 'prefill_hopper_kernel<__nv_bfloat16' \
    pa_bench_prefill --only "causal 4x2k" --no-unfused
done
rm -f $O/ncu/*.ncu-rep
echo "=== latent"; tail -22 $O/ab.txt 2>/dev/null
echo "=== prefill"; tail -26 $O/abp.txt
