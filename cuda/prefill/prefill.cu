// The PREFILL backend's launcher: fused paged attention on tensor cores for multi-token steps.
// Plan time fixes the kernel family (the sm_90a wgmma kernels of prefill_hopper_kernel.cuh where
// they run, else the mma.sync kernels of prefill_kernel.cuh), the variant, the row-block geometry,
// the split size, the grid and the workspace; run fills the pointers and launches the schedule, the
// attention and, with splits, the merge.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>

#include "../common/split_merge.cuh"
#include "../launch_common.cuh"
#include "internal.h"
#include "launch_row_blocks.cuh"
#include "prefill_hopper_kernel.cuh"

namespace pa {
namespace detail {
namespace {

// A split never spans fewer than this many 64-key tiles: shorter ones cost more in partial
// writes and merging than they gain in balance.
constexpr int kMinTilesPerSplit = 8;
// The partial outputs stay below this even when no attention_metadata bounds max_kv_len.
constexpr size_t kMaxPartialBytes = (size_t)256 << 20;

// The kernel families, in the order they are preferred.
enum prefill_family { PREFILL_WGMMA, PREFILL_MMA_SYNC };
const char *family_name(prefill_family f) { return f == PREFILL_WGMMA ? "wgmma" : "mma.sync"; }

struct prefill_variant {
  prefill_family family;
  int threads, smem_bytes, rows;  // per CTA; rows: of a row block
  int tile_span;                  // the schedule's 64-key tiles per kernel tile
  cudaError_t (*set_smem)(int smem_bytes);
  cudaError_t (*occupancy)(int smem_bytes, int *ctas_per_sm);
  // maps: the call's page and query maps where the kernel loads boxes (prefill_state::boxes)
  cudaError_t (*launch)(const prefill_params &P, const kv_page_maps &maps, dim3 grid,
                        int smem_bytes, cudaStream_t stream, bool chained);
};

struct prefill_state : row_block_launch {
  prefill_variant variant;
  row_geometry geometry;
  // the wgmma kernel with a 16-bit cache: Q and whole K/V runs as boxes of maps encoded each call
  step_boxes boxes;
  // with boxes, and a row block whose heads split into two warpgroups' boxes of 64 rows (a power
  // of two up to 64 heads, or 128): whole warpgroups' rows stored as output boxes, each call whose
  // output is 16-byte aligned (params.output_box_heads: the box's heads)
  bool output_boxes;
};

// The mma.sync kernels take no maps.
template <typename T, typename C, int DMAX>
cudaError_t mma_sync_launch(const prefill_params &P, const kv_page_maps &, dim3 grid,
                            int smem_bytes, cudaStream_t stream, bool chained) {
  return prefill_launch<T, C, DMAX>(P, grid, smem_bytes, stream, chained);
}

template <typename T, typename C, int DMAX>
prefill_variant mma_sync_variant() {
  return {PREFILL_MMA_SYNC,
          kPrefillThreads,
          prefill_smem_bytes(DMAX, (int)sizeof(C)),
          prefill_rows(DMAX),
          1,
          prefill_set_smem<T, C, DMAX>,
          prefill_occupancy<T, C, DMAX>,
          mma_sync_launch<T, C, DMAX>};
}
template <typename T, typename C, int DMAX>
prefill_variant wgmma_variant() {
  return {PREFILL_WGMMA,
          kHopperThreads,
          hopper_geometry<C, DMAX>::kSmemBytes,
          kHopperRows,
          hopper_geometry<C, DMAX>::kTileSpan,
          prefill_hopper_set_smem<T, C, DMAX>,
          prefill_hopper_occupancy<T, C, DMAX>,
          prefill_hopper_launch<T, C, DMAX>};
}

// The family a problem runs on: wgmma on a device of compute capability 9.0 (whose sm_90a cubin
// this build holds) for head sizes from 64 with every cache type (8-bit caches converted to fp16
// by the kernel's producer) and for every head size below 64 with 16-bit caches (their 64-channel
// boxes wider than the tensors: the channels past head_size land as zeros), else mma.sync. (8-bit
// caches below 64 channels, loaded by cp.async, have not run on the 64-channel kernel.)
// PA_PREFILL_KERNEL=mma.sync keeps every plan on mma.sync (for measurements and tests that compare
// the two).
prefill_family family_for(const pa__problem *p, const pa_device_caps *caps) {
  const char *env = getenv("PA_PREFILL_KERNEL");
  if (env && strcmp(env, "mma.sync") == 0) return PREFILL_MMA_SYNC;
  const bool wgmma_built = p->head_size >= 64 || pa_dtype_size(p->k_cache_dtype) == 2;
  return runs_sm90a_kernels(caps) && wgmma_built ? PREFILL_WGMMA : PREFILL_MMA_SYNC;
}

bool variant_for(const pa__problem *p, const pa_device_caps *caps, prefill_variant *v) {
  const prefill_family family = family_for(p, caps);
  return for_kernel_types(p, [&](auto t, auto c) {
    using T = decltype(t);
    using C = decltype(c);
    const int dmax = prefill_dmax(p->head_size);
    if (family == PREFILL_WGMMA) {
      *v = dmax == 64    ? wgmma_variant<T, C, 64>()
           : dmax == 128 ? wgmma_variant<T, C, 128>()
                         : wgmma_variant<T, C, 256>();
      return;
    }
    *v = dmax == 64 ? mma_sync_variant<T, C, 64>()
                    : dmax == 128 ? mma_sync_variant<T, C, 128>() : mma_sync_variant<T, C, 256>();
  });
}

// The row-block geometry (launch_row_blocks.cuh): up to the variant's rows of one GQA group.
row_geometry row_geometry_of(const pa__problem *p, const prefill_variant &v) {
  return row_geometry_for(p->group_size, v.rows);
}

pa_status prefill_check(const pa__problem *p, const pa_device_caps *caps, char *why,
                        size_t why_size) {
  prefill_variant v = {};
  const bool built = variant_for(p, caps, &v);
  const pa_status refusal = fused_backend_refusal(p, caps, built, v.smem_bytes, why, why_size);
  if (refusal != PA_SUCCESS) return refusal;
  // the merge grid is (token_count, num_heads); work units are counted in int32
  if (p->num_heads > 65535)
    return unsupported(why, why_size, "num_heads %d (the merge grid allows 65535)", p->num_heads);
  if (p->token_count > INT32_MAX)
    return unsupported(why, why_size, "token_count %lld (the merge grid allows 2^31 - 1)",
                       (long long)p->token_count);
  const row_geometry g = row_geometry_of(p, v);
  if ((ceil_div(p->token_count, g.tokens_per_block) + p->batch_size) * g.head_blocks *
          p->kv_num_heads > INT32_MAX / 64)
    return unsupported(why, why_size, "token_count %lld with %d KV heads (too many work units)",
                       (long long)p->token_count, p->kv_num_heads);
  return PA_SUCCESS;
}

// Resident CTAs per multiprocessor, estimated without the device: shared memory and the kernel's
// launch bounds (mma.sync: 2 CTAs up to 128 channels, 1 at 256; wgmma: 1).
int64_t ctas_per_sm_of(const pa_device_caps *caps, const prefill_variant &v, const pa__problem *p) {
  const int64_t by_registers =
      v.family == PREFILL_MMA_SYNC && prefill_dmax(p->head_size) <= 128 ? 2 : 1;
  return std::max<int64_t>(1, std::min(by_registers, ctas_per_sm_by_smem(caps, v.smem_bytes)));
}

// Whole kernel tiles per split: a split ending inside a 128-key tile would load its second half
// for nothing.
int64_t tiles_per_split_for(const pa__problem *p, const pa_device_caps *caps,
                            const prefill_variant &v, const row_geometry &g) {
  const int64_t tiles = split_tiles_for(p, caps, ctas_per_sm_of(caps, v, p),
                                        row_blocks_of(p, g.tokens_per_block, g.head_blocks),
                                        kPrefillTileKeys, kMinTilesPerSplit, kMaxPartialBytes);
  return ceil_div(tiles, (int64_t)v.tile_span) * v.tile_span;
}

pa_status prefill_plan(pa_plan *plan, int setup_device) {
  const pa__problem *p = &plan->problem;
  prefill_state *s = (prefill_state *)calloc(1, sizeof *s);
  if (!s) return pa__fail(PA_ERROR_OUT_OF_MEMORY, "plan: host allocation failed");
  plan->backend_state = s;
  if (!variant_for(p, &plan->caps, &s->variant))
    return pa__fail(PA_ERROR_INTERNAL, "PREFILL: no kernel for this problem after check passed");
  s->smem_bytes = s->variant.smem_bytes;
  s->chained = plan->caps.compute_capability_major >= 9;
  const row_geometry g = row_geometry_of(p, s->variant);
  s->geometry = g;
  // first: a runtime call, which also makes the device's primary context current on this thread,
  // as the maps' driver-side encoder below needs (LATENT's plan has the same order)
  if (setup_device) {
    cudaError_t err = s->variant.set_smem(s->smem_bytes);
    if (err != cudaSuccess)
      return pa__fail(PA_ERROR_CUDA, "PREFILL: cudaFuncSetAttribute(%d bytes of shared memory): %s",
                      s->smem_bytes, cudaGetErrorString(err));
  }
  const bool boxes = s->variant.family == PREFILL_WGMMA && pa_dtype_size(p->k_cache_dtype) == 2;
  s->boxes = {boxes, boxes, boxes};
  if (setup_device && boxes) {  // (a plan for described device_caps never runs)
    const pa_status st = plan_step_maps(s->boxes, paged_kv_layout_of(*p), pa__query_row_elems(p),
                                        p->head_size, p->num_heads, p->token_count, g, "PREFILL",
                                        &s->page_map_encoder);
    if (st != PA_SUCCESS) return st;
  }
  const int64_t tiles_per_split = tiles_per_split_for(p, &plan->caps, s->variant, g);
  const int64_t bound_tiles = std::max<int64_t>(1, ceil_div(p->max_kv_len, kPrefillTileKeys));
  const int64_t slots = ceil_div(bound_tiles, tiles_per_split);

  static const char *const kRegionNames[5] = {
      "PREFILL partial outputs [item][head][head_size]", "PREFILL partial (max, sum) [item][head]",
      "PREFILL splits per token", "PREFILL schedule: first unit per sequence",
      "PREFILL schedule: counter"};
  plan_row_block_launch(plan,
                        {p->kv_num_heads, p->group_size, p->head_size, p->v_quant, g,
                         tiles_per_split, slots, kRegionNames},
                        s);
  const int hpb = g.heads_per_block;
  s->output_boxes = s->boxes.q && (hpb == 128 || (hpb <= 64 && 64 % hpb == 0));
  if (s->output_boxes) s->params.output_box_heads = std::min(hpb, 64);
  if (s->boxes.q) s->params.q_box_bytes = query_box_bytes(prefill_dmax(p->head_size), g);
  const prefill_params &P = s->params;

  // A persistent grid: one CTA per resident slot (more would only queue), at most one per unit.
  int64_t per_sm = ctas_per_sm_of(&plan->caps, s->variant, p);
  int occupancy = 0;
  if (setup_device && s->variant.occupancy(s->smem_bytes, &occupancy) == cudaSuccess &&
      occupancy > 0)
    per_sm = occupancy;
  const int64_t resident = (int64_t)std::max(1, plan->caps.multiprocessor_count) * per_sm;
  const int64_t max_units = (ceil_div(p->token_count, g.tokens_per_block) + p->batch_size) *
                            g.head_blocks * P.num_split_slots * p->kv_num_heads;
  s->grid = dim3((unsigned)std::max<int64_t>(1, std::min(resident, max_units)));

  s->merge_launch =
      split_merge_launch_for(p->dtype, p->token_count, p->num_heads, p->head_size,
                             P.num_split_slots);

  const char *env = getenv("PA_DEBUG");
  if (env && strcmp(env, "1") == 0)
    fprintf(stderr,
            "[pagedattn] PREFILL: %s kernel, grid %u, %d threads, %d B shared, row blocks of %d "
            "tokens x %d heads (%d per token), %d tiles of %d keys per split, %d split slots%s\n",
            family_name(s->variant.family), s->grid.x, s->variant.threads, s->smem_bytes,
            g.tokens_per_block, g.heads_per_block,
            g.head_blocks, P.tiles_per_split, kPrefillTileKeys, P.num_split_slots,
            P.num_split_slots > 1 ? " + merge" : "");
  return PA_SUCCESS;
}

pa_status prefill_run(const pa_plan *plan, const pa__io *io, pa__stream stream) {
  const prefill_state *s = (const prefill_state *)plan->backend_state;
  prefill_params P = s->params;
  set_call_inputs(P, io);
  kv_page_maps maps;
  const pa_status st =
      encode_step_maps(s->page_map_encoder, s->boxes, P, s->geometry, "PREFILL", &maps);
  if (st != PA_SUCCESS) return st;
  // (an output the copy engine cannot take, 2-byte aligned say, is stored by the threads)
  P.output_boxes = s->output_boxes && output_aligned(P, 16) &&
                   encode_output_map(s->page_map_encoder, P.output, P.v_head_size, P.num_heads,
                                     P.token_count, P.output_box_heads, &maps.out);
  const cudaError_t err = launch_row_block_step(
      *s, P,
      [&](const prefill_params &Q, dim3 grid, int smem_bytes, cudaStream_t st, bool chained) {
        return s->variant.launch(Q, maps, grid, smem_bytes, st, chained);
      },
      &plan->workspace, io->workspace, (cudaStream_t)stream);
  if (err != cudaSuccess)
    return pa__fail(PA_ERROR_CUDA, "PREFILL: kernel launch failed: %s", cudaGetErrorString(err));
  return PA_SUCCESS;
}

void prefill_destroy(pa_plan *plan) {
  free(plan->backend_state);
  plan->backend_state = nullptr;
}

}  // namespace
}  // namespace detail
}  // namespace pa

extern "C" const char *pa__prefill_kernel_family(const pa_plan *plan) {
  if (!plan || plan->backend != PA_BACKEND_PREFILL || !plan->backend_state) return NULL;
  return pa::detail::family_name(
      static_cast<const pa::detail::prefill_state *>(plan->backend_state)->variant.family);
}

extern "C" const pa__backend_ops pa__prefill_backend = {
    PA_BACKEND_PREFILL, pa::detail::prefill_check, pa::detail::prefill_plan,
    pa::detail::prefill_run, pa::detail::prefill_destroy};
