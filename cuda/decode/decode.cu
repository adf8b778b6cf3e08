// The DECODE backend's launcher (doc/backends.md): split-KV flash decoding, kernels in
// decode_kernel.cuh. Plan time fixes the kernel variant, the split size (for one token, the count
// its tiles are divided by), the grid, the workspace regions and the kernel parameters; run only
// fills in the call's pointers and launches.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>

#include "../common/split_merge.cuh"
#include "../launch_common.cuh"
#include "decode_kernel.cuh"
#include "decode_schedule_kernel.cuh"
#include "internal.h"

namespace pa {
namespace detail {
namespace {

// With several tokens a split never spans more than this many 64-key tiles, so one long sequence
// in a batch of short ones still spreads over many CTAs (one token: its tiles / sizing_splits).
constexpr int kMaxTilesPerSplit = 32;
// The partial outputs stay below this even when no attention_metadata bounds max_kv_len.
constexpr size_t kMaxPartialBytes = (size_t)256 << 20;
// No token's key range reaches this: past_seqlens, positions and cumulative lengths are int32, so
// kv_len and position + 1 stay below 2^31 + 2^32. Splits are laid out over at most this many keys,
// which keeps every tile count (int32 in decode_params and the kernels) in range for any table.
constexpr int64_t kMaxReachableKeys = (int64_t)1 << 33;
// gridDim.y and gridDim.z limit
constexpr int64_t kMaxGridY = 65535;

struct decode_variant {
  cudaError_t (*set_smem)(int smem_bytes);
  cudaError_t (*occupancy)(int smem_bytes, int *ctas_per_sm);
  cudaError_t (*launch)(const decode_params &P, dim3 grid, int smem_bytes, cudaStream_t stream,
                        bool chained);
};

struct decode_state {
  decode_variant variant;
  dim3 grid;
  int smem_bytes;
  bool work_list;  // schedule the non-empty splits on device (several tokens and split slots)
  // the static grid's last CTA of a row block merges its splits (decode_merge_if_last): no merge
  // kernel; its arrival counters are pa_plan::arrivals_region, zeroed by the write kernel
  bool merge_in_kernel;
  bool chained;    // programmatic dependent launch (compute capability 9.0 and newer)
  // the kernels' parameters less the call's pointers
  decode_params params;
  split_merge_params merge;
  split_merge_launch merge_launch;
  // workspace regions (pa__workspace_add indices; -1 when unused)
  int partial_out_region, partial_ml_region, item_begin_region, work_items_region,
      work_counter_region;
};

template <typename T, typename C, int DMAX>
decode_variant variant_with() {
  return {decode_set_smem<T, C, DMAX>, decode_occupancy<T, C, DMAX>, decode_launch<T, C, DMAX>};
}
template <typename T, typename C>
decode_variant variant_of(int head_size) {
  switch (decode_dmax(head_size)) {
    case 64:
      return variant_with<T, C, 64>();
    case 128:
      return variant_with<T, C, 128>();
    default:
      return variant_with<T, C, 256>();
  }
}

bool variant_for(const pa__problem *p, decode_variant *v) {
  return for_kernel_types(p, [&](auto t, auto c) {
    *v = variant_of<decltype(t), decltype(c)>(p->head_size);
  });
}

int smem_bytes_of(const pa__problem *p) {
  return decode_smem_bytes(p->head_size, (int)pa_dtype_size(p->k_cache_dtype));
}

struct decode_splits {
  int tiles_per_split;  // several tokens: each split's tiles (one token: the most, at capacity)
  int sizing_splits;    // one token: a split is ceil(the token's tiles / this) tiles; else 0
  int num_split_slots;
};
decode_splits splits_for(const pa__problem *p, const pa_device_caps *caps, int smem_bytes,
                         int head_chunks);

pa_status decode_check(const pa__problem *p, const pa_device_caps *caps, char *why,
                       size_t why_size) {
  decode_variant v;
  const pa_status refusal =
      fused_backend_refusal(p, caps, variant_for(p, &v), smem_bytes_of(p), why, why_size);
  if (refusal != PA_SUCCESS) return refusal;
  // Launch dimensions (the ones run uses): the static grid's x = token_count * cta_heads, y = the
  // split slots; the merge's x = token_count, y = num_heads. The work-list grid is smaller.
  const int head_chunks = (int)ceil_div(p->group_size, kDecodeHeadsPerCta);
  if (p->token_count * p->kv_num_heads * head_chunks > INT32_MAX)
    return unsupported(why, why_size, "token_count %lld with %d KV heads (grid too large)",
                       (long long)p->token_count, p->kv_num_heads);
  const int slots = splits_for(p, caps, smem_bytes_of(p), head_chunks).num_split_slots;
  if (slots > 1 && p->num_heads > kMaxGridY)
    return unsupported(why, why_size,
                       "num_heads %d with %d KV splits (the merge grid's gridDim.y is num_heads, at "
                       "most %lld)",
                       p->num_heads, slots, (long long)kMaxGridY);
  return PA_SUCCESS;
}

// Resident CTAs per multiprocessor, estimated without the device: shared memory and registers
// (-Xptxas -v, sm_90a: 16-bit caches 109 to 155 per thread up to DMAX 128, 3 CTAs of 128 threads;
// 8-bit caches at most 128 there by the kernel's launch bounds, 4 CTAs; 204 to 240 for DMAX 256,
// 2 CTAs).
int64_t ctas_per_sm_of(const pa_device_caps *caps, int smem_bytes, const pa__problem *p) {
  const int64_t by_registers =
      decode_dmax(p->head_size) > 128 ? 2 : pa_dtype_size(p->k_cache_dtype) == 1 ? 4 : 3;
  return std::max<int64_t>(1, std::min(by_registers, ctas_per_sm_by_smem(caps, smem_bytes)));
}

// How a step's key ranges are cut into splits, and the grid's split slots. The partition depends
// only on static shapes, the device and (one token) the token's own key count, never on
// attention_metadata, so the partition of every key range (hence the summation order) is the same
// with bounds absent, tight or loose; the bound only decides how many split slots the grid has
// (and the workspace). Several tokens: splits of a fixed size, aiming at two waves of CTAs over
// the capacity. One token (the static grid): its tiles cut on the device into sizing_splits
// parts, as many as one wave of resident CTAs holds per (KV head, head chunk), so that a long
// sequence runs in one wave and a short one in a wide table still spreads over it; the grid needs
// at most min(sizing_splits, the bound's tiles) slots, since ceil(tiles / ceil(tiles / S)) <=
// min(S, tiles).
decode_splits splits_for(const pa__problem *p, const pa_device_caps *caps, int smem_bytes,
                         int head_chunks) {
  const int64_t reach = std::min<int64_t>((int64_t)p->max_blocks_per_seq * p->block_size,
                                          kMaxReachableKeys);
  const int64_t sms = caps->multiprocessor_count > 0 ? caps->multiprocessor_count : 1;
  const int64_t resident_ctas = sms * ctas_per_sm_of(caps, smem_bytes, p);
  const int64_t units = std::max<int64_t>(1, p->token_count * p->kv_num_heads * head_chunks);
  const int64_t capacity_tiles = ceil_div(reach, kDecodeTileKeys);  // <= 2^27
  const int64_t bound_tiles =
      ceil_div(std::min<int64_t>(p->max_kv_len, kMaxReachableKeys), kDecodeTileKeys);
  const int64_t slot_bytes =
      std::max<int64_t>(1, p->token_count * p->num_heads * ((int64_t)p->head_size * 4 + 8));
  const int64_t max_slots = std::max<int64_t>(1, (int64_t)kMaxPartialBytes / slot_bytes);
  decode_splits d;
  if (p->token_count == 1) {
    int64_t sizing = std::max<int64_t>(1, resident_ctas / units);
    sizing = std::min({sizing, std::max<int64_t>(1, capacity_tiles), kMaxGridY, max_slots});
    d.sizing_splits = (int)sizing;
    d.tiles_per_split = (int)std::max<int64_t>(1, ceil_div(capacity_tiles, sizing));
    d.num_split_slots = (int)std::max<int64_t>(1, std::min(sizing, bound_tiles));
    return d;
  }
  const int64_t splits_wanted = ceil_div(2 * resident_ctas, units);
  int64_t tiles = std::min<int64_t>(kMaxTilesPerSplit, ceil_div(capacity_tiles, splits_wanted));
  tiles = std::max<int64_t>(tiles, ceil_div(capacity_tiles, kMaxGridY));  // gridDim.y
  tiles = std::max<int64_t>(tiles, ceil_div(capacity_tiles, max_slots));
  d.sizing_splits = 0;
  d.tiles_per_split = (int)std::max<int64_t>(1, tiles);
  d.num_split_slots = (int)std::max<int64_t>(1, ceil_div(bound_tiles, d.tiles_per_split));
  return d;
}

// The kernels' parameters that depend only on the plan (the call's pointers stay NULL).
void fill_params(const pa__problem *p, decode_state *s, const decode_splits &splits,
                 int head_chunks) {
  const int num_split_slots = splits.num_split_slots;
  decode_params &P = s->params;
  P.kv = paged_kv_layout_of(*p);
  P.k_quant = p->k_quant;
  P.v_quant = p->v_quant;
  P.token_count = p->token_count;
  P.batch_size = p->batch_size;
  P.num_heads = p->num_heads;
  P.group_size = p->group_size;
  P.head_chunks = head_chunks;
  P.cta_heads = p->kv_num_heads * head_chunks;
  P.scale = p->scale;
  P.softcap = p->softcap;
  P.window = p->window;
  P.is_causal = p->is_causal;
  P.tiles_per_split = splits.tiles_per_split;
  P.sizing_splits = splits.sizing_splits;
  P.num_split_slots = num_split_slots;

  split_merge_params &M = s->merge;
  M.num_split_slots = num_split_slots;
  M.num_heads = p->num_heads;
  M.group_size = p->group_size;
  M.head_size = p->head_size;
  M.v_quant = p->v_quant;
  M.is_quantized_cache = pa_dtype_size(p->k_cache_dtype) == 1;
  s->merge_launch =
      split_merge_launch_for(p->dtype, p->token_count, p->num_heads, p->head_size,
                             num_split_slots);
}

pa_status decode_plan(pa_plan *plan, int setup_device) {
  const pa__problem *p = &plan->problem;
  decode_state *s = (decode_state *)calloc(1, sizeof *s);
  if (!s) return pa__fail(PA_ERROR_OUT_OF_MEMORY, "plan: host allocation failed");
  plan->backend_state = s;
  s->partial_out_region = s->partial_ml_region = s->item_begin_region = s->work_items_region =
      s->work_counter_region = -1;
  if (!variant_for(p, &s->variant))
    return pa__fail(PA_ERROR_INTERNAL, "DECODE: no kernel for this problem after check passed");
  s->smem_bytes = smem_bytes_of(p);
  const int head_chunks = (int)ceil_div(p->group_size, kDecodeHeadsPerCta);
  const decode_splits splits = splits_for(p, &plan->caps, s->smem_bytes, head_chunks);
  const int num_split_slots = splits.num_split_slots;
  const int64_t cta_heads = (int64_t)p->kv_num_heads * head_chunks;
  const int64_t items = p->token_count * num_split_slots;  // the most work items a step can have
  s->work_list = num_split_slots > 1 && p->token_count > 1;
  s->merge_in_kernel =
      !s->work_list && num_split_slots > 1 && num_split_slots <= kDecodeMergeSplits;
  s->chained = plan->caps.compute_capability_major >= 9;
  fill_params(p, s, splits, head_chunks);
  // Q is the step's input unless the write path stages it (its region is planned before this)
  s->params.q_before_wait = plan->q_staged_region < 0;
  if (setup_device) {
    cudaError_t err = s->variant.set_smem(s->smem_bytes);
    if (err != cudaSuccess)
      return pa__fail(PA_ERROR_CUDA, "DECODE: cudaFuncSetAttribute(%d bytes of shared memory): %s",
                      s->smem_bytes, cudaGetErrorString(err));
  }
  if (s->work_list) {  // one CTA per resident slot; more would only queue
    int64_t per_sm = ctas_per_sm_of(&plan->caps, s->smem_bytes, p);
    int occupancy = 0;
    if (setup_device && s->variant.occupancy(s->smem_bytes, &occupancy) == cudaSuccess &&
        occupancy > 0)
      per_sm = occupancy;
    const int64_t resident = (int64_t)std::max(1, plan->caps.multiprocessor_count) * per_sm;
    s->grid = dim3((unsigned)std::min(resident, items * cta_heads));
  } else {
    s->grid = dim3((unsigned)(p->token_count * cta_heads), (unsigned)num_split_slots);
  }
  if (num_split_slots > 1) {
    pa__workspace_layout *w = &plan->workspace;
    const uint64_t item_heads = (uint64_t)items * p->num_heads;
    s->partial_out_region = pa__workspace_add(w, "DECODE partial outputs [item][head][head_size]",
                                              item_heads * p->head_size, sizeof(float),
                                              PA_WORKSPACE_ALIGNMENT);
    s->partial_ml_region = pa__workspace_add(w, "DECODE partial (max, sum) [item][head]",
                                             item_heads, sizeof(float2), PA_WORKSPACE_ALIGNMENT);
    if (s->work_list) {
      s->item_begin_region = pa__workspace_add(w, "DECODE work list: first item per token",
                                               (uint64_t)p->token_count + 1, sizeof(int32_t),
                                               PA_WORKSPACE_ALIGNMENT);
      s->work_items_region = pa__workspace_add(w, "DECODE work list: (token, split) items",
                                               (uint64_t)items, sizeof(int2),
                                               PA_WORKSPACE_ALIGNMENT);
      s->work_counter_region = pa__workspace_add(w, "DECODE work list: counter", 1,
                                                 sizeof(unsigned int), PA_WORKSPACE_ALIGNMENT);
    }
    if (s->merge_in_kernel) {
      const uint64_t counters = (uint64_t)p->token_count * cta_heads;
      plan->arrivals_region =
          pa__workspace_add(w, "DECODE merge arrivals [token][cta head] (zeroed by the write path)",
                            counters, sizeof(unsigned int), PA_WORKSPACE_ALIGNMENT);
      plan->arrival_count = (uint32_t)counters;
    }
  }
  const char *env = getenv("PA_DEBUG");
  if (env && strcmp(env, "1") == 0)
    fprintf(stderr,
            "[pagedattn] DECODE: grid %u x %u, %d threads, %d B shared, %s%d tiles of %d keys "
            "per split (sizing count %d), %d split slots%s\n",
            s->grid.x, s->grid.y, kDecodeThreads, s->smem_bytes,
            splits.sizing_splits > 0 ? "the token's tiles / the sizing count, at most " : "",
            splits.tiles_per_split, kDecodeTileKeys, splits.sizing_splits, num_split_slots,
            s->work_list          ? ", device work list + merge"
            : s->merge_in_kernel  ? ", merged by each row block's last CTA"
            : num_split_slots > 1 ? " + merge"
                                  : "");
  return PA_SUCCESS;
}

pa_status decode_run(const pa_plan *plan, const pa__io *io, pa__stream stream) {
  const decode_state *s = (const decode_state *)plan->backend_state;
  const pa__workspace_layout *w = &plan->workspace;
  decode_params P = s->params;
  set_call_inputs(P, io);
  if (s->partial_out_region >= 0) {
    P.partial_out = (float *)pa__workspace_at(w, s->partial_out_region, io->workspace);
    P.partial_ml = (float2 *)pa__workspace_at(w, s->partial_ml_region, io->workspace);
  }
  if (s->work_list) {
    P.item_begin = (int32_t *)pa__workspace_at(w, s->item_begin_region, io->workspace);
    P.work_items = (int2 *)pa__workspace_at(w, s->work_items_region, io->workspace);
    P.work_counter = (unsigned int *)pa__workspace_at(w, s->work_counter_region, io->workspace);
  }
  if (s->merge_in_kernel)
    P.merge_arrivals = (unsigned int *)pa__workspace_at(w, plan->arrivals_region, io->workspace);

  cudaStream_t st = (cudaStream_t)stream;
  cudaError_t err = cudaSuccess;
  if (s->work_list)
    err = launch_chained(decode_schedule_kernel, dim3(1), kScheduleThreads, 0, st, s->chained, P);
  if (err == cudaSuccess) err = s->variant.launch(P, s->grid, s->smem_bytes, st, s->chained);
  if (err == cudaSuccess && P.num_split_slots > 1 && !s->merge_in_kernel) {
    split_merge_params M = s->merge;
    M.partial_out = P.partial_out;
    M.partial_ml = P.partial_ml;
    M.item_begin = P.item_begin;
    M.head_sink = P.head_sink;
    M.v_scale = P.v_scale;
    M.output = P.output;
    err = launch_chained(s->merge_launch.kernel, s->merge_launch.grid, kMergeThreads, 0, st,
                         s->chained, M);
  }
  if (err != cudaSuccess)
    return pa__fail(PA_ERROR_CUDA, "DECODE: kernel launch failed: %s", cudaGetErrorString(err));
  return PA_SUCCESS;
}

void decode_destroy(pa_plan *plan) {
  free(plan->backend_state);
  plan->backend_state = nullptr;
}

}  // namespace
}  // namespace detail
}  // namespace pa

extern "C" const pa__backend_ops pa__decode_backend = {
    PA_BACKEND_DECODE, pa::detail::decode_check, pa::detail::decode_plan, pa::detail::decode_run,
    pa::detail::decode_destroy};
