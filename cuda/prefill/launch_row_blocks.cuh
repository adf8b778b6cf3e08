// What the row-block backends (PREFILL, LATENT) share: the row geometry, the plan-time launch state
// less the kernel variant and how it is planned, and one step's launches (the schedule, the
// row-block kernel, the split merge).
// A launcher header: it sees the planning types.
#pragma once

#include <string.h>

#include <algorithm>

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_runtime.h>

#include "../common/bulk_copy.cuh"
#include "../common/chained_launch.cuh"
#include "../common/split_merge.cuh"
#include "../launch_common.cuh"
#include "internal.h"
#include "prefill_kernel.cuh"
#include "prefill_schedule.cuh"

namespace pa {
namespace detail {

// The driver's tensor-map encoder (cuTensorMapEncodeTiled), resolved by a plan whose kernel loads
// page or Q boxes (plan_step_maps: the PREFILL and LATENT Hopper kernels).
using kv_page_map_encoder = PFN_cuTensorMapEncodeTiled_v12000;

// Fixed at plan time; each backend's state adds its kernel variant.
struct row_block_launch {
  prefill_params params;  // every field but the pointers of a call
  kv_page_map_encoder page_map_encoder;  // nullptr unless the kernel loads page or Q boxes
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
  // false: every unit is the CTA of its index (prefill_params::units_by_index), no schedule
  bool schedule = true;
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
  P.units_by_index = !R.schedule;
  L->unit_begin_region = L->work_counter_region = -1;
  if (R.schedule) {
    L->unit_begin_region = pa__workspace_add(w, R.region_names[3], (uint64_t)p->batch_size + 1,
                                             sizeof(int32_t), PA_WORKSPACE_ALIGNMENT);
    L->work_counter_region =
        pa__workspace_add(w, R.region_names[4], 1, sizeof(unsigned int), PA_WORKSPACE_ALIGNMENT);
  }

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

// One 128-byte-swizzled tensor map of 16-bit elements, every element stride 1: the form of each
// map below. cuTensorMapEncodeTiled is a driver call, and on a thread with no current context it
// fails with CUDA_ERROR_INVALID_CONTEXT. Plans make a runtime call before they encode (the
// kernel's shared-memory attribute) and steps launch the write kernel first, and the runtime makes
// the current device's primary context current at a thread's first call that needs one; the
// retry is the safety net for an encode that would come first: cudaFree(nullptr) is such a call
// that does nothing else. No capture runs on this thread then (a capture begins with a
// runtime call), but one on another thread in global mode would refuse cudaFree: relaxed here.
inline CUresult encode_swizzled_map(kv_page_map_encoder encode, CUtensorMap *map, cuuint32_t rank,
                                    const void *address, const cuuint64_t *dims,
                                    const cuuint64_t *strides, const cuuint32_t *box,
                                    CUtensorMapL2promotion l2_promotion) {
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  auto once = [&] {
    return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT16, rank, const_cast<void *>(address), dims,
                  strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  CU_TENSOR_MAP_SWIZZLE_128B, l2_promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  };
  CUresult r = once();
  if (r == CUDA_ERROR_INVALID_CONTEXT) {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    const cudaError_t bound = cudaFree(nullptr);
    cudaThreadExchangeStreamCaptureMode(&mode);
    if (bound == cudaSuccess)
      r = once();
    else
      cudaGetLastError();  // (the encoder's error is the one reported)
  }
  return r;
}

// A call's kv_page_maps (bulk_copy.cuh) for 16-bit caches of geometry kv: host work only (no
// device call, no synchronization), about a microsecond. With no blocks nothing is ever loaded
// through them, and they stay zero; so does the value map without a value cache (LATENT).
inline pa_status encode_kv_page_maps(kv_page_map_encoder encode, const paged_kv_layout &kv,
                                     const void *k_cache, const void *v_cache,
                                     const char *backend, kv_page_maps *maps) {
  memset(maps, 0, sizeof *maps);
  if (kv.num_blocks == 0) return PA_SUCCESS;
  const cuuint64_t row_bytes = (cuuint64_t)kv.head_size * 2;
  const cuuint64_t dims[4] = {(cuuint64_t)kv.head_size, (cuuint64_t)kv.kv_num_heads,
                              (cuuint64_t)kv.block_size, (cuuint64_t)kv.num_blocks};
  const cuuint64_t strides[3] = {row_bytes, row_bytes * kv.kv_num_heads,
                                 row_bytes * kv.kv_num_heads * kv.block_size};
  const cuuint32_t box[4] = {kPageBoxChannels, 1, kPageBoxRows, 1};
  const struct {
    CUtensorMap *map;
    const void *cache;
    const char *name;
  } caches[2] = {{&maps->k, k_cache, "key_cache"}, {&maps->v, v_cache, "value_cache"}};
  for (const auto &c : caches) {
    if (!c.cache) continue;
    const CUresult r = encode_swizzled_map(encode, c.map, 4, c.cache, dims, strides, box,
                                           CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
    if (r != CUDA_SUCCESS)
      return pa__fail(PA_ERROR_CUDA,
                      "%s: cuTensorMapEncodeTiled(%s at %p, %lld blocks x %d rows x %d heads x %d "
                      "channels) failed with CUresult %d",
                      backend, c.name, c.cache, (long long)kv.num_blocks, kv.block_size,
                      kv.kv_num_heads, kv.head_size, (int)r);
  }
  return PA_SUCCESS;
}

// A call's query map for the Hopper kernels' Q boxes (q_box_load; PREFILL and LATENT): Q
// (token_count tokens of q_row_stride elements, num_heads heads of head_size channels from the
// first) as a 3-D tensor of 16-bit elements, innermost first (channel, head, token), each box 64
// channels of g's heads_per_block heads of tokens_per_block tokens: a row block's rows
// (token-major), one 128-byte panel of the Q slot. Channels past head_size, heads past num_heads
// and tokens past token_count land as zeros. Host work only, as encode_kv_page_maps.
inline pa_status encode_q_map(kv_page_map_encoder encode, const void *q, int64_t q_row_stride,
                              int head_size, int num_heads, int64_t token_count,
                              const row_geometry &g, const char *backend, CUtensorMap *map) {
  memset(map, 0, sizeof *map);
  if (token_count == 0) return PA_SUCCESS;
  const cuuint64_t dims[3] = {(cuuint64_t)head_size, (cuuint64_t)num_heads,
                              (cuuint64_t)token_count};
  const cuuint64_t strides[2] = {(cuuint64_t)head_size * 2, (cuuint64_t)q_row_stride * 2};
  const cuuint32_t box[3] = {kPageBoxChannels, (cuuint32_t)g.heads_per_block,
                             (cuuint32_t)g.tokens_per_block};
  const CUresult r = encode_swizzled_map(encode, map, 3, q, dims, strides, box,
                                         CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  if (r != CUDA_SUCCESS)
    return pa__fail(PA_ERROR_CUDA,
                    "%s: cuTensorMapEncodeTiled(query at %p, %lld tokens of %lld elements, %d "
                    "heads x %d channels, boxes of %d heads x %d tokens) failed with CUresult %d",
                    backend, q, (long long)token_count, (long long)q_row_stride, num_heads,
                    head_size, g.heads_per_block, g.tokens_per_block, (int)r);
  return PA_SUCCESS;
}

// The bytes of a row block's Q boxes (q_box_load, counted on its slot's barrier): one box per
// 64-channel panel of the kernel's Q slot, `channels` wide (a multiple of 64), the channels past
// the tensor's head_size landed as zeros included.
inline int32_t query_box_bytes(int channels, const row_geometry &g) {
  return channels * 2 * g.heads_per_block * g.tokens_per_block;
}

// A call's output map for the PREFILL Hopper kernel's box stores (output_box_store): the output
// (token_count tokens of num_heads x head_size 16-bit elements, dense) as a 3-D tensor, innermost
// first (channel, head, token), each box 64 channels of box_heads heads of 64 / box_heads tokens:
// a consumer warpgroup's 64 rows (token-major, as a row block's), one 128-byte panel of its half
// of a Q slot. Returns false (the caller stores the rows itself) where the encoder refuses it.
// Host work only, as encode_kv_page_maps.
inline bool encode_output_map(kv_page_map_encoder encode, void *output, int head_size,
                              int num_heads, int64_t token_count, int box_heads, CUtensorMap *map) {
  memset(map, 0, sizeof *map);
  if (token_count == 0) return false;
  const cuuint64_t dims[3] = {(cuuint64_t)head_size, (cuuint64_t)num_heads,
                              (cuuint64_t)token_count};
  const cuuint64_t strides[2] = {(cuuint64_t)head_size * 2, (cuuint64_t)head_size * num_heads * 2};
  const cuuint32_t box[3] = {kPageBoxChannels, (cuuint32_t)box_heads, (cuuint32_t)(64 / box_heads)};
  return encode_swizzled_map(encode, map, 3, output, dims, strides, box,
                             CU_TENSOR_MAP_L2_PROMOTION_NONE) == CUDA_SUCCESS;
}

// The driver's tensor-map encoder, resolved through the runtime (the library does not link
// libcuda itself); `backend` and `what` name the caller in the error.
inline pa_status resolve_tensor_map_encoder(const char *backend, const char *what,
                                            kv_page_map_encoder *encoder) {
  void *fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                       &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || !fn)
    return pa__fail(PA_ERROR_CUDA,
                    "%s: the CUDA driver has no cuTensorMapEncodeTiled, which the sm_90a kernel "
                    "needs for its %s",
                    backend, what);
  *encoder = reinterpret_cast<kv_page_map_encoder>(fn);
  return PA_SUCCESS;
}

// The boxes a Hopper kernel loads through tensor maps of the call's tensors (kv_page_maps): whole
// page runs of the caches (with the value cache, or without: LATENT's values are its latent
// rows) and each row block's Q.
struct step_boxes {
  bool pages, values, q;
};

// At plan time, for a plan on a device whose kernel loads boxes: the driver's encoder, resolved
// through the runtime (the library does not link libcuda itself), and the maps encoded once over
// a placeholder address (16-byte aligned), so that every rule of the encoder but the tensors'
// addresses is checked here; the write path checks the caches' 16-byte alignment before a step
// launches anything. q_row_stride, head_size, num_heads, token_count and g: the query map's.
inline pa_status plan_step_maps(const step_boxes &b, const paged_kv_layout &kv,
                                int64_t q_row_stride, int head_size, int num_heads,
                                int64_t token_count, const row_geometry &g, const char *backend,
                                kv_page_map_encoder *encoder) {
  pa_status st = resolve_tensor_map_encoder(backend, b.pages ? "page boxes" : "query boxes",
                                            encoder);
  const void *placeholder = reinterpret_cast<const void *>(uintptr_t{1} << 20);
  kv_page_maps trial;
  if (st == PA_SUCCESS && b.pages)
    st = encode_kv_page_maps(*encoder, kv, placeholder, b.values ? placeholder : nullptr, backend,
                             &trial);
  if (st == PA_SUCCESS && b.q)
    st = encode_q_map(*encoder, placeholder, q_row_stride, head_size, num_heads, token_count, g,
                      backend, &trial.q);
  return st;
}

// A step's maps (P: the call's tensors filled in), zero where the kernel loads no such boxes: host
// work only (no device call, no synchronization), a microsecond or two.
inline pa_status encode_step_maps(kv_page_map_encoder encode, const step_boxes &b,
                                  const prefill_params &P, const row_geometry &g,
                                  const char *backend, kv_page_maps *maps) {
  memset(maps, 0, sizeof *maps);
  pa_status st = PA_SUCCESS;
  if (b.pages)
    st = encode_kv_page_maps(encode, P.kv, P.k_cache, b.values ? P.v_cache : nullptr, backend,
                             maps);
  if (st == PA_SUCCESS && b.q)
    st = encode_q_map(encode, P.q, P.q_row_stride, P.kv.head_size, P.num_heads, P.token_count, g,
                      backend, &maps->q);
  return st;
}

// One step: P (the plan's parameters with the call's tensors filled in) gets the workspace regions,
// then the schedule (none with units_by_index), the kernel (kernel(P, grid, smem_bytes, stream,
// chained)) and (with split slots) the merge go out on the stream, chained.
template <typename KernelLaunch>
inline cudaError_t launch_row_block_step(const row_block_launch &L, prefill_params P,
                                         KernelLaunch &&kernel,
                                         const pa__workspace_layout *w, void *workspace,
                                         cudaStream_t stream) {
  if (P.num_split_slots > 1) {
    P.partial_out = (float *)pa__workspace_at(w, L.partial_out_region, workspace);
    P.partial_ml = (float2 *)pa__workspace_at(w, L.partial_ml_region, workspace);
    P.split_counts = (int32_t *)pa__workspace_at(w, L.split_counts_region, workspace);
  }
  cudaError_t err = cudaSuccess;
  if (!P.units_by_index) {
    P.unit_begin = (int32_t *)pa__workspace_at(w, L.unit_begin_region, workspace);
    P.work_counter = (unsigned int *)pa__workspace_at(w, L.work_counter_region, workspace);
    err = launch_chained(prefill_schedule_kernel, dim3(1), kPrefillScheduleThreads, 0, stream,
                         L.chained, P, L.out_row_elems, L.t_bytes);
  }
  if (err == cudaSuccess) err = kernel(P, L.grid, L.smem_bytes, stream, L.chained);
  if (err == cudaSuccess && P.num_split_slots > 1 && !P.merge_arrivals) {
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
