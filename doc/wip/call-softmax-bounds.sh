#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps; any card; about 330 s): what the PREFILL Hopper
# softmax costs, as bounds. Two diagnostics with wrong results, timed against main (no tests;
# their benches fail their checks): diag-nomufu.patch (the exponentials as one FFMA: the tile
# loop without MUFU's cost) and diag-nosoftmax.patch (no mask and no softmax: GEMMs, loads, turns
# and stores alone), on pa_bench_prefill --quick and the causal 1 x 8k row, RUNS times (default 2);
# then main's per-tile wait sums and trace of causal 4 x 2k (doc/wip/call-waits.sh, since the
# softmax rescale's merge), then tools/sweep_random.py on main for SWEEP_SECONDS (default 100).
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
TESTS= RUNS=${RUNS:-2} BENCH_FIRST=1 \
  BENCHES="pa_bench_prefill --quick --no-unfused; pa_bench_prefill --no-unfused --only 1x8k" \
  timeout 300 tools/ab-patches nomufu=doc/wip/diag-nomufu.patch \
    nosoftmax=doc/wip/diag-nosoftmax.patch > $O/ab.txt 2>&1
echo "ab rc $?"
sed -n '/^=== benches/,$p' $O/ab.txt | grep -v "AUTO\|part:" | cut -c1-160
ROWS="causal 4x2k" SUMS=30 timeout 150 bash doc/wip/call-waits.sh 2>&1 | tail -32
git checkout -q .
rm -rf build-s && meson setup build-s -Dgpu_archs=90a -Dbuildtype=release > $O/setup-s.log 2>&1 &&
  ninja -C build-s > $O/build-s.log 2>&1 || { tail -20 $O/build-s.log; exit 1; }
PAGEDATTN_LIBRARY=build-s/libpagedattn.so.0 timeout 200 \
  python3 tools/sweep_random.py 80000 1000 ${SWEEP_SECONDS:-100} > $O/sweep.txt 2>&1
tail -1 $O/sweep.txt
