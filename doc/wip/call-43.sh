#!/usr/bin/env bash
# Session 43's second call (one `run`, carry .devdeps, any card, timeout 560): why the streaming
# merge (latent-streamed-merge.patch) takes 3 µs off 16h 1 x 64k when that row runs alone and
# nothing in the whole bench (thirty-ninth measurement). Main and the stream tree built
# (tools/ab-patches, no tests, no benches), then the row in three contexts -- alone (--only
# "16h 1x64k"), after the other 16-head rows (--only 16h) and in the whole --quick bench -- with
# main's merge kernel and the stream tree's three paths (PA_LATENT_MERGE unset, =wait, =kernel),
# alternating, ROUNDS (default 1) times; then the stream tree's kernel timelines of that row
# (diag-stream-timeline.patch) alone and in the whole bench, streaming merge and merge kernel;
# then the LATENT timelines of main with the set-up steps and each CTA's multiprocessor
# (doc/wip/call.sh, SETUP_STEPS=1 CTA_SM=1). About 400 s. The timelines are of single replays after a
# synchronization, not of back-to-back ones: a context effect on the steady state may not show.
O=$OUT
source .devdeps/env.sh
nvidia-smi -L
TESTS= BENCHES= timeout 200 tools/ab-patches stream=doc/wip/latent-streamed-merge.patch \
  > $O/ab.txt 2>&1 || { echo "ab rc $?"; tail -20 $O/ab.txt; exit 1; }
row() { grep -E "16h 1x64k q1 block 64 +LATENT +[0-9]" "$1" | tr -s ' ' | cut -d' ' -f7,8; }
for r in $(seq "${ROUNDS:-1}"); do
  for ctx in alone 16h whole; do
    case $ctx in
      alone) args=(--quick --only "16h 1x64k") ;;
      16h) args=(--quick --only "16h") ;;
      whole) args=(--quick) ;;
    esac
    for v in main stream stream-wait stream-kernel; do
      unset PA_LATENT_MERGE
      case $v in
        main) bench=build-ab/bench/pa_bench_latent ;;
        stream*) bench=/tmp/ab-stream/build-ab/bench/pa_bench_latent ;;
      esac
      case $v in stream-wait) export PA_LATENT_MERGE=wait ;; stream-kernel) export PA_LATENT_MERGE=kernel ;; esac
      timeout 60 $bench "${args[@]}" > $O/ctx-$ctx-$v-$r.txt 2>&1
      echo "$r $ctx $v: $(row $O/ctx-$ctx-$v-$r.txt)"
    done
  done
done | tee $O/contexts.txt
unset PA_LATENT_MERGE
# the stream tree's timelines (diag-timeline.patch + diag-stream-timeline.patch): each kernel's
# first start and last end in three replays of the 1 x 64k row, alone and in the whole bench
rm -rf /tmp/stream-tl && mkdir -p /tmp/stream-tl &&
  tar --exclude='./build*' -cf - . | tar -xf - -C /tmp/stream-tl
(cd /tmp/stream-tl && git apply doc/wip/diag-timeline.patch && git apply doc/wip/diag-stream-timeline.patch &&
   meson setup b -Dgpu_archs=90a -Dbuildtype=release > $O/stl-setup.log 2>&1 &&
   ninja -C b bench/pa_bench_latent > $O/stl-build.log 2>&1 &&
   for m in stream kernel; do
     if [ $m = stream ]; then unset PA_LATENT_MERGE; else export PA_LATENT_MERGE=kernel; fi
     PA_DIAG_TIMELINE=1 timeout 40 b/bench/pa_bench_latent --quick --only "16h 1x64k q1 block 64" \
       > $O/stl-alone-$m.txt 2>&1
     PA_DIAG_TIMELINE=1 timeout 90 b/bench/pa_bench_latent --quick > $O/stl-whole-$m.txt 2>&1
     for ctx in alone whole; do
       echo "== $ctx $m"
       # (a row's timelines print before its result line)
       awk '/timeline [0-2]/ { buf = buf $0 "\n"; next }
            /^16h 1x64k q1 block 64 +LATENT +[0-9]/ { printf "%s%s\n", buf, $0 }
            /^[0-9]+h / { buf = "" }' $O/stl-$ctx-$m.txt | cut -c1-230
     done
   done > $O/stream-timelines.txt 2>&1)
echo "stream timelines rc $?"
rm -rf /tmp/timeline-tree && mkdir -p /tmp/timeline-tree &&
  tar --exclude='./build*' -cf - . | tar -xf - -C /tmp/timeline-tree
(cd /tmp/timeline-tree && SETUP_STEPS=1 CTA_SM=1 NO_PREFILL=1 timeout 150 bash doc/wip/call.sh \
  > $O/timeline.txt 2>&1)
echo "timeline rc $?"
cat $O/contexts.txt
cat $O/stream-timelines.txt
cut -c1-170 $O/timeline.txt
