#!/usr/bin/env bash
# The 16-head 1 x 64k rows of a pa_bench_latent built with latent-streamed-merge.patch, with the
# streaming merge, its wait path (PA_LATENT_MERGE=wait) and the merge kernel (=kernel, main's path
# for that row), alternating, ROUNDS times each; logs under OUTDIR, one summary line per run
# printed and kept in OUTDIR/merges.txt. Used by doc/wip/call-43.sh.
#   doc/wip/time-merges.sh BENCH ROUNDS OUTDIR [SECONDS per run, default 12]
B=$1 ROUNDS=$2 O=$3 SECS=${4:-12}
for r in $(seq "$ROUNDS"); do
  for m in stream wait kernel; do
    if [ $m = stream ]; then unset PA_LATENT_MERGE; else export PA_LATENT_MERGE=$m; fi
    timeout "$SECS" "$B" --only "16h 1x64k" > "$O/merge-$m-$r.txt" 2>&1
    echo "$m $r: $(grep LATENT "$O/merge-$m-$r.txt" | grep -v kernels | tr -s ' ' | cut -c1-100 | paste -sd'|')"
  done
done | tee "$O/merges.txt"
