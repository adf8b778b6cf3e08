// Programmatic dependent launch (sm_90 and newer; a no-op before), shared by every kernel of a
// step: each is launched so that it may start while the previous kernel of the stream finishes.
// The kernel first waits until that kernel has completed and its writes are visible, then lets
// the next one start launching, which hides most of the launch gap between the kernels of a step.
#pragma once

#include <cuda_runtime.h>

namespace pa {
namespace detail {

// Waits until the previous kernel of the stream has completed and its writes are visible.
__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Lets the next kernel of the stream start launching; it still waits for this one to complete.
__device__ __forceinline__ void let_next_kernel_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// A load of a step's input (lengths, positions, block-table entries): through the non-coherent
// cache, or with kBeforeWait through L2 alone, for a kernel that reads it before its wait (DECODE's
// static grid, Q included), where nothing documented promises that the non-coherent path sees what
// a kernel two launches back wrote.
template <bool kBeforeWait = false>
__device__ __forceinline__ int32_t load_step_input(const int32_t *p) {
  if constexpr (kBeforeWait)
    return __ldcg(p);
  else
    return __ldg(p);
}

// Called by a chained kernel before its first global memory access of anything the previous
// kernels may write (DECODE's static grid reads the step's inputs before it, load_step_input). A
// kernel that calls it has passed its wait before the next kernel starts, so everything before it
// in the stream is complete by then (the schedule kernels rely on that to run beside the write
// kernel).
__device__ __forceinline__ void wait_for_previous_kernel() {
  wait_for_previous_grid();
  let_next_kernel_launch();
}

// A schedule kernel's chaining, as a scope over its body. It reads only the step's inputs and
// writes only its own workspace regions (and, PREFILL's and LATENT's, the output rows of no
// sequence), none of which the write kernel before it touches, so it runs beside that kernel:
// the next kernel may launch at once, and the wait comes at the end, so that the schedule's
// completion still implies the write kernel's. The write kernel lets it launch only after its own
// wait, so the inputs and the previous step (which used the same workspace) are complete.
struct schedule_beside_write_kernel {
  __device__ __forceinline__ schedule_beside_write_kernel() { let_next_kernel_launch(); }
  __device__ __forceinline__ ~schedule_beside_write_kernel() { wait_for_previous_grid(); }
};

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
