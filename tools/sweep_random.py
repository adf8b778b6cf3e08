"""test/python/test_gpu.py's random configurations (60 per seed block) over many seed blocks in one
process, on a GPU: a rare failing configuration shows in minutes instead of one suite run in ten
(session 33 found DECODE's and the mma.sync kernels' 8-bit bugs this way, doc/development.md).
Run from the repository root with the library built:
    PAGEDATTN_LIBRARY=build/libpagedattn.so.0.1.0 python3 tools/sweep_random.py FIRST COUNT [SECONDS]
Seed blocks FIRST, FIRST + 60, ... (COUNT of them, or as many as SECONDS allow); prints each
failing block's report (its seed repeats it: PAGEDATTN_TEST_SEED=N test/python/test_gpu.py), then a
count."""
import sys
import time
import unittest

sys.path[:0] = ["python", "test/python"]
import test_gpu  # noqa: E402

first, count = int(sys.argv[1]), int(sys.argv[2])
budget = float(sys.argv[3]) if len(sys.argv) > 3 else 1e9
start, failed, ran = time.time(), [], 0
for k in range(count):
    if time.time() - start > budget:
        break
    seed = first + 60 * k  # the run's configs take seeds SEED .. SEED + 59
    test_gpu.SEED = seed
    case = test_gpu.BackendsAgainstReference("test_random_configurations")
    result = unittest.TestResult()
    case.run(result)
    ran += 1
    if result.failures or result.errors:
        failed.append(seed)
        print("seed %d FAILED" % seed)
        for _, report in result.failures + result.errors:
            print(report[-3000:])
print("sweep: %d runs of 60 configurations from seed %d in %.0f s, %d failed: %s"
      % (ran, first, time.time() - start, len(failed), failed))
