#!/usr/bin/env bash
# The weights app's GPU checks alone: the "weights" step of scripts/device-test.sh (unpack the
# carried packages, build with CUDA, then what scripts/device-weights.sh lists: fp8 kernel vs the
# CPU reference and torch, the Gpu* integration tests, identical logits over ipc, the pipeline
# benchmark). Run from the repository root with carry [".deb"]:
#   bash apps/weights/tests/device/device-weights.sh
# Output in $OUT as device-test.sh writes it (summary.txt, weights.log, weights_pipeline.*).
root=$(cd "$(dirname "$0")/../../../.." && pwd)
FABRIC_LIB_DEVICE_STEPS=weights exec bash "$root/scripts/device-test.sh"
