#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps, about 250 s after the start; the H200 for the bars):
# main's whole pa_bench_latent and pa_bench_prefill --quick (issues 17 and 18), then call.sh's
# timelines of main
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
rm -rf build-b && meson setup build-b -Dgpu_archs=90a -Dbuildtype=release > $O/setup-b.log 2>&1 &&
  ninja -C build-b bench/pa_bench_latent bench/pa_bench_prefill > $O/build-b.log 2>&1 ||
  { tail -30 $O/build-b.log; exit 1; }
timeout 150 build-b/bench/pa_bench_latent > $O/latent-bars.txt 2>&1
timeout 150 build-b/bench/pa_bench_prefill --quick > $O/prefill-bars.txt 2>&1
bash doc/wip/call.sh > $O/timeline.txt 2>&1
grep -E "^16h|^128h" $O/timeline.txt | grep -v "LATENT  "
grep -E "timeline 0" $O/timeline.txt
grep -E "device|LATENT  |UNFUSED  " $O/latent-bars.txt | head -40
grep -E "device|causal|chunk|1x8k" $O/prefill-bars.txt | tail -24
