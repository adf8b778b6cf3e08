#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps, about 590 s; any card, the bars on an H200): the
# working tree's whole pa_bench_latent and pa_bench_prefill --no-unfused (issues 17 and 18), then
# its whole gpu suite (the gpu tests run one at a time, about 420 s on an H100 in session 38: the
# limit below may stop the last one, python_test_torch_op, which then needs a run of its own).
# The per-tile trace of the PREFILL Hopper kernel is doc/wip/call-waits.sh's.
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
rm -rf build-v && meson setup build-v -Dgpu_archs=90a -Dbuildtype=release > $O/setup-v.log 2>&1 &&
  ninja -C build-v > $O/build-v.log 2>&1 || { tail -30 $O/build-v.log; exit 1; }
timeout 120 build-v/bench/pa_bench_latent > $O/latent-bars.txt 2>&1
timeout 100 build-v/bench/pa_bench_prefill --no-unfused > $O/prefill-bars.txt 2>&1
timeout 400 meson test -C build-v --suite gpu --print-errorlogs > $O/suite.txt 2>&1
echo "suite rc $?" >> $O/suite.txt
cp build-v/meson-logs/testlog.txt $O/suite-testlog.txt
grep -E "^ *[0-9]+/[0-9]+ |Ok:|Fail:|Timeout|suite rc" $O/suite.txt
grep -E "^device|LATENT  |block 16 /" $O/latent-bars.txt | head -40
grep -E "^device|PREFILL  |DECODE  |peak|target" $O/prefill-bars.txt | grep -v "AUTO->PREFILL " | tail -24
