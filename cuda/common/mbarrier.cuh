// Shared-memory barriers (mbarrier, compute capability 9.0 and newer) and the proxy fence: the
// completion mechanism of the bulk-copy engine (bulk_copy.cuh) and of the Hopper PREFILL pipeline's
// producer / consumer rings (cp.async loads counted on an mbarrier).
// Only kernels the host launches on sm_90 and newer call these.
#pragma once

#include <stdint.h>

namespace pa {
namespace detail {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

__device__ __forceinline__ uint32_t shared_address(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

// The bytes from p (dynamic shared memory) to the next 1024-byte boundary, where every
// 128-byte-swizzled tile of the wgmma kernels starts; their launchers ask for 1024 bytes of slack.
__device__ __forceinline__ uint32_t swizzle_align_bytes(const void *p) {
  return (1024u - (shared_address(p) & 1023u)) & 1023u;
}

// A barrier whose phases complete after `arrivals` arrivals (plus any pending loads counted on it).
__device__ __forceinline__ void mbarrier_init(uint64_t *barrier, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(barrier)),
               "r"(arrivals)
               : "memory");
}
// After the inits, before any other thread or the copy engines use the barriers.
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// One arrival (release: this thread's earlier writes are visible to a thread whose wait sees the
// phase complete).
__device__ __forceinline__ void mbarrier_arrive(uint64_t *barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_address(barrier))
               : "memory");
}

// `count` arrivals at once (a thread arriving for its warpgroup's warps).
__device__ __forceinline__ void mbarrier_arrive_count(uint64_t *barrier, uint32_t count) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(barrier)),
               "r"(count)
               : "memory");
}

// Waits until the phase of parity `parity` has completed (acquire). A fresh barrier is in phase
// 0, so waiting for parity 1 returns at once: a ring's "slot free" barriers start that way.
__device__ __forceinline__ void mbarrier_wait(uint64_t *barrier, uint32_t parity) {
  const uint32_t bar = shared_address(barrier);
  uint32_t done;
  do {
    asm volatile(
        "{\n .reg .pred complete;\n"
        " mbarrier.try_wait.parity.shared::cta.b64 complete, [%1], %2;\n"
        " selp.u32 %0, 1, 0, complete;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// Whether the phase of parity `parity` has completed, without waiting.
__device__ __forceinline__ bool mbarrier_test(uint64_t *barrier, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n .reg .pred complete;\n"
      " mbarrier.test_wait.parity.shared::cta.b64 complete, [%1], %2;\n"
      " selp.u32 %0, 1, 0, complete;\n}\n"
      : "=r"(done)
      : "r"(shared_address(barrier)), "r"(parity)
      : "memory");
  return done != 0;
}

// The barrier's current phase also waits for every cp.async this thread issued so far: pending
// count + 1 now, - 1 when they have landed (so the thread still arrives itself, with
// mbarrier_arrive).
__device__ __forceinline__ void mbarrier_track_cp_async(uint64_t *barrier) {
  asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];" ::"r"(shared_address(barrier))
               : "memory");
}

// Orders this thread's earlier shared-memory accesses through the generic proxy (ordinary stores,
// cp.async) with later ones through the async proxy (bulk copies, wgmma operands), or the reverse:
// writes that the copy engine or the tensor cores read next, after a synchronization.
__device__ __forceinline__ void fence_async_proxy() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

#endif  // __CUDA_ARCH__ >= 900

}  // namespace detail
}  // namespace pa
