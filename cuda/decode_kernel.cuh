// The DECODE backend's kernels: split-KV flash decoding over 16-token (or larger) pages.
//
// A CTA works on (query token, KV head, chunk of up to 16 query heads of its group, split); the KV
// heads of a token are neighbours in launch order, so concurrent CTAs read neighbouring bytes of a
// page. The CTA holds every query head of the chunk on the M dimension of mma.sync m16n8k16, so
// each KV tile is read from memory once per group. Tiles are 64 keys at absolute multiples of 64
// whatever the page size, so a thread's run of up to 16 consecutive rows of a tile lies in one
// page: it looks up one block id per tile (prefetched a tile ahead) and issues its rows' 16-byte
// cp.async loads at a fixed stride into a 3-stage ring. Shared rows are DMAX channels wide;
// channels past head_size are zero-filled by the same loads, so the math below never tests
// head_size. Each of the 4 warps owns 16 keys of every tile (fragments through ldmatrix) and runs
// its own online softmax over them; the warps are merged once at the end. The key range of a token
// is window-clamped ([lo, hi) below) and its tiles are cut into splits of tiles_per_split tiles
// (fixed at plan time from static shapes only, so results do not depend on attention_metadata);
// each split writes unnormalized fp32 partial outputs with their running max and sum, and
// decode_merge_kernel combines them. With one split slot the CTA writes the output directly (same
// finalization, bitwise equal). With several tokens and split slots, decode_schedule_kernel
// (decode.cu) first lists the non-empty splits on device and a persistent grid walks that list, so
// a loose bound or a skewed batch (one long sequence among short ones) launches no empty CTAs.
//
// Quantized caches: raw codes are exact in T, so the MMAs run on codes; a per-tensor k_scale goes
// into the score scale, a per-channel one into Q (rounded to T once), v_scale into the output.
#pragma once

#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "chained_launch.cuh"
#include "kv_access.cuh"
#include "numeric.cuh"

namespace pa {
namespace detail {

constexpr int kDecodeTileKeys = 64;  // also the alignment of every tile's first key
constexpr int kDecodeWarps = 4;
constexpr int kDecodeThreads = 32 * kDecodeWarps;
constexpr int kDecodeKeysPerWarp = kDecodeTileKeys / kDecodeWarps;  // 16: one mma k-step of P·V
constexpr int kDecodeStages = 3;
constexpr int kDecodeHeadsPerCta = 16;  // the M of m16n8k16
constexpr int kDecodeRowPadBytes = 16;  // staggers shared rows across banks
constexpr float kLog2e = 1.4426950408889634f;

struct decode_params {
  const void *q;
  int64_t q_row_stride;  // elements between tokens
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
  int64_t token_count;
  int32_t batch_size, num_heads, group_size;
  int32_t head_chunks;   // ceil(group_size / 16)
  int32_t cta_heads;     // kv_num_heads * head_chunks
  float scale, softcap;  // softcap 0 = off
  int32_t window;        // -1 = off
  int32_t is_causal;
  int32_t tiles_per_split, num_split_slots;
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
  return kDecodeHeadsPerCta * decode_q_row_elems(dmax) * 2 + kDecodeStages * kDecodeTileKeys +
         kDecodeStages * 2 * kDecodeTileKeys * decode_kv_row_bytes(dmax, cache_elem_bytes);
}

// ---- small device pieces ------------------------------------------------------------------------

__device__ __forceinline__ void cp_async_16(void *smem_dst, const void *global_src, bool fill) {
  // src-size 0 zero-fills the 16 bytes without reading global memory (unmapped / beyond-range rows)
  uint32_t dst = (uint32_t)__cvta_generic_to_shared(smem_dst);
  int src_bytes = fill ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global_src),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Four 8x8 matrices of 16-bit elements; lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void *row) {
  uint32_t addr = (uint32_t)__cvta_generic_to_shared(row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
// The same, each matrix transposed: lane i receives column i / 4, rows 2 (i % 4) and 2 (i % 4) + 1.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void *row) {
  uint32_t addr = (uint32_t)__cvta_generic_to_shared(row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

template <typename T>
struct mma_op;
template <>
struct mma_op<__half> {
  __device__ static __forceinline__ void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <>
struct mma_op<__nv_bfloat16> {
  __device__ static __forceinline__ void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

// Weight of a partial state with running max m (log2 units) inside a merge whose max is m_all.
__device__ __forceinline__ float softmax_rescale(float m, float m_all) { return exp2f(m - m_all); }

// The output channel from the merged state (running max m, sum l, unnormalized o; log2 units):
// the sink (log2 units, -inf when absent) joins the denominator only; a row with no admitted key
// (l == 0) is zero, sink or not; v_scale_c dequantizes V. One definition for the direct path and
// the merge kernel, so both round identically.
__device__ __forceinline__ float finalize_output(float m, float l, float o, float sink,
                                                 float v_scale_c) {
  if (l == 0.0f) return 0.0f;
  float m_all = fmaxf(m, sink);
  float keep = exp2f(m - m_all);
  float denominator = l * keep + exp2f(sink - m_all);
  return o * keep / denominator * v_scale_c;
}

__device__ __forceinline__ float sink_log2(const decode_params &P, int head, bool is_bf16) {
  if (!P.head_sink) return -INFINITY;
  float s = is_bf16 ? to_float(reinterpret_cast<const __nv_bfloat16 *>(P.head_sink)[head])
                    : to_float(reinterpret_cast<const __half *>(P.head_sink)[head]);
  return s * kLog2e;
}

// The admitted key range [lo, hi) of token t (doc/semantics.md) and the 64-key tiles covering it:
// tile i starts at key (first_tile + i) * 64. Empty for a token with no sequence.
struct key_range {
  int32_t seq;  // -1: no sequence
  int64_t lo, hi;
  int64_t first_tile;
  int32_t tiles;
};
__device__ __forceinline__ key_range token_key_range(const decode_params &P, int64_t t) {
  key_range r = {-1, 0, 0, 0, 0};
  int32_t b = token_sequence(P.cu_seqlens, P.batch_size, t);
  if (b < 0) return r;
  r.seq = b;
  int64_t first = __ldg(P.cu_seqlens + b);
  int64_t q_len = __ldg(P.cu_seqlens + b + 1) - first;
  int64_t past = __ldg(P.past_seqlens + b);
  int64_t kv_len = past + q_len;
  int64_t pos = P.query_positions ? (int64_t)__ldg(P.query_positions + t) : past + (t - first);
  if (P.is_causal) {
    r.hi = min(kv_len, pos + 1);
    r.lo = P.window > 0 ? max((int64_t)0, pos - P.window + 1) : 0;
  } else {
    r.hi = kv_len;
  }
  if (r.hi <= r.lo) {
    r.hi = r.lo;
    return r;
  }
  r.first_tile = r.lo / kDecodeTileKeys;
  r.tiles = (int32_t)((r.hi + kDecodeTileKeys - 1) / kDecodeTileKeys - r.first_tile);
  return r;
}

// ---- the main kernel ----------------------------------------------------------------------------

// The B fragments of one warp's 16 keys (rows 0..15 of `tile`, row_bytes apart in shared memory),
// for kLoads 16-channel blocks per call (one ldmatrix x4 covers 16 keys x 32 bytes):
//   scores_k(b, ks): Q·K^T for k-steps ks + s, s < kLoads, channels [16 (ks + s), +16):
//     b[s][0..1] keys 0-7, b[s][2..3] keys 8-15.
//   values_v(b, n): P·V for n-tiles n + 2s and n + 2s + 1, s < kLoads, channels [8 n + 16 s, +16):
//     b[s][0..1] n-tile n + 2s, b[s][2..3] n-tile n + 2s + 1.
// 16-bit caches: ldmatrix (transposed for V), channels in order. 8-bit caches: the same ldmatrix
// on the codes, a b16 element being two codes, so each lane gets 4 codes per register, converted
// to two T pairs. That reorders the channels inside every 16-channel block: k-step k index
// 2i + e (i < 4, e < 2) reads channel 4i + e and index 8 + 2i + e channel 4i + 2 + e, so store_q
// writes Q in that order; P·V n-tile n (even) column c holds channel 8n + 2c and n-tile n + 1
// column c channel 8n + 2c + 1, which store_out undoes.
template <typename T, typename C>
struct warp_fragments {
  static constexpr int kLoads = 32 / (16 * (int)sizeof(C));
  const unsigned char *tile;
  int row_bytes, lane;
  __device__ __forceinline__ void scores_k(uint32_t (&b)[kLoads][4], int ks) const {
    if constexpr (sizeof(C) == 2) {
      const int key = (lane / 16) * 8 + lane % 8, channel = ks * 16 + (lane / 8) % 2 * 8;
      ldmatrix_x4(b[0], tile + key * row_bytes + channel * 2);
    } else {
      // codes[2s + h]: keys 8h + lane / 4, channels 16 (ks + s) + 4 (lane % 4) + 0..3
      uint32_t codes[4];
      ldmatrix_x4(codes, tile + (lane % 16) * row_bytes + ks * 16 + (lane / 16) * 16);
#pragma unroll
      for (int i = 0; i < 4; i++) {
        b[i / 2][i % 2 * 2] = codes_to_t2<T, C, 0, 1>(codes[i]);
        b[i / 2][i % 2 * 2 + 1] = codes_to_t2<T, C, 2, 3>(codes[i]);
      }
    }
  }
  __device__ __forceinline__ void values_v(uint32_t (&b)[kLoads][4], int n) const {
    if constexpr (sizeof(C) == 2) {
      const int key = (lane / 8) % 2 * 8 + lane % 8, channel = n * 8 + (lane / 16) * 8;
      ldmatrix_x4_trans(b[0], tile + key * row_bytes + channel * 2);
    } else {
      // codes[2s + h]: keys 8h + 2 (lane % 4) + 0..1, channels 8n + 16s + 2 (lane / 4) + 0..1:
      // bytes 0 and 2 are one channel's pair of keys, bytes 1 and 3 the next channel's
      uint32_t codes[4];
      ldmatrix_x4_trans(codes, tile + (lane % 16) * row_bytes + n * 8 + (lane / 16) * 16);
#pragma unroll
      for (int i = 0; i < 4; i++) {
        b[i / 2][i % 2] = codes_to_t2<T, C, 0, 2>(codes[i]);
        b[i / 2][2 + i % 2] = codes_to_t2<T, C, 1, 3>(codes[i]);
      }
    }
  }
  // Channels c..c+7 of a Q row (c % 8 == 0) into its shared row, in the order scores_k reads K.
  __device__ static __forceinline__ void store_q(T *row, int c, uint4 v) {
    if constexpr (sizeof(C) == 2) {
      *reinterpret_cast<uint4 *>(row + c) = v;
    } else {  // channel pair 2i of a block goes to index pair i, pair 2i + 1 to index pair 4 + i
      T *block = row + (c & ~15) + (c & 8) / 2;
      *reinterpret_cast<uint2 *>(block) = make_uint2(v.x, v.z);
      *reinterpret_cast<uint2 *>(block + 8) = make_uint2(v.y, v.w);
    }
  }
  // A lane's P·V accumulators into rows group_id (lo) and group_id + 8 (hi), channels in order.
  template <int kOutTiles>
  __device__ static __forceinline__ void store_out(float *lo, float *hi,
                                                   const float (&acc)[kOutTiles][4], int col) {
#pragma unroll
    for (int n = 0; n < kOutTiles; n++) {
      if constexpr (sizeof(C) == 2) {
        *reinterpret_cast<float2 *>(lo + n * 8 + col) = make_float2(acc[n][0], acc[n][1]);
        *reinterpret_cast<float2 *>(hi + n * 8 + col) = make_float2(acc[n][2], acc[n][3]);
      } else if (n % 2 == 0) {
        *reinterpret_cast<float4 *>(lo + n * 8 + 2 * col) =
            make_float4(acc[n][0], acc[n + 1][0], acc[n][1], acc[n + 1][1]);
        *reinterpret_cast<float4 *>(hi + n * 8 + 2 * col) =
            make_float4(acc[n][2], acc[n + 1][2], acc[n][3], acc[n + 1][3]);
      }
    }
  }
};

// One work item: split `split` of token `token`, for the query heads of cta_head.
template <typename T, typename C, int DMAX>
__device__ __forceinline__ void decode_item(const decode_params &P, unsigned char *smem,
                                            int64_t token, int split, int64_t item, int cta_head) {
  const int head_size = P.kv.head_size;
  const int kv_head = cta_head / P.head_chunks;
  const int head0 = kv_head * P.group_size + (cta_head % P.head_chunks) * kDecodeHeadsPerCta;
  const int rows = min(kDecodeHeadsPerCta, kv_head * P.group_size + P.group_size - head0);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int group_id = lane / 4, col = (lane % 4) * 2;  // mma fragment coordinates

  T *q_smem = reinterpret_cast<T *>(smem);
  constexpr int q_stride = decode_q_row_elems(DMAX);
  unsigned char *admitted = smem + kDecodeHeadsPerCta * q_stride * sizeof(T);
  unsigned char *stages = admitted + kDecodeStages * kDecodeTileKeys;
  constexpr int row_bytes = decode_kv_row_bytes(DMAX, (int)sizeof(C));
  constexpr int stage_bytes = 2 * kDecodeTileKeys * row_bytes;

  // Q of the chunk's heads into shared memory, with a per-channel k_scale folded in; rows beyond
  // the group and channels beyond head_size are zero (their scores are finite and discarded).
  // Q needs only the token, so its loads go out before the key range's chain of dependent loads.
  float qk_scale = P.scale;
  if (is_quantized<C>::value && P.k_quant == PA_QUANT_PER_TENSOR) qk_scale *= __ldg(P.k_scale);
  const bool fold_k_scale = is_quantized<C>::value && P.k_quant == PA_QUANT_PER_CHANNEL;
  {
    const T *q = reinterpret_cast<const T *>(P.q) + token * P.q_row_stride;
    constexpr int vecs_per_row = DMAX / 8;
    for (int i = tid; i < kDecodeHeadsPerCta * vecs_per_row; i += kDecodeThreads) {
      int r = i / vecs_per_row, c = (i % vecs_per_row) * 8;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (r < rows && c < head_size) {
        v = *reinterpret_cast<const uint4 *>(q + (int64_t)(head0 + r) * head_size + c);
        if (fold_k_scale) {
          T *e = reinterpret_cast<T *>(&v);
#pragma unroll
          for (int k = 0; k < 8; k++)
            e[k] = from_float<T>(to_float(e[k]) *
                                 __ldg(P.k_scale + (int64_t)kv_head * head_size + c + k));
        }
      }
      warp_fragments<T, C>::store_q(q_smem + r * q_stride, c, v);
    }
  }

  const key_range range = token_key_range(P, token);
  const int tile_begin = min(split * P.tiles_per_split, range.tiles);
  const int tile_end = min(range.tiles, tile_begin + P.tiles_per_split);
  const bool direct = P.num_split_slots == 1;
  const int64_t slot_base = item * P.num_heads;

  if (tile_begin >= tile_end) {  // nothing to read: an empty partial, or a zero output row
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

  // Loads: thread (run, chunk) owns 16-byte chunk `chunk` of the kRunRows consecutive rows starting
  // at row run * kRunRows of every tile. A run never crosses a page (tiles start at multiples of
  // 64, kRunRows <= 16 <= block_size), so it needs one block id per tile and its rows are a fixed
  // stride apart in the cache. Chunks at or past the row's real length zero-fill the DMAX pad.
  constexpr int kChunks = DMAX * (int)sizeof(C) / 16;
  constexpr int kRunRows = kDecodeTileKeys * kChunks / kDecodeThreads;
  static_assert(kRunRows >= 1 && kRunRows <= 16, "a run of rows must fit in a 16-key page");
  const int chunk = tid % kChunks, run = tid / kChunks;
  const bool real_chunk = chunk * 16 < head_size * (int)sizeof(C);
  const int64_t slot_bytes = (int64_t)P.kv.kv_num_heads * head_size * sizeof(C);
  const int32_t *table_row = P.block_table + (int64_t)range.seq * P.kv.max_blocks_per_seq;
  const unsigned char *k_base = reinterpret_cast<const unsigned char *>(P.k_cache);
  const unsigned char *v_base = reinterpret_cast<const unsigned char *>(P.v_cache);
  auto run_first_key = [&](int tile) {
    return (range.first_tile + tile) * kDecodeTileKeys + run * kRunRows;
  };
  // The block-table entry of this thread's run in `tile` (-1: past the range), validated only
  // when the tile is issued, so the lookup's latency hides behind a tile of work.
  auto run_block_entry = [&](int tile) {
    const int64_t key = run_first_key(tile);
    return key < range.hi ? kv_block_entry(P.kv, table_row, key) : -1;
  };

  // Issues the loads of tile `tile` into its stage; rows outside [lo, hi) or in an unmapped block
  // are zero-filled (so 0 * V stays finite) and flagged not admitted.
  auto issue_tile = [&](int tile, int32_t block_entry) {
    const int32_t block_id = kv_block_mapped(P.kv, block_entry);
    const int stage = tile % kDecodeStages;
    unsigned char *k_dst = stages + stage * stage_bytes + run * kRunRows * row_bytes + chunk * 16;
    unsigned char *v_dst = k_dst + kDecodeTileKeys * row_bytes;
    const int64_t key0 = run_first_key(tile);
    const int first_valid = (int)max((int64_t)0, min((int64_t)kRunRows, range.lo - key0));
    const int end_valid = (int)max((int64_t)0, min((int64_t)kRunRows, range.hi - key0));
    const uint32_t valid =
        block_id >= 0 ? ((1u << end_valid) - 1u) & ~((1u << first_valid) - 1u) : 0u;
    const int64_t offset =
        block_id >= 0
            ? kv_row_offset(P.kv, block_id, key0, kv_head) * (int64_t)sizeof(C) + chunk * 16
            : 0;
    const unsigned char *k_src = k_base + offset, *v_src = v_base + offset;
#pragma unroll
    for (int i = 0; i < kRunRows; i++) {
      const bool fill = real_chunk && (valid >> i & 1u);
      cp_async_16(k_dst + i * row_bytes, fill ? k_src + i * slot_bytes : k_base, fill);
      cp_async_16(v_dst + i * row_bytes, fill ? v_src + i * slot_bytes : v_base, fill);
    }
    if (chunk == 0) {
#pragma unroll
      for (int i = 0; i < kRunRows; i++)
        admitted[stage * kDecodeTileKeys + run * kRunRows + i] = valid >> i & 1u;
    }
  };

  constexpr int kSteps = DMAX / 16;    // k-steps of Q·K^T
  constexpr int kOutTiles = DMAX / 8;  // n-tiles of P·V
  constexpr int kLoads = warp_fragments<T, C>::kLoads;
  static_assert(kSteps % kLoads == 0 && kOutTiles % (2 * kLoads) == 0, "whole fragment loads");
  float out_acc[kOutTiles][4];
#pragma unroll
  for (int n = 0; n < kOutTiles; n++)
#pragma unroll
    for (int i = 0; i < 4; i++) out_acc[n][i] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};  // rows group_id and group_id + 8
  float row_sum[2] = {0.0f, 0.0f};            // this thread's columns only, reduced at the end
  const float softcap = P.softcap;
  const float score_to_log2 = qk_scale * kLog2e;

  // Prologue of the pipeline; next_entry always holds the block-table entry of the next tile to
  // issue, looked up one tile early so the issue never waits for the block table.
  int32_t next_entry = run_block_entry(tile_begin);
#pragma unroll
  for (int s = 0; s < kDecodeStages - 1; s++) {
    const int tile = tile_begin + s;
    if (tile < tile_end) {
      const int32_t entry = next_entry;
      if (tile + 1 < tile_end) next_entry = run_block_entry(tile + 1);
      issue_tile(tile, entry);
    }
    cp_async_commit();
  }

  const T *q_frag_row = q_smem + (lane % 16) * q_stride + (lane / 16) * 8;  // ldmatrix A rows
  for (int tile = tile_begin; tile < tile_end; tile++) {
    cp_async_wait<kDecodeStages - 2>();
    __syncthreads();
    const int ahead = tile + kDecodeStages - 1;
    if (ahead < tile_end) {
      const int32_t entry = next_entry;
      if (ahead + 1 < tile_end) next_entry = run_block_entry(ahead + 1);
      issue_tile(ahead, entry);
    }
    cp_async_commit();

    const int stage = tile % kDecodeStages;
    const unsigned char *k_tile =
        stages + stage * stage_bytes + warp * kDecodeKeysPerWarp * row_bytes;
    const warp_fragments<T, C> k_frags = {k_tile, row_bytes, lane};
    const warp_fragments<T, C> v_frags = {k_tile + kDecodeTileKeys * row_bytes, row_bytes, lane};
    const unsigned char *tile_admitted =
        admitted + stage * kDecodeTileKeys + warp * kDecodeKeysPerWarp;

    // scores of 16 heads x this warp's 16 keys
    float score[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int ks = 0; ks < kSteps; ks += kLoads) {
      uint32_t a[kLoads][4], b[kLoads][4];
#pragma unroll
      for (int s = 0; s < kLoads; s++) ldmatrix_x4(a[s], q_frag_row + (ks + s) * 16);
      k_frags.scores_k(b, ks);
#pragma unroll
      for (int s = 0; s < kLoads; s++) {
        mma_op<T>::run(score[0], a[s], b[s][0], b[s][1]);
        mma_op<T>::run(score[1], a[s], b[s][2], b[s][3]);
      }
    }

    // scale, softcap, mask; online softmax per row (log2 units)
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 2; n++)
#pragma unroll
      for (int i = 0; i < 4; i++) {
        float s = softcap > 0.0f ? softcap * tanhf(score[n][i] * qk_scale / softcap) * kLog2e
                                 : score[n][i] * score_to_log2;
        s = tile_admitted[n * 8 + col + (i & 1)] ? s : -INFINITY;
        score[n][i] = s;
        tile_max[i / 2] = fmaxf(tile_max[i / 2], s);
      }
    float rescale[2], base[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
      tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
      tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));
      float new_max = fmaxf(row_max[h], tile_max[h]);
      base[h] = new_max == -INFINITY ? 0.0f : new_max;  // keeps exp2(-inf - base) = 0, never NaN
      rescale[h] = exp2f(row_max[h] - base[h]);
      row_max[h] = new_max;
      row_sum[h] *= rescale[h];
    }
    float prob[2][4];
#pragma unroll
    for (int n = 0; n < 2; n++)
#pragma unroll
      for (int i = 0; i < 4; i++) {
        prob[n][i] = exp2f(score[n][i] - base[i / 2]);
        row_sum[i / 2] += prob[n][i];
      }
    // Once the running max settles (most tiles of a long range), every rescale is exactly 1 and
    // the multiply would change nothing: skip it for the whole warp then.
    if (__any_sync(0xffffffffu, rescale[0] != 1.0f || rescale[1] != 1.0f)) {
#pragma unroll
      for (int n = 0; n < kOutTiles; n++) {
        out_acc[n][0] *= rescale[0];
        out_acc[n][1] *= rescale[0];
        out_acc[n][2] *= rescale[1];
        out_acc[n][3] *= rescale[1];
      }
    }

    // out += P · V over this warp's 16 keys (P rounded to T, as in every flash kernel)
    const uint32_t p_frag[4] = {
        pack_t2<T>(prob[0][0], prob[0][1]), pack_t2<T>(prob[0][2], prob[0][3]),
        pack_t2<T>(prob[1][0], prob[1][1]), pack_t2<T>(prob[1][2], prob[1][3])};
#pragma unroll
    for (int n = 0; n < kOutTiles; n += 2 * kLoads) {
      uint32_t b[kLoads][4];
      v_frags.values_v(b, n);
#pragma unroll
      for (int s = 0; s < kLoads; s++) {
        mma_op<T>::run(out_acc[n + 2 * s], p_frag, b[s][0], b[s][1]);
        mma_op<T>::run(out_acc[n + 2 * s + 1], p_frag, b[s][2], b[s][3]);
      }
    }
  }

  // Merge the 4 warps through shared memory (the stage ring is free once every load has landed).
  cp_async_wait<0>();
  __syncthreads();
#pragma unroll
  for (int h = 0; h < 2; h++) {
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
  }
  float *warp_out = reinterpret_cast<float *>(stages);  // [warp][16][DMAX]
  float2 *warp_ml = reinterpret_cast<float2 *>(warp_out + kDecodeWarps * kDecodeHeadsPerCta * DMAX);
  {
    float *mine = warp_out + warp * kDecodeHeadsPerCta * DMAX;
    warp_fragments<T, C>::store_out(mine + group_id * DMAX, mine + (group_id + 8) * DMAX, out_acc,
                                    col);
    if (lane % 4 == 0) {
      warp_ml[warp * kDecodeHeadsPerCta + group_id] = make_float2(row_max[0], row_sum[0]);
      warp_ml[warp * kDecodeHeadsPerCta + group_id + 8] = make_float2(row_max[1], row_sum[1]);
    }
  }
  __syncthreads();

  const bool is_bf16 = dtype_of<T>::value == PA_DTYPE_BFLOAT16;
  for (int i = tid; i < rows * head_size; i += kDecodeThreads) {
    const int r = i / head_size, c = i % head_size;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; w++) {
      float2 ml = warp_ml[w * kDecodeHeadsPerCta + r];
      if (ml.y > 0.0f) m = fmaxf(m, ml.x);
    }
    float l = 0.0f, o = 0.0f;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; w++) {
      float2 ml = warp_ml[w * kDecodeHeadsPerCta + r];
      if (ml.y > 0.0f) {
        float weight = softmax_rescale(ml.x, m);
        l += ml.y * weight;
        o += warp_out[(w * kDecodeHeadsPerCta + r) * DMAX + c] * weight;
      }
    }
    const int head = head0 + r;
    if (direct) {
      float v_scale_c =
          is_quantized<C>::value ? cache_scale(P.v_scale, P.v_quant, kv_head, head_size, c) : 1.0f;
      reinterpret_cast<T *>(P.output)[(token * P.num_heads + head) * head_size + c] =
          from_float<T>(finalize_output(m, l, o, sink_log2(P, head, is_bf16), v_scale_c));
    } else {
      P.partial_out[(slot_base + head) * head_size + c] = o;
      if (c == 0) P.partial_ml[slot_base + head] = make_float2(m, l);
    }
  }
}

// Static grid: gridDim = (token_count * cta_heads, num_split_slots), empty splits exit at once.
// Work list: a persistent 1-D grid; each CTA takes the next (item, cta_head) pair from an atomic
// counter, the KV heads of an item adjacent, until the list is exhausted (robust to however many
// CTAs are actually resident).
// An 8-bit stage ring up to DMAX 128 leaves room for 3 CTAs per SM: registers must too (<= 168).
template <typename T, typename C, int DMAX>
__global__ void __launch_bounds__(kDecodeThreads, sizeof(C) == 1 && DMAX <= 128 ? 3 : 1)
    decode_kernel(const decode_params P) {
  extern __shared__ __align__(16) unsigned char smem[];
  wait_for_previous_kernel();
  if (!P.work_items) {
    const int64_t token = blockIdx.x / P.cta_heads;
    decode_item<T, C, DMAX>(P, smem, token, blockIdx.y, token * P.num_split_slots + blockIdx.y,
                            blockIdx.x % P.cta_heads);
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
    decode_item<T, C, DMAX>(P, smem, work.x, work.y, item, (int)(taken % P.cta_heads));
    __syncthreads();  // the next item rewrites `next` and the shared memory this one read
  }
}

constexpr int kMergeThreads = 128;
constexpr int kMergeWarps = kMergeThreads / 32;
// A lane holds 4 channels of every 128 (one float4): head sizes up to 256 take two.
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
template <typename T>
__global__ void __launch_bounds__(kMergeThreads)
    decode_merge_kernel(const decode_params P, int is_quantized_cache) {
  wait_for_previous_kernel();
  __shared__ float scratch[kMergeWarps];
  __shared__ float4 warp_sums[kMergeWarps][32 * kMergeVecsPerLane];
  const int64_t token = blockIdx.x;
  const int head = blockIdx.y;
  const int head_size = P.kv.head_size;
  const int kv_head = head / P.group_size;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  int64_t first = token * P.num_split_slots;
  int count = P.num_split_slots;
  if (P.item_begin) {
    first = P.item_begin[token];
    count = (int)(P.item_begin[token + 1] - first);
  }
  const float2 *ml = P.partial_ml + first * P.num_heads + head;
  float m = -INFINITY;
  for (int s = tid; s < count; s += kMergeThreads) {
    float2 x = ml[(int64_t)s * P.num_heads];
    if (x.y > 0.0f) m = fmaxf(m, x.x);
  }
  m = merge_block_reduce(m, scratch, [](float a, float b) { return fmaxf(a, b); });
  float l = 0.0f;
  for (int s = tid; s < count; s += kMergeThreads) {
    float2 x = ml[(int64_t)s * P.num_heads];
    if (x.y > 0.0f) l += x.y * softmax_rescale(x.x, m);
  }
  l = merge_block_reduce(l, scratch, [](float a, float b) { return a + b; });

  // Rows of empty splits are loaded too (they lie inside the workspace, unwritten) and then not
  // added: no load waits on the split's weight.
  const float4 *partial =
      reinterpret_cast<const float4 *>(P.partial_out + (first * P.num_heads + head) * head_size);
  const int64_t split_stride = (int64_t)P.num_heads * head_size / 4;
  const int vecs = head_size / 4;
  float4 sum[kMergeVecsPerLane];
#pragma unroll
  for (int k = 0; k < kMergeVecsPerLane; k++) sum[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int round = warp; round < count; round += kMergeWarps * kMergeRowsInFlight) {
    float weight[kMergeRowsInFlight];
    float4 row[kMergeRowsInFlight][kMergeVecsPerLane];
#pragma unroll
    for (int r = 0; r < kMergeRowsInFlight; r++) {
      const int s = round + r * kMergeWarps;
      const float2 x = s < count ? ml[(int64_t)s * P.num_heads] : make_float2(0.0f, 0.0f);
#pragma unroll
      for (int k = 0; k < kMergeVecsPerLane; k++) {
        const int v = lane + 32 * k;
        row[r][k] = s < count && v < vecs ? partial[s * split_stride + v]
                                          : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
      weight[r] = x.y > 0.0f ? softmax_rescale(x.x, m) : -1.0f;  // < 0: the split is empty
    }
#pragma unroll
    for (int r = 0; r < kMergeRowsInFlight; r++) {
      if (weight[r] < 0.0f) continue;
#pragma unroll
      for (int k = 0; k < kMergeVecsPerLane; k++) {
        sum[k].x += row[r][k].x * weight[r];
        sum[k].y += row[r][k].y * weight[r];
        sum[k].z += row[r][k].z * weight[r];
        sum[k].w += row[r][k].w * weight[r];
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kMergeVecsPerLane; k++) warp_sums[warp][lane + 32 * k] = sum[k];
  __syncthreads();

  const float sink = sink_log2(P, head, dtype_of<T>::value == PA_DTYPE_BFLOAT16);
  T *out = reinterpret_cast<T *>(P.output) + (token * P.num_heads + head) * head_size;
  for (int c = tid; c < head_size; c += kMergeThreads) {
    const float *first_warp = reinterpret_cast<const float *>(warp_sums[0]);
    float o = first_warp[c];
#pragma unroll
    for (int w = 1; w < kMergeWarps; w++) o += reinterpret_cast<const float *>(warp_sums[w])[c];
    const float v_scale_c =
        is_quantized_cache ? cache_scale(P.v_scale, P.v_quant, kv_head, head_size, c) : 1.0f;
    out[c] = from_float<T>(finalize_output(m, l, o, sink, v_scale_c));
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
