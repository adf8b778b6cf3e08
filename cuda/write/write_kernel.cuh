// The write path's kernels (doc/semantics.md, "The write path"): per token, unpack -> QK-Norm ->
// RoPE -> round to T -> quantize -> slot write, and Q into the workspace. Included by the per-type
// translation units only, which instantiate launch_write<T, C>. A kernel header: sees only
// cuda/common/.
#pragma once

#include <type_traits>

#include "../common/attention_rules.cuh"
#include "../common/bulk_copy.cuh"
#include "../common/chained_launch.cuh"
#include "../common/numeric.cuh"
#include "write_params.cuh"

namespace pa {
namespace detail {

enum write_row_kind { ROW_Q, ROW_K, ROW_V };

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

// Quantizes eight values, each already exact in T, to an 8-bit cache type and stores them (8
// bytes); the scale of value i is channel `channel + i` of `head` (PER_CHANNEL) or the single one.
template <typename C>
__device__ __forceinline__ void store8_codes(C *dst, const float (&x)[8], const float *scale,
                                             pa_quant_type quant, float tensor_inv_scale, int head,
                                             int head_size, int channel) {
  uint2 raw;
  C *e = reinterpret_cast<C *>(&raw);
#pragma unroll
  for (int i = 0; i < 8; i++) {
    const float inv_scale = quant == PA_QUANT_PER_CHANNEL
                                ? 1.0f / __ldg(scale + (int64_t)head * head_size + channel + i)
                                : tensor_inv_scale;
    e[i] = quantize<C>(x[i], inv_scale);
  }
  *reinterpret_cast<uint2 *>(dst) = raw;
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
    float rounded[8];
#pragma unroll
    for (int i = 0; i < 8; i++) rounded[i] = to_float(from_float<T>(x[i]));
    store8_codes<C>(dst, rounded, scale, quant, tensor_inv_scale, head, head_size, channel);
  }
}

// Where a lane group's row sits in shared memory while RoPE reads partners. A lane stores its
// element k * 8 + i (chunk lane + k * L, channel i) at [(k * 8 + i) * kWriteThreads + thread],
// so the 32 lanes of a warp touch 32 consecutive banks (a row-major layout put every lane group of
// a warp on the same 4 banks: 8-way conflicts on every access).
struct rotary_scratch {
  float *base;
  int group_first_thread, lanes_log2;
  __device__ __forceinline__ float &slot(int element, int thread) const {
    return base[element * kWriteThreads + thread];
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

// cos (or sin) of pairs [pair0, pair0 + N) of a table row in fp32, with one 16-byte (N = 8) or
// 8-byte (N = 4) load: the host checked the alignment (write_params::rotary_in_lane).
template <typename T, int N>
__device__ __forceinline__ void load_pairs(const T *table_row, int pair0, float (&v)[N]) {
  using vec = std::conditional_t<N * sizeof(T) == sizeof(uint4), uint4, uint2>;
  static_assert(N * sizeof(T) == sizeof(vec), "one vector per table and chunk");
  const vec raw = __ldg(reinterpret_cast<const vec *>(table_row + pair0));
  const T *e = reinterpret_cast<const T *>(&raw);
#pragma unroll
  for (int i = 0; i < N; i++) v[i] = to_float(e[i]);
}

// In-register RoPE of an interleaved chunk: its 4 pairs (channels 2j, 2j + 1) use cos[j], sin[j].
__device__ __forceinline__ void rotate_interleaved(const float (&cos_v)[4], const float (&sin_v)[4],
                                                   float (&x)[8]) {
#pragma unroll
  for (int j = 0; j < 4; j++) {
    const float x1 = x[2 * j], x2 = x[2 * j + 1];
    x[2 * j] = rope(true, x1, x2, cos_v[j], sin_v[j]);
    x[2 * j + 1] = rope(false, x2, x1, cos_v[j], sin_v[j]);
  }
}

// In-register RoPE of a half-split x1 chunk and its x2 chunk (channel i of each is pair i).
__device__ __forceinline__ void rotate_half_split(const float (&cos_v)[8], const float (&sin_v)[8],
                                                  float (&x1)[8], float (&x2)[8]) {
#pragma unroll
  for (int i = 0; i < 8; i++) {
    const float a = x1[i], b = x2[i];
    x1[i] = rope(true, a, b, cos_v[i], sin_v[i]);
    x2[i] = rope(false, b, a, cos_v[i], sin_v[i]);
  }
}

// The 8 channels of `chunk` after RoPE, from the row in shared memory (fp32, after QK-Norm).
template <typename T>
__device__ __forceinline__ void rotate_chunk(const write_params &prm, const rotary_scratch &row,
                                             int chunk, const T *cos_row, const T *sin_row,
                                             float (&x)[8]) {
  const int c0 = chunk * 8, r0 = c0 - prm.rotary_offset, R = prm.rotary_dim, half = R >> 1;
  const bool interleaved = prm.rotary_interleaved;
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

// The lookup's first guess at token t's sequence (its own index: right in a decode step), whose
// past length the kernels load early, ahead of the lookup's chain of dependent loads.
__device__ __forceinline__ int32_t likely_sequence(const write_params &prm, int64_t t) {
  return (int32_t)(t < prm.batch_size - 1 ? t : prm.batch_size - 1);
}
__device__ __forceinline__ int32_t likely_past_length(const write_params &prm, bool active,
                                                      int32_t likely_b) {
  return active && !prm.query_positions ? __ldg(prm.past_seqlens + likely_b) : 0;
}

// Where token t's row (kind, head) goes (doc/semantics.md, "The write path"): its position (RoPE
// and the block lookup; attention_rules.cuh, with the past length loaded early) and the element
// offset of its destination row in q_staged or its cache, -1 when it is not written (a token of no
// sequence; a K/V row whose slot_mapping entry is -1 or out of range, or whose block is unmapped).
struct row_destination {
  int64_t position, row;
};
__device__ __forceinline__ row_destination find_row_destination(const write_params &prm,
                                                                int64_t t, write_row_kind kind,
                                                                int head, int32_t likely_b,
                                                                int32_t likely_past) {
  row_destination dst = {0, -1};
  const int b = token_sequence(prm.cu_seqlens, prm.batch_size, t);
  if (b >= 0) {
    const int64_t first_token = __ldg(prm.cu_seqlens + b);
    dst.position = token_position(prm.query_positions, first_token, t, [&] {
      return b == likely_b ? likely_past : __ldg(prm.past_seqlens + b);
    });
    const int D = prm.head_size;
    if (kind == ROW_Q) {
      dst.row = (t * prm.num_heads + head) * D;
    } else if (prm.slot_mapping) {
      const int64_t slot = __ldg(prm.slot_mapping + t);
      if (slot >= 0 && slot < prm.cache_slots) dst.row = (slot * prm.kv_num_heads + head) * D;
    } else {
      const int32_t *table_row = prm.block_table + (int64_t)b * prm.kv.max_blocks_per_seq;
      const int32_t block_id = kv_block_id(prm.kv, table_row, dst.position);
      if (block_id >= 0) dst.row = kv_row_offset(prm.kv, block_id, dst.position, head);
    }
  }
  return dst;
}

// Zeroes the step's arrival counters (write_params::arrivals); called by every kernel of the write
// path after its wait.
__device__ __forceinline__ void zero_arrivals(const write_params &prm) {
  if (blockIdx.x != 0) return;
  for (int i = threadIdx.x; i < prm.arrival_count; i += blockDim.x) prm.arrivals[i] = 0u;
}

// Resident CTAs per SM the kernel's registers are held to: 5 (<= 48 registers) for a T cache, 4
// (<= 64) when quantizing, which needs more; without the bound the 8-bit variants took 78. RoPE in
// registers (kRotaryInLane) holds a half-split pair's two chunks, their QK-Norm weights and cos /
// sin at once: one CTA less (<= 64 and <= 80 registers), since at 48 and 64 it spilled.
template <typename C, bool kRotaryInLane>
constexpr int write_min_ctas_per_sm() {
  return (is_quantized<C>::value ? 4 : 5) - (kRotaryInLane ? 1 : 0);
}

// Every lane of a warp runs every iteration (the shuffles and __syncwarp need the whole warp); a
// lane without work (row past the end, token of no sequence, slot not written, chunk past the row)
// just does not load or store. kRotaryInLane: prm.rotary_in_lane (RoPE in registers), a separate
// instantiation so that the shared-memory path keeps its registers.
template <typename T, typename C, bool kRotaryInLane>
__global__ void __launch_bounds__(kWriteThreads, write_min_ctas_per_sm<C, kRotaryInLane>())
    write_kernel(const write_params prm) {
  extern __shared__ float rotary_rows[];  // the rows being rotated, in fp32 (rotary_scratch)
  const int L = prm.lanes_per_row;
  const int group = threadIdx.x >> prm.lanes_log2;
  const int lane_in_row = threadIdx.x & (L - 1);
  const int groups_per_cta = blockDim.x >> prm.lanes_log2;
  const int D = prm.head_size;
  const int chunks = D >> 3;
  const rotary_scratch row_scratch = {rotary_rows, group << prm.lanes_log2, prm.lanes_log2};
  wait_for_previous_kernel();  // the inputs may come from the stream's previous kernel
  zero_arrivals(prm);

  for (int64_t first_row = (int64_t)blockIdx.x * groups_per_cta; first_row < prm.total_rows;
       first_row += (int64_t)gridDim.x * groups_per_cta) {
    const int64_t row = first_row + group;
    bool active = row < prm.total_rows;
    // 32-bit division where the row index allows it: a 64-bit one is a long instruction sequence
    const int64_t t = !active                ? 0
                      : row <= INT32_MAX ? (int64_t)((uint32_t)row / (uint32_t)prm.rows_per_token)
                                         : row / prm.rows_per_token;
    const int row_in_token = active ? (int)(row - t * prm.rows_per_token) : 0;
    write_row_kind kind = ROW_Q;
    int head = row_in_token;
    if (row_in_token >= prm.q_rows + prm.kv_num_heads) {
      kind = ROW_V;
      head = row_in_token - prm.q_rows - prm.kv_num_heads;
    } else if (row_in_token >= prm.q_rows) {
      kind = ROW_K;
      head = row_in_token - prm.q_rows;
    }

    // 1. unpack: issue this row's loads first; the sequence lookup below overlaps them
    const T *src;
    if (kind == ROW_Q) {
      src = static_cast<const T *>(prm.query) + t * prm.query_row_elems + (int64_t)head * D;
    } else if (prm.packed) {
      const int heads_before = prm.num_heads + (kind == ROW_V ? prm.kv_num_heads : 0);
      src = static_cast<const T *>(prm.query) + t * prm.query_row_elems +
            (int64_t)(heads_before + head) * D;
    } else {
      src = static_cast<const T *>(kind == ROW_K ? prm.key : prm.value) + t * prm.kv_row_elems +
            (int64_t)head * D;
    }
    uint4 raw[kWriteMaxChunksPerLane];
#pragma unroll
    for (int k = 0; k < kWriteMaxChunksPerLane; k++) {
      const int chunk = lane_in_row + k * L;
      raw[k] = make_uint4(0, 0, 0, 0);
      if (active && k < prm.chunks_per_lane && chunk < chunks)
        raw[k] = __ldg(reinterpret_cast<const uint4 *>(src + chunk * 8));
    }

    // Loads that need only t go out before the lookup's chain of dependent loads (each a DRAM
    // round trip when the small tables are cold): the past length of the likely sequence and an
    // 8-bit cache's single scale.
    const int32_t likely_b = likely_sequence(prm, t);
    const int32_t likely_past = likely_past_length(prm, active, likely_b);
    const bool to_k_cache = kind == ROW_K;
    const float *scale = to_k_cache ? prm.k_scale : prm.v_scale;
    const pa_quant_type quant = to_k_cache ? prm.k_quant : prm.v_quant;
    float tensor_scale = 1.0f;  // inverted after the lookup: no wait for it here
    if (is_quantized<C>::value && kind != ROW_Q && quant == PA_QUANT_PER_TENSOR)
      tensor_scale = __ldg(scale);

    // the token's sequence, position and destination row
    int64_t position = 0;
    int64_t dst_row = -1;  // element offset of the destination row
    if (active) {
      const row_destination dst = find_row_destination(prm, t, kind, head, likely_b, likely_past);
      position = dst.position;
      dst_row = dst.row;
      active = dst_row >= 0;
    }
    const bool transformed = kind != ROW_V;  // V is never normalized or rotated

    // 2. QK-Norm: the row's sum of squares over its lane group (every lane takes part)
    float inv_rms = 1.0f;
    if (prm.has_qk_norm) {
      float sum_sq = 0.0f;
#pragma unroll
      for (int k = 0; k < kWriteMaxChunksPerLane; k++) {
        float x[8];
        unpack8<T>(raw[k], x);
#pragma unroll
        for (int i = 0; i < 8; i++) sum_sq = fmaf(x[i], x[i], sum_sq);
      }
      for (int offset = L >> 1; offset > 0; offset >>= 1)
        sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);
      inv_rms = 1.0f / sqrtf(sum_sq / (float)D + prm.qk_norm_epsilon);
    }
    const bool normalize = prm.has_qk_norm && transformed;
    const float tensor_inv_scale = 1.0f / tensor_scale;
    const T *norm_weight =
        static_cast<const T *>(kind == ROW_Q ? prm.q_norm_weight : prm.k_norm_weight);

    // Rows that rotate go through shared memory, or stay in registers (kRotaryInLane); V rows and
    // out-of-table positions store directly.
    const bool rotate = active && prm.do_rotary && transformed && position >= 0 &&
                        position < prm.rotary_max_positions;

    auto write_chunk = [&](int chunk, const float(&x)[8]) {
      if (kind == ROW_Q) {
        store8_t<T>(static_cast<T *>(prm.q_staged) + dst_row + chunk * 8, x);
      } else {
        C *cache = static_cast<C *>(to_k_cache ? prm.key_cache : prm.value_cache);
        store8_cache<T, C>(cache + dst_row + chunk * 8, x, scale, quant, tensor_inv_scale, head, D,
                           chunk * 8);
      }
    };
    // the chunk's 8 channels in fp32, after QK-Norm
    auto load_chunk = [&](const uint4 &chunk_raw, int chunk, float(&x)[8]) {
      unpack8<T>(chunk_raw, x);
      if (normalize) {
        float w[8];
        unpack8<T>(__ldg(reinterpret_cast<const uint4 *>(norm_weight + chunk * 8)), w);
#pragma unroll
        for (int i = 0; i < 8; i++) x[i] = __fmul_rn(__fmul_rn(x[i], inv_rms), w[i]);
      }
    };

    const int half = prm.rotary_dim >> 1;
    const T *cos_row = static_cast<const T *>(prm.cos_cache) + position * half;
    const T *sin_row = static_cast<const T *>(prm.sin_cache) + position * half;
#pragma unroll
    for (int k = 0; k < kWriteMaxChunksPerLane; k++) {
      const int chunk = lane_in_row + k * L;
      if (k >= prm.chunks_per_lane || chunk >= chunks) continue;
      float x[8];
      const int r0 = chunk * 8 - prm.rotary_offset;
      if (kRotaryInLane && rotate && r0 >= 0 && r0 < prm.rotary_dim) {
        // 3. RoPE in registers: an interleaved chunk holds its 4 pairs; a half-split x1 chunk's x2
        // chunk (half / 8 chunks on) is this lane's k + pair_step and is written with it
        if (prm.rotary_interleaved) {
          float cos_v[4], sin_v[4];
          load_pairs<T>(cos_row, r0 >> 1, cos_v);
          load_pairs<T>(sin_row, r0 >> 1, sin_v);
          load_chunk(raw[k], chunk, x);
          rotate_interleaved(cos_v, sin_v, x);
          write_chunk(chunk, x);
        } else if (r0 < half) {
          // raw[k + pair_step] by selects over constant indices, which keeps raw[] in registers
          const int pair_step = (half >> 3) >> prm.lanes_log2;
          uint4 partner_raw = raw[k];
#pragma unroll
          for (int j = k + 1; j < kWriteMaxChunksPerLane; j++)
            if (j - k == pair_step) partner_raw = raw[j];
          float cos_v[8], sin_v[8], x2[8];
          load_pairs<T>(cos_row, r0, cos_v);
          load_pairs<T>(sin_row, r0, sin_v);
          load_chunk(raw[k], chunk, x);
          load_chunk(partner_raw, chunk + (half >> 3), x2);
          rotate_half_split(cos_v, sin_v, x, x2);
          write_chunk(chunk, x);
          write_chunk(chunk + (half >> 3), x2);
        }
        continue;
      }
      load_chunk(raw[k], chunk, x);
      if (!kRotaryInLane && rotate) {
#pragma unroll
        for (int i = 0; i < 8; i++)
          row_scratch.slot(k * 8 + i, threadIdx.x) = x[i];  // at(chunk*8+i)
      } else if (active) {
        write_chunk(chunk, x);
      }
    }

    // 3. RoPE through shared memory, once the whole row is there (partners may sit in other lanes'
    // chunks)
    if (!kRotaryInLane && prm.do_rotary) {
      __syncwarp();
#pragma unroll 1
      for (int k = 0; k < kWriteMaxChunksPerLane; k++) {
        const int chunk = lane_in_row + k * L;
        if (!rotate || k >= prm.chunks_per_lane || chunk >= chunks) continue;
        float x[8];
        rotate_chunk<T>(prm, row_scratch, chunk, cos_row, sin_row, x);
        write_chunk(chunk, x);
      }
      __syncwarp();  // the next iteration overwrites the scratch row
    }
  }
}

// Threads of a write_copy_kernel CTA: one warp for a T cache (its lanes only issue copies);
// for an 8-bit cache kBulkCopyQuantizeWarps, which share the quantization of each token.
template <typename C>
constexpr int bulk_copy_threads() {
  return 32 * (is_quantized<C>::value ? kBulkCopyQuantizeWarps : 1);
}

// The write path when no row is transformed (write_params::bulk_copy_tokens > 0: no QK-Norm,
// no RoPE, no staged Q; sm_90 and newer). A token's K heads, and its V heads, are one contiguous
// run in the input and another at its slot in the cache, so the bulk-copy engine loads each run
// into shared memory while the token's thread looks up the slot, and stores it from there: no row
// data passes through the SM's load path, so the lookup's dependent loads do not wait behind it.
// A T cache takes the runs as loaded; an 8-bit cache's runs are quantized in shared memory by the
// whole CTA first (store8_codes, as the register kernel does). Thread j of CTA c handles token
// c * bulk_copy_tokens + j.
// (min blocks 1: no occupancy target; with none given, ptxas held the 64-thread variant to 32
// registers and spilled)
template <typename T, typename C>
__global__ void __launch_bounds__(bulk_copy_threads<C>(), 1) write_copy_kernel(
    const write_params prm) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool kQuantized = is_quantized<C>::value;
  // per token: its K and V runs as loaded; then, for an 8-bit cache, every token's runs quantized
  extern __shared__ __align__(128) unsigned char staging[];
  __shared__ uint64_t runs_loaded[32];  // per token
  const int thread = threadIdx.x;
  const int64_t first_token = (int64_t)blockIdx.x * prm.bulk_copy_tokens;
  const int64_t left = prm.token_count - first_token;
  const int tokens = (int)(left < prm.bulk_copy_tokens ? left : prm.bulk_copy_tokens);
  const int64_t t = first_token + thread;
  wait_for_previous_kernel();  // the inputs may come from the stream's previous kernel
  zero_arrivals(prm);

  const int run_elems = prm.kv_num_heads * prm.head_size;
  const uint32_t run_bytes = (uint32_t)run_elems * sizeof(T);
  const int runs = prm.rows_per_token > prm.kv_num_heads ? 2 : 1;  // K and V; LATENT: K
  auto loaded_run = [&](int token, int run) {
    return staging + ((size_t)token * runs + run) * run_bytes;
  };
  // One thread initializes every token's barrier before any is used: initialized by the token's
  // own thread, compute-sanitizer's racecheck reports each init against the other lanes' arrivals.
  if (thread == 0) {
    for (int token = 0; token < tokens; token++) mbarrier_init(&runs_loaded[token], 1);
    mbarrier_init_fence();
  }
  __syncthreads();
  int64_t dst_run = -1;  // element offset of the token's run (head 0's K row) in either cache
  if (thread < tokens) {
    uint64_t *loaded = &runs_loaded[thread];
    bytes_barrier_expect(loaded, runs * run_bytes);
    bulk_load(loaded_run(thread, 0), static_cast<const T *>(prm.key) + t * prm.kv_row_elems,
              run_bytes, loaded);
    if (runs == 2)
      bulk_load(loaded_run(thread, 1), static_cast<const T *>(prm.value) + t * prm.kv_row_elems,
                run_bytes, loaded);
    const int32_t likely_b = likely_sequence(prm, t);
    dst_run = find_row_destination(prm, t, ROW_K, 0, likely_b,
                                   likely_past_length(prm, true, likely_b))
                  .row;
  }
  auto cache = [&](int run) { return static_cast<C *>(run == 0 ? prm.key_cache : prm.value_cache); };

  if constexpr (!kQuantized) {
    if (thread >= tokens) return;
    bytes_barrier_wait(&runs_loaded[thread]);  // also when not written: the loads must land first
    if (dst_run < 0) return;
    for (int run = 0; run < runs; run++)
      bulk_store(cache(run) + dst_run, loaded_run(thread, run), run_bytes);
  } else {
    __shared__ int64_t token_dst_run[32];
    if (thread < tokens) token_dst_run[thread] = dst_run;
    __syncthreads();  // every token's destination, for every thread
    const uint32_t code_bytes = (uint32_t)run_elems * sizeof(C);
    unsigned char *const codes = staging + (size_t)tokens * runs * run_bytes;
    auto code_run = [&](int token, int run) {
      return codes + ((size_t)token * runs + run) * code_bytes;
    };
    // K's run, then V's, each with its own scale
    const float k_inv_scale = prm.k_quant == PA_QUANT_PER_TENSOR ? 1.0f / __ldg(prm.k_scale) : 1.0f;
    const float v_inv_scale =
        runs == 2 && prm.v_quant == PA_QUANT_PER_TENSOR ? 1.0f / __ldg(prm.v_scale) : 1.0f;
    for (int token = 0; token < tokens; token++) {
      bytes_barrier_wait(&runs_loaded[token]);
      if (token_dst_run[token] < 0) continue;  // the same for every thread
      for (int run = 0; run < runs; run++) {
        const T *in = reinterpret_cast<const T *>(loaded_run(token, run));
        C *out = reinterpret_cast<C *>(code_run(token, run));
        const float *scale = run == 0 ? prm.k_scale : prm.v_scale;
        const pa_quant_type quant = run == 0 ? prm.k_quant : prm.v_quant;
        const float inv_scale = run == 0 ? k_inv_scale : v_inv_scale;
        // element e of the run is channel e % D of head e / D: its PER_CHANNEL scale is scale[e]
        for (int e = thread * 8; e < run_elems; e += bulk_copy_threads<C>() * 8) {
          float x[8];
          unpack8<T>(*reinterpret_cast<const uint4 *>(in + e), x);
          store8_codes<C>(out + e, x, scale, quant, inv_scale, 0, 0, e);  // x is exact in T
        }
      }
      fence_async_proxy();  // the bulk stores read the codes
      __syncthreads();
      if (thread == token)
        for (int run = 0; run < runs; run++)
          bulk_store(cache(run) + dst_run, code_run(token, run), code_bytes);
    }
  }
  bulk_stores_wait_read();
#endif
}

template <typename T, typename C>
cudaError_t launch_write(const write_params &params, unsigned grid, size_t shared_bytes,
                            cudaStream_t stream, bool chained) {
  if (params.bulk_copy_tokens > 0)
    return launch_chained(write_copy_kernel<T, C>, dim3(grid), bulk_copy_threads<C>(),
                          shared_bytes, stream, chained, params);
  return launch_chained(params.rotary_in_lane ? write_kernel<T, C, true>
                                              : write_kernel<T, C, false>,
                        dim3(grid), kWriteThreads, shared_bytes, stream, chained, params);
}

// The explicit instantiation of launch_write<T, C> (one translation unit per T).
#define PA_WRITE_INSTANTIATE(T, C)                                                        \
  template cudaError_t launch_write<T, C>(const write_params &, unsigned, size_t,      \
                                             cudaStream_t, bool)

}  // namespace detail
}  // namespace pa
