#!/usr/bin/env bash
# call-42.sh cut to session 42's two LATENT patches, for a call of about LIMIT (default 400) s (one
# `run`, carry .devdeps, any card): the A/B of stream (latent-streamed-merge.patch: the LATENT
# matrix in 4 shards, memcheck and racecheck of its quick matrix) and lean
# (latent-setup-lean.patch: the PREFILL and LATENT matrices), pa_bench_latent --quick twice per
# tree (benches first); then the 1 x 64k rows of the stream build with the streaming merge, its
# wait path and the merge kernel, alternating.
LIMIT=${LIMIT:-400}
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
W=doc/wip
TESTS="prefill latent" TESTS_stream="latent" SHARDS=4 RUNS=2 BENCH_FIRST=1 \
  BENCHES="pa_bench_latent --quick" timeout $((LIMIT - 60)) tools/ab-patches \
  stream=$W/latent-streamed-merge.patch lean=$W/latent-setup-lean.patch > $O/ab.txt 2>&1
echo "ab rc $?"
bash doc/wip/time-merges.sh /tmp/ab-stream/build-ab/bench/pa_bench_latent 2 $O 15 > /dev/null
sed -n '/=== tests/,$p' $O/ab.txt | cut -c1-150
cat $O/merges.txt
