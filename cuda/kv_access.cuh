// The paged-KV accessor: the one place that knows how a key position becomes cache bytes.
// Every kernel that reads the cache (DECODE, UNFUSED's gather, PREFILL) goes through it, so the
// block-table lookup, the unmapped-block rule and the dequantization exist once (doc/semantics.md,
// "Attention"; contract §4).
//
// Cache layout (NHD): key_cache / value_cache are (num_blocks, block_size, kv_num_heads, head_size)
// of the cache element type C (T itself, int8_t or fp8_e4m3 from numeric.cuh). Key position k of a
// sequence lives in physical block block_table_row[k / block_size], row k % block_size.
//
// Usage, per token t: its sequence is token_sequence(cu_seqlens, batch_size, t) (-1: none).
// Then per key (the gather pattern):
//   paged_kv_layout kv = paged_kv_layout_of(problem);          // host side, passed by value
//   const int32_t *table_row = block_table + (int64_t)seq * kv.max_blocks_per_seq;
//   int32_t block_id = kv_block_id(kv, table_row, key);
//   if (block_id < 0) { /* unmapped: masked, never read */ }
//   const C *row = kv_row(cache, kv, block_id, key, kv_head);   // head_size elements
//   float x[8];
//   load_dequant8(row, channel, scale, quant, kv_head, kv.head_size, x);  // channel % 8 == 0
// Kernels that feed tensor cores keep raw codes instead (exact in T, see codes_to_t2) and fold the
// scales into Q and the output.
#pragma once

#include <stdint.h>

#include "numeric.cuh"
#include "problem.h"

namespace pa {
namespace detail {

// Static geometry of one cache, copied into kernel parameters.
struct paged_kv_layout {
  int64_t num_blocks;
  int32_t block_size;          // a power of two >= 16
  int32_t block_shift;         // log2(block_size)
  int32_t max_blocks_per_seq;  // block_table.dims[1]
  int32_t kv_num_heads;
  int32_t head_size;  // elements per (token, head) row
};

inline paged_kv_layout paged_kv_layout_of(const pa__problem &p) {
  paged_kv_layout kv;
  kv.num_blocks = p.num_blocks;
  kv.block_size = p.block_size;
  kv.block_shift = 0;
  while ((1 << kv.block_shift) < p.block_size) kv.block_shift++;
  kv.max_blocks_per_seq = p.max_blocks_per_seq;
  kv.kv_num_heads = p.kv_num_heads;
  kv.head_size = p.head_size;
  return kv;
}

// The block-table entry of key position `key` (key >= 0) as stored, or -1 when the key lies past
// the table's width. Kernels that prefetch the entry validate it later with kv_block_mapped.
__device__ __forceinline__ int32_t kv_block_entry(const paged_kv_layout &kv,
                                                  const int32_t *table_row, int64_t key) {
  int64_t logical_block = key >> kv.block_shift;
  return logical_block < kv.max_blocks_per_seq ? __ldg(table_row + logical_block) : -1;
}
// The entry as a physical block, or -1 when it is outside [0, num_blocks) (-1 and any other).
__device__ __forceinline__ int32_t kv_block_mapped(const paged_kv_layout &kv, int32_t entry) {
  return (entry >= 0 && entry < kv.num_blocks) ? entry : -1;
}
// The physical block of key position `key` in a sequence whose block-table row is table_row, or -1
// when the key is unmapped: key < 0, key / block_size >= max_blocks_per_seq, or a block id outside
// [0, num_blocks) (-1 and any other). An unmapped key must be masked and never dereferenced.
__device__ __forceinline__ int32_t kv_block_id(const paged_kv_layout &kv, const int32_t *table_row,
                                               int64_t key) {
  return key < 0 ? -1 : kv_block_mapped(kv, kv_block_entry(kv, table_row, key));
}

// Element offset of the (key, kv_head) row inside the cache; block_id must be mapped (>= 0).
__device__ __forceinline__ int64_t kv_row_offset(const paged_kv_layout &kv, int32_t block_id,
                                                 int64_t key, int kv_head) {
  int64_t slot = ((int64_t)block_id << kv.block_shift) + (key & (kv.block_size - 1));
  return (slot * kv.kv_num_heads + kv_head) * kv.head_size;
}

template <typename C>
__device__ __forceinline__ const C *kv_row(const C *cache, const paged_kv_layout &kv,
                                           int32_t block_id, int64_t key, int kv_head) {
  return cache + kv_row_offset(kv, block_id, key, kv_head);
}

// The sequence b of packed token t: cu[b] <= t < cu[b+1] (cu = cumulative_sequence_length), or -1
// when t >= cu[batch_size] (the token belongs to no sequence). Correct for any ragged batch,
// zero-token sequences included; decode steps (one token per sequence) resolve with two loads.
__device__ __forceinline__ int32_t token_sequence(const int32_t *cu, int32_t batch_size,
                                                  int64_t t) {
  int32_t guess = (int32_t)(t < batch_size - 1 ? t : batch_size - 1);
  if (__ldg(cu + guess) <= t && t < __ldg(cu + guess + 1)) return guess;
  int32_t lo = 0, hi = batch_size;  // the last b with cu[b] <= t lies in [lo, hi)
  while (hi - lo > 1) {
    int32_t mid = (lo + hi) / 2;
    if (__ldg(cu + mid) <= t)
      lo = mid;
    else
      hi = mid;
  }
  return (__ldg(cu + lo) <= t && t < __ldg(cu + lo + 1)) ? lo : -1;
}

// ---- conversions of cached elements ------------------------------------------------------------

// Two values as a packed pair of T (low half = first), the layout mma.sync operands use. Exact for
// cache codes: int8 codes and e4m3 values are representable in fp16 and bf16, so the scale is
// applied elsewhere, in fp32.
template <typename T>
__device__ __forceinline__ uint32_t pack_t2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack_t2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack_t2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}

// Two of the four 8-bit codes in `codes` (bytes kLo and kHi; ldmatrix hands a lane four) as a
// packed T pair, low half = byte kLo. int8 without I2F (a quarter-rate conversion): the biased code
// x + 128 becomes the low mantissa bits of a constant, which is then subtracted (1024 + u in
// float16; 2^23 + u in float32 on the way to bfloat16).
template <typename T, typename C, int kLo, int kHi>
__device__ __forceinline__ uint32_t codes_to_t2(uint32_t codes) {
  static_assert(sizeof(C) == 1 && kLo >= 0 && kLo < 4 && kHi >= 0 && kHi < 4, "two of 4 bytes");
  if constexpr (dtype_of<C>::value == PA_DTYPE_INT8) {
    const uint32_t biased = codes ^ 0x80808080u;
    if constexpr (dtype_of<T>::value == PA_DTYPE_FLOAT16) {
      const uint32_t bits = __byte_perm(biased, 0x6464u, 0x5040 | kHi << 8 | kLo);  // (0x64, u) x 2
      const __half2 v =
          __hsub2(*reinterpret_cast<const __half2 *>(&bits), __half2(1152.0f, 1152.0f));
      return *reinterpret_cast<const uint32_t *>(&v);
    } else {
      const float lo = __uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7540 | kLo)) - 8388736.0f;
      const float hi = __uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7540 | kHi)) - 8388736.0f;
      return pack_t2<T>(lo, hi);
    }
  } else {
    // an aligned pair of adjacent bytes is a half of the register (no PRMT)
    const uint32_t two = kLo % 2 == 0 && kHi == kLo + 1 ? codes >> 8 * kLo
                                                        : __byte_perm(codes, 0u, kHi << 4 | kLo);
    const __nv_fp8x2_storage_t pair = (__nv_fp8x2_storage_t)two;
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);
    if constexpr (dtype_of<T>::value == PA_DTYPE_FLOAT16) {
      return (uint32_t)h.x | ((uint32_t)h.y << 16);
    } else {
      const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&h));
      return pack_t2<T>(f.x, f.y);
    }
  }
}

// Eight consecutive cached elements starting at channel `channel` (a multiple of 8) of a row,
// dequantized to fp32 exactly as doc/semantics.md says: q * s, s per tensor or per channel
// (cache_scale in numeric.cuh), the raw value when the cache is unquantized. One 16-byte load for a
// 16-bit cache, one 8-byte load for an 8-bit one.
template <typename C>
__device__ __forceinline__ void load_dequant8(const C *row, int channel, const float *scale,
                                              pa_quant_type quant, int kv_head, int head_size,
                                              float (&out)[8]) {
  C elems[8];
  if constexpr (sizeof(C) == 2) {
    *reinterpret_cast<uint4 *>(elems) = *reinterpret_cast<const uint4 *>(row + channel);
  } else {
    *reinterpret_cast<uint2 *>(elems) = *reinterpret_cast<const uint2 *>(row + channel);
  }
#pragma unroll
  for (int i = 0; i < 8; i++) {
    float x = to_float(elems[i]);
    out[i] =
        is_quantized<C>::value ? x * cache_scale(scale, quant, kv_head, head_size, channel + i) : x;
  }
}

}  // namespace detail
}  // namespace pa
