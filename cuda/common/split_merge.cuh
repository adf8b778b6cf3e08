// The merge of split-KV partial results, shared by the backends that split a key range: each split
// wrote an unnormalized fp32 output row with its running max and sum (log2 units); this kernel
// combines a (token, head)'s splits and finalizes the row (attention_rules.cuh), so a split and an
// unsplit row round the same way.
#pragma once

#include <math.h>
#include <stdint.h>

#include "attention_rules.cuh"
#include "block_scan.cuh"
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
// split_merge_few_kernel's lane holds 4 channels of every 128 (one float4): head sizes up to 256
// take two (the default), LATENT's 512 value channels four.
constexpr int kMergeVecsPerLane = 256 / 128;
// Split rows (of one float4 per lane) a warp of split_merge_kernel loads before it adds any: the
// loads of one round are independent, so a long sequence's splits cost one or two L2 round trips
// instead of one each (128 splits: one).
constexpr int kMergeRowsInFlight = 32;

// A token's items: [*first, *first + *count); false when there is nothing to merge (the attention
// kernel finalized the token itself).
__device__ __forceinline__ bool merge_items(const split_merge_params &P, int64_t token,
                                            int64_t *first, int *count) {
  *first = token * P.num_split_slots;
  *count = P.num_split_slots;
  if (P.item_begin) {
    *first = P.item_begin[token];
    *count = (int)(P.item_begin[token + 1] - *first);
  } else if (P.split_counts) {
    *count = min(P.split_counts[token], P.num_split_slots);
    if (*count <= 1) return false;
  }
  return true;
}

// sum += row * weight, channel by channel: the one place a split's row is added, so both merge
// kernels round (and contract) it the same way.
__device__ __forceinline__ void merge_add_row(float4 &sum, float4 row, float weight) {
  sum.x += row.x * weight;
  sum.y += row.y * weight;
  sum.z += row.z * weight;
  sum.w += row.w * weight;
}

// Channel c of a merged row (running max m, sum l, unnormalized o).
template <typename T>
__device__ __forceinline__ T merge_output(const split_merge_params &P, int kv_head, float m,
                                          float l, float o, float sink, int c) {
  const float v_scale_c =
      P.is_quantized_cache ? cache_scale(P.v_scale, P.v_quant, kv_head, P.head_size, c) : 1.0f;
  return from_float<T>(finalize_output(m, l, o, sink, v_scale_c));
}

// Combines the items of one (token, head), channels [128 z, 128 z + 128) for blockIdx.z = z (a
// lane one float4 of them): a long sequence's rows spread over ceil(head_size / 128) CTAs per
// (token, head), each loading its splits' rows at once (LATENT 1 x 64k: 128 splits of 512
// channels, a CTA per head took 9-10 us after the attention kernel, doc/performance.md). Items
// with no admitted key are skipped and split s is always added by warp s % kMergeWarps, in split
// order, the warps' sums then in warp order: the result does not depend on how many split slots
// the launch had (bounds absent, tight or loose), nor on the channel chunks.
template <typename T>
__global__ void __launch_bounds__(kMergeThreads) split_merge_kernel(const split_merge_params P) {
  wait_for_previous_kernel();
  __shared__ float scratch[kMergeWarps];
  __shared__ float4 warp_sums[kMergeWarps][32];
  const int64_t token = blockIdx.x;
  const int head = blockIdx.y;
  const int head_size = P.head_size;
  const int kv_head = head / P.group_size;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int v = blockIdx.z * 32 + lane;  // this lane's float4 of the row
  int64_t first;
  int count;
  if (!merge_items(P, token, &first, &count)) return;
  const float2 *ml = P.partial_ml + first * P.num_heads + head;
  float m = -INFINITY;
  for (int s = tid; s < count; s += kMergeThreads) {
    float2 x = ml[(int64_t)s * P.num_heads];
    if (partial_has_keys(x.y)) m = fmaxf(m, x.x);
  }
  m = block_reduce<kMergeThreads>(m, scratch, [](float a, float b) { return fmaxf(a, b); });
  float l = 0.0f;
  for (int s = tid; s < count; s += kMergeThreads) {
    float2 x = ml[(int64_t)s * P.num_heads];
    if (partial_has_keys(x.y)) l += x.y * softmax_rescale(x.x, m);
  }
  l = block_reduce<kMergeThreads>(l, scratch, [](float a, float b) { return a + b; });

  // Rows of empty splits are loaded too (they lie inside the workspace, unwritten) and then not
  // added: no load waits on the split's weight.
  const float4 *partial =
      reinterpret_cast<const float4 *>(P.partial_out + (first * P.num_heads + head) * head_size);
  const int64_t split_stride = (int64_t)P.num_heads * head_size / 4;
  const bool has_channels = v < head_size / 4;
  float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int round = warp; round < count; round += kMergeWarps * kMergeRowsInFlight) {
    float weight[kMergeRowsInFlight];
    float4 row[kMergeRowsInFlight];
#pragma unroll
    for (int r = 0; r < kMergeRowsInFlight; r++) {
      const int s = round + r * kMergeWarps;
      const float2 x = s < count ? ml[(int64_t)s * P.num_heads] : make_float2(0.0f, 0.0f);
      row[r] = s < count && has_channels ? partial[s * split_stride + v]
                                         : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      // < 0: the split is empty
      weight[r] = partial_has_keys(x.y) ? softmax_rescale(x.x, m) : -1.0f;
    }
#pragma unroll
    for (int r = 0; r < kMergeRowsInFlight; r++)  // a NaN weight is added, as merge_row_in_warp's
      if (!(weight[r] < 0.0f)) merge_add_row(sum, row[r], weight[r]);
  }
  warp_sums[warp][lane] = sum;
  __syncthreads();

  const float sink = sink_log2<T>(P.head_sink, head);
  T *out = reinterpret_cast<T *>(P.output) + (token * P.num_heads + head) * head_size;
  const int c = blockIdx.z * 128 + tid;  // thread tid's channel of the chunk
  if (c < head_size) {
    const float *first_warp = reinterpret_cast<const float *>(warp_sums[0]);
    float o = first_warp[tid];
#pragma unroll
    for (int w = 1; w < kMergeWarps; w++) o += reinterpret_cast<const float *>(warp_sums[w])[tid];
    out[c] = merge_output<T>(P, kv_head, m, l, o, sink, c);
  }
}

// A CTA's arrival at a counter of split partials, made by one thread after a barrier of every
// thread that wrote the CTA's rows: a release (cumulative through the barrier: those rows are
// visible at gpu scope before the count is) and an acquire (after a second barrier, the CTA reads
// the rows of the arrivals counted before it). Returns the count before this arrival.
__device__ __forceinline__ unsigned int arrive_after_partials(unsigned int *counter) {
  unsigned int before;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;"
               : "=r"(before)
               : "l"(counter)
               : "memory");
  return before;
}

// The same merge for at most kMaxSplits (<= 32) items, by one warp for one (token, head): every
// load of a row goes out at once (lane s its split's max and sum, every lane its channels of each
// split), with no barrier. It reproduces split_merge_kernel's arithmetic: with at most 32 splits,
// every split's max and sum are on a lane of warp 0 there (the other warps add -inf and +0 to a
// maximum and a sum >= +0: no change), and its four classes s % kMergeWarps (warps there,
// accumulators here, zero when empty) are each summed in split order and then in class order, so
// the bits agree (test_decode: decode_metadata_bitwise_merge_shapes). The loads go to L2
// (`ld.global.cg`): DECODE's kernel merges its own splits, rows that other multiprocessors wrote
// during the same launch. count <= kMaxSplits.
template <typename T, int kVecsPerLane, int kMaxSplits>
__device__ __forceinline__ void merge_row_in_warp(const split_merge_params &P, int64_t token,
                                                  int head, int64_t first, int count, int lane) {
  static_assert(kMaxSplits <= 32, "every split on a lane of the first warp's tree");
  const int head_size = P.head_size;
  const int kv_head = head / P.group_size;
  const float2 *ml = P.partial_ml + first * P.num_heads + head;
  const float4 *partial =
      reinterpret_cast<const float4 *>(P.partial_out + (first * P.num_heads + head) * head_size);
  const int64_t split_stride = (int64_t)P.num_heads * head_size / 4;
  const int vecs = head_size / 4;
  const float2 mine =
      lane < count ? __ldcg(ml + (int64_t)lane * P.num_heads) : make_float2(0.0f, 0.0f);
  float4 row[kMaxSplits][kVecsPerLane];
#pragma unroll
  for (int s = 0; s < kMaxSplits; s++)
#pragma unroll
    for (int k = 0; k < kVecsPerLane; k++) {
      const int v = lane + 32 * k;
      row[s][k] = s < count && v < vecs ? __ldcg(partial + s * split_stride + v)
                                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }

  const bool has_keys = partial_has_keys(mine.y);
  float m = has_keys ? mine.x : -INFINITY;
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
  float l = 0.0f;
  if (has_keys) l += mine.y * softmax_rescale(mine.x, m);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) l += __shfl_xor_sync(0xffffffffu, l, offset);
  const float my_weight = has_keys ? softmax_rescale(mine.x, m) : -1.0f;  // < 0: empty

  float4 sum[kMergeWarps][kVecsPerLane];
#pragma unroll
  for (int c = 0; c < kMergeWarps; c++)
#pragma unroll
    for (int k = 0; k < kVecsPerLane; k++) sum[c][k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int s = 0; s < kMaxSplits; s++) {
    const float weight = __shfl_sync(0xffffffffu, my_weight, s);
    if (s >= count || weight < 0.0f) continue;
#pragma unroll
    for (int k = 0; k < kVecsPerLane; k++)
      merge_add_row(sum[s % kMergeWarps][k], row[s][k], weight);
  }

  const float sink = sink_log2<T>(P.head_sink, head);
  T *out = reinterpret_cast<T *>(P.output) + (token * P.num_heads + head) * head_size;
#pragma unroll
  for (int k = 0; k < kVecsPerLane; k++) {
    const int v = lane + 32 * k;
    if (v >= vecs) continue;
    float4 o = sum[0][k];
#pragma unroll
    for (int c = 1; c < kMergeWarps; c++) {
      o.x += sum[c][k].x;
      o.y += sum[c][k].y;
      o.z += sum[c][k].z;
      o.w += sum[c][k].w;
    }
    out[4 * v] = merge_output<T>(P, kv_head, m, l, o.x, sink, 4 * v);
    out[4 * v + 1] = merge_output<T>(P, kv_head, m, l, o.y, sink, 4 * v + 1);
    out[4 * v + 2] = merge_output<T>(P, kv_head, m, l, o.z, sink, 4 * v + 2);
    out[4 * v + 3] = merge_output<T>(P, kv_head, m, l, o.w, sink, 4 * v + 3);
  }
}

// merge_row_in_warp as a kernel for plans of at most kMaxSplits split slots: a warp per (token,
// head), kMergeWarps heads per CTA (split_merge_launch_for, launch_common.cuh), every load of a row
// at once and no barrier; split_merge_kernel spent its time in barriers and dependent loads for two
// splits (DECODE 64/8 d64 64 x 8k: 17.8 us of a 312 us step).
template <typename T, int kVecsPerLane, int kMaxSplits>
__global__ void __launch_bounds__(kMergeThreads)
    split_merge_few_kernel(const split_merge_params P) {
  wait_for_previous_kernel();
  const int64_t token = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int head = blockIdx.y * kMergeWarps + warp;
  if (head >= P.num_heads) return;
  int64_t first;
  int count;
  if (!merge_items(P, token, &first, &count)) return;
  merge_row_in_warp<T, kVecsPerLane, kMaxSplits>(P, token, head, first, count, lane);
}

}  // namespace detail
}  // namespace pa
