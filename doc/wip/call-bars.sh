#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps, about 300 s after the start; the H200): first
# test/python/test_gpu.py three times with its logs kept (it failed once on an H200 in session 32,
# log lost; it passed on an H100 on the same library code), then main's whole pa_bench_latent and
# pa_bench_prefill --quick (issues 17 and 18), then call.sh's timelines of main
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
rm -rf build-b && meson setup build-b -Dgpu_archs=90a -Dbuildtype=release > $O/setup-b.log 2>&1 &&
  ninja -C build-b > $O/build-b.log 2>&1 || { tail -30 $O/build-b.log; exit 1; }
for i in 1 2 3; do
  timeout 120 meson test -C build-b python_test_gpu --print-errorlogs > $O/pytest$i.txt 2>&1
  echo "python_test_gpu run $i: rc $?"
  cp build-b/meson-logs/testlog.txt $O/pytest$i-testlog.txt
  grep -E "seed|FAIL|Error|assert|^  File" $O/pytest$i-testlog.txt | head -12
done
timeout 150 build-b/bench/pa_bench_latent > $O/latent-bars.txt 2>&1
timeout 150 build-b/bench/pa_bench_prefill --quick > $O/prefill-bars.txt 2>&1
bash doc/wip/call.sh > $O/timeline.txt 2>&1
grep -E "timeline 0" $O/timeline.txt
grep -E "device|LATENT  |UNFUSED  " $O/latent-bars.txt | head -40
grep -E "device|causal|chunk|1x8k" $O/prefill-bars.txt | tail -12
