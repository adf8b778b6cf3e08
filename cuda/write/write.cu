// The write path's launcher (the kernels are in write_kernel.cuh): pa__write_plan decides the
// kernel, its launch geometry and its parameters once, in pa_plan_create; pa__write_run fills in
// the call's pointers and launches. Two choices depend on the call's pointers (RoPE in registers
// needs vector-aligned cos / sin tables, the bulk-copy kernel 16-byte aligned 8-bit caches): the
// plan holds both configurations, and run picks one with a pointer test.
#include <stdint.h>
#include <stdlib.h>

#include "../launch_common.cuh"
#include "internal.h"
#include "write_params.cuh"

namespace pa {
namespace detail {
namespace {

typedef cudaError_t (*write_launcher)(const write_params &params, unsigned grid,
                                      size_t shared_bytes, cudaStream_t stream, bool chained);

// One launch: the kernel parameters less the call's pointers, the grid and the shared memory.
struct write_launch {
  write_params params;
  unsigned grid;
  size_t shared_bytes;
};

struct write_state {
  write_launcher launch;  // by T and the cache type
  bool stage_q;
  bool chained;  // programmatic dependent launch (compute capability 9.0 and newer)
  // `fast` (RoPE in registers, or the bulk-copy kernel) when the call's pointers allow it, else
  // `general`: what allows it is fixed here
  bool has_fast;
  bool fast_needs_aligned_caches;  // key_cache and value_cache 16-byte aligned
  uintptr_t fast_table_alignment;  // cos_cache and sin_cache aligned to this (0: no condition)
  write_launch fast, general;
};

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
write_launcher launcher_for_cache(pa_dtype cache_dtype) {
  switch (cache_dtype) {
    case PA_DTYPE_INT8:
      return launch_write<T, int8_t>;
#if PA_FP8_KV_CACHE
    case PA_DTYPE_FLOAT8_E4M3FN:
      return launch_write<T, fp8_e4m3>;
#endif
    default:
      return launch_write<T, T>;
  }
}

// The parameters every configuration shares (the call's pointers stay NULL until run).
write_params params_of(const pa__problem &p, bool stage_q) {
  write_params prm = {};
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
  while ((1 << lanes_log2) * kWriteMaxChunksPerLane < chunks && lanes_log2 < 5) lanes_log2++;
  prm.lanes_log2 = lanes_log2;
  prm.lanes_per_row = 1 << lanes_log2;
  prm.chunks_per_lane = (chunks + prm.lanes_per_row - 1) / prm.lanes_per_row;
  return prm;
}

// The register kernel (write_kernel): rows spread over lane groups, the grid capped (the kernel
// loops); RoPE through shared memory unless rotary_in_lane.
write_launch register_kernel_launch(const pa__problem &p, const write_params &prm,
                                    bool rotary_in_lane) {
  write_launch L;
  L.params = prm;
  L.params.rotary_in_lane = rotary_in_lane;
  const int64_t groups_per_cta = kWriteThreads / prm.lanes_per_row;
  const int64_t ctas = (prm.total_rows + groups_per_cta - 1) / groups_per_cta;
  L.grid = (unsigned)(ctas < (1 << 30) ? ctas : (1 << 30));
  const bool rotary_in_shared = p.do_rotary && !rotary_in_lane;
  L.shared_bytes =
      rotary_in_shared ? (size_t)kWriteThreads * prm.chunks_per_lane * 8 * sizeof(float) : 0;
  return L;
}

pa_status plan_write(pa_plan *plan) {
  const pa__problem &p = plan->problem;
  const bool cache_ok = p.k_cache_dtype == p.dtype || p.k_cache_dtype == PA_DTYPE_INT8 ||
                        (PA_FP8_KV_CACHE && p.k_cache_dtype == PA_DTYPE_FLOAT8_E4M3FN);
  if ((p.dtype != PA_DTYPE_FLOAT16 && p.dtype != PA_DTYPE_BFLOAT16) || !cache_ok)
    return pa__fail(PA_ERROR_NOT_SUPPORTED, "write path: query type %d with cache type %d",
                    (int)p.dtype, (int)p.k_cache_dtype);
  write_state *s = (write_state *)calloc(1, sizeof *s);
  if (!s) return pa__fail(PA_ERROR_OUT_OF_MEMORY, "plan: host allocation failed");
  plan->write_state = s;
  s->launch = p.dtype == PA_DTYPE_BFLOAT16 ? launcher_for_cache<__nv_bfloat16>(p.k_cache_dtype)
                                           : launcher_for_cache<__half>(p.k_cache_dtype);
  s->stage_q = pa__needs_q_staging(&p) != 0;
  const bool sm90 = plan->caps.compute_capability_major >= 9;
  s->chained = sm90;
  const write_params prm = params_of(p, s->stage_q);
  if (prm.chunks_per_lane > kWriteMaxChunksPerLane)
    return pa__fail(PA_ERROR_NOT_SUPPORTED, "write path: head_size %d exceeds %d channels",
                    p.head_size, 8 * 32 * kWriteMaxChunksPerLane);
  s->general = register_kernel_launch(p, prm, false);

  // Without transformed rows (no staged Q means no QK-Norm and no RoPE) the bulk-copy engine
  // moves the rows (write_copy_kernel) where a token's staging fits (its runs, plus their codes
  // for an 8-bit cache), the grid (one CTA per few tokens) its limit, and every run is 16-byte
  // aligned: T runs always are (head_size % 8 == 0, 16-byte aligned tensors); 8-bit ones when a
  // run's codes are a multiple of 16 bytes and the caches 16-byte aligned (tested at run).
  const bool quantized = p.k_cache_dtype != p.dtype;
  const int64_t token_elems = (int64_t)prm.rows_per_token * p.head_size;
  const int64_t token_bytes =
      token_elems * (pa_dtype_size(p.dtype) + (quantized ? pa_dtype_size(p.k_cache_dtype) : 0));
  const bool runs_can_align = !quantized || (int64_t)p.kv_num_heads * p.head_size % 16 == 0;
  // RoPE in registers (write_params::rotary_in_lane) when every chunk is wholly inside or outside
  // [offset, offset + rotary_dim) and a half-split chunk's partner, rotary_dim / 16 chunks on, is
  // in the same lane. A chunk's cos / sin (8 pairs at r0 = chunk * 8 - offset half-split, 4 at
  // r0 / 2 interleaved) are then one 16- or 8-byte vector at a multiple of its size in a row, and
  // rows (rotary_dim / 2 elements) are multiples of 16 bytes: the tables' own alignment decides
  // (tested at run). Unaligned tables take the shared-memory path, which reads them by element.
  const bool rotary_can_be_in_lane =
      p.do_rotary && p.rotary_offset % 8 == 0 && p.rotary_dim % 16 == 0 &&
      (p.rotary_interleaved || (p.rotary_dim / 16) % prm.lanes_per_row == 0);
  if (sm90 && !s->stage_q && runs_can_align && token_bytes <= kBulkCopyMaxTokenBytes &&
      p.token_count <= INT32_MAX) {
    s->has_fast = true;
    s->fast_needs_aligned_caches = quantized;
    s->fast.params = prm;
    const int64_t tokens = kBulkCopyStagingBytes / token_bytes;
    s->fast.params.bulk_copy_tokens = (int32_t)(tokens < 1 ? 1 : tokens < 32 ? tokens : 32);
    s->fast.grid = (unsigned)((p.token_count + s->fast.params.bulk_copy_tokens - 1) /
                              s->fast.params.bulk_copy_tokens);
    s->fast.shared_bytes = (size_t)(s->fast.params.bulk_copy_tokens * token_bytes);
  } else if (rotary_can_be_in_lane) {
    s->has_fast = true;
    s->fast_table_alignment = p.rotary_interleaved ? 8 : 16;
    s->fast = register_kernel_launch(p, prm, true);
  }
  return PA_SUCCESS;
}

// Whether the call's pointers allow the fast configuration.
bool fast_applies(const write_state &s, const pa__io &io) {
  if (!s.has_fast) return false;
  if (s.fast_needs_aligned_caches &&
      ((uintptr_t)io.key_cache % 16 != 0 || (uintptr_t)io.value_cache % 16 != 0))
    return false;
  if (s.fast_table_alignment && ((uintptr_t)io.cos_cache % s.fast_table_alignment != 0 ||
                                 (uintptr_t)io.sin_cache % s.fast_table_alignment != 0))
    return false;
  return true;
}

}  // namespace
}  // namespace detail
}  // namespace pa

extern "C" int pa__write_workspace(const pa__problem *p, pa__workspace_layout *w) {
  if (!pa__needs_q_staging(p)) return -1;
  return pa__workspace_add(w, "staged Q (write path)",
                           (uint64_t)p->token_count * (uint64_t)pa__q_row_elems(p),
                           pa_dtype_size(p->dtype), PA_WORKSPACE_ALIGNMENT);
}

extern "C" pa_status pa__write_plan(pa_plan *plan) { return pa::detail::plan_write(plan); }

extern "C" pa_status pa__write_check_alignment(const pa_plan *plan, const pa__io *io) {
  return pa::detail::check_alignment(plan->problem, *io);
}

extern "C" pa_status pa__write_run(const pa_plan *plan, const pa__io *io, pa__stream stream) {
  using namespace pa::detail;
  const pa__problem &p = plan->problem;
  if (p.token_count == 0) return PA_SUCCESS;
  const write_state *s = static_cast<const write_state *>(plan->write_state);
  if (!s) return pa__fail(PA_ERROR_INTERNAL, "write path: the plan has no write configuration");
  if (s->stage_q && !io->q_staged)
    return pa__fail(PA_ERROR_INTERNAL, "write path: the plan stages Q but io->q_staged is NULL");

  const write_launch &L = fast_applies(*s, *io) ? s->fast : s->general;
  write_params prm = L.params;
  prm.query = io->query;
  prm.key = io->key;
  prm.value = io->value;
  prm.key_cache = io->key_cache;
  prm.value_cache = io->value_cache;
  prm.q_staged = s->stage_q ? io->q_staged : nullptr;
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
  if (plan->arrivals_region >= 0) {
    prm.arrivals = static_cast<unsigned int *>(
        pa__workspace_at(&plan->workspace, plan->arrivals_region, io->workspace));
    prm.arrival_count = (int32_t)plan->arrival_count;
  }
  const cudaError_t err = s->launch(prm, L.grid, L.shared_bytes,
                                    reinterpret_cast<cudaStream_t>(stream), s->chained);
  if (err != cudaSuccess)
    return pa__fail(PA_ERROR_CUDA, "write path: kernel launch failed: %s",
                    cudaGetErrorString(err));
  return PA_SUCCESS;
}

extern "C" void pa__write_destroy(pa_plan *plan) {
  free(plan->write_state);
  plan->write_state = nullptr;
}
