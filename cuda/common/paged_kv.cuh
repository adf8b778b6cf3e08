// The paged-KV accessor: the one place that knows how a key position becomes cache bytes.
// Every kernel that reads the cache goes through it, so the block-table lookup, the unmapped-block
// rule and the dequantization exist once (doc/semantics.md, "Attention").
//
// Cache layout (NHD): key_cache / value_cache are (num_blocks, block_size, kv_num_heads, head_size)
// of the cache element type C (T itself, int8_t or fp8_e4m3 from numeric.cuh). Key position k of a
// sequence lives in physical block block_table_row[k / block_size], row k % block_size.
//
// Usage, per token t of sequence seq (attention_rules.cuh: token_sequence), per key (the gather
// pattern):
//   paged_kv_layout kv = ...;   // filled by the launcher at plan time, passed by value
//   const int32_t *table_row = block_table + (int64_t)seq * kv.max_blocks_per_seq;
//   int32_t block_id = kv_block_id(kv, table_row, key);
//   if (block_id < 0) { /* unmapped: masked, never read */ }
//   const C *row = kv_row(cache, kv, block_id, key, kv_head);   // head_size elements
//   float x[8];
//   load_dequant8(row, channel, scale, quant, kv_head, kv.head_size, x);  // channel % 8 == 0
// Kernels that feed tensor cores keep raw codes instead (exact in fp16, see codes_to_t2) and fold
// the scales into Q and the output.
#pragma once

#include <stdint.h>

#include "chained_launch.cuh"
#include "numeric.cuh"

namespace pa {
namespace detail {

// Static geometry of one cache, fixed at plan time (cuda/launch_common.cuh) and copied into kernel
// parameters.
struct paged_kv_layout {
  int64_t num_blocks;
  int32_t block_size;          // a power of two >= 16
  int32_t block_shift;         // log2(block_size)
  int32_t max_blocks_per_seq;  // block_table.dims[1]
  int32_t kv_num_heads;
  int32_t head_size;  // elements per (token, head) row
  // Byte strides of the caches (their element type's): between a block's rows (tokens), and
  // between blocks.
  int64_t row_bytes, block_bytes;
};

// The block-table entry of key position `key` (key >= 0) as stored, or -1 when the key lies past
// the table's width. Kernels that prefetch the entry validate it later with kv_block_mapped.
// kBeforeWait: load_step_input's.
template <bool kBeforeWait = false>
__device__ __forceinline__ int32_t kv_block_entry(const paged_kv_layout &kv,
                                                  const int32_t *table_row, int64_t key) {
  int64_t logical_block = key >> kv.block_shift;
  return logical_block < kv.max_blocks_per_seq
             ? load_step_input<kBeforeWait>(table_row + logical_block)
             : -1;
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

// Byte offset of key position `key` in block block_id (mapped, or 0 for an address that is read
// with src-size 0) at channel 0 of KV head 0, from the layout's byte strides; only the key's low
// bits matter, so a 32-bit truncation of it will do.
__device__ __forceinline__ int64_t kv_page_row_bytes(const paged_kv_layout &kv, int32_t block_id,
                                                     uint32_t key) {
  return (int64_t)block_id * kv.block_bytes +
         (int64_t)(key & (uint32_t)(kv.block_size - 1)) * kv.row_bytes;
}

template <typename C>
__device__ __forceinline__ const C *kv_row(const C *cache, const paged_kv_layout &kv,
                                           int32_t block_id, int64_t key, int kv_head) {
  return cache + kv_row_offset(kv, block_id, key, kv_head);
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
