#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps, about 250 s; any card): session 39's two PREFILL
# producer patches against main (the PREFILL matrix, memcheck, racecheck, pa_bench_prefill
# twice each), then main's per-CTA wait sums and per-tile trace on 4 x 2k and 1 x 8k
# (doc/wip/call-waits.sh, which patches the working tree: it runs last).
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
TESTS=prefill SHARDS=4 RUNS=2 BENCH_FIRST=1 BENCHES="pa_bench_prefill --no-unfused" \
  tools/ab-patches setup=doc/wip/prefill-setup-before-slot.patch \
  ahead=doc/wip/prefill-setup-before-slot.patch+doc/wip/prefill-claim-ahead.patch > $O/ab.txt 2>&1
ROWS="causal 4x2k;causal 1x8k" SUMS=60 bash doc/wip/call-waits.sh > $O/waits.txt 2>&1
grep -A80 "=== tests" $O/ab.txt | head -50
grep -E "^== |^ *(causal|chunk).*PREFILL|^    sum" $O/waits.txt | head -70
