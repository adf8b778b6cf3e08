#!/usr/bin/env bash
# Session 42's device call (one `run`, carry .devdeps, any card, under LIMIT + 5 s): session 41's A/B
# (call-41.sh's setup and merge variants; pf alone is left out, setup holds it) with session 42's
# streaming merge (stream: latent-streamed-merge.patch; the LATENT matrix in 4 shards, memcheck
# and racecheck of its quick matrix) and the LATENT producers' leaner unit set-up (lean:
# latent-setup-lean.patch; the PREFILL and LATENT matrices), the benches twice per variant; then, in the stream build, the
# 16-head 1 x 64k rows with the streaming merge, its wait path (PA_LATENT_MERGE=wait) and the
# merge kernel (=kernel), alternating, three times each; then main's whole gpu suite in the time
# left. call-41.sh's LATENT timelines (CTA_SM) are not in it. LIMIT (default 575) is the call's
# seconds: the A/B takes all but 160 of them.
LIMIT=${LIMIT:-575}
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
W=doc/wip
TESTS="prefill latent" TESTS_merge="decode latent" TESTS_stream="latent" SHARDS=4 \
  RUNS=2 BENCH_FIRST=1 BENCHES="pa_bench_prefill --no-unfused --quick;pa_bench_latent --quick" \
  timeout $((LIMIT - 160)) tools/ab-patches \
  setup=$W/prefetch-tensor-maps.patch+$W/latent-prefetch-entries.patch+$W/latent-prefetch-lengths.patch+$W/latent-span-reuse.patch \
  merge=$W/merge-rows-first.patch stream=$W/latent-streamed-merge.patch \
  lean=$W/latent-setup-lean.patch > $O/ab.txt 2>&1
echo "ab rc $?"
bash doc/wip/time-merges.sh /tmp/ab-stream/build-ab/bench/pa_bench_latent 3 $O 30 > /dev/null
left=$((LIMIT - SECONDS))
[ $left -gt 40 ] && timeout $left python3 tools/gpu-suite-parallel.py build-ab $O/suite.txt \
  --seconds $((left - 20)) --logdir $O/suite > /dev/null 2>&1
sed -n '/=== tests/,$p' $O/ab.txt | cut -c1-150
cat $O/merges.txt
tail -25 $O/suite.txt 2>/dev/null
