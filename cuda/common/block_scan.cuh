// Prefix sums of one int32 per thread (a warp's, a block's), for the one-CTA schedule kernels that
// lay out each token's or sequence's work items from device-side lengths, and for the kernels that
// find their first unit from the lengths themselves; and a block's deterministic reduction of one
// float per thread (the split merge's maximum and sum, a row block's largest Q element).
#pragma once

#include <stdint.h>

namespace pa {
namespace detail {

// The inclusive prefix sum of `value` over the warp's lanes.
__device__ __forceinline__ int32_t warp_inclusive_scan(int32_t value) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int offset = 1; offset < 32; offset *= 2) {
    const int32_t other = __shfl_up_sync(0xffffffffu, value, offset);
    if (lane >= offset) value += other;
  }
  return value;
}

// The exclusive prefix sum of `value` over the block's threads in thread order, plus `carry`; then
// carry += the block's total, so successive calls continue one scan over chunks of 1024 values.
// Every thread of the block calls it (it synchronizes); warp_totals is 32 ints of shared memory,
// reusable once it returns.
template <int kThreads>
__device__ __forceinline__ int32_t block_exclusive_scan(int32_t value, int32_t *warp_totals,
                                                        int32_t &carry) {
  static_assert(kThreads == 32 * 32, "warp 0 scans one warp total per lane");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int32_t inclusive = warp_inclusive_scan(value);
  if (lane == 31) warp_totals[warp] = inclusive;
  __syncthreads();
  if (warp == 0) warp_totals[lane] = warp_inclusive_scan(warp_totals[lane]);
  __syncthreads();
  const int32_t first = carry + inclusive - value + (warp > 0 ? warp_totals[warp - 1] : 0);
  carry += warp_totals[kThreads / 32 - 1];
  __syncthreads();  // warp_totals is rewritten by the next call
  return first;
}

// op over one float per thread of a block of kThreads threads, in a fixed order (a shuffle tree per
// warp, then the warps in order), the same in every thread. Every thread of the block calls it (it
// synchronizes); scratch is kThreads / 32 floats of shared memory, free again for the next call.
template <int kThreads, typename Op>
__device__ __forceinline__ float block_reduce(float x, float *scratch, Op op) {
  static_assert(kThreads % 32 == 0, "whole warps");
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x = op(x, __shfl_xor_sync(0xffffffffu, x, offset));
  __syncthreads();  // scratch may still be read by a previous reduction
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = x;
  __syncthreads();
  x = scratch[0];
#pragma unroll
  for (int w = 1; w < kThreads / 32; w++) x = op(x, scratch[w]);
  return x;
}

}  // namespace detail
}  // namespace pa
