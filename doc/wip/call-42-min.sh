#!/usr/bin/env bash
# The least call that says something about latent-streamed-merge.patch (one `run`, carry .devdeps,
# any card, about 200 s): the patched tree built alone (no base), the 16-head 1 x 64k rows with
# the streaming merge, the merge kernel (PA_LATENT_MERGE=kernel: main's path for that row) and the
# wait path, alternating, three times each; then test_gpu_latent's quick matrix (its
# latent_streamed_merge included) in 4 shards.
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
rm -rf /tmp/st && mkdir -p /tmp/st && tar --exclude=./.git --exclude='./build*' -cf - . | tar -xf - -C /tmp/st
cd /tmp/st && git apply doc/wip/latent-streamed-merge.patch || exit 1
meson setup b -Dgpu_archs=90a -Dbuildtype=release > $O/setup.log 2>&1 && ninja -C b > $O/build.log 2>&1 ||
  { tail -20 $O/build.log; exit 1; }
echo "built at $SECONDS s"
bash doc/wip/time-merges.sh b/bench/pa_bench_latent 3 $O 12
for i in 0 1 2 3; do
  PA_GPU_TEST_QUICK=1 PA_GPU_TEST_SHARD=$i/4 timeout 100 b/test/gpu/test_gpu_latent > $O/latent-$i.txt 2>&1 &
done
wait
for i in 0 1 2 3; do grep -E "FAIL|latent: " $O/latent-$i.txt | head -8; done
echo "done at $SECONDS s"
