#!/usr/bin/env bash
# Session 41's device call, not run (its device budget went on refusals; one `run`, carry .devdeps,
# any card, under 600 s): the A/B of the start and merge patches against main (tools/ab-patches,
# base = this tree) as three variants: pf (the tensor maps prefetched), setup (pf and the LATENT
# producers' step inputs: block-table entries and lengths into L2, the search's span reused) and
# merge (split_merge_kernel's rows before its reductions); then the LATENT timelines over pf and
# the entries' prefetch with the setup steps and each CTA's multiprocessor (doc/wip/call.sh); then
# as much of main's whole gpu suite as the time leaves (base's build-ab).
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
W=doc/wip
TESTS="prefill latent" TESTS_pf="" TESTS_merge="decode latent" SHARDS=4 RUNS=2 BENCH_FIRST=1 \
  BENCHES="pa_bench_prefill --no-unfused --quick;pa_bench_latent --quick" \
  timeout 330 tools/ab-patches pf=$W/prefetch-tensor-maps.patch \
  setup=$W/prefetch-tensor-maps.patch+$W/latent-prefetch-entries.patch+$W/latent-prefetch-lengths.patch+$W/latent-span-reuse.patch \
  merge=$W/merge-rows-first.patch > $O/ab.txt 2>&1
echo "ab rc $?"
rm -rf /tmp/timeline-tree && mkdir -p /tmp/timeline-tree &&
  tar --exclude='./build*' -cf - . | tar -xf - -C /tmp/timeline-tree
(cd /tmp/timeline-tree && git apply $W/prefetch-tensor-maps.patch &&
   git apply $W/latent-prefetch-entries.patch &&
   SETUP_STEPS=1 CTA_SM=1 NO_PREFILL=1 timeout 120 bash $W/call.sh > $O/timeline.txt 2>&1)
echo "timeline rc $?"
left=$((560 - SECONDS))
[ $left -gt 40 ] && timeout $left python3 tools/gpu-suite-parallel.py build-ab $O/suite.txt \
  --seconds $((left - 20)) --logdir $O/suite > /dev/null 2>&1
sed -n '/=== tests/,$p' $O/ab.txt | cut -c1-150
cat $O/timeline.txt | cut -c1-170
tail -25 $O/suite.txt 2>/dev/null
