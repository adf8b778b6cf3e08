#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps, about 520 s; any card):
# tools/ab-patches of the patches given as arguments (NAME=PATCH..., the PREFILL matrix, memcheck
# and racecheck of its quick matrix, pa_bench_prefill --no-unfused twice per tree, benches first),
# then the whole gpu suite on the working tree (ab-patches' base build; its GPU tests run one at a
# time, about 300 s), then its
# whole pa_bench_latent (issue 17's rows)
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
TESTS=prefill SHARDS=4 RUNS=2 BENCH_FIRST=1 BENCHES="pa_bench_prefill --no-unfused" \
  tools/ab-patches "$@" > $O/ab.txt 2>&1
timeout 330 meson test -C build-ab --suite gpu --print-errorlogs \
  > $O/suite.txt 2>&1
echo "suite rc $?" >> $O/suite.txt
cp build-ab/meson-logs/testlog.txt $O/suite-testlog.txt
timeout 100 build-ab/bench/pa_bench_latent > $O/latent-bars.txt 2>&1
grep -E "^device|LATENT  |block 16 /" $O/latent-bars.txt | head -24
grep -E "^ *[0-9]+/[0-9]+ |Ok:|Fail:|Timeout|suite rc" $O/suite.txt
sed -n '/=== tests/,$p' $O/ab.txt
