// The prologue kernel (doc/semantics.md, "Prologue"): per token, unpack -> QK-Norm -> RoPE ->
// round to T -> quantize -> slot write, and Q into the workspace. Included by the per-type
// translation units only, which instantiate launch_prologue<T, C>.
//
// A warp's work item (a slice of one token's rows, see prologue.cuh) runs in three steps:
//   1. the loads of every row of the slice, which need only the token index;
//   2. the token's lookup (sequence, position, slot), once for the whole slice: its chain of
//      dependent loads overlaps the loads of step 1;
//   3. per pass of rows: QK-Norm, RoPE through shared memory, quantize, store. A row that nothing
//      transforms and whose destination holds T is stored as loaded, without a round trip
//      through fp32.
// The grid holds kPrologueCtasPerSm CTAs per SM and its warps step through the items.
#pragma once

#include "numeric.cuh"
#include "prologue.cuh"

namespace pa {
namespace detail {

enum prologue_row_kind { ROW_Q, ROW_K, ROW_V };

struct prologue_row {
  prologue_row_kind kind;
  int head;
};

// Row r of a token: its Q heads first (when Q is staged), then its K heads, then its V heads.
__device__ __forceinline__ prologue_row describe_row(const prologue_params &prm, int r) {
  if (r < prm.q_rows) return {ROW_Q, r};
  r -= prm.q_rows;
  if (r < prm.kv_num_heads) return {ROW_K, r};
  return {ROW_V, r - prm.kv_num_heads};
}

// The first element of token t's input for `row`.
template <typename T>
__device__ __forceinline__ const T *row_source(const prologue_params &prm, int64_t t,
                                               prologue_row row) {
  const int64_t head_offset = (int64_t)row.head * prm.head_size;
  if (row.kind == ROW_Q)
    return static_cast<const T *>(prm.query) + t * prm.query_row_elems + head_offset;
  if (prm.packed) {  // Q | K | V heads in one row of query
    const int heads_before = prm.num_heads + (row.kind == ROW_V ? prm.kv_num_heads : 0);
    return static_cast<const T *>(prm.query) + t * prm.query_row_elems +
           (int64_t)heads_before * prm.head_size + head_offset;
  }
  return static_cast<const T *>(row.kind == ROW_K ? prm.key : prm.value) + t * prm.kv_row_elems +
         head_offset;
}

// Where a token's rows go; head h's row is h * head_size elements further.
struct token_destination {
  int64_t position;   // in its sequence (RoPE)
  int64_t q_row;      // element offset of head 0 in the staged Q; -1: the token has no sequence
  int64_t cache_row;  // element offset of head 0 in its cache slot; -1: not written
};

__device__ __forceinline__ token_destination resolve_token(const prologue_params &prm, int64_t t) {
  token_destination d = {0, -1, -1};
  // The past length of the lookup's first guess (token t's own sequence, as in a decode step)
  // needs only t: it goes out before the chain of dependent loads in token_sequence (each a DRAM
  // round trip when the small tables are cold).
  const int32_t likely_b = (int32_t)(t < prm.batch_size - 1 ? t : prm.batch_size - 1);
  const int32_t likely_past = prm.query_positions ? 0 : __ldg(prm.past_seqlens + likely_b);
  const int b = token_sequence(prm.cu_seqlens, prm.batch_size, t);
  if (b < 0) return d;
  const int64_t first_token = __ldg(prm.cu_seqlens + b);
  d.position = prm.query_positions
                   ? (int64_t)__ldg(prm.query_positions + t)
                   : (int64_t)(b == likely_b ? likely_past : __ldg(prm.past_seqlens + b)) +
                         (t - first_token);
  d.q_row = t * prm.num_heads * prm.head_size;
  if (prm.slot_mapping) {
    const int64_t slot = __ldg(prm.slot_mapping + t);
    if (slot >= 0 && slot < prm.cache_slots) d.cache_row = slot * prm.kv_num_heads * prm.head_size;
  } else {
    const int32_t *table_row = prm.block_table + (int64_t)b * prm.kv.max_blocks_per_seq;
    const int32_t block_id = kv_block_id(prm.kv, table_row, d.position);
    if (block_id >= 0) d.cache_row = kv_row_offset(prm.kv, block_id, d.position, 0);
  }
  return d;
}

template <typename T>
__device__ __forceinline__ void unpack8(const uint4 &raw, float (&x)[8]) {
  const T *e = reinterpret_cast<const T *>(&raw);
#pragma unroll
  for (int i = 0; i < 8; i++) x[i] = to_float(e[i]);
}

// Rounds eight values to T (one rounding, nearest even) and stores them with one 16-byte store.
template <typename T>
__device__ __forceinline__ void store8_t(T *dst, const float (&x)[8]) {
  uint4 raw;
  T *e = reinterpret_cast<T *>(&raw);
#pragma unroll
  for (int i = 0; i < 8; i++) e[i] = from_float<T>(x[i]);
  *reinterpret_cast<uint4 *>(dst) = raw;
}

// Rounds eight values to T, quantizes them to the cache type (K and V each with their own scale)
// and stores them: 16 bytes for a T cache, 8 bytes for an 8-bit one.
template <typename T, typename C>
__device__ __forceinline__ void store8_cache(C *dst, const float (&x)[8], const float *scale,
                                             pa_quant_type quant, float tensor_inv_scale, int head,
                                             int head_size, int channel) {
  if constexpr (!is_quantized<C>::value) {
    store8_t<T>(reinterpret_cast<T *>(dst), x);
  } else {
    uint2 raw;
    C *e = reinterpret_cast<C *>(&raw);
#pragma unroll
    for (int i = 0; i < 8; i++) {
      float rounded = to_float(from_float<T>(x[i]));
      float inv_scale = quant == PA_QUANT_PER_CHANNEL
                            ? 1.0f / __ldg(scale + (int64_t)head * head_size + channel + i)
                            : tensor_inv_scale;
      e[i] = quantize<C>(rounded, inv_scale);
    }
    *reinterpret_cast<uint2 *>(dst) = raw;
  }
}

// Where a lane group's row sits in shared memory while RoPE reads partners. A lane stores its
// element k * 8 + i (chunk lane + k * L, channel i) at [(k * 8 + i) * kPrologueThreads + thread],
// so the 32 lanes of a warp touch 32 consecutive banks (a row-major layout put every lane group of
// a warp on the same 4 banks: 8-way conflicts on every access).
struct rotary_scratch {
  float *base;
  int group_first_thread, lanes_log2;
  __device__ __forceinline__ float &slot(int element, int thread) const {
    return base[element * kPrologueThreads + thread];
  }
  // channel c of the group's row
  __device__ __forceinline__ float &at(int channel) const {
    const int chunk = channel >> 3;
    return slot(((chunk >> lanes_log2) << 3) + (channel & 7),
                group_first_thread + (chunk & ((1 << lanes_log2) - 1)));
  }
};

// One RoPE output (doc/semantics.md step 3): x1' = x1*cos - x2*sin when `own` is x1 of its pair,
// x2' = x2*cos + x1*sin when it is x2. The products are rounded separately (no FMA contraction), as
// the reference computes them.
__device__ __forceinline__ float rope(bool own_is_x1, float own, float partner, float cos_v,
                                      float sin_v) {
  return own_is_x1 ? __fsub_rn(__fmul_rn(own, cos_v), __fmul_rn(partner, sin_v))
                   : __fadd_rn(__fmul_rn(own, cos_v), __fmul_rn(partner, sin_v));
}

// The 8 channels of `chunk` after RoPE, from the row in shared memory (fp32, after QK-Norm).
template <typename T>
__device__ __forceinline__ void rotate_chunk(const prologue_params &prm, const rotary_scratch &row,
                                             int chunk, int64_t position, float (&x)[8]) {
  const int c0 = chunk * 8, r0 = c0 - prm.rotary_offset, R = prm.rotary_dim, half = R >> 1;
  const bool interleaved = prm.rotary_interleaved;
  const T *cos_row = static_cast<const T *>(prm.cos_cache) + position * half;
  const T *sin_row = static_cast<const T *>(prm.sin_cache) + position * half;
  // Usually the chunk lies inside the rotated range as 4 whole pairs (interleaved) or as x1 (or x2)
  // of 8 consecutive pairs (half-split): pair and partner then follow channel 0's, which saves
  // most of the per-channel index arithmetic.
  const bool uniform =
      r0 >= 0 && r0 + 8 <= R && (interleaved ? (r0 & 1) == 0 : (r0 + 8 <= half || r0 >= half));
  if (uniform) {
    const bool first_half = r0 < half;
    const int pair0 = interleaved ? r0 >> 1 : (first_half ? r0 : r0 - half);
    const int partner0 = interleaved ? c0 : (first_half ? c0 + half : c0 - half);
#pragma unroll
    for (int i = 0; i < 8; i++) {
      const int pair = pair0 + (interleaved ? i >> 1 : i);
      x[i] = rope(interleaved ? (i & 1) == 0 : first_half, row.at(c0 + i),
                  row.at(partner0 + (interleaved ? i ^ 1 : i)), to_float(__ldg(cos_row + pair)),
                  to_float(__ldg(sin_row + pair)));
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < 8; i++) {
    const int c = c0 + i, r = r0 + i;
    x[i] = row.at(c);
    if (r < 0 || r >= R) continue;  // outside the rotated range: passes through
    const bool first = interleaved ? (r & 1) == 0 : r < half;
    const int pair = interleaved ? r >> 1 : (first ? r : r - half);
    const int partner = interleaved ? (first ? c + 1 : c - 1) : (first ? c + half : c - half);
    x[i] = rope(first, x[i], row.at(partner), to_float(__ldg(cos_row + pair)),
                to_float(__ldg(sin_row + pair)));
  }
}

// Step 3 for one row of a pass: `raw` holds the lane's chunks as loaded, dst is the element offset
// of the row's destination (-1: not written). Every lane of the warp calls it (the shuffles and
// __syncwarp need the whole warp); a lane without work just does not store.
template <typename T, typename C, bool Transforms>
__device__ __forceinline__ void finish_row(const prologue_params &prm,
                                           const rotary_scratch &scratch, prologue_row row,
                                           int64_t dst, int64_t position, float tensor_scale,
                                           const uint4 (&raw)[kPrologueMaxChunksPerLane]) {
  const int L = prm.lanes_per_row, D = prm.head_size, chunks = D >> 3;
  const int lane_in_row = threadIdx.x & (L - 1);
  const bool active = dst >= 0;
  const bool transformed = row.kind != ROW_V;  // V is never normalized or rotated
  const bool has_qk_norm = Transforms && prm.has_qk_norm;
  const bool do_rotary = Transforms && prm.do_rotary;

  // QK-Norm: the row's sum of squares over its lane group (every lane takes part)
  float inv_rms = 1.0f;
  if (has_qk_norm) {
    float sum_sq = 0.0f;
#pragma unroll
    for (int k = 0; k < kPrologueMaxChunksPerLane; k++) {
      float x[8];
      unpack8<T>(raw[k], x);
#pragma unroll
      for (int i = 0; i < 8; i++) sum_sq = fmaf(x[i], x[i], sum_sq);
    }
    for (int offset = L >> 1; offset > 0; offset >>= 1)
      sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);
    inv_rms = 1.0f / sqrtf(sum_sq / (float)D + prm.qk_norm_epsilon);
  }
  const bool normalize = has_qk_norm && transformed;
  // only rows that rotate go through shared memory; out-of-table positions pass through
  const bool rotate =
      active && do_rotary && transformed && position >= 0 && position < prm.rotary_max_positions;
  // a row nothing changes, bound for T (the staged Q or a T cache), is copied as it is
  const bool verbatim = !normalize && !rotate && (row.kind == ROW_Q || !is_quantized<C>::value);

  const bool to_k_cache = row.kind == ROW_K;
  const float *scale = to_k_cache ? prm.k_scale : prm.v_scale;
  const pa_quant_type quant = to_k_cache ? prm.k_quant : prm.v_quant;
  const float tensor_inv_scale = 1.0f / tensor_scale;
  const T *norm_weight =
      static_cast<const T *>(row.kind == ROW_Q ? prm.q_norm_weight : prm.k_norm_weight);
  void *const destination =
      row.kind == ROW_Q ? prm.q_staged : (to_k_cache ? prm.key_cache : prm.value_cache);
  auto write_chunk = [&](int chunk, const float(&x)[8]) {
    if (row.kind == ROW_Q)
      store8_t<T>(static_cast<T *>(destination) + dst + chunk * 8, x);
    else
      store8_cache<T, C>(static_cast<C *>(destination) + dst + chunk * 8, x, scale, quant,
                         tensor_inv_scale, row.head, D, chunk * 8);
  };

#pragma unroll
  for (int k = 0; k < kPrologueMaxChunksPerLane; k++) {
    const int chunk = lane_in_row + k * L;
    if (k >= prm.chunks_per_lane || chunk >= chunks) continue;
    if (verbatim) {
      if (active)
        *reinterpret_cast<uint4 *>(static_cast<T *>(destination) + dst + chunk * 8) = raw[k];
      continue;
    }
    float x[8];
    unpack8<T>(raw[k], x);
    if (normalize) {
      float w[8];
      unpack8<T>(__ldg(reinterpret_cast<const uint4 *>(norm_weight + chunk * 8)), w);
#pragma unroll
      for (int i = 0; i < 8; i++) x[i] = __fmul_rn(__fmul_rn(x[i], inv_rms), w[i]);
    }
    if (rotate) {
#pragma unroll
      for (int i = 0; i < 8; i++) scratch.slot(k * 8 + i, threadIdx.x) = x[i];  // at(chunk*8+i)
    } else if (active) {
      write_chunk(chunk, x);
    }
  }

  // RoPE, once the whole row is in shared memory (partners may sit in other lanes' chunks)
  if (do_rotary) {
    __syncwarp();
#pragma unroll 1
    for (int k = 0; k < kPrologueMaxChunksPerLane; k++) {
      const int chunk = lane_in_row + k * L;
      if (!rotate || k >= prm.chunks_per_lane || chunk >= chunks) continue;
      float x[8];
      rotate_chunk<T>(prm, scratch, chunk, position, x);
      write_chunk(chunk, x);
    }
    __syncwarp();  // the next row overwrites the scratch
  }
}

template <typename T, typename C, bool Transforms>
__global__ void __launch_bounds__(kPrologueThreads,
                                  prologue_ctas_per_sm(Transforms, is_quantized<C>::value))
    prologue_kernel(const prologue_params prm) {
  extern __shared__ float rotary_rows[];  // the rows being rotated, in fp32 (rotary_scratch)
  const int L = prm.lanes_per_row;
  const int lane_in_row = threadIdx.x & (L - 1);
  const int group_in_warp = (threadIdx.x & 31) >> prm.lanes_log2;
  const int chunks = prm.head_size >> 3;
  const int rows_per_slice = prm.rows_per_pass * kProloguePassesInFlight;
  const rotary_scratch scratch = {rotary_rows, (int)threadIdx.x & ~(L - 1), prm.lanes_log2};

  // Warp w takes items w, w + W, w + 2W, ... (W: the grid's warps; item i is slice
  // i % slices_per_token of token i / slices_per_token); the host split W into tokens and slices,
  // so that no item pays for a division.
  const int slices = prm.slices_per_token;
  const unsigned first_item = blockIdx.x * (kPrologueThreads / 32) + threadIdx.x / 32;
  int64_t t = first_item / slices;
  int slice = (int)(first_item % slices);

  while (t < prm.token_count) {
    // 1. the loads of the slice's rows, and of the per-tensor scale of an 8-bit cache
    prologue_row rows[kProloguePassesInFlight];
    bool row_exists[kProloguePassesInFlight];
    float tensor_scale[kProloguePassesInFlight];
    uint4 raw[kProloguePassesInFlight][kPrologueMaxChunksPerLane];
#pragma unroll
    for (int pass = 0; pass < kProloguePassesInFlight; pass++) {
      const int r = slice * rows_per_slice + pass * prm.rows_per_pass + group_in_warp;
      row_exists[pass] = r < prm.rows_per_token;
      rows[pass] = describe_row(prm, r);
      const T *src = row_source<T>(prm, t, rows[pass]);
#pragma unroll
      for (int k = 0; k < kPrologueMaxChunksPerLane; k++) {
        const int chunk = lane_in_row + k * L;
        raw[pass][k] = make_uint4(0, 0, 0, 0);
        if (row_exists[pass] && k < prm.chunks_per_lane && chunk < chunks)
          raw[pass][k] = __ldg(reinterpret_cast<const uint4 *>(src + chunk * 8));
      }
      tensor_scale[pass] = 1.0f;
      if (is_quantized<C>::value && row_exists[pass] && rows[pass].kind != ROW_Q) {
        const bool k_row = rows[pass].kind == ROW_K;
        if ((k_row ? prm.k_quant : prm.v_quant) == PA_QUANT_PER_TENSOR)
          tensor_scale[pass] = __ldg(k_row ? prm.k_scale : prm.v_scale);
      }
    }

    // 2. the token's destination, once for the slice
    const token_destination dest = resolve_token(prm, t);

    // 3. transform and store, pass by pass
#pragma unroll
    for (int pass = 0; pass < kProloguePassesInFlight; pass++) {
      const int64_t base = rows[pass].kind == ROW_Q ? dest.q_row : dest.cache_row;
      const int64_t dst =
          row_exists[pass] && base >= 0 ? base + (int64_t)rows[pass].head * prm.head_size : -1;
      finish_row<T, C, Transforms>(prm, scratch, rows[pass], dst, dest.position, tensor_scale[pass],
                                   raw[pass]);
    }

    t += prm.item_step_tokens;
    slice += prm.item_step_slices;
    if (slice >= slices) {
      slice -= slices;
      t++;
    }
  }
}

template <typename T, typename C>
cudaError_t launch_prologue(const prologue_params &params, bool transforms, unsigned grid,
                            size_t shared_bytes, cudaStream_t stream) {
  if (transforms)
    prologue_kernel<T, C, true><<<grid, kPrologueThreads, shared_bytes, stream>>>(params);
  else
    prologue_kernel<T, C, false><<<grid, kPrologueThreads, shared_bytes, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace detail
}  // namespace pa
