#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps; any card; about 450 s): softmax-rescale-first.patch
# (the Hopper PREFILL softmax's rescale unconditional and before its MUFU run, 16-bit caches at 64
# and 128 channels) against main: the timings first (pa_bench_prefill --quick and its 8k rows,
# RUNS times per tree, default 3, alternating), the PREFILL matrix in 4 shards and memcheck of
# its quick matrix (RACECHECK=0: no shared-memory change); then the patch applied to this tree
# and its whole gpu suite (tools/gpu-suite-parallel.py, at most SUITE_SECONDS, default 200).
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
p=doc/wip/softmax-rescale-first.patch
TESTS="prefill" SHARDS=4 RUNS=${RUNS:-3} BENCH_FIRST=1 RACECHECK=${RACECHECK:-0} \
  BENCHES="${BENCHES-pa_bench_prefill --quick --no-unfused; pa_bench_prefill --no-unfused --only 8k}" \
  timeout 330 tools/ab-patches rescale=$p > $O/ab.txt 2>&1
echo "ab rc $?"
git apply $p && rm -rf build-v && meson setup build-v -Dgpu_archs=90a -Dbuildtype=release > $O/setup-v.log 2>&1 &&
  ninja -C build-v > $O/build-v.log 2>&1 || { tail -30 $O/build-v.log; exit 1; }
python3 tools/gpu-suite-parallel.py build-v $O/suite.txt --seconds ${SUITE_SECONDS:-200} --logdir $O/suite > /dev/null 2>&1
head -1 $O/suite.txt; echo "passed: $(grep -c ': rc=0 ' $O/suite.txt); failing or stopped:"; grep -v ': rc=0 ' $O/suite.txt | tail -n +2 | cut -c1-160
sed -n '/^=== tests/,$p' $O/ab.txt | cut -c1-200 | grep -v "AUTO\|part:\|UNFUSED\|read alone" | tail -30
