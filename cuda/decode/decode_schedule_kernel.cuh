// DECODE's work-list kernel: lists the non-empty splits of every token on the device, so that the
// persistent grid of decode_kernel never visits an empty one. Included by the launcher's
// translation unit only (decode.cu), which launches it. A kernel header: sees only cuda/common/.
#pragma once

#include <stdint.h>

#include "../common/block_scan.cuh"
#include "../common/chained_launch.cuh"
#include "decode_kernel.cuh"

namespace pa {
namespace detail {

constexpr int kScheduleThreads = 1024;

// Lists the non-empty splits of every token (token-major, split order) and each token's first item,
// from the device-side lengths: one CTA, a block-wide prefix sum over chunks of tokens, beside the
// write kernel (see schedule_beside_write_kernel).
__global__ void __launch_bounds__(kScheduleThreads) decode_schedule_kernel(const decode_params P) {
  schedule_beside_write_kernel scope;
  __shared__ int32_t warp_totals[kScheduleThreads / 32];
  int32_t carry = 0;
  for (int64_t chunk = 0; chunk < P.token_count; chunk += kScheduleThreads) {
    const int64_t token = chunk + threadIdx.x;
    int32_t splits = 0;
    if (token < P.token_count) {
      const int64_t tiles = token_key_tiles<false>(P, token).tiles;
      // an under-sized max_kv_len bound drops the tail splits: wrong, but inside the workspace
      splits = (int32_t)min((tiles + P.tiles_per_split - 1) / P.tiles_per_split,
                            (int64_t)P.num_split_slots);
    }
    const int32_t first = block_exclusive_scan<kScheduleThreads>(splits, warp_totals, carry);
    if (token < P.token_count) {
      P.item_begin[token] = first;
      for (int32_t s = 0; s < splits; s++) P.work_items[first + s] = make_int2((int)token, s);
    }
  }
  if (threadIdx.x == 0) {
    P.item_begin[P.token_count] = carry;
    *P.work_counter = 0;
  }
}

}  // namespace detail
}  // namespace pa
