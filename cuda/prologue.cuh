// The shared prologue (the write path): its launch parameters and the launchers the per-type
// translation units instantiate (prologue_f16.cu, prologue_bf16.cu). The kernel itself is in
// prologue_kernel.cuh; the host entry point pa__prologue_run in prologue.cu.
//
// Work split: the rows of a token are its Q heads (when Q is staged), then its K heads, then its V
// heads (none in LATENT). A warp takes one work item at a time, a slice of one token's rows, and
// resolves the token's sequence, position and cache slot once for every row of the slice. Inside a
// warp, `lanes_per_row` lanes share a row, each taking `chunks_per_lane` chunks of 8 channels
// (chunk = lane + k * lanes_per_row, so a row's loads are contiguous); the warp's
// 32 / lanes_per_row lane groups cover `rows_per_pass` rows, and a slice is
// kProloguePassesInFlight such passes, whose loads all go out before the first store.
#pragma once

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "kv_access.cuh"

namespace pa {
namespace detail {

constexpr int kPrologueThreads = 256;
// Resident CTAs per SM the kernel's registers are held to: 4 (<= 64 registers a thread) for a step
// without QK-Norm and RoPE into a T cache; one fewer with the transforms, and one fewer again for
// an 8-bit cache (quantizing needs more; tighter bounds spill). The grid is sized to this many CTAs
// per SM and the kernel loops over the remaining work.
constexpr int prologue_ctas_per_sm(bool transforms, bool quantized) {
  return 4 - (transforms ? 1 : 0) - (quantized ? 1 : 0);
}
// A lane covers at most this many 16-byte chunks of a row: head_size 576 (LATENT) over 32 lanes;
// rows up to 256 channels take at most 4 with fewer lanes.
constexpr int kPrologueMaxChunksPerLane = 4;
// Passes of a slice whose loads are in flight together: 2 x 4 chunks = 128 bytes a lane.
constexpr int kProloguePassesInFlight = 2;

struct prologue_params {
  const void *query, *key, *value;  // T; key/value unused in PACKED, value unused in LATENT
  void *key_cache, *value_cache;    // C
  void *q_staged;                   // T, (token_count, num_heads * head_size); NULL: no Q rows
  const int32_t *cu_seqlens, *past_seqlens, *block_table, *slot_mapping, *query_positions;
  const void *cos_cache, *sin_cache;  // T, (rotary_max_positions, rotary_dim / 2)
  const void *q_norm_weight, *k_norm_weight;
  const float *k_scale, *v_scale;
  paged_kv_layout kv;
  int64_t token_count;
  int64_t cache_slots;      // num_blocks * block_size
  int64_t query_row_elems;  // elements between tokens of query (packed: Q|K|V)
  int64_t kv_row_elems;     // elements between tokens of key / value
  int64_t rotary_max_positions;
  int32_t batch_size, num_heads, kv_num_heads, head_size;
  int32_t q_rows;          // num_heads when Q is staged, else 0
  int32_t rows_per_token;  // q_rows + kv_num_heads (+ kv_num_heads with a value)
  int32_t packed;
  int32_t has_qk_norm;
  float qk_norm_epsilon;
  int32_t do_rotary, rotary_interleaved, rotary_dim, rotary_offset;
  pa_quant_type k_quant, v_quant;
  int32_t lanes_per_row, lanes_log2;  // a power of two <= 32
  int32_t chunks_per_lane;            // <= kPrologueMaxChunksPerLane
  int32_t rows_per_pass;              // 32 / lanes_per_row
  int32_t slices_per_token;  // ceil(rows_per_token / (rows_per_pass * kProloguePassesInFlight))
  // the grid's warp count W = item_step_tokens * slices_per_token + item_step_slices: a warp's
  // next item is W items further
  int64_t item_step_tokens;
  int32_t item_step_slices;
};

// Launches the prologue for activation type T and cache element type C (T, int8_t, fp8_e4m3);
// `transforms`: the step has QK-Norm or RoPE (the kernel without them is a separate, leaner one).
template <typename T, typename C>
cudaError_t launch_prologue(const prologue_params &params, bool transforms, unsigned grid,
                            size_t shared_bytes, cudaStream_t stream);

}  // namespace detail
}  // namespace pa
