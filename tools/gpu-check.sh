#!/usr/bin/env bash
# One call on the GPU machine: build, run the gpu suite (and the rest), optionally the sanitizer and
# the benchmarks. Full logs go under $OUT; a short summary is printed last.
#   tools/gpu-check.sh [tests] [sanitize] [bench] [anchors] [profile]
# profile: ncu (clocks left alone) on one timed DECODE step of each pa_bench_decode shape whose
# label contains a word of PROFILE_ONLY (default "1x128k"), block 16; the key figures of each go to
# profile.txt (the reports themselves stay on the machine: only 8 files come back).
set -u
out=${OUT:-/tmp/pa-out}
mkdir -p "$out"
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
summary=()
rm -rf build-gpu  # always fresh: meson 1.0.1 misses some CUDA header dependencies
meson setup build-gpu -Dgpu_archs=90a -Dbuildtype=release >"$out/setup.log" 2>&1 || { tail -40 "$out/setup.log"; exit 1; }
start=$(date +%s)
if ! ninja -C build-gpu >"$out/build.log" 2>&1; then
  grep -E "error|Error" -A4 "$out/build.log" | head -80; exit 1
fi
summary+=("build: $(( $(date +%s) - start )) s")
rm -f "$out/setup.log" "$out/build.log"  # only 8 files come back from the device machine
for step in "$@"; do
  case "$step" in
  tests)
    meson test -C build-gpu --num-processes 4 --print-errorlogs ${TEST_ARGS:-} >"$out/tests.log" 2>&1
    python3 - "$out" <<'PY' | tee "$out/tests-summary.txt"
import json, sys, collections
c = collections.Counter(); bad = []
for line in open("build-gpu/meson-logs/testlog.json"):
    r = json.loads(line); c[r["result"]] += 1
    if r["result"] not in ("OK", "SKIP", "EXPECTEDFAIL"): bad.append(f'{r["name"]} ({r["result"]})')
print("tests:", dict(c)); [print("  not ok:", b) for b in bad[:40]]
PY
    summary+=("$(head -1 "$out/tests-summary.txt")") ;;
  sanitize)
    for name in ${SANITIZE_TESTS:-decode write unfused prefill}; do  # the quick matrices under memcheck
      t=build-gpu/test/gpu/test_gpu_$name
      PA_GPU_TEST_QUICK=1 compute-sanitizer --tool memcheck --error-exitcode 9 "$t" >"$out/sanitize.log" 2>&1
      summary+=("memcheck $name: rc=$? $(grep -c 'Invalid' "$out/sanitize.log") invalid accesses, $(grep -E '^test_|^decode:|^prefill:' "$out/sanitize.log" | tail -1)")
    done ;;
  bench)
    for b in build-gpu/bench/pa_bench_*; do
      [ -f "$b" ] && [ -x "$b" ] || continue
      "$b" --quick >"$out/bench-$(basename "$b").txt" 2>&1; summary+=("bench $(basename "$b"): rc=$?")
    done ;;
  anchors)
    python3 bench/anchors.py ${ANCHORS_ARGS:---quick} >"$out/anchors.txt" 2>&1; summary+=("anchors: rc=$?") ;;
  profile)
    for only in ${PROFILE_ONLY:-1x128k}; do
      ncu --clock-control none --kernel-name regex:decode_kernel --launch-skip 3 --launch-count 1 \
        --set full -f -o /tmp/pa-profile build-gpu/bench/pa_bench_decode --only "$only" --block 16 \
        >/dev/null 2>&1
      { echo "== $only"; ncu --import /tmp/pa-profile.ncu-rep --page details 2>&1 |
        grep -E "Duration|DRAM Throughput|Issue Slots Busy|Executed Instructions  |Registers Per|Grid Size|Waves Per SM|Achieved Active Warps|Eligible Warps|Warp Cycles Per Issued|L2 Hit Rate|stalled"
        echo "  top stall reasons (warps stalled per issued instruction):"
        ncu --import /tmp/pa-profile.ncu-rep --page raw 2>&1 |
          grep -E "smsp__average_warps_issue_stalled_[a-z_]+_per_issue_active.ratio" |
          awk '{print $NF, $1}' | sort -g -r | head -6 | sed 's/^/    /'; } >>"$out/profile.txt"
    done
    summary+=("profile: $(grep -c '^==' "$out/profile.txt") shape(s) in profile.txt") ;;
  esac
done
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
for f in "$out"/bench-*.txt "$out/anchors.txt"; do [ -f "$f" ] && { echo "== $f"; tail -25 "$f"; }; done
exit 0  # the steps' results are in the summary; a non-zero exit means the build failed
