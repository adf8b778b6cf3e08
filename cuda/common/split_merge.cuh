// The merge of split-KV partial results, shared by the backends that split a key range: each split
// wrote an unnormalized fp32 output row with its running max and sum (log2 units); this kernel
// combines a (token, head)'s splits and finalizes the row (attention_rules.cuh), so a split and an
// unsplit row round the same way.
#pragma once

#include <math.h>
#include <stdint.h>

#include "attention_rules.cuh"
#include "chained_launch.cuh"
#include "numeric.cuh"

namespace pa {
namespace detail {

struct split_merge_params {
  // [item][head][head_size] and [item][head]: item = token * num_split_slots + split, or an index
  // into a work list (item_begin)
  const float *partial_out;
  const float2 *partial_ml;
  // Where a token's items are: [item_begin[t], item_begin[t + 1]) of a work list; else
  // token * num_split_slots + [0, split_counts[t]) (a count <= 1: the attention kernel finalized
  // the token itself, nothing to merge); else all num_split_slots.
  const int32_t *item_begin;
  const int32_t *split_counts;
  int32_t num_split_slots;
  int32_t num_heads, group_size, head_size;
  const void *head_sink;  // or NULL
  const float *v_scale;
  pa_quant_type v_quant;
  int32_t is_quantized_cache;
  void *output;  // T, [token][head][head_size]
};

constexpr int kMergeThreads = 128;
constexpr int kMergeWarps = kMergeThreads / 32;
// A lane holds 4 channels of every 128 (one float4): head sizes up to 256 take two (the default),
// LATENT's 512 value channels four.
constexpr int kMergeVecsPerLane = 256 / 128;
// Split rows a warp loads before it adds any: the loads of one round are independent, so a long
// sequence's dozens of splits cost a few L2 round trips instead of one each.
constexpr int kMergeRowsInFlight = 8;

// Deterministic block-wide reductions of kMergeThreads values (a fixed shuffle-then-warp tree).
template <typename Op>
__device__ __forceinline__ float merge_block_reduce(float x, float *scratch, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x = op(x, __shfl_xor_sync(0xffffffffu, x, offset));
  __syncthreads();  // scratch may still be read by a previous reduction
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = x;
  __syncthreads();
  x = scratch[0];
#pragma unroll
  for (int w = 1; w < kMergeWarps; w++) x = op(x, scratch[w]);
  return x;
}

// Combines the items of one (token, head). Items with no admitted key are skipped and split s is
// always added by warp s % kMergeWarps, in split order, the warps' sums then in warp order: the
// result does not depend on how many split slots the launch had (bounds absent, tight or loose).
template <typename T, int kVecsPerLane = kMergeVecsPerLane>
__global__ void __launch_bounds__(kMergeThreads) split_merge_kernel(const split_merge_params P) {
  wait_for_previous_kernel();
  __shared__ float scratch[kMergeWarps];
  __shared__ float4 warp_sums[kMergeWarps][32 * kVecsPerLane];
  const int64_t token = blockIdx.x;
  const int head = blockIdx.y;
  const int head_size = P.head_size;
  const int kv_head = head / P.group_size;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  int64_t first = token * P.num_split_slots;
  int count = P.num_split_slots;
  if (P.item_begin) {
    first = P.item_begin[token];
    count = (int)(P.item_begin[token + 1] - first);
  } else if (P.split_counts) {
    count = min(P.split_counts[token], P.num_split_slots);
    if (count <= 1) return;  // finalized by the attention kernel itself
  }
  const float2 *ml = P.partial_ml + first * P.num_heads + head;
  float m = -INFINITY;
  for (int s = tid; s < count; s += kMergeThreads) {
    float2 x = ml[(int64_t)s * P.num_heads];
    if (partial_has_keys(x.y)) m = fmaxf(m, x.x);
  }
  m = merge_block_reduce(m, scratch, [](float a, float b) { return fmaxf(a, b); });
  float l = 0.0f;
  for (int s = tid; s < count; s += kMergeThreads) {
    float2 x = ml[(int64_t)s * P.num_heads];
    if (partial_has_keys(x.y)) l += x.y * softmax_rescale(x.x, m);
  }
  l = merge_block_reduce(l, scratch, [](float a, float b) { return a + b; });

  // Rows of empty splits are loaded too (they lie inside the workspace, unwritten) and then not
  // added: no load waits on the split's weight.
  const float4 *partial =
      reinterpret_cast<const float4 *>(P.partial_out + (first * P.num_heads + head) * head_size);
  const int64_t split_stride = (int64_t)P.num_heads * head_size / 4;
  const int vecs = head_size / 4;
  float4 sum[kVecsPerLane];
#pragma unroll
  for (int k = 0; k < kVecsPerLane; k++) sum[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int round = warp; round < count; round += kMergeWarps * kMergeRowsInFlight) {
    float weight[kMergeRowsInFlight];
    float4 row[kMergeRowsInFlight][kVecsPerLane];
#pragma unroll
    for (int r = 0; r < kMergeRowsInFlight; r++) {
      const int s = round + r * kMergeWarps;
      const float2 x = s < count ? ml[(int64_t)s * P.num_heads] : make_float2(0.0f, 0.0f);
#pragma unroll
      for (int k = 0; k < kVecsPerLane; k++) {
        const int v = lane + 32 * k;
        row[r][k] = s < count && v < vecs ? partial[s * split_stride + v]
                                          : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
      weight[r] = partial_has_keys(x.y) ? softmax_rescale(x.x, m) : -1.0f;  // < 0: the split is empty
    }
#pragma unroll
    for (int r = 0; r < kMergeRowsInFlight; r++) {
      if (weight[r] < 0.0f) continue;
#pragma unroll
      for (int k = 0; k < kVecsPerLane; k++) {
        sum[k].x += row[r][k].x * weight[r];
        sum[k].y += row[r][k].y * weight[r];
        sum[k].z += row[r][k].z * weight[r];
        sum[k].w += row[r][k].w * weight[r];
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kVecsPerLane; k++) warp_sums[warp][lane + 32 * k] = sum[k];
  __syncthreads();

  const float sink = sink_log2<T>(P.head_sink, head);
  T *out = reinterpret_cast<T *>(P.output) + (token * P.num_heads + head) * head_size;
  for (int c = tid; c < head_size; c += kMergeThreads) {
    const float *first_warp = reinterpret_cast<const float *>(warp_sums[0]);
    float o = first_warp[c];
#pragma unroll
    for (int w = 1; w < kMergeWarps; w++) o += reinterpret_cast<const float *>(warp_sums[w])[c];
    const float v_scale_c =
        P.is_quantized_cache ? cache_scale(P.v_scale, P.v_quant, kv_head, head_size, c) : 1.0f;
    out[c] = from_float<T>(finalize_output(m, l, o, sink, v_scale_c));
  }
}

}  // namespace detail
}  // namespace pa
