#!/usr/bin/env bash
# Session 41's device call (one `run`, carry .devdeps, any card): the A/B of the
# start and merge patches against main (tools/ab-patches, base = this tree), the LATENT
# timelines over them with the setup steps and each CTA's multiprocessor (doc/wip/call.sh), then
# as much of main's whole gpu suite as the time leaves (base's build-ab), all within 290 s.
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
W=doc/wip
TESTS="decode prefill latent" SHARDS=4 RUNS=2 BENCH_FIRST=1 \
  BENCHES="pa_bench_prefill --no-unfused --quick;pa_bench_latent --quick" \
  timeout 190 tools/ab-patches \
  all=$W/prefetch-tensor-maps.patch+$W/latent-prefetch-entries.patch+$W/latent-prefetch-lengths.patch+$W/merge-rows-first.patch \
  > $O/ab.txt 2>&1
echo "ab rc $?"
rm -rf /tmp/timeline-tree && mkdir -p /tmp/timeline-tree &&
  tar --exclude='./build*' -cf - . | tar -xf - -C /tmp/timeline-tree
(cd /tmp/timeline-tree && git apply $W/prefetch-tensor-maps.patch &&
   git apply $W/latent-prefetch-entries.patch &&
   SETUP_STEPS=1 CTA_SM=1 NO_PREFILL=1 timeout $((275 - SECONDS)) bash $W/call.sh > $O/timeline.txt 2>&1)
echo "timeline rc $?"
left=$((280 - SECONDS))
[ $left -gt 40 ] && timeout $left python3 tools/gpu-suite-parallel.py build-ab $O/suite.txt \
  --seconds $((left - 20)) --logdir $O/suite > /dev/null 2>&1
sed -n '/=== tests/,$p' $O/ab.txt | cut -c1-150
cat $O/timeline.txt | cut -c1-170
tail -25 $O/suite.txt 2>/dev/null
