#!/usr/bin/env bash
# call-16h.sh in one build (about 200 s on an H100): main, latent-guess-l2.patch and
# diag-latent-splits.patch built at once by tools/ab-patches; the LATENT matrix (4 shards) and
# memcheck on the guess only; pa_bench_latent --quick twice per tree; then the split-count probe
# on the splits tree's bench (PA_DIAG_LATENT_SPLITS=N, see call-16h.sh).
source .devdeps/env.sh
nvidia-smi -L
TESTS= TESTS_guess=latent SHARDS=4 RACECHECK=0 RUNS=2 BENCH_FIRST=1 \
  BENCHES="pa_bench_latent --quick --only 16h" \
  timeout 300 tools/ab-patches guess=doc/wip/latent-guess-l2.patch \
  splits=doc/wip/diag-latent-splits.patch > $OUT/ab.txt 2>&1
echo "ab rc $?"
tail -24 $OUT/ab.txt
B=/tmp/ab-splits/build-ab/bench/pa_bench_latent
for n in 0 3 4 8 0; do
  echo "== splits $n 64x4k"
  PA_DIAG_LATENT_SPLITS=$n timeout 20 $B --quick --only "16h 64x4k q1 block 64" | grep -E "LATENT |FAIL"
done
for n in 0 256 0; do
  echo "== splits $n 1x64k"
  PA_DIAG_LATENT_SPLITS=$n timeout 20 $B --quick --only "16h 1x64k q1 block 64" | grep -E "LATENT |FAIL"
done
