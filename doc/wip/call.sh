#!/usr/bin/env bash
# next call 1 of doc/development.md (one `run`, carry .devdeps), on an H200 only: main against its
# parent without the first LATENT unit before the wait, then main's whole pa_bench_latent
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo "not an H200"; exit 0; }
OUT=/tmp/abo TESTS= BENCHES="pa_bench_latent --quick" RUNS=3 timeout 240 tools/ab-patches \
  parent=doc/wip/latent-first-unit-revert.patch > $O/ab.txt 2>&1
mkdir -p $O/abo && cp /tmp/abo/ab/bench*.log $O/abo/ 2>/dev/null
timeout 150 build-ab/bench/pa_bench_latent > $O/latent-full.txt 2>&1
tail -16 $O/ab.txt
tail -25 $O/latent-full.txt
