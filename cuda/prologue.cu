// pa__prologue_run: the host side of the shared prologue (the kernel is in prologue_kernel.cuh).
// Cheap by design: launch extents come from the plan's static shapes, no CUDA queries, one launch.
#include <stdint.h>

#include "internal.h"
#include "launch_common.cuh"
#include "prologue.cuh"

namespace pa {
namespace detail {
namespace {

pa_status check_aligned(const void *ptr, uintptr_t alignment, const char *tensor) {
  if (!ptr || (uintptr_t)ptr % alignment == 0) return PA_SUCCESS;
  return pa__fail(PA_ERROR_MISALIGNED, "%s: expected %u-byte alignment (vectorized access), got %p",
                  tensor, (unsigned)alignment, ptr);
}

// Every pointer the kernel reads or writes with 16-byte vectors (8-byte for 8-bit caches).
pa_status check_alignment(const pa__problem &p, const pa__io &io) {
  const uintptr_t cache_alignment = pa_dtype_size(p.k_cache_dtype) == 1 ? 8 : 16;
  pa_status st;
  if ((st = check_aligned(io.query, 16, "query")) != PA_SUCCESS) return st;
  if (p.input_mode != PA__MODE_PACKED && (st = check_aligned(io.key, 16, "key")) != PA_SUCCESS)
    return st;
  if (p.input_mode == PA__MODE_SEPARATE &&
      (st = check_aligned(io.value, 16, "value")) != PA_SUCCESS)
    return st;
  if ((st = check_aligned(io.key_cache, cache_alignment, "key_cache")) != PA_SUCCESS) return st;
  if (p.input_mode != PA__MODE_LATENT &&
      (st = check_aligned(io.value_cache, cache_alignment, "value_cache")) != PA_SUCCESS)
    return st;
  if (p.has_qk_norm && ((st = check_aligned(io.q_norm_weight, 16, "q_norm_weight")) != PA_SUCCESS ||
                        (st = check_aligned(io.k_norm_weight, 16, "k_norm_weight")) != PA_SUCCESS))
    return st;
  return check_aligned(io.q_staged, 16, "workspace (staged query)");
}

template <typename T>
cudaError_t launch_for_cache(pa_dtype cache_dtype, const prologue_params &prm, unsigned grid,
                             size_t shared_bytes, cudaStream_t stream, bool chained) {
  switch (cache_dtype) {
    case PA_DTYPE_INT8:
      return launch_prologue<T, int8_t>(prm, grid, shared_bytes, stream, chained);
#if PA_FP8_KV_CACHE
    case PA_DTYPE_FLOAT8_E4M3FN:
      return launch_prologue<T, fp8_e4m3>(prm, grid, shared_bytes, stream, chained);
#endif
    default:
      return launch_prologue<T, T>(prm, grid, shared_bytes, stream, chained);
  }
}

}  // namespace
}  // namespace detail
}  // namespace pa

extern "C" pa_status pa__prologue_run(const pa_plan *plan, const pa__io *io, pa__stream stream) {
  using namespace pa::detail;
  const pa__problem &p = plan->problem;
  if (p.token_count == 0) return PA_SUCCESS;
  const bool stage_q = pa__needs_q_staging(&p) != 0;
  if (stage_q && !io->q_staged)
    return pa__fail(PA_ERROR_INTERNAL, "prologue: the plan stages Q but io->q_staged is NULL");
  const bool cache_ok = p.k_cache_dtype == p.dtype || p.k_cache_dtype == PA_DTYPE_INT8 ||
                        (PA_FP8_KV_CACHE && p.k_cache_dtype == PA_DTYPE_FLOAT8_E4M3FN);
  if ((p.dtype != PA_DTYPE_FLOAT16 && p.dtype != PA_DTYPE_BFLOAT16) || !cache_ok)
    return pa__fail(PA_ERROR_NOT_SUPPORTED, "prologue: query type %d with cache type %d",
                    (int)p.dtype, (int)p.k_cache_dtype);
  pa_status st = check_alignment(p, *io);
  if (st != PA_SUCCESS) return st;

  prologue_params prm = {};
  prm.query = io->query;
  prm.key = io->key;
  prm.value = io->value;
  prm.key_cache = io->key_cache;
  prm.value_cache = io->value_cache;
  prm.q_staged = stage_q ? io->q_staged : nullptr;
  prm.cu_seqlens = io->cu_seqlens;
  prm.past_seqlens = io->past_seqlens;
  prm.block_table = io->block_table;
  prm.slot_mapping = io->slot_mapping;
  prm.query_positions = io->query_positions;
  prm.cos_cache = io->cos_cache;
  prm.sin_cache = io->sin_cache;
  prm.q_norm_weight = io->q_norm_weight;
  prm.k_norm_weight = io->k_norm_weight;
  prm.k_scale = io->k_scale;
  prm.v_scale = io->v_scale;
  prm.kv = paged_kv_layout_of(p);
  prm.cache_slots = p.num_blocks * p.block_size;
  prm.query_row_elems = pa__query_row_elems(&p);
  prm.kv_row_elems = pa__kv_row_elems(&p);
  prm.rotary_max_positions = p.do_rotary ? p.rotary_max_positions : 0;
  prm.batch_size = p.batch_size;
  prm.num_heads = p.num_heads;
  prm.kv_num_heads = p.kv_num_heads;
  prm.head_size = p.head_size;
  prm.q_rows = stage_q ? p.num_heads : 0;
  prm.rows_per_token =
      prm.q_rows + p.kv_num_heads + (p.input_mode == PA__MODE_LATENT ? 0 : p.kv_num_heads);
  prm.token_count = p.token_count;
  prm.total_rows = p.token_count * prm.rows_per_token;
  prm.packed = p.input_mode == PA__MODE_PACKED;
  prm.has_qk_norm = p.has_qk_norm;
  prm.qk_norm_epsilon = p.qk_norm_epsilon;
  prm.do_rotary = p.do_rotary;
  prm.rotary_interleaved = p.rotary_interleaved;
  prm.rotary_dim = p.rotary_dim;
  prm.rotary_offset = p.rotary_offset;
  prm.k_quant = p.k_quant;
  prm.v_quant = p.v_quant;

  // lanes per row: enough for about two 16-byte chunks each, a power of two up to a warp
  const int chunks = p.head_size / 8;
  int lanes_log2 = 0;
  while ((1 << lanes_log2) * kPrologueMaxChunksPerLane < chunks && lanes_log2 < 5) lanes_log2++;
  prm.lanes_log2 = lanes_log2;
  prm.lanes_per_row = 1 << lanes_log2;
  prm.chunks_per_lane = (chunks + prm.lanes_per_row - 1) / prm.lanes_per_row;
  if (prm.chunks_per_lane > kPrologueMaxChunksPerLane)
    return pa__fail(PA_ERROR_NOT_SUPPORTED, "prologue: head_size %d exceeds %d channels",
                    p.head_size, 8 * 32 * kPrologueMaxChunksPerLane);

  // RoPE in registers (prologue_params::rotary_in_lane) when every chunk is wholly inside or
  // outside [offset, offset + rotary_dim) and a half-split chunk's partner, rotary_dim / 16 chunks
  // on, is in the same lane. A chunk's cos / sin (8 pairs at r0 = chunk * 8 - offset half-split, 4
  // at r0 / 2 interleaved) are then one 16- or 8-byte vector at a multiple of its size in a row,
  // and rows (rotary_dim / 2 elements) are multiples of 16 bytes: the tables' own alignment
  // decides. Unaligned tables take the shared-memory path, which reads them by element.
  const uintptr_t table_vector_bytes = p.rotary_interleaved ? 8 : 16;
  prm.rotary_in_lane = p.do_rotary && p.rotary_offset % 8 == 0 && p.rotary_dim % 16 == 0 &&
                       (p.rotary_interleaved || (p.rotary_dim / 16) % prm.lanes_per_row == 0) &&
                       (uintptr_t)io->cos_cache % table_vector_bytes == 0 &&
                       (uintptr_t)io->sin_cache % table_vector_bytes == 0;

  const bool sm90 = plan->caps.compute_capability_major >= 9;
  unsigned grid;
  size_t shared_bytes;
  // Without transformed rows (no staged Q means no QK-Norm and no RoPE) the bulk-copy engine
  // moves the rows (prologue_copy_kernel) where a token's staging fits (its runs, plus their codes
  // for an 8-bit cache), the grid (one CTA per few tokens) its limit, and every run is 16-byte
  // aligned: T runs always are (head_size % 8 == 0, 16-byte aligned tensors); 8-bit ones when a
  // run's codes are a multiple of 16 bytes and the caches 16-byte aligned.
  const bool quantized = p.k_cache_dtype != p.dtype;
  const int64_t token_elems = (int64_t)prm.rows_per_token * p.head_size;
  const int64_t token_bytes =
      token_elems * (pa_dtype_size(p.dtype) + (quantized ? pa_dtype_size(p.k_cache_dtype) : 0));
  const bool runs_aligned =
      !quantized || ((int64_t)p.kv_num_heads * p.head_size % 16 == 0 &&
                     (uintptr_t)io->key_cache % 16 == 0 && (uintptr_t)io->value_cache % 16 == 0);
  if (sm90 && !stage_q && runs_aligned && token_bytes <= kBulkCopyMaxTokenBytes &&
      p.token_count <= INT32_MAX) {
    const int64_t tokens = kBulkCopyStagingBytes / token_bytes;
    prm.bulk_copy_tokens = (int32_t)(tokens < 1 ? 1 : tokens < 32 ? tokens : 32);
    grid = (unsigned)((p.token_count + prm.bulk_copy_tokens - 1) / prm.bulk_copy_tokens);
    shared_bytes = (size_t)(prm.bulk_copy_tokens * token_bytes);
  } else {
    const int64_t groups_per_cta = kPrologueThreads / prm.lanes_per_row;
    const int64_t ctas = (prm.total_rows + groups_per_cta - 1) / groups_per_cta;
    grid = (unsigned)(ctas < (1 << 30) ? ctas : (1 << 30));  // the kernel loops
    const bool rotary_in_shared = p.do_rotary && !prm.rotary_in_lane;
    shared_bytes =
        rotary_in_shared ? (size_t)kPrologueThreads * prm.chunks_per_lane * 8 * sizeof(float) : 0;
  }

  cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
  const bool chained = sm90;
  auto launch = p.dtype == PA_DTYPE_BFLOAT16 ? launch_for_cache<__nv_bfloat16>
                                             : launch_for_cache<__half>;
  cudaError_t err = launch(p.k_cache_dtype, prm, grid, shared_bytes, s, chained);
  if (err != cudaSuccess)
    return pa__fail(PA_ERROR_CUDA, "prologue: kernel launch failed: %s", cudaGetErrorString(err));
  return PA_SUCCESS;
}
