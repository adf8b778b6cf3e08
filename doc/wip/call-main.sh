#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps, about 480 s; any card, the bars on an H200): the
# working tree's whole gpu suite, then its whole pa_bench_latent and pa_bench_prefill --no-unfused
# (issues 17 and 18), then the PREFILL Hopper kernel's per-tile trace of causal 1 x 8k
# (diag-timeline.patch + diag-prefill-waits.patch, built beside the suite in /tmp/diag)
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
rm -rf /tmp/diag && mkdir -p /tmp/diag &&
  tar --exclude=./.git --exclude='./build*' -cf - . | tar -xf - -C /tmp/diag
(cd /tmp/diag && git apply doc/wip/diag-timeline.patch && git apply doc/wip/diag-prefill-waits.patch &&
 meson setup build-d -Dgpu_archs=90a -Dbuildtype=release > $O/setup-d.log 2>&1 &&
 ninja -C build-d bench/pa_bench_prefill > $O/build-d.log 2>&1 || echo "diag build failed") &
rm -rf build-v && meson setup build-v -Dgpu_archs=90a -Dbuildtype=release > $O/setup-v.log 2>&1 &&
  ninja -C build-v > $O/build-v.log 2>&1 || { tail -30 $O/build-v.log; exit 1; }
timeout 360 meson test -C build-v --suite gpu --print-errorlogs > $O/suite.txt 2>&1
echo "suite rc $?" >> $O/suite.txt
cp build-v/meson-logs/testlog.txt $O/suite-testlog.txt
wait
timeout 120 build-v/bench/pa_bench_latent > $O/latent-bars.txt 2>&1
timeout 100 build-v/bench/pa_bench_prefill --no-unfused > $O/prefill-bars.txt 2>&1
PA_DIAG_TIMELINE=1 timeout 60 /tmp/diag/build-d/bench/pa_bench_prefill --no-unfused \
  --only "causal 1x8k" > $O/trace.txt 2>&1
grep -A80 "timeline 0" $O/trace.txt | grep -E "^    sum|^    trace|timeline 0" | head -70
grep -E "^ *[0-9]+/[0-9]+ |Ok:|Fail:|Timeout|suite rc" $O/suite.txt
grep -E "^device|LATENT  |UNFUSED  |block 16 /" $O/latent-bars.txt | head -40
grep -E "^device|PREFILL  |DECODE  |peak|target" $O/prefill-bars.txt | grep -v "AUTO->PREFILL " | tail -24
