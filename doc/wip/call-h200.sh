#!/usr/bin/env bash
# a device call (one `run`, carry .devdeps, about 150 s on an H200, 240 s elsewhere): on an H200,
# call-main.sh (the whole suite and both issues' bars), then the cuDNN anchor (bench/anchors.py
# --prefill --no-flex) on the same machine, then with LATENT_TOO=1 call-latent-softmax.sh; on any
# other card only call-latent-softmax.sh, so that an H100 does not spend the budget on bars that
# resolve only on the H200.
if nvidia-smi -L | grep -q H200; then
  bash doc/wip/call-main.sh
  echo "=== cuDNN anchor"
  timeout 100 python3 bench/anchors.py --prefill --no-flex > $OUT/anchors.txt 2>&1
  echo "anchors rc $?"; tail -12 $OUT/anchors.txt
  if [ -n "${LATENT_TOO:-}" ]; then
    echo "=== latent softmax"
    LIMIT=200 bash doc/wip/call-latent-softmax.sh
  fi
else
  bash doc/wip/call-latent-softmax.sh
fi
