#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps, about 30 s a row; any card): main with
# diag-timeline.patch and diag-prefill-waits.patch (the PREFILL Hopper kernel's producer and
# consumer cycles by what they wait for, summed per CTA, and one CTA's per-tile trace) on
# PREFILL's rows (ROWS, ;-separated; default causal 4 x 2k, 1 x 8k and the 2k chunk over 30k);
# SUMS: how many lines of sums and trace to print per row. Thirty-third measurement, calls 3-7.
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
# EXTRA: patches applied first (the change under study, e.g. doc/wip/hopper-uniform-descriptors.patch)
for p in ${EXTRA:-}; do git apply "$p" || exit 1; done
# WAITS: the sums' patch (default doc/wip/diag-prefill-waits.patch; a change to the consumer
# loop needs the sums rebased over it, as session 44 did for its deferred boxes)
git apply doc/wip/diag-timeline.patch && git apply "${WAITS:-doc/wip/diag-prefill-waits.patch}" || exit 1
rm -rf build-d && meson setup build-d -Dgpu_archs=90a -Dbuildtype=release > $O/setup.log 2>&1 &&
  ninja -C build-d bench/pa_bench_prefill > $O/build.log 2>&1 || { tail -30 $O/build.log; exit 1; }
IFS=";" read -r -a rows <<<"${ROWS:-causal 4x2k;causal 1x8k;chunk 2k over 30k}"
for row in "${rows[@]}"; do
  PA_DIAG_TIMELINE=1 timeout 100 build-d/bench/pa_bench_prefill --no-unfused --only "$row" \
    > "$O/$row.txt" 2>&1
  echo "== $row: rc $?"
  grep -E "^ *(causal|chunk).*PREFILL|error|FAIL" "$O/$row.txt" | head -4
  grep -A80 "timeline 0" "$O/$row.txt" | grep -E "^    sum|^    trace|timeline 0" | head -${SUMS:-24}
done
