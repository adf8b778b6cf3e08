"""test/python/test_gpu.py's random configurations (60 per seed block) over many seed blocks in one
process, on a GPU: a rare failing configuration shows in minutes instead of one suite run in ten
(session 33 found DECODE's and the mma.sync kernels' 8-bit bugs this way, doc/development.md).
Run from the repository root with the library built:
    PAGEDATTN_LIBRARY=build/libpagedattn.so.0.1.0 python3 tools/sweep_random.py [--large] \\
        FIRST COUNT [SECONDS]
Seed blocks FIRST, FIRST + 60, ... (COUNT of them, or as many as SECONDS allow); prints each
failing block's report, then a count. A block of the default sweep repeats as
PAGEDATTN_TEST_SEED=N python3 test/python/test_gpu.py \
    BackendsAgainstReference.test_random_configurations
--large: 6 configurations per block from test_binding.random_large_config (long contexts with
splits, LATENT at 576 / 512 channels with 16-128 heads, head sizes up to 256, blocks up to 256),
the shapes the fast kernels take; a block repeats as tools/sweep_random.py --large SEED 1."""
import sys
import time
import unittest

import numpy as np

sys.path[:0] = ["python", "test/python"]
import test_binding  # noqa: E402
import test_gpu  # noqa: E402

LARGE_PER_BLOCK = 6


class LargeConfigurations(test_gpu.BackendsAgainstReference):
    def test_random_large_configurations(self):
        rng = np.random.default_rng(test_gpu.SEED)
        for i in range(LARGE_PER_BLOCK):
            cfg = test_binding.random_large_config(rng)
            with self.subTest(i=i, seed=test_gpu.SEED + i):
                self.run_config(cfg, test_gpu.SEED + i)


args = sys.argv[1:]
large = "--large" in args
if large:
    args.remove("--large")
first, count = int(args[0]), int(args[1])
budget = float(args[2]) if len(args) > 2 else 1e9
start, failed, ran = time.time(), [], 0
for k in range(count):
    if time.time() - start > budget:
        break
    seed = first + 60 * k  # a block's configurations take seeds SEED .. SEED + 59
    test_gpu.SEED = seed
    case = LargeConfigurations("test_random_large_configurations") if large else \
        test_gpu.BackendsAgainstReference("test_random_configurations")
    result = unittest.TestResult()
    case.run(result)
    ran += 1
    if result.failures or result.errors:
        failed.append(seed)
        print("seed %d FAILED" % seed)
        for _, report in result.failures + result.errors:
            print(report[-3000:])
print("sweep: %d blocks of %d %sconfigurations from seed %d in %.0f s, %d failed: %s"
      % (ran, LARGE_PER_BLOCK if large else 60, "large " if large else "", first,
         time.time() - start, len(failed), failed))
