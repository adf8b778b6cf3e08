// The DECODE backend's kernels: split-KV flash decoding over 16-token (or larger) pages.
//
// A kernel header: sees only cuda/common/ (the launcher, decode.cu, fills decode_params at plan
// time). A CTA works on (query token, KV head, chunk of up to 16 query heads of its group, split);
// the KV heads of a token are neighbours in launch order, so concurrent CTAs read neighbouring
// bytes of a page. The CTA holds every query head of the chunk on the M dimension of mma.sync
// m16n8k16, so each KV tile is read from memory once per group. Tiles are 64 keys at absolute
// multiples of 64 whatever the page size, so a thread's run of up to 16 consecutive rows of a tile
// lies in one page: it looks up one block id per tile (prefetched a tile ahead) and issues its
// rows' 16-byte cp.async loads at a fixed stride into a 3-stage ring (2 stages for 8-bit caches up
// to DMAX 128: decode_stages; cp_async_tile_ring, through common/kv_tile_loader.cuh, shared with
// PREFILL's mma.sync kernel). Shared rows are DMAX channels wide; channels past head_size are
// zero-filled by the same loads, so the math below never tests head_size. Each of the 4 warps owns
// 16 keys of every tile (fragments through ldmatrix) and runs its own online softmax over them;
// the warps are merged once at the end. The key range of a token is window-clamped ([lo, hi)
// below) and its tiles are cut into splits of tiles_per_split tiles (fixed at plan time from
// static shapes only), or for a single token into sizing_splits parts of its own tiles (a plan
// constant too), so results do not depend on attention_metadata;
// each split writes unnormalized fp32 partial outputs with their running max and sum, and
// the merge kernels (common/split_merge.cuh) combine them; a single token's static grid with at
// most kDecodeMergeSplits slots merges them itself, in the last CTA of each row block to finish
// (decode_merge_if_last). With one split slot the CTA writes the output directly (same
// finalization, bitwise equal). With several tokens and split slots,
// decode_schedule_kernel (decode_schedule_kernel.cuh) first lists the non-empty splits on device
// and a persistent grid walks that list, so a loose bound or a skewed batch (one long sequence
// among short ones) launches no empty CTAs.
//
// Quantized caches: the MMAs run in fp16 on the codes (exact in fp16; int8 as code + 1152, the bias
// taken off the products, decode_item) whatever T is; a per-tensor k_scale goes into the score
// scale, a per-channel one into Q, which goes to fp16 row by row scaled by a power of two (the
// row's score scale takes it back), v_scale into the output.
#pragma once

#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "../common/attention_rules.cuh"
#include "../common/chained_launch.cuh"
#include "../common/kv_tile_loader.cuh"
#include "../common/numeric.cuh"
#include "../common/paged_kv.cuh"
#include "../common/split_merge.cuh"
#include "../common/tensor_core.cuh"

namespace pa {
namespace detail {

constexpr int kDecodeTileKeys = 64;  // also the alignment of every tile's first key
constexpr int kDecodeWarps = 4;
constexpr int kDecodeThreads = 32 * kDecodeWarps;
constexpr int kDecodeKeysPerWarp = kDecodeTileKeys / kDecodeWarps;  // 16: one mma k-step of P·V
// Stages of the K/V ring: three, or two for 8-bit caches up to DMAX 128, whose kernel is bound
// by latency with three CTAs (twelve warps) per multiprocessor: two stages leave room for four.
__host__ __device__ constexpr int decode_stages(int dmax, int cache_elem_bytes) {
  return cache_elem_bytes == 1 && dmax <= 128 ? 2 : 3;
}
constexpr int kDecodeHeadsPerCta = 16;  // the M of m16n8k16
// The most split slots the static grid merges in the kernel (a split's row of a head in a lane's
// registers, merge_row_in_warp); plans with more launch the merge kernel.
constexpr int kDecodeMergeSplits = 16;
constexpr int kDecodeRowPadBytes = 16;  // staggers shared rows across banks

struct decode_params {
  const void *q;
  int64_t q_row_stride;  // elements between tokens
  // Q is the step's own input, not staged by the write kernel: the static grid reads it, the key
  // range and the first block-table entries before waiting for the write kernel (everything
  // before that kernel in the stream is complete once this kernel runs: the write kernel lets it
  // launch only after its own wait)
  int32_t q_before_wait;
  const void *k_cache, *v_cache;
  paged_kv_layout kv;
  const int32_t *cu_seqlens, *past_seqlens, *block_table, *query_positions;  // positions: or NULL
  const void *head_sink;                                                     // or NULL
  const float *k_scale, *v_scale;
  pa_quant_type k_quant, v_quant;
  void *output;
  // Partial results per work item (a non-empty split of a token): item = token * num_split_slots +
  // split on the static grid, or its index in work_items.
  float *partial_out;  // [item][head][head_size], unnormalized
  float2 *partial_ml;  // [item][head]: (running max in log2 units, sum)
  // Work list (decode_schedule_kernel): the non-empty splits of every token, token-major, so the
  // persistent grid never visits an empty split; NULL = one CTA per (token, split slot).
  int2 *work_items;     // (token, split)
  int32_t *item_begin;  // [token_count + 1]: first item of each token; [token_count] = the total
  unsigned int *work_counter;  // (item, cta_head) pairs taken so far; zeroed by the schedule
  // The static grid with at most kDecodeMergeSplits split slots: the last CTA of a token's
  // cta_head to finish merges its splits (decode_merge_if_last), counted here per (token,
  // cta_head) and zeroed by the write kernel (pa_plan::arrivals_region); NULL: the merge kernel
  unsigned int *merge_arrivals;
  int64_t token_count;
  int32_t batch_size, num_heads, group_size;
  int32_t head_chunks;   // ceil(group_size / 16)
  int32_t cta_heads;     // kv_num_heads * head_chunks
  float scale, softcap;  // softcap 0 = off
  int32_t window;        // -1 = off
  int32_t is_causal;
  int32_t tiles_per_split, num_split_slots;
  // > 0 (one token, the static grid): split y reads tiles [y * z, (y + 1) * z) of the token's
  // range, z = ceil(its tiles / sizing_splits), instead of tiles_per_split
  int32_t sizing_splits;
};

// The kernel variant's channel capacity DMAX for a head size: 64, 128 or 256.
__host__ __device__ inline int decode_dmax(int head_size) {
  return head_size <= 64 ? 64 : head_size <= 128 ? 128 : 256;
}
// Dynamic shared memory of the main kernel: Q, the admitted-row flags, then the K/V stage ring,
// every row DMAX channels wide (plus a pad that staggers rows across banks).
__host__ __device__ constexpr int decode_q_row_elems(int dmax) { return dmax + 8; }
__host__ __device__ constexpr int decode_kv_row_bytes(int dmax, int cache_elem_bytes) {
  return dmax * cache_elem_bytes + kDecodeRowPadBytes;
}
__host__ __device__ inline int decode_smem_bytes(int head_size, int cache_elem_bytes) {
  const int dmax = decode_dmax(head_size);
  const int stages = decode_stages(dmax, cache_elem_bytes);
  return kDecodeHeadsPerCta * decode_q_row_elems(dmax) * 2 + stages * kDecodeTileKeys +
         stages * 2 * kDecodeTileKeys * decode_kv_row_bytes(dmax, cache_elem_bytes);
}

// The admitted keys [lo, hi) of token t (attention_rules.cuh) and the number of 64-key tiles
// covering them, from the tile of key lo (kv_tile_loader numbers them so). Empty for a token with
// no sequence.
struct decode_key_tiles {
  int32_t seq;  // -1: no sequence
  int64_t lo, hi;
  int32_t tiles;
};
// kBeforeWait: the loads through L2 (load_step_input).
template <bool kBeforeWait>
__device__ __forceinline__ decode_key_tiles token_key_tiles(const decode_params &P, int64_t t) {
  decode_key_tiles r = {-1, 0, 0, 0};
  int32_t b = token_sequence<kBeforeWait>(P.cu_seqlens, P.batch_size, t);
  if (b < 0) return r;
  r.seq = b;
  const sequence_span span = load_sequence_span<kBeforeWait>(P.cu_seqlens, P.past_seqlens, b);
  const key_span keys = admitted_keys(token_position<kBeforeWait>(P.query_positions, span, t),
                                      span.kv_len, P.is_causal, P.window);
  r.lo = keys.lo;
  r.hi = keys.hi;
  if (r.hi <= r.lo) return r;
  r.tiles = (int32_t)((r.hi + kDecodeTileKeys - 1) / kDecodeTileKeys - r.lo / kDecodeTileKeys);
  return r;
}

// ---- the main kernel ----------------------------------------------------------------------------

// One work item: split `split` of token `token`, for the query heads of cta_head. kStaticGrid:
// the static grid's, which reads the step's inputs through L2 (load_step_input), since with
// wait_after_q it reads them before its wait.
template <typename T, typename C, int DMAX, bool kStaticGrid>
__device__ __forceinline__ void decode_item(const decode_params &P, unsigned char *smem,
                                            int64_t token, int split, int64_t item, int cta_head,
                                            bool wait_after_q) {
  const int head_size = P.kv.head_size;
  const int kv_head = cta_head / P.head_chunks;
  const int head0 = kv_head * P.group_size + (cta_head % P.head_chunks) * kDecodeHeadsPerCta;
  const int rows = min(kDecodeHeadsPerCta, kv_head * P.group_size + P.group_size - head0);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int group_id = lane / 4, col = (lane % 4) * 2;  // mma fragment coordinates

  // The tensor cores' element type (mma_input_t); with 8-bit caches Q goes to fp16 row by row,
  // each row with its own power of two, which the row's score scale takes back.
  using M = mma_input_t<T, C>;
  constexpr bool kShifted = sizeof(C) == 1;
  // int8 codes reach the tensor cores as code + kInt8CodeBias (a byte permute per pair, no
  // subtraction: the 8-bit loop is bound by issue): each score then carries the bias times its
  // row's sum of Q, taken off with the score scale, and each output the bias times its row's sum
  // of P, which one more n-tile of P·V (against a constant B) computes and the end takes off.
  constexpr bool kBiased = dtype_of<C>::value == PA_DTYPE_INT8;
  using fragments = warp_fragments<M, C, kBiased>;
  M *q_smem = reinterpret_cast<M *>(smem);
  constexpr int q_stride = decode_q_row_elems(DMAX);
  unsigned char *admitted = smem + kDecodeHeadsPerCta * q_stride * sizeof(T);
  constexpr int kStages = decode_stages(DMAX, (int)sizeof(C));
  unsigned char *stages = admitted + kStages * kDecodeTileKeys;
  constexpr int row_bytes = decode_kv_row_bytes(DMAX, (int)sizeof(C));
  using Loader = kv_tile_loader<C, DMAX, kDecodeThreads, row_bytes, kStages, kStaticGrid>;
  static_assert(Loader::kTileKeys == kDecodeTileKeys, "the loader's tiles are the kernel's");
  constexpr int stage_bytes = Loader::kStageBytes;

  // Q of the chunk's heads into shared memory, with a per-channel k_scale folded in; rows beyond
  // the group and channels beyond head_size are zero (their scores are finite and discarded).
  // Q needs only the token, so its loads go out before the key range's chain of dependent loads.
  // With 8-bit caches a row's score multiplier 2^shift waits in the row's padding (channels
  // DMAX.. of q_stride, which no fragment load reads), and with int8 its scores' offset next to it.
  float qk_scale = P.scale;
  if (is_quantized<C>::value && P.k_quant == PA_QUANT_PER_TENSOR) qk_scale *= __ldg(P.k_scale);
  const bool fold_k_scale = is_quantized<C>::value && P.k_quant == PA_QUANT_PER_CHANNEL;
  {
    const T *q = reinterpret_cast<const T *>(P.q) + token * P.q_row_stride;
    constexpr int vecs_per_row = DMAX / 8;
    for (int i = tid; i < kDecodeHeadsPerCta * vecs_per_row; i += kDecodeThreads) {
      int r = i / vecs_per_row, c = (i % vecs_per_row) * 8;
      uint4 v = make_uint4(0, 0, 0, 0);
      // (through L2 alone: the static grid may read Q before its wait, decode_kernel)
      if (r < rows && c < head_size)
        v = __ldcg(reinterpret_cast<const uint4 *>(q + (int64_t)(head0 + r) * head_size + c));
      if constexpr (kShifted) {  // (only 8-bit caches carry a k_scale)
        // none past head_size: those channels are zero, and the head's scales end there (the next
        // head's, or past the tensor, whose Inf or NaN times zero made the row's scores NaN)
        const float *k_scale =
            fold_k_scale && c < head_size ? P.k_scale + (int64_t)kv_head * head_size : nullptr;
        // the row's largest element over the vecs_per_row consecutive lanes that hold it (a whole
        // number of them per warp, and every lane of a warp in the loop or none)
        float row_max = q_chunk_max<T>(v, k_scale, c);
#pragma unroll
        for (int offset = 1; offset < min(vecs_per_row, 32); offset *= 2)
          row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, offset));
        const int shift = fp16_q_shift(row_max);
        v = q_chunk_to_half<T>(v, k_scale, c, ldexpf(1.0f, -shift));
        float *row_pad = reinterpret_cast<float *>(q_smem + r * q_stride + DMAX);
        if (c == 0) row_pad[0] = ldexpf(1.0f, shift);
        if constexpr (kBiased) {  // kInt8CodeBias x the row's sum of Q as the MMAs take it
          float q_sum = half8_sum(v);
#pragma unroll
          for (int offset = 1; offset < min(vecs_per_row, 32); offset *= 2)
            q_sum += __shfl_xor_sync(0xffffffffu, q_sum, offset);
          if (c == 0) row_pad[1] = q_sum * kInt8CodeBias;
        }
      }
      fragments::store_q(q_smem + r * q_stride, c, v);
    }
  }
  // wait_after_q: the key range and the first block-table entries are the step's inputs too and
  // are asked for before the wait; only the cache loads wait for the write kernel. Every CTA
  // waits, so that this kernel's completion still implies the write kernel's (the next kernels
  // rely on it).
  const auto wait_for_caches = [&] {
    if (wait_after_q) wait_for_previous_kernel();
  };
  const decode_key_tiles range = token_key_tiles<kStaticGrid>(P, token);
  const int split_tiles = P.sizing_splits > 0
                              ? (range.tiles + P.sizing_splits - 1) / P.sizing_splits
                              : P.tiles_per_split;
  const int tile_begin = min(split * split_tiles, range.tiles);
  const int tile_end = min(range.tiles, tile_begin + split_tiles);
  const bool direct = P.num_split_slots == 1;
  const int64_t slot_base = item * P.num_heads;

  if (tile_begin >= tile_end) {  // nothing to read: an empty partial, or a zero output row
    wait_for_caches();
    for (int i = tid; i < rows * head_size; i += kDecodeThreads) {
      int r = i / head_size, c = i % head_size;
      if (direct) {
        reinterpret_cast<T *>(P.output)[(token * P.num_heads + head0 + r) * head_size + c] =
            from_float<T>(0.0f);
      } else if (c == 0) {
        P.partial_ml[slot_base + head0 + r] = make_float2(-INFINITY, 0.0f);
      }
    }
    return;
  }

  const Loader loader(
      P.k_cache, P.v_cache, P.kv, P.block_table + (int64_t)range.seq * P.kv.max_blocks_per_seq,
      kv_head, range.lo, range.hi, stages, admitted);

  constexpr int kSteps = DMAX / 16;    // k-steps of Q·K^T
  constexpr int kOutTiles = DMAX / 8;  // n-tiles of P·V
  constexpr int kLoads = fragments::kLoads;
  static_assert(kSteps % kLoads == 0 && kOutTiles % (2 * kLoads) == 0, "whole fragment loads");
  // with int8, n-tile kOutTiles: kInt8CodeBias x each row's sum of P (both columns)
  constexpr int kAccTiles = kOutTiles + (kBiased ? 1 : 0);
  float out_acc[kAccTiles][4];
#pragma unroll
  for (int n = 0; n < kAccTiles; n++)
#pragma unroll
    for (int i = 0; i < 4; i++) out_acc[n][i] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};  // rows group_id and group_id + 8
  float row_sum[2] = {0.0f, 0.0f};            // this thread's columns only, reduced at the end
  const float softcap = P.softcap;

  const M *q_frag_row = q_smem + (lane % 16) * q_stride + (lane / 16) * 8;  // ldmatrix A rows
  // the score scale of rows group_id and group_id + 8 (with 8-bit caches, times the row's 2^shift)
  float row_qk_scale[2] = {qk_scale, qk_scale};
  loader.run_tiles(tile_begin, tile_end, [&](int tile, int stage) {
    const unsigned char *k_tile =
        stages + stage * stage_bytes + warp * kDecodeKeysPerWarp * row_bytes;
    const fragments k_frags = {k_tile, row_bytes, lane};
    const fragments v_frags = {k_tile + kDecodeTileKeys * row_bytes, row_bytes, lane};
    // the rows' multipliers, visible since the ring's barrier
    if (kShifted && tile == tile_begin) {
#pragma unroll
      for (int h = 0; h < 2; h++)
        row_qk_scale[h] = qk_scale * *reinterpret_cast<const float *>(
                                         q_smem + (group_id + 8 * h) * q_stride + DMAX);
    }
    const unsigned char *tile_admitted =
        admitted + stage * kDecodeTileKeys + warp * kDecodeKeysPerWarp;

    // scores of 16 heads x this warp's 16 keys
    float scores[1][2][4] = {{{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}}};
    float(&score)[2][4] = scores[0];
#pragma unroll
    for (int ks = 0; ks < kSteps; ks += kLoads) {
      uint32_t a[kLoads][4], b[kLoads][4];
#pragma unroll
      for (int s = 0; s < kLoads; s++) ldmatrix_x4(a[s], q_frag_row + (ks + s) * 16);
      k_frags.scores_k(b, ks);
#pragma unroll
      for (int s = 0; s < kLoads; s++) {
        mma_op<M>::run(score[0], a[s], b[s][0], b[s][1]);
        mma_op<M>::run(score[1], a[s], b[s][2], b[s][3]);
      }
    }

    // scale, softcap, mask; online softmax per row (log2 units)
    if constexpr (kBiased) {  // the rows' offsets, read at each tile (held, they spilled)
      float row_offset[2];
#pragma unroll
      for (int h = 0; h < 2; h++)
        row_offset[h] = reinterpret_cast<const float *>(q_smem + (group_id + 8 * h) * q_stride +
                                                        DMAX)[1];
      transform_offset_score_rows(scores, row_qk_scale, row_offset, softcap);
    } else
      transform_score_rows(scores, row_qk_scale, softcap);
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 2; n++)
#pragma unroll
      for (int i = 0; i < 4; i++) {
        if (!tile_admitted[n * 8 + col + (i & 1)]) score[n][i] = -INFINITY;
        tile_max[i / 2] = fmaxf(tile_max[i / 2], score[n][i]);
      }
    float rescale[2], base[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
      tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
      tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));
      const softmax_step step = online_softmax_step<false>(row_max[h], tile_max[h]);
      base[h] = step.base;
      rescale[h] = step.rescale;
      row_sum[h] *= rescale[h];
    }
    float prob[2][4];
#pragma unroll
    for (int n = 0; n < 2; n++)
#pragma unroll
      for (int i = 0; i < 4; i++) {
        prob[n][i] = softmax_exp2(score[n][i] - base[i / 2]);
        row_sum[i / 2] += prob[n][i];
      }
    rescale_accumulator_rows(out_acc, rescale);

    // out += P · V over this warp's 16 keys (P rounded to T, as in every flash kernel)
    const uint32_t p_frag[4] = {
        pack_t2<M>(prob[0][0], prob[0][1]), pack_t2<M>(prob[0][2], prob[0][3]),
        pack_t2<M>(prob[1][0], prob[1][1]), pack_t2<M>(prob[1][2], prob[1][3])};
#pragma unroll
    for (int n = 0; n < kOutTiles; n += 2 * kLoads) {
      uint32_t b[kLoads][4];
      v_frags.values_v(b, n);
#pragma unroll
      for (int s = 0; s < kLoads; s++) {
        mma_op<M>::run(out_acc[n + 2 * s], p_frag, b[s][0], b[s][1]);
        mma_op<M>::run(out_acc[n + 2 * s + 1], p_frag, b[s][2], b[s][3]);
      }
    }
    if constexpr (kBiased)
      mma_op<M>::run(out_acc[kOutTiles], p_frag, kInt8CodeBiasPair, kInt8CodeBiasPair);
  }, wait_for_caches);

  // Merge the 4 warps through shared memory (the ring ends with every load landed).
#pragma unroll
  for (int h = 0; h < 2; h++) {
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
  }
  static_assert(kDecodeWarps * kDecodeHeadsPerCta * (DMAX * 4 + 12) <= kStages * stage_bytes,
                "the warps' partial rows fit in the stage ring");
  float *warp_out = reinterpret_cast<float *>(stages);  // [warp][16][DMAX]
  float2 *warp_ml = reinterpret_cast<float2 *>(warp_out + kDecodeWarps * kDecodeHeadsPerCta * DMAX);
  // int8: each warp's output bias per row (taken off as the warps merge: taken off in the
  // registers, it made the kernel spill)
  float *warp_bias = reinterpret_cast<float *>(warp_ml + kDecodeWarps * kDecodeHeadsPerCta);
  {
    float *mine = warp_out + warp * kDecodeHeadsPerCta * DMAX;
    fragments::store_out(mine + group_id * DMAX, mine + (group_id + 8) * DMAX,
                         reinterpret_cast<const float(&)[kOutTiles][4]>(out_acc), col);
    if (lane % 4 == 0) {
      warp_ml[warp * kDecodeHeadsPerCta + group_id] = make_float2(row_max[0], row_sum[0]);
      warp_ml[warp * kDecodeHeadsPerCta + group_id + 8] = make_float2(row_max[1], row_sum[1]);
      if constexpr (kBiased) {
        warp_bias[warp * kDecodeHeadsPerCta + group_id] = out_acc[kAccTiles - 1][0];
        warp_bias[warp * kDecodeHeadsPerCta + group_id + 8] = out_acc[kAccTiles - 1][2];
      }
    }
  }
  __syncthreads();

  for (int i = tid; i < rows * head_size; i += kDecodeThreads) {
    const int r = i / head_size, c = i % head_size;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; w++) {
      float2 ml = warp_ml[w * kDecodeHeadsPerCta + r];
      if (partial_has_keys(ml.y)) m = fmaxf(m, ml.x);
    }
    float l = 0.0f, o = 0.0f;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; w++) {
      float2 ml = warp_ml[w * kDecodeHeadsPerCta + r];
      if (partial_has_keys(ml.y)) {
        float weight = softmax_rescale(ml.x, m);
        l += ml.y * weight;
        float out = warp_out[(w * kDecodeHeadsPerCta + r) * DMAX + c];
        if constexpr (kBiased) out -= warp_bias[w * kDecodeHeadsPerCta + r];
        o += out * weight;
      }
    }
    const int head = head0 + r;
    if (direct) {
      float v_scale_c =
          is_quantized<C>::value ? cache_scale(P.v_scale, P.v_quant, kv_head, head_size, c) : 1.0f;
      reinterpret_cast<T *>(P.output)[(token * P.num_heads + head) * head_size + c] =
          from_float<T>(finalize_output(m, l, o, sink_log2<T>(P.head_sink, head), v_scale_c));
    } else {
      P.partial_out[(slot_base + head) * head_size + c] = o;
      if (c == 0) P.partial_ml[slot_base + head] = make_float2(m, l);
    }
  }
}

// The static grid's merge without a merge kernel (P.merge_arrivals): the last CTA of (token,
// cta_head) to finish merges its split slots' partial rows, a warp per head, in the merge kernel's
// arithmetic (the same bits, split_merge.cuh), reading them through L2. In a latency-bound step
// this saves the merge kernel's wait for the whole grid and its launch.
template <typename T, typename C, int DMAX>
__device__ __forceinline__ void decode_merge_if_last(const decode_params &P, int64_t token,
                                                     int cta_head) {
  __syncthreads();  // every thread's partial stores, before the arrival's release
  int last = 0;
  if (threadIdx.x == 0)
    last = arrive_after_partials(P.merge_arrivals + token * P.cta_heads + cta_head) + 1u ==
           (unsigned)P.num_split_slots;
  if (!__syncthreads_or(last)) return;
  split_merge_params M = {};
  M.partial_out = P.partial_out;
  M.partial_ml = P.partial_ml;
  M.num_split_slots = P.num_split_slots;
  M.num_heads = P.num_heads;
  M.group_size = P.group_size;
  M.head_size = P.kv.head_size;
  M.head_sink = P.head_sink;
  M.v_scale = P.v_scale;
  M.v_quant = P.v_quant;
  M.is_quantized_cache = is_quantized<C>::value;
  M.output = P.output;
  const int kv_head = cta_head / P.head_chunks;
  const int head0 = kv_head * P.group_size + (cta_head % P.head_chunks) * kDecodeHeadsPerCta;
  const int rows = min(kDecodeHeadsPerCta, kv_head * P.group_size + P.group_size - head0);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < rows; r += kDecodeWarps)
    merge_row_in_warp<T, DMAX <= 128 ? 1 : DMAX / 128, kDecodeMergeSplits>(
        M, token, head0 + r, token * P.num_split_slots, P.num_split_slots, lane);
}

// Static grid: gridDim = (token_count * cta_heads, num_split_slots); an empty split writes an
// empty partial (and with merge_arrivals counts its arrival).
// Work list: a persistent 1-D grid; each CTA takes the next (item, cta_head) pair from an atomic
// counter, the KV heads of an item adjacent, until the list is exhausted (robust to however many
// CTAs are actually resident).
// An 8-bit two-stage ring up to DMAX 128 leaves room for 4 CTAs per SM: registers must too
// (<= 128).
template <typename T, typename C, int DMAX>
__global__ void __launch_bounds__(kDecodeThreads, sizeof(C) == 1 && DMAX <= 128 ? 4 : 1)
    decode_kernel(const decode_params P) {
  extern __shared__ __align__(16) unsigned char smem[];
  const bool q_first = !P.work_items && P.q_before_wait;  // the latency case: one token, static
  if (!q_first) wait_for_previous_kernel();
  if (!P.work_items) {
    const int64_t token = blockIdx.x / P.cta_heads;
    const int cta_head = blockIdx.x % P.cta_heads;
    decode_item<T, C, DMAX, true>(P, smem, token, blockIdx.y,
                                  token * P.num_split_slots + blockIdx.y, cta_head, q_first);
    if (P.merge_arrivals) decode_merge_if_last<T, C, DMAX>(P, token, cta_head);
    return;
  }
  __shared__ int64_t next;
  const int64_t total = (int64_t)P.item_begin[P.token_count] * P.cta_heads;
  for (;;) {
    if (threadIdx.x == 0) next = atomicAdd(P.work_counter, 1u);
    __syncthreads();
    const int64_t taken = next;
    if (taken >= total) break;
    const int64_t item = taken / P.cta_heads;
    const int2 work = P.work_items[item];
    decode_item<T, C, DMAX, false>(P, smem, work.x, work.y, item, (int)(taken % P.cta_heads),
                                   false);
    __syncthreads();  // the next item rewrites `next` and the shared memory this one read
  }
}

// Per-instantiation entry points, defined in the decode_*.cu translation units.
template <typename T, typename C, int DMAX>
cudaError_t decode_set_smem(int smem_bytes);
template <typename T, typename C, int DMAX>
cudaError_t decode_occupancy(int smem_bytes, int *ctas_per_sm);
template <typename T, typename C, int DMAX>
cudaError_t decode_launch(const decode_params &P, dim3 grid, int smem_bytes, cudaStream_t stream,
                          bool chained);

#define PA_DECODE_INSTANTIATE(T, C, DMAX)                                                        \
  template <>                                                                                    \
  cudaError_t decode_set_smem<T, C, DMAX>(int smem_bytes) {                                      \
    return cudaFuncSetAttribute(decode_kernel<T, C, DMAX>,                                       \
                                cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);        \
  }                                                                                              \
  template <>                                                                                    \
  cudaError_t decode_occupancy<T, C, DMAX>(int smem_bytes, int *ctas_per_sm) {                   \
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, decode_kernel<T, C, DMAX>, \
                                                         kDecodeThreads, smem_bytes);            \
  }                                                                                              \
  template <>                                                                                    \
  cudaError_t decode_launch<T, C, DMAX>(const decode_params &P, dim3 grid, int smem_bytes,       \
                                        cudaStream_t stream, bool chained) {                     \
    return launch_chained(decode_kernel<T, C, DMAX>, grid, kDecodeThreads, (size_t)smem_bytes, \
                          stream, chained, P);                                                   \
  }

}  // namespace detail
}  // namespace pa
