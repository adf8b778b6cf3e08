#!/usr/bin/env bash
# session 29's device call: on an H200 the A/B of call 0 (+ the no-math diagnostic) and the
# PREFILL overlap patch; else (an H100) the PREFILL patch's A/B and ncu SASS profiles
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  OUT=/tmp/abo TESTS= BENCHES="pa_bench_latent --quick" RUNS=2 timeout 170 tools/ab-patches \
    parent=doc/wip/latent-first-unit-revert.patch nomath=doc/wip/diag-nomath.patch > $O/ab.txt 2>&1
  tail -28 $O/ab.txt
  cp /tmp/abo/ab/bench*.log $O/ 2>/dev/null
fi
OUT=/tmp/abp TESTS=prefill TESTS_overlap= SHARDS=4 BENCHES="pa_bench_prefill --quick" RUNS=2 \
  BENCH_FIRST=1 timeout 240 tools/ab-patches overlap=doc/wip/prefill-hopper-overlap.patch \
  both=doc/wip/prefill-hopper-overlap.patch+doc/wip/prefill-hopper-k-ahead.patch > $O/abp.txt 2>&1
tail -24 $O/abp.txt
mkdir -p $O/abp && cp /tmp/abp/ab/*.log $O/abp/ 2>/dev/null
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  timeout 50 tools/ncu-sass.sh build-ab $O/ncu prefill4x2k 'prefill_hopper_kernel<__nv_bfloat16' \
    pa_bench_prefill --only "causal 4x2k" --no-unfused
  timeout 50 tools/ncu-sass.sh /tmp/ab-both/build-ab $O/ncu both4x2k \
    'prefill_hopper_kernel<__nv_bfloat16' pa_bench_prefill --only "causal 4x2k" --no-unfused
  rm -f $O/ncu/*.ncu-rep
  ls -la $O/ncu
fi
