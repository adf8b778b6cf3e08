// The bulk-copy engine (TMA, compute capability 9.0 and newer) for contiguous runs: global ->
// shared memory, completion counted in bytes on an mbarrier, and shared memory -> global, tracked
// as bulk groups of the issuing thread. Addresses are 16-byte aligned, sizes multiples of 16.
// Only kernels the host launches on sm_90 and newer call these (the plan runs a cubin for the
// device's own major version, so such a kernel is compiled for sm_90+).
#pragma once

#include <stdint.h>

#include "mbarrier.cuh"

namespace pa {
namespace detail {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

// A bytes barrier: an mbarrier initialized with mbarrier_init(barrier, 1) and mbarrier_init_fence()
// (the bulk-copy engine updates it: the init must be visible to it first), whose first phase
// completes after one arrival plus `bytes` of bulk loads. The arriving thread announces the bytes
// here, then issues the loads with bulk_load.
__device__ __forceinline__ void bytes_barrier_expect(uint64_t *barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(
                   shared_address(barrier)),
               "r"(bytes)
               : "memory");
}

// Waits until the barrier's first phase has completed (every expected byte has arrived).
__device__ __forceinline__ void bytes_barrier_wait(uint64_t *barrier) { mbarrier_wait(barrier, 0); }

// global -> shared, `bytes` counted on `barrier` when they have landed.
__device__ __forceinline__ void bulk_load(void *dst_shared, const void *src_global, uint32_t bytes,
                                          uint64_t *barrier) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(shared_address(dst_shared)),
      "l"(src_global), "r"(bytes), "r"(shared_address(barrier))
      : "memory");
}

// shared -> global, in the thread's current bulk group.
__device__ __forceinline__ void bulk_store(void *dst_global, const void *src_shared,
                                           uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst_global),
               "r"(shared_address(src_shared)), "r"(bytes)
               : "memory");
}

// Closes the thread's bulk group and waits until its stores have read their shared memory (which
// may then be reused or released; the writes themselves complete with the grid).
__device__ __forceinline__ void bulk_stores_wait_read() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

#endif  // __CUDA_ARCH__ >= 900

}  // namespace detail
}  // namespace pa
