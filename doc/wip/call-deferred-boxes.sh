#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps; any card): prefill-deferred-boxes.patch against main:
# the PREFILL matrix in 4 shards and memcheck of its quick matrix (both passed in session 44),
# racecheck of it unless RACECHECK=0 (in session 44 it had not finished after about 470 s, where
# main's takes well under 100 s: run RACECHECK=0 first, about 250 s, then racecheck alone with
# BENCHES= and a timeout), then pa_bench_prefill --quick and its 1 x 8k rows, RUNS times per tree
# (default 3), alternating.
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
TESTS=prefill SHARDS=4 RUNS=${RUNS:-3} RACECHECK=${RACECHECK:-0} \
  BENCHES="${BENCHES-pa_bench_prefill --quick --no-unfused; pa_bench_prefill --no-unfused --only 1x8k}" \
  timeout 560 tools/ab-patches defer=doc/wip/prefill-deferred-boxes.patch > $O/ab.txt 2>&1
echo "ab rc $?"
sed -n '/^=== tests/,$p' $O/ab.txt | cut -c1-200 | grep -v "AUTO\|part:\|UNFUSED" | tail -40
