#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps, 84 s on the H200 in session 39; any card, the bars
# on an H200): the working tree's whole pa_bench_latent and pa_bench_prefill --no-unfused
# (issues 17 and 18), then its whole gpu suite as parallel processes
# (tools/gpu-suite-parallel.py: the matrix tests in shards, every other gpu test once, memcheck
# of the quick write matrix; meson runs the gpu tests one at a time, about 420 s on an H100 in
# session 38). The per-tile trace of the PREFILL Hopper kernel is doc/wip/call-waits.sh's.
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
rm -rf build-v && meson setup build-v -Dgpu_archs=90a -Dbuildtype=release > $O/setup-v.log 2>&1 &&
  ninja -C build-v > $O/build-v.log 2>&1 || { tail -30 $O/build-v.log; exit 1; }
timeout 120 build-v/bench/pa_bench_latent > $O/latent-bars.txt 2>&1
timeout 100 build-v/bench/pa_bench_prefill --no-unfused > $O/prefill-bars.txt 2>&1
python3 tools/gpu-suite-parallel.py build-v $O/suite.txt --seconds 330 --logdir $O/suite
cat $O/suite.txt
grep -E "^device|LATENT  |block 16 /" $O/latent-bars.txt | head -40
grep -E "^device|PREFILL  |DECODE  |peak|target" $O/prefill-bars.txt | grep -v "AUTO->PREFILL " | tail -24
