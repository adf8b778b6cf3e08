// Programmatic dependent launch (sm_90 and newer; a no-op before), shared by every kernel of a
// step: each is launched so that it may start while the previous kernel of the stream finishes.
// The kernel first waits until that kernel has completed and its writes are visible, then lets
// the next one start launching, which hides most of the launch gap between the kernels of a step.
#pragma once

#include <cuda_runtime.h>

namespace pa {
namespace detail {

// Called by a chained kernel before its first global memory access.
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Launches kernel(args) on stream; chained: allowed to start before the previous kernel of the
// stream has finished (the kernel calls wait_for_previous_kernel first; sm_90 and newer).
template <typename... Params, typename... Args>
cudaError_t launch_chained(void (*kernel)(Params...), dim3 grid, int threads, size_t smem_bytes,
                           cudaStream_t stream, bool chained, Args... args) {
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3((unsigned)threads);
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = chained ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, args...);
}

}  // namespace detail
}  // namespace pa
