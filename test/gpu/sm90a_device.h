/* For the gpu tests of sm_90a building blocks (test_wgmma_layout.cu and the like): whether the
 * current device runs this build's sm_90a cubin (compute capability 9.0 exactly); if not, why, on
 * stderr, and the test exits 77 (meson: skipped). */
#pragma once

#include <stdio.h>

#include <cuda_runtime.h>

static inline int sm90a_device_or_skip(void) {
  int device = 0;
  cudaDeviceProp prop;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    fprintf(stderr, "no CUDA device: skipped\n");
    return 0;
  }
  if (prop.major != 9 || prop.minor != 0) {
    fprintf(stderr, "compute capability %d.%d: the sm_90a kernels do not run here: skipped\n",
            prop.major, prop.minor);
    return 0;
  }
  return 1;
}
