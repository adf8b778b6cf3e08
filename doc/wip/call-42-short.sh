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
B=/tmp/ab-stream/build-ab/bench/pa_bench_latent
for r in 1 2; do
  for m in stream wait kernel; do
    if [ $m = stream ]; then unset PA_LATENT_MERGE; else export PA_LATENT_MERGE=$m; fi
    timeout 12 $B --only "16h 1x64k" > $O/merge-$m-$r.txt 2>&1
    echo "$m $r: $(grep LATENT $O/merge-$m-$r.txt | grep -v kernels | tr -s ' ' | cut -c1-100 | paste -sd'|')"
  done
done > $O/merges.txt
unset PA_LATENT_MERGE
sed -n '/=== tests/,$p' $O/ab.txt | cut -c1-150
cat $O/merges.txt
