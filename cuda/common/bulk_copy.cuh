// The bulk-copy engine (TMA, compute capability 9.0 and newer) for contiguous runs: global ->
// shared memory, completion counted in bytes on an mbarrier, and shared memory -> global, tracked
// as bulk groups of the issuing thread. Addresses are 16-byte aligned, sizes multiples of 16.
// Also its tensor form: a box of a cache page through a tensor map (kv_page_maps), or of a row
// block's Q (q_box_load), 128-byte swizzled on the way as wgmma.cuh's tiles are.
// Only kernels the host launches on sm_90 and newer call these (the plan runs a cubin for the
// device's own major version, so such a kernel is compiled for sm_90+).
#pragma once

#include <stdint.h>

#include <cuda.h>  // CUtensorMap (a plain 128-byte type; no driver call is made from here)

#include "mbarrier.cuh"

namespace pa {
namespace detail {

// The key and value caches (num_blocks, block_size, kv_num_heads, head_size) as 4-D tensors of
// 16-bit elements, innermost first (channel, KV head, row of the page, block), each box
// kPageBoxChannels channels x kPageBoxRows rows of one head in one page, 128-byte swizzled. The
// launcher encodes them for each call (the cache addresses are the call's) and passes them as a
// __grid_constant__ kernel parameter, where the copy engine can read them. Channels past
// head_size land as zeros.
struct kv_page_maps {
  CUtensorMap k, v;
  CUtensorMap q;    // the Hopper kernels' Q (encode_q_map), boxes of a row block
  CUtensorMap out;  // the PREFILL Hopper kernel's output (encode_output_map), boxes of 64 rows
};
constexpr int kPageBoxChannels = 64;  // 128 bytes: the widest box a 128-byte swizzle takes
constexpr int kPageBoxRows = 16;      // the smallest page
constexpr int kPageBoxBytes = kPageBoxChannels * kPageBoxRows * 2;

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

// Adds `bytes` to what the barrier's current phase waits for, without arriving: the thread that
// announces a stage's bulk loads before any is issued, beside the arrivals the barrier counts.
__device__ __forceinline__ void mbarrier_expect_bytes(uint64_t *barrier, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(
                   shared_address(barrier)),
               "r"(bytes)
               : "memory");
}

// Box (channel, head, page_row, block) of `map` (a kv_page_maps member) -> shared memory at dst
// (1024-byte aligned for the swizzle to match wgmma.cuh's), kPageBoxBytes counted on `barrier`.
__device__ __forceinline__ void page_box_load(void *dst_shared, const CUtensorMap *map,
                                              uint64_t *barrier, int channel, int head,
                                              int page_row, int block) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(shared_address(dst_shared)),
      "l"(map), "r"(shared_address(barrier)), "r"(channel), "r"(head), "r"(page_row), "r"(block)
      : "memory");
}

// Box (channel, head, token) of a query map (encode_q_map: 64 channels x heads_per_block heads x
// tokens_per_block tokens of the call's Q, 128-byte swizzled, rows token-major as a row block's)
// -> shared memory at dst (1024-byte aligned), the box's bytes counted on `barrier`.
__device__ __forceinline__ void q_box_load(void *dst_shared, const CUtensorMap *map,
                                           uint64_t *barrier, int channel, int head, int token) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(shared_address(dst_shared)),
      "l"(map), "r"(shared_address(barrier)), "r"(channel), "r"(head), "r"(token)
      : "memory");
}

// Box (channel, head, token) of an output map (encode_output_map: 64 channels x a warpgroup's 64
// rows, 128-byte swizzled) <- shared memory at src (1024-byte aligned), in the thread's current
// bulk group; channels, heads and tokens past the tensor's bounds are not written.
__device__ __forceinline__ void output_box_store(const CUtensorMap *map, const void *src_shared,
                                                 int channel, int head, int token) {
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(map),
      "r"(shared_address(src_shared)), "r"(channel), "r"(head), "r"(token)
      : "memory");
}

// Closes the thread's bulk group (its stores then go out while the thread runs on).
__device__ __forceinline__ void bulk_group_commit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// Waits until every committed bulk store of the thread has read its shared memory.
__device__ __forceinline__ void bulk_group_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
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
