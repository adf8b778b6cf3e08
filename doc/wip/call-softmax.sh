#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps; any card; about 450 s): the PREFILL Hopper softmax.
# Against main, timed first (pa_bench_prefill --quick and the causal 1 x 8k rows, RUNS times per
# tree, default 2, alternating):
#   spec       prefill-softmax-speculative.patch (the exponentials against the current
#              references before the maxima are known) with test-prefill-rising-max.patch (a
#              PREFILL case whose references move on later tiles), then tested: the PREFILL
#              matrix in 4 shards and memcheck of its quick matrix (RACECHECK=0: no shared-memory
#              change);
#   nomufu     diag-nomufu.patch (the exponentials as one FFMA; wrong results, not tested);
#   nosoftmax  diag-nosoftmax.patch (no mask, no softmax; wrong results, not tested).
# Then main's wait sums and trace of causal 4 x 2k (doc/wip/call-waits.sh; with WAITS_EXTRA=spec
# the speculative patch under them too), and tools/sweep_random.py on main for SWEEP_SECONDS
# (default 100; 0 skips it). With SUITE=spec the waits and the sweep are skipped: the speculative
# patches are applied and doc/wip/call-main.sh runs (both bars and the whole gpu suite on that
# tree, about 150 s on an H100), so that one call can test a tree to merge. BOUNDS=0 leaves out
# nomufu and nosoftmax (about 100 s less).
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
bounds="nomufu=doc/wip/diag-nomufu.patch nosoftmax=doc/wip/diag-nosoftmax.patch"
[ "${BOUNDS:-1}" = 0 ] && bounds=
TESTS= TESTS_spec=prefill SHARDS=4 RUNS=${RUNS:-2} BENCH_FIRST=1 RACECHECK=${RACECHECK:-0} \
  BENCHES="pa_bench_prefill --quick --no-unfused; pa_bench_prefill --no-unfused --only 1x8k" \
  timeout 330 tools/ab-patches \
    spec=doc/wip/prefill-softmax-speculative.patch+doc/wip/test-prefill-rising-max.patch \
    $bounds > $O/ab.txt 2>&1
echo "ab rc $?"
sed -n '/^=== tests/,$p' $O/ab.txt | grep -v "AUTO\|part:" | cut -c1-170
if [ "${SUITE:-}" = spec ]; then
  git checkout -q . && git apply doc/wip/prefill-softmax-speculative.patch \
    doc/wip/test-prefill-rising-max.patch && bash doc/wip/call-main.sh
  exit
fi
extra=; [ "${WAITS_EXTRA:-}" = spec ] && extra=doc/wip/prefill-softmax-speculative.patch
EXTRA=$extra ROWS="causal 4x2k" SUMS=30 timeout 150 bash doc/wip/call-waits.sh 2>&1 | tail -32
git checkout -q .
[ "${SWEEP_SECONDS:-100}" = 0 ] && exit 0
rm -rf build-s && meson setup build-s -Dgpu_archs=90a -Dbuildtype=release > $O/setup-s.log 2>&1 &&
  ninja -C build-s > $O/build-s.log 2>&1 || { tail -20 $O/build-s.log; exit 1; }
PAGEDATTN_LIBRARY=build-s/libpagedattn.so.0 timeout 200 \
  python3 tools/sweep_random.py 80000 1000 ${SWEEP_SECONDS:-100} > $O/sweep.txt 2>&1
tail -1 $O/sweep.txt
