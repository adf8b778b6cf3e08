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

// Split s of a (token, head) always belongs to class s % kMergeWarps: each class is summed in split
// order and the classes then in class order, and the softmax denominators follow one fixed tree
// (lane sums over splits s = 32 c + lane + 128 i, a butterfly per class, the classes in order). So
// the result does not depend on how many split slots the launch had (bounds absent, tight or loose)
// nor on how the classes are spread over warps:
// * kRowsPerCta = 1: a CTA per (token, head), warp w holding class w (a long sequence's dozens of
//   splits, kMergeRowsInFlight rows in flight per warp);
// * kRowsPerCta = kMergeWarps: a warp per (token, head) holding every class, no barrier, for plans
//   whose splits all fit one round of loads (split_merge_launch_for, launch_common.cuh); a CTA
//   per row spent most of its time in barriers and dependent loads for two splits (DECODE 64/8
//   d64: 18 us of a 312 us step).
template <int kRowsPerCta>
struct merge_shape {
  static_assert(kRowsPerCta == 1 || kRowsPerCta == kMergeWarps, "a CTA merges 1 or 4 rows");
  static constexpr int kWarpsPerRow = kMergeWarps / kRowsPerCta;
  static constexpr int kClasses = kMergeWarps / kWarpsPerRow;  // split classes per warp
  // Split rows a warp loads before it adds any: the loads of one round are independent, so a long
  // sequence's dozens of splits cost a few L2 round trips instead of one each.
  template <int kVecsPerLane>
  __host__ __device__ static constexpr int rows_in_flight() {
    return kRowsPerCta == 1 ? 8 : 16 / kVecsPerLane;
  }
  // the c-th class that warp w of a row holds
  __host__ __device__ static constexpr int class_of(int w, int c) { return w + kWarpsPerRow * c; }
};

__device__ __forceinline__ float4 float4_add(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

// x[c] over the lanes of every class this warp holds, then over the row's classes in class order;
// scratch: kMergeWarps floats of the row (used only when the row spans several warps).
template <int kRowsPerCta, typename Op>
__device__ __forceinline__ float merge_row_reduce(float (&x)[merge_shape<kRowsPerCta>::kClasses],
                                                  float *scratch, int row_warp, Op op) {
  using S = merge_shape<kRowsPerCta>;
#pragma unroll
  for (int c = 0; c < S::kClasses; c++)
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
      x[c] = op(x[c], __shfl_xor_sync(0xffffffffu, x[c], offset));
  if constexpr (S::kWarpsPerRow == 1) {
    float r = x[0];
#pragma unroll
    for (int c = 1; c < S::kClasses; c++) r = op(r, x[c]);
    return r;
  } else {
    __syncthreads();  // scratch may still be read by a previous reduction
    if (threadIdx.x % 32 == 0) scratch[row_warp] = x[0];
    __syncthreads();
    float r = scratch[0];
#pragma unroll
    for (int w = 1; w < kMergeWarps; w++) r = op(r, scratch[w]);
    return r;
  }
}

// Combines the items of (token, head) rows (merge_shape above). Items with no admitted key are
// skipped.
template <typename T, int kVecsPerLane = kMergeVecsPerLane, int kRowsPerCta = 1>
__global__ void __launch_bounds__(kMergeThreads) split_merge_kernel(const split_merge_params P) {
  using S = merge_shape<kRowsPerCta>;
  constexpr int kClasses = S::kClasses;
  constexpr int kRowsInFlight = S::template rows_in_flight<kVecsPerLane>();
  wait_for_previous_kernel();
  __shared__ float scratch[kMergeWarps];
  // the classes' sums when a row spans several warps (one class per warp)
  __shared__ float4 class_sums[S::kWarpsPerRow > 1 ? kMergeWarps : 1][32 * kVecsPerLane];
  const int64_t token = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row_warp = warp % S::kWarpsPerRow;  // this warp's place among its row's warps
  const int head = blockIdx.y * kRowsPerCta + warp / S::kWarpsPerRow;
  if (kRowsPerCta > 1 && head >= P.num_heads) return;  // (no barrier when a warp is a row)
  const int head_size = P.head_size;
  const int kv_head = head / P.group_size;
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
  float m_of[kClasses], l_of[kClasses];
#pragma unroll
  for (int c = 0; c < kClasses; c++) {
    m_of[c] = -INFINITY;
    for (int s = 32 * S::class_of(row_warp, c) + lane; s < count; s += kMergeThreads) {
      float2 x = ml[(int64_t)s * P.num_heads];
      if (partial_has_keys(x.y)) m_of[c] = fmaxf(m_of[c], x.x);
    }
  }
  const float m = merge_row_reduce<kRowsPerCta>(m_of, scratch, row_warp,
                                                [](float a, float b) { return fmaxf(a, b); });
#pragma unroll
  for (int c = 0; c < kClasses; c++) {
    l_of[c] = 0.0f;
    for (int s = 32 * S::class_of(row_warp, c) + lane; s < count; s += kMergeThreads) {
      float2 x = ml[(int64_t)s * P.num_heads];
      if (partial_has_keys(x.y)) l_of[c] += x.y * softmax_rescale(x.x, m);
    }
  }
  const float l = merge_row_reduce<kRowsPerCta>(l_of, scratch, row_warp,
                                                [](float a, float b) { return a + b; });

  // The warp's i-th split is s = (i / kClasses) * kMergeWarps + class_of(row_warp, i % kClasses).
  // Rows of empty splits are loaded too (they lie inside the workspace, unwritten) and then not
  // added: no load waits on the split's weight.
  const float4 *partial =
      reinterpret_cast<const float4 *>(P.partial_out + (first * P.num_heads + head) * head_size);
  const int64_t split_stride = (int64_t)P.num_heads * head_size / 4;
  const int vecs = head_size / 4;
  const int warp_splits = (count - row_warp + S::kWarpsPerRow - 1) / S::kWarpsPerRow;
  float4 sum[kClasses][kVecsPerLane];
#pragma unroll
  for (int c = 0; c < kClasses; c++)
#pragma unroll
    for (int k = 0; k < kVecsPerLane; k++) sum[c][k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int round = 0; round < warp_splits; round += kRowsInFlight) {
    float weight[kRowsInFlight];
    float4 row[kRowsInFlight][kVecsPerLane];
#pragma unroll
    for (int r = 0; r < kRowsInFlight; r++) {
      const int i = round + r;
      const int s = (i / kClasses) * kMergeWarps + S::class_of(row_warp, i % kClasses);
      const float2 x = s < count ? ml[(int64_t)s * P.num_heads] : make_float2(0.0f, 0.0f);
#pragma unroll
      for (int k = 0; k < kVecsPerLane; k++) {
        const int v = lane + 32 * k;
        row[r][k] = s < count && v < vecs ? partial[s * split_stride + v]
                                          : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
      // < 0: the split is empty
      weight[r] = partial_has_keys(x.y) ? softmax_rescale(x.x, m) : -1.0f;
    }
#pragma unroll
    for (int r = 0; r < kRowsInFlight; r++) {
      if (weight[r] < 0.0f) continue;
      // (round is a multiple of kRowsInFlight, itself of kClasses: the class is r's)
      float4(&acc)[kVecsPerLane] = sum[r % kClasses];
#pragma unroll
      for (int k = 0; k < kVecsPerLane; k++) {
        acc[k].x += row[r][k].x * weight[r];
        acc[k].y += row[r][k].y * weight[r];
        acc[k].z += row[r][k].z * weight[r];
        acc[k].w += row[r][k].w * weight[r];
      }
    }
  }

  // The classes in class order, channel by channel: from registers when the warp holds them all,
  // else from shared memory, each warp finishing the float4s k = row_warp (mod kWarpsPerRow).
  if constexpr (S::kWarpsPerRow > 1) {
#pragma unroll
    for (int k = 0; k < kVecsPerLane; k++) class_sums[warp][lane + 32 * k] = sum[0][k];
    __syncthreads();
  }
  const float sink = sink_log2<T>(P.head_sink, head);
  T *out = reinterpret_cast<T *>(P.output) + (token * P.num_heads + head) * head_size;
#pragma unroll
  for (int k = 0; k < kVecsPerLane; k++) {
    const int v = lane + 32 * k;
    if (k % S::kWarpsPerRow != row_warp || v >= vecs) continue;
    float4 o;
    if constexpr (S::kWarpsPerRow > 1) {
      o = class_sums[0][v];
#pragma unroll
      for (int c = 1; c < kMergeWarps; c++) o = float4_add(o, class_sums[c][v]);
    } else {
      o = sum[0][k];
#pragma unroll
      for (int c = 1; c < kClasses; c++) o = float4_add(o, sum[c][k]);
    }
    const float channel_sums[4] = {o.x, o.y, o.z, o.w};
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int ch = 4 * v + e;
      const float v_scale_c =
          P.is_quantized_cache ? cache_scale(P.v_scale, P.v_quant, kv_head, head_size, ch) : 1.0f;
      out[ch] = from_float<T>(finalize_output(m, l, channel_sums[e], sink, v_scale_c));
    }
  }
}

}  // namespace detail
}  // namespace pa
