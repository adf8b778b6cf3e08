#!/usr/bin/env bash
# call-42.sh cut to the streaming merge, for a call of about 330 s (one `run`, carry .devdeps, any
# card): the A/B of latent-streamed-merge.patch alone (the LATENT matrix in 4 shards, memcheck and
# racecheck of its quick matrix, pa_bench_latent's 16-head rows three times per tree), then the
# 1 x 64k rows of the stream build with the streaming merge, its wait path and the merge kernel.
# LIMIT (default 330) is the call's seconds.
LIMIT=${LIMIT:-330}
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
TESTS="latent" SHARDS=4 RUNS=3 BENCH_FIRST=1 BENCHES="pa_bench_latent --quick --only 16h" \
  timeout $((LIMIT - 70)) tools/ab-patches stream=doc/wip/latent-streamed-merge.patch > $O/ab.txt 2>&1
echo "ab rc $?"
bash doc/wip/time-merges.sh /tmp/ab-stream/build-ab/bench/pa_bench_latent 2 $O 12 > /dev/null
sed -n '/=== tests/,$p' $O/ab.txt | cut -c1-150
cat $O/merges.txt
