// What the row-block backends (PREFILL, LATENT) share at run time: the plan-time launch state less
// the kernel variant, and one step's launches (the schedule, the row-block kernel, the split merge).
// A launcher header: it sees the planning types.
#pragma once

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
