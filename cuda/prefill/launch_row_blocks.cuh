// What the row-block backends (PREFILL, LATENT) share: the row geometry, the plan-time launch state
// less the kernel variant and how it is planned, and one step's launches (the schedule, the
// row-block kernel, the split merge).
// A launcher header: it sees the planning types.
#pragma once

#include <string.h>

#include <algorithm>

#include <cuda_runtime.h>

#include "../common/chained_launch.cuh"
#include "../common/split_merge.cuh"
#include "../launch_common.cuh"
#include "internal.h"
#include "prefill_kernel.cuh"
#include "prefill_schedule.cuh"

namespace pa {
namespace detail {

// Fixed at plan time; each backend's state adds its kernel variant.
struct row_block_launch {
  prefill_params params;  // every field but the pointers of a call
  split_merge_params merge;
  split_merge_launch merge_launch;
  int out_row_elems, t_bytes;  // the schedule kernel's (it zeroes the rows of no sequence)
  dim3 grid;
  int smem_bytes;
  bool chained;  // programmatic dependent launch (compute capability 9.0 and newer)
  // workspace regions (pa__workspace_add indices; -1 when unused)
  int partial_out_region, partial_ml_region, split_counts_region, unit_begin_region,
      work_counter_region;
};

// The row-block geometry: a block is up to `rows` (token, query head) rows of `group` query heads
// that share a KV head (PREFILL: a GQA group; LATENT: every head).
struct row_geometry {
  int32_t heads_per_block, tokens_per_block, head_blocks;
};
inline row_geometry row_geometry_for(int32_t group, int rows) {
  row_geometry g;
  g.heads_per_block = std::min(group, rows);
  g.tokens_per_block = rows / g.heads_per_block;
  g.head_blocks = (int32_t)ceil_div(group, g.heads_per_block);
  return g;
}

// What PREFILL and LATENT plan alike, from the backend's view of the problem.
struct row_block_plan {
  int32_t kv_num_heads, group_size;  // LATENT: one KV head for every query head
  int32_t out_channels;              // of a partial and a merged row (LATENT: v_head_size)
  pa_quant_type v_quant;             // LATENT: k_quant (V is a view of the latent row)
  row_geometry g;
  int64_t tiles_per_split, split_slots;
  // the workspace regions' names: partial outputs, partial (max, sum), splits per token, the
  // schedule's first unit per sequence, its counter
  const char *const *region_names;
};
// The kernel parameters less a call's pointers, the workspace (split partials with several split
// slots, then the schedule) and the merge's parameters; the backend sets the grid and the merge
// kernel.
inline void plan_row_block_launch(pa_plan *plan, const row_block_plan &R, row_block_launch *L) {
  const pa__problem *p = &plan->problem;
  prefill_params &P = L->params;
  memset(&P, 0, sizeof P);
  P.kv = paged_kv_layout_of(*p);
  P.k_quant = p->k_quant;
  P.v_quant = R.v_quant;
  P.token_count = p->token_count;
  P.batch_size = p->batch_size;
  P.num_heads = p->num_heads;
  P.kv_num_heads = R.kv_num_heads;
  P.group_size = R.group_size;
  P.v_head_size = p->v_head_size;
  P.heads_per_block = R.g.heads_per_block;
  P.heads_per_block_reciprocal = prefill_row_reciprocal(R.g.heads_per_block);
  P.tokens_per_block = R.g.tokens_per_block;
  P.head_blocks = R.g.head_blocks;
  P.scale = p->scale;
  P.softcap = p->softcap;
  P.window = p->window;
  P.is_causal = p->is_causal;
  P.tiles_per_split = (int32_t)std::min<int64_t>(R.tiles_per_split, INT32_MAX);
  P.num_split_slots = (int32_t)std::min<int64_t>(R.split_slots, INT32_MAX / 2);

  pa__workspace_layout *w = &plan->workspace;
  L->partial_out_region = L->partial_ml_region = L->split_counts_region = -1;
  if (P.num_split_slots > 1) {
    const uint64_t item_heads =
        (uint64_t)p->token_count * (uint64_t)P.num_split_slots * (uint64_t)p->num_heads;
    L->partial_out_region = pa__workspace_add(w, R.region_names[0], item_heads * R.out_channels,
                                              sizeof(float), PA_WORKSPACE_ALIGNMENT);
    L->partial_ml_region = pa__workspace_add(w, R.region_names[1], item_heads, sizeof(float2),
                                             PA_WORKSPACE_ALIGNMENT);
    L->split_counts_region = pa__workspace_add(w, R.region_names[2], (uint64_t)p->token_count,
                                               sizeof(int32_t), PA_WORKSPACE_ALIGNMENT);
  }
  L->unit_begin_region = pa__workspace_add(w, R.region_names[3], (uint64_t)p->batch_size + 1,
                                           sizeof(int32_t), PA_WORKSPACE_ALIGNMENT);
  L->work_counter_region =
      pa__workspace_add(w, R.region_names[4], 1, sizeof(unsigned int), PA_WORKSPACE_ALIGNMENT);

  L->out_row_elems = (int)pa__out_row_elems(p);
  L->t_bytes = (int)pa_dtype_size(p->dtype);
  split_merge_params &M = L->merge;
  memset(&M, 0, sizeof M);
  M.num_split_slots = P.num_split_slots;
  M.num_heads = p->num_heads;
  M.group_size = R.group_size;
  M.head_size = R.out_channels;
  M.v_quant = R.v_quant;
  M.is_quantized_cache = pa_dtype_size(p->k_cache_dtype) == 1;
}

using row_block_kernel_launch = cudaError_t (*)(const prefill_params &P, dim3 grid, int smem_bytes,
                                                cudaStream_t stream, bool chained);

// One step: P (the plan's parameters with the call's tensors filled in) gets the workspace regions,
// then the schedule, the kernel and (with split slots) the merge go out on the stream, chained.
inline cudaError_t launch_row_block_step(const row_block_launch &L, prefill_params P,
                                         row_block_kernel_launch kernel,
                                         const pa__workspace_layout *w, void *workspace,
                                         cudaStream_t stream) {
  if (P.num_split_slots > 1) {
    P.partial_out = (float *)pa__workspace_at(w, L.partial_out_region, workspace);
    P.partial_ml = (float2 *)pa__workspace_at(w, L.partial_ml_region, workspace);
    P.split_counts = (int32_t *)pa__workspace_at(w, L.split_counts_region, workspace);
  }
  P.unit_begin = (int32_t *)pa__workspace_at(w, L.unit_begin_region, workspace);
  P.work_counter = (unsigned int *)pa__workspace_at(w, L.work_counter_region, workspace);

  cudaError_t err = launch_chained(prefill_schedule_kernel, dim3(1), kPrefillScheduleThreads, 0,
                                   stream, L.chained, P, L.out_row_elems, L.t_bytes);
  if (err == cudaSuccess) err = kernel(P, L.grid, L.smem_bytes, stream, L.chained);
  if (err == cudaSuccess && P.num_split_slots > 1) {
    split_merge_params M = L.merge;
    M.partial_out = P.partial_out;
    M.partial_ml = P.partial_ml;
    M.split_counts = P.split_counts;
    M.head_sink = P.head_sink;
    M.v_scale = P.v_scale;
    M.output = P.output;
    err = launch_chained(L.merge_launch.kernel, L.merge_launch.grid, kMergeThreads, 0, stream,
                         L.chained, M);
  }
  return err;
}

}  // namespace detail
}  // namespace pa
