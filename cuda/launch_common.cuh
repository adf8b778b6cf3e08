// Pieces every launcher shares: the only cuda/ code besides the launchers that sees the planning
// types (lib/problem.h). Kernel headers and cuda/common/ never include this.
#pragma once

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/numeric.cuh"
#include "common/paged_kv.cuh"
#include "common/split_merge.cuh"
#include "problem.h"

namespace pa {
namespace detail {

// The cache geometry of a problem, as the kernels take it; computed once per plan.
inline paged_kv_layout paged_kv_layout_of(const pa__problem &p) {
  paged_kv_layout kv;
  kv.num_blocks = p.num_blocks;
  kv.block_size = p.block_size;
  kv.block_shift = 0;
  while ((1 << kv.block_shift) < p.block_size) kv.block_shift++;
  kv.max_blocks_per_seq = p.max_blocks_per_seq;
  kv.kv_num_heads = p.kv_num_heads;
  kv.head_size = p.head_size;
  kv.row_bytes = (int64_t)p.kv_num_heads * p.head_size * (int64_t)pa_dtype_size(p.k_cache_dtype);
  kv.block_bytes = kv.row_bytes * p.block_size;
  return kv;
}

// Whether this build holds sm_90a machine code: gpu_archs lists 90a (and not plain 90, whose cubin
// a 9.0 device might run instead).
inline bool built_for_sm90a() {
  bool sm90a = false, sm90 = false;
  const char *arch = PA_GPU_ARCHS;
  while (*arch) {
    const char *end = strchr(arch, ',');
    const size_t length = end ? (size_t)(end - arch) : strlen(arch);
    if (length == 3 && strncmp(arch, "90a", 3) == 0) sm90a = true;
    if (length == 2 && strncmp(arch, "90", 2) == 0) sm90 = true;
    arch += length + (end ? 1 : 0);
  }
  return sm90a && !sm90;
}
// Whether a device runs this build's sm_90a kernels (wgmma, setmaxnreg): compute capability 9.0
// exactly, and a build that holds their cubin.
inline bool runs_sm90a_kernels(const pa_device_caps *caps) {
  return caps->compute_capability_major == 9 && caps->compute_capability_minor == 0 &&
         built_for_sm90a();
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Writes the unserved feature into why (plan.c prefixes "backend NAME does not serve") and returns
// PA_ERROR_NOT_SUPPORTED: a backend's check op.
__attribute__((format(printf, 3, 4))) inline pa_status unsupported(char *why, size_t why_size,
                                                                   const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vsnprintf(why, why_size, fmt, args);
  va_end(args);
  return PA_ERROR_NOT_SUPPORTED;
}

// Calls make(T(), C()) with the problem's query type T (__half, __nv_bfloat16) and cache element
// type C (T itself, int8_t or fp8_e4m3), the template arguments of the tensor-core kernels; false
// when this build has no such kernel (another query type, or fp8 without -Dfp8_kv_cache).
template <typename Make>
bool for_kernel_types(const pa__problem *p, Make &&make) {
  auto with_cache = [&](auto t) {
    using T = decltype(t);
    if (p->k_cache_dtype == dtype_of<T>::value)
      make(T(), T());
    else if (p->k_cache_dtype == PA_DTYPE_INT8)
      make(T(), int8_t());
#if PA_FP8_KV_CACHE
    else if (p->k_cache_dtype == PA_DTYPE_FLOAT8_E4M3FN)
      make(T(), fp8_e4m3());
#endif
    else
      return false;
    return true;
  };
  if (p->dtype == PA_DTYPE_FLOAT16) return with_cache(__half());
  if (p->dtype == PA_DTYPE_BFLOAT16) return with_cache(__nv_bfloat16());
  return false;
}

// What neither fused tensor-core backend (DECODE, PREFILL) serves, in the order their checks
// report it: PA_SUCCESS, or unsupported() naming the feature. kernels_built: for_kernel_types found
// a kernel; smem_bytes: what the backend's kernel needs per block.
inline pa_status fused_backend_refusal(const pa__problem *p, const pa_device_caps *caps,
                                       bool kernels_built, int smem_bytes, char *why,
                                       size_t why_size) {
  if (p->input_mode == PA__MODE_LATENT) return unsupported(why, why_size, "LATENT");
  if (p->has_bias) return unsupported(why, why_size, "attention_bias");
  if (p->qk_output) return unsupported(why, why_size, "output_qk");
  if (p->head_size % 16 != 0 || p->head_size > 256)
    return unsupported(why, why_size, "head_size %d (needs a multiple of 16 up to 256)",
                       p->head_size);
  if (p->v_head_size != p->head_size)
    return unsupported(why, why_size, "v_head_size %d", p->v_head_size);
  if (!kernels_built)
    return unsupported(why, why_size, "key_cache dtype %s",
                       pa_dtype_size(p->k_cache_dtype) == 1 ? "float8e4m3fn (not built)"
                                                            : "other than T, int8, float8e4m3fn");
  if (p->v_cache_dtype != p->k_cache_dtype)
    return unsupported(why, why_size, "value_cache dtype different from key_cache's");
  if (caps->compute_capability_major < 8)
    return unsupported(why, why_size, "compute capability %d.%d (needs 8.0 or newer)",
                       caps->compute_capability_major, caps->compute_capability_minor);
  if (smem_bytes > caps->max_shared_memory_per_block_optin)
    return unsupported(why, why_size,
                       "head_size %d (needs %d bytes of shared memory per block, the device "
                       "allows %lld)",
                       p->head_size, smem_bytes, (long long)caps->max_shared_memory_per_block_optin);
  return PA_SUCCESS;
}

// The row blocks of a step (units per KV head before splits) when a block holds tokens_per_block
// tokens of head_blocks blocks per token: every non-empty sequence has at least one, so
// min(batch_size, token_count) is a floor.
inline int64_t row_blocks_of(const pa__problem *p, int64_t tokens_per_block, int64_t head_blocks) {
  const int64_t token_blocks = (p->token_count + tokens_per_block - 1) / tokens_per_block;
  const int64_t floor_blocks =
      p->batch_size < p->token_count ? (int64_t)p->batch_size : p->token_count;
  return (token_blocks > floor_blocks ? token_blocks : floor_blocks) * head_blocks;
}

// The split size, in tiles of tile_keys keys, of a split-KV backend with `row_blocks` row blocks
// per KV head and ctas_per_sm resident CTAs per multiprocessor. It depends only on static shapes
// and the device, never on attention_metadata, so every key range is partitioned (and summed) the
// same way with bounds absent, tight or loose. Splits are worth it only when the units alone cannot
// fill the device twice over; a split spans at least min_tiles tiles (shorter ones cost more in
// partial writes and merging than they gain in balance), and the fp32 partials of every split slot
// stay below max_partial_bytes.
// A split rule's bounds: the block table's capacity in tiles of tile_keys keys (a sequence's most),
// and a split size raised so that the fp32 partials of every split slot stay below
// max_partial_bytes, then capped at that capacity.
inline int64_t split_capacity_tiles(const pa__problem *p, int tile_keys) {
  const int64_t tiles = ceil_div((int64_t)p->max_blocks_per_seq * p->block_size, tile_keys);
  return tiles > 1 ? tiles : 1;
}
inline int64_t split_slots_within_partials(const pa__problem *p, int64_t max_partial_bytes) {
  const int64_t slot_bytes = p->token_count * p->num_heads * ((int64_t)p->v_head_size * 4 + 8);
  const int64_t slots = max_partial_bytes / (slot_bytes > 1 ? slot_bytes : 1);
  return slots > 1 ? slots : 1;
}
inline int64_t split_tiles_within_partials(const pa__problem *p, int64_t tiles,
                                           int64_t capacity_tiles, int64_t max_partial_bytes) {
  auto max64 = [](int64_t a, int64_t b) { return a > b ? a : b; };
  tiles = max64(tiles, ceil_div(capacity_tiles, split_slots_within_partials(p, max_partial_bytes)));
  return tiles < capacity_tiles ? tiles : capacity_tiles;
}

inline int64_t split_tiles_for(const pa__problem *p, const pa_device_caps *caps,
                               int64_t ctas_per_sm, int64_t row_blocks, int tile_keys,
                               int64_t min_tiles, int64_t max_partial_bytes) {
  auto max64 = [](int64_t a, int64_t b) { return a > b ? a : b; };
  const int64_t capacity_tiles = split_capacity_tiles(p, tile_keys);
  const int64_t sms = caps->multiprocessor_count > 0 ? caps->multiprocessor_count : 1;
  const int64_t target_ctas = 2 * sms * ctas_per_sm;
  const int64_t units = max64(1, row_blocks * p->kv_num_heads);
  if (units >= target_ctas) return capacity_tiles;
  const int64_t splits_wanted = ceil_div(target_ctas, units);
  const int64_t tiles = max64(min_tiles, ceil_div(capacity_tiles, splits_wanted));
  return split_tiles_within_partials(p, tiles, capacity_tiles, max_partial_bytes);
}

// The split size for a persistent kernel of `ctas` CTAs whose units each cost about their tiles
// plus unit_cost_tiles (a unit's setup and epilogue, its partial writes and their merge), as for
// a compute-bound LATENT step: the split count that minimizes the busiest CTA's cost,
// ceil(units x splits / ctas) x (tiles per split + unit_cost_tiles), the fewest splits on a tie
// (split_tiles_for's rule of "fill the device twice over" splits 128 units on 132 CTAs three ways,
// which balances nothing and pays the merge). Static shapes only, the same minimum split length
// and partial-bytes cap as split_tiles_for; unit_cost_tiles >= 1.
// Two bounds keep the search to about 2 x ctas steps whatever the block table's capacity (a
// table of 2^30-key blocks made it take billions; fuzz_plan's timeout):
// - more than ctas x (1 + c) / c splits, c = unit_cost_tiles, cost more than ctas splits (they
//   cost at least units x (capacity + splits x c) / ctas; ctas splits cost less than
//   units x (capacity / ctas + 1 + c));
// - more split slots than the partials allow are never planned (split_slots_within_partials).
inline int64_t balanced_split_tiles_for(const pa__problem *p, int64_t ctas, int64_t row_blocks,
                                        int tile_keys, int64_t min_tiles,
                                        int64_t max_partial_bytes, int64_t unit_cost_tiles) {
  auto max64 = [](int64_t a, int64_t b) { return a > b ? a : b; };
  auto min64 = [](int64_t a, int64_t b) { return a < b ? a : b; };
  const int64_t capacity_tiles = split_capacity_tiles(p, tile_keys);
  const int64_t units = max64(1, row_blocks * p->kv_num_heads);
  ctas = max64(1, ctas);
  const int64_t max_splits = min64(
      min64(ceil_div(capacity_tiles, min_tiles), split_slots_within_partials(p, max_partial_bytes)),
      ceil_div(ctas * (1 + unit_cost_tiles), unit_cost_tiles));
  // costs in double: units x capacity passes 2^63 for such tables (exact below 2^53)
  int64_t best_tiles = capacity_tiles;
  double best_cost = (double)ceil_div(units, ctas) * (double)(capacity_tiles + unit_cost_tiles);
  for (int64_t splits = 2; splits <= max_splits; splits++) {
    const int64_t tiles = ceil_div(capacity_tiles, splits);
    if (tiles < min_tiles) break;
    const double cost = (double)ceil_div(units * ceil_div(capacity_tiles, tiles), ctas) *
                        (double)(tiles + unit_cost_tiles);
    if (cost < best_cost) best_cost = cost, best_tiles = tiles;
  }
  return best_tiles;  // within the partials and the capacity: splits <= max_splits
}

// The call's pointers in a fused backend's kernel parameters (DECODE's decode_params, PREFILL's and
// LATENT's prefill_params), whose plan-time copy holds NULL there. A LATENT call has no value
// cache or head_sink (validation), so those stay NULL.
template <typename Params>
inline void set_call_inputs(Params &P, const pa__io *io) {
  P.q = io->q_attn;
  P.q_row_stride = io->q_attn_row_stride;
  P.k_cache = io->key_cache;
  P.v_cache = io->value_cache;
  P.cu_seqlens = io->cu_seqlens;
  P.past_seqlens = io->past_seqlens;
  P.block_table = io->block_table;
  P.query_positions = io->query_positions;
  P.head_sink = io->head_sink;
  P.k_scale = io->k_scale;
  P.v_scale = io->v_scale;
  P.output = io->output;
}

// CTAs of smem_bytes of dynamic shared memory that fit on a multiprocessor, estimated without the
// device: a multiprocessor has about 1 KB more than the per-block opt-in limit and reserves 1 KB
// per CTA.
inline int64_t ctas_per_sm_by_smem(const pa_device_caps *caps, int smem_bytes) {
  return (caps->max_shared_memory_per_block_optin + 1024) / ((int64_t)smem_bytes + 1024);
}

// The merge kernel (split_merge.cuh) and grid for a plan's split partials: a warp per (token, head)
// holding every split's row when the plan has at most 8 split slots (split_merge_few_kernel, sized
// to the slots), else a CTA per (token, head, 128 of the value_channels). Both give the same bits.
struct split_merge_launch {
  void (*kernel)(const split_merge_params);
  dim3 grid;
};
template <typename T, int kVecsPerLane>
inline split_merge_launch split_merge_launch_of(int64_t token_count, int num_heads,
                                                int value_channels, int num_split_slots) {
  const dim3 few_grid((unsigned)token_count, (unsigned)ceil_div(num_heads, kMergeWarps));
  if (num_split_slots <= 2) return {split_merge_few_kernel<T, kVecsPerLane, 2>, few_grid};
  if (num_split_slots <= 4) return {split_merge_few_kernel<T, kVecsPerLane, 4>, few_grid};
  if (num_split_slots <= 8) return {split_merge_few_kernel<T, kVecsPerLane, 8>, few_grid};
  return {split_merge_kernel<T>, dim3((unsigned)token_count, (unsigned)num_heads,
                                      (unsigned)ceil_div(value_channels, 128))};
}
template <int kVecsPerLane = kMergeVecsPerLane>
inline split_merge_launch split_merge_launch_for(pa_dtype dtype, int64_t token_count,
                                                 int num_heads, int value_channels,
                                                 int num_split_slots) {
  return dtype == PA_DTYPE_BFLOAT16
             ? split_merge_launch_of<__nv_bfloat16, kVecsPerLane>(token_count, num_heads,
                                                                  value_channels, num_split_slots)
             : split_merge_launch_of<__half, kVecsPerLane>(token_count, num_heads, value_channels,
                                                           num_split_slots);
}

}  // namespace detail
}  // namespace pa
