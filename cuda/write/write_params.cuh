// The write path shared by every backend: its kernel parameters and the launcher the per-type
// translation units instantiate (write_f16.cu, write_bf16.cu). The kernels are in
// write_kernel.cuh; the launcher (pa__write_plan / pa__write_run) in write.cu. A kernel header:
// sees only cuda/common/.
#pragma once

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "../common/paged_kv.cuh"

namespace pa {
namespace detail {

constexpr int kWriteThreads = 256;
// A lane covers at most this many 16-byte chunks of a head row: the host picks the fewest lanes
// per row that keep within it (4 chunks each for head sizes 64, 128 and 256; 3 for 576 over 32
// lanes), so every lane has several loads in flight.
constexpr int kWriteMaxChunksPerLane = 4;

// One launch over every (token, head row) of the step. A row is one Q head (when Q is staged), one
// K head or one V head of a token; `lanes_per_row` lanes handle it, each lane
// `chunks_per_lane` chunks of 8 channels (chunk = lane + k * lanes_per_row, so a group's loads are
// contiguous).
struct write_params {
  const void *query, *key, *value;  // T; key/value unused in PACKED, value unused in LATENT
  void *key_cache, *value_cache;    // C
  void *q_staged;                   // T, (token_count, num_heads * head_size); NULL: no Q rows
  const int32_t *cu_seqlens, *past_seqlens, *block_table, *slot_mapping, *query_positions;
  const void *cos_cache, *sin_cache;  // T, (rotary_max_positions, rotary_dim / 2)
  const void *q_norm_weight, *k_norm_weight;
  const float *k_scale, *v_scale;
  paged_kv_layout kv;
  int64_t token_count;
  int64_t total_rows;       // token_count * rows_per_token
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
  // RoPE in registers, without shared memory: every chunk lies wholly inside or outside the
  // rotated range, a channel's partner is in the same lane (in its chunk, or half-split: the lane's
  // chunk k + (rotary_dim / 16) / lanes_per_row) and a chunk's cos / sin are one aligned vector
  int32_t rotary_in_lane;
  pa_quant_type k_quant, v_quant;
  int32_t lanes_per_row, lanes_log2;  // a power of two <= 32
  int32_t chunks_per_lane;            // <= kWriteMaxChunksPerLane
  // > 0: no row is transformed, and write_copy_kernel (write_kernel.cuh) moves them with this
  // many tokens per CTA (bulk_copy_threads), each token's K and V runs staged in shared memory
  int32_t bulk_copy_tokens;
  // A backend's arrival counters (pa_plan::arrivals_region), zeroed by the first CTA after its
  // wait: the previous step's kernels are complete, and the backend's kernels wait for this one
  unsigned int *arrivals;
  int32_t arrival_count;
};

// The shared memory write_copy_kernel stages per CTA: tokens per CTA = this / a token's staging
// (its K + V bytes, plus their 8-bit codes for a quantized cache; at least 1, at most 32). Small
// CTAs keep many loads in flight per SM and a fine-grained tail: at 32/8 heads d128, 4 KB (one
// token a CTA) measured faster than 8, 16 and 32 KB (doc/performance.md). Tokens whose staging
// exceeds kBulkCopyMaxTokenBytes take the register kernel.
constexpr int64_t kBulkCopyStagingBytes = 4 * 1024;
constexpr int64_t kBulkCopyMaxTokenBytes = 32 * 1024;  // within the 48 KB a CTA has unasked
// Warps of a write_copy_kernel CTA for an 8-bit cache: they quantize each token's runs together
// (a T cache's CTA is one warp).
constexpr int kBulkCopyQuantizeWarps = 2;

// Launches the write path for activation type T and cache element type C (T, int8_t, fp8_e4m3);
// chained: programmatic dependent launch (chained_launch.cuh; compute capability 9.0 and newer).
template <typename T, typename C>
cudaError_t launch_write(const write_params &params, unsigned grid, size_t shared_bytes,
                            cudaStream_t stream, bool chained);

}  // namespace detail
}  // namespace pa
