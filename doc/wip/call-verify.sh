#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps, about 450 s): main's whole gpu suite and the random
# sweeps of tools/sweep_random.py at the same time (correctness only; timings meaningless here)
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
rm -rf build-v && meson setup build-v -Dgpu_archs=90a -Dbuildtype=release > $O/setup-v.log 2>&1 &&
  ninja -C build-v > $O/build-v.log 2>&1 || { tail -30 $O/build-v.log; exit 1; }
lib=build-v/libpagedattn.so.0.1.0
(timeout 420 meson test -C build-v --suite gpu --num-processes 3 --print-errorlogs > $O/suite.txt 2>&1
 echo "suite rc $?" >> $O/suite.txt; cp build-v/meson-logs/testlog.txt $O/suite-testlog.txt) &
(PAGEDATTN_LIBRARY=$lib timeout 240 python3 tools/sweep_random.py ${SWEEP_FIRST:-20000} 400 200 > $O/sweep.txt 2>&1
 echo "sweep rc $?" >> $O/sweep.txt
 PAGEDATTN_LIBRARY=$lib timeout 170 python3 tools/sweep_random.py --large ${LARGE_FIRST:-1} 400 150 > $O/sweep-large.txt 2>&1
 echo "large rc $?" >> $O/sweep-large.txt) &
wait
tail -5 $O/sweep.txt; tail -5 $O/sweep-large.txt
grep -E "^ *[0-9]+/[0-9]+ |Ok:|Fail:|Timeout|suite rc" $O/suite.txt
