// The LATENT backend's launcher: fused absorbed MLA decode on tensor cores (kernel in
// latent_kernel.cuh; on compute capability 9.0 the sm_90a wgmma kernel of latent_hopper_kernel.cuh
// for 16-bit caches at 576 / 512 channels). Plan time fixes the kernel variant, the row-block
// geometry, the split size, the grid and the workspace; run fills the pointers and launches
// PREFILL's schedule kernel, the attention and, with splits, the merge.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>

#include "../common/split_merge.cuh"
#include "../launch_common.cuh"
#include "../prefill/launch_row_blocks.cuh"
#include "internal.h"
#include "latent_kernel.cuh"
#include "latent_narrow_kernel.cuh"
#include "latent_whole_kernel.cuh"

namespace pa {
namespace detail {
namespace {

// A split never spans fewer than this many 64-key tiles (as PREFILL's).
constexpr int kMinTilesPerSplit = 8;
// What a unit of the 64-row tile costs besides its tiles, in tiles: its Q load and epilogue, and
// with splits its partials and their merge (ncu, sixteenth measurement: 11 % of the consumers'
// time waited for units at about 21 tiles per unit).
constexpr int64_t kUnitCostTiles = 2;
// The partial outputs stay below this even when no attention_metadata bounds max_kv_len.
constexpr int64_t kMaxPartialBytes = (int64_t)256 << 20;
// split_merge_kernel's float4s per lane: 512 value channels
constexpr int kMergeVecs = kLatentValueWidth / 128;

struct latent_variant {
  const char *family;  // "wgmma whole", "wgmma", "wgmma narrow" or "mma.sync"
  int threads, smem_bytes;
  // the split rule: balanced_split_tiles_for (true), or PREFILL's memory-bound one, which aims
  // at about four units per CTA (the 32-row mma.sync tile)
  bool balanced_splits;
  bool page_boxes;  // loads whole page runs through kv_page_maps, encoded for each call
  bool q_boxes;     // loads each unit's Q as boxes of kv_page_maps::q (latent_hopper_produce)
  // merges up to kLatentNarrowMergeSplits split slots itself (prefill_params::merge_arrivals)
  bool merges_few_splits;
  // takes every unit by its CTA's index where they fit the grid (prefill_params::units_by_index):
  // the narrow and whole-tile kernels (latent_hopper_produce's kUnitsByIndex)
  bool units_by_index;
  cudaError_t (*set_smem)(int smem_bytes);
  cudaError_t (*launch)(const prefill_params &P, const kv_page_maps &maps, dim3 grid,
                        int smem_bytes, cudaStream_t stream, bool chained);
};

// The maps a variant's kernel loads: pages of the latent cache alone (the values are its rows'
// first channels) and Q.
step_boxes boxes_of(const latent_variant &v) { return {v.page_boxes, false, v.q_boxes}; }

// The mma.sync kernels load with cp.async alone and take no maps.
template <cudaError_t (*kLaunch)(const prefill_params &, dim3, int, cudaStream_t, bool)>
cudaError_t launch_without_maps(const prefill_params &P, const kv_page_maps &, dim3 grid,
                                int smem_bytes, cudaStream_t stream, bool chained) {
  return kLaunch(P, grid, smem_bytes, stream, chained);
}

struct latent_state : row_block_launch {
  latent_variant variant;
  row_geometry geometry;  // the row blocks of the Q boxes (page-box kernels)
  // the kernel merges the splits (variant.merges_few_splits and 2..kLatentNarrowMergeSplits
  // slots); its arrival counters are pa_plan::arrivals_region, zeroed by the write kernel
  bool merge_in_kernel;
};

// PA_LATENT_KERNEL, read at plan time, for measurements and tests that compare kernels:
// "mma.sync" keeps every plan on the mma.sync kernels, "wgmma64" gives the 64-row wgmma kernel
// the narrow rows too.
bool latent_kernel_env(const char *value) {
  const char *env = getenv("PA_LATENT_KERNEL");
  return env && strcmp(env, value) == 0;
}

// Whether the sm_90a wgmma kernels serve this problem: a device of compute capability 9.0 whose
// sm_90a cubin this build holds, caches that hold T, head_size 576 / v_head_size 512.
bool wgmma_serves(const pa__problem *p, const pa_device_caps *caps) {
  return !latent_kernel_env("mma.sync") && runs_sm90a_kernels(caps) &&
         p->k_cache_dtype == p->dtype && p->head_size == kLatentHopperWidth &&
         p->v_head_size == kLatentHopperValueWidth;
}

// The row tile, by the step's mean query tokens per sequence (rounded up) times num_heads: the
// rows a sequence's token has. At most 32 (16-32 heads of one token, 16 heads of two), the step is
// memory-bound. The wgmma kernels take up to 16 rows with the keys as M (latent_narrow_kernel.cuh;
// at 32 rows that kernel measured 10 % slower than the 64-row one, doc/performance.md, eighteenth
// measurement), else 64 rows; the mma.sync kernels take 32 rows in 32-key steps through a deeper
// ring (latent_kernel.cuh), else 64.
static_assert(kLatentHopperRows == 64, "the wide wgmma kernels take 64-row blocks");
int64_t sequence_rows(const pa__problem *p) {
  const int64_t tokens_per_seq = ceil_div(p->token_count, std::max<int64_t>(1, p->batch_size));
  return (int64_t)p->num_heads * tokens_per_seq;
}
int rows_of(const pa__problem *p, const pa_device_caps *caps) {
  const int64_t rows = sequence_rows(p);
  if (!wgmma_serves(p, caps)) return rows <= 32 ? 32 : 64;
  return rows <= kLatentNarrowRows && !latent_kernel_env("wgmma64") ? kLatentNarrowRows
                                                                      : kLatentHopperRows;
}

// The kernel: where wgmma serves, the narrow wgmma kernel at 16 rows, at 64 the whole-tile one
// (latent_whole_kernel.cuh) where row blocks are more than half full, else the half-stage one
// (latent_hopper_kernel.cuh: at 32 rows per sequence the whole tiles measured 3-4 % slower,
// doc/performance.md, twenty-second measurement); else mma.sync at rows_of's tile.
bool variant_for(const pa__problem *p, const pa_device_caps *caps, latent_variant *v) {
  const int rows = rows_of(p, caps);
  const bool wgmma = wgmma_serves(p, caps);
  return for_kernel_types(p, [&](auto t, auto c) {
    using T = decltype(t);
    using C = decltype(c);
    const int smem_bytes = latent_smem_bytes((int)sizeof(C), rows);
    if constexpr (sizeof(C) == 2) {
      if (wgmma && rows == kLatentNarrowRows)
        *v = {"wgmma narrow", kLatentNarrowThreads,
              latent_narrow_geometry<kLatentNarrowRows>::kSmemBytes, true, false, true, true, true,
              latent_narrow_set_smem<T, kLatentNarrowRows>,
              latent_narrow_launch<T, kLatentNarrowRows>};
      else if (wgmma && sequence_rows(p) > kLatentHopperRows / 2)
        *v = {"wgmma whole", kLatentHopperThreads, latent_whole_geometry::kSmemBytes, true, true,
              true, false, true, latent_whole_set_smem<T>, latent_whole_launch<T>};
      else if (wgmma)
        *v = {"wgmma", kLatentHopperThreads, latent_hopper_geometry::kSmemBytes, true, true, true,
              false, false, latent_hopper_set_smem<T>, latent_hopper_launch<T>};
      if (wgmma) return;
    }
    if (rows == 32)
      *v = {"mma.sync", kLatentThreads, smem_bytes, false, false, false, false, false,
            latent_set_smem<T, C, 32>, launch_without_maps<latent_launch<T, C, 32>>};
    else
      *v = {"mma.sync", kLatentThreads, smem_bytes, true, false, false, false, false,
            latent_set_smem<T, C, 64>, launch_without_maps<latent_launch<T, C, 64>>};
  });
}

// The row-block geometry (launch_row_blocks.cuh): up to rows_of rows, every head one group.
row_geometry row_geometry_of(const pa__problem *p, const pa_device_caps *caps) {
  return row_geometry_for(p->num_heads, rows_of(p, caps));
}

pa_status latent_check(const pa__problem *p, const pa_device_caps *caps, char *why,
                       size_t why_size) {
  if (p->input_mode != PA__MODE_LATENT)
    return unsupported(why, why_size, "kv_cache_layout SEPARATE (it serves LATENT only)");
  if (p->has_bias) return unsupported(why, why_size, "attention_bias");
  if (p->qk_output) return unsupported(why, why_size, "output_qk");
  if (p->head_size % 16 != 0 || p->head_size > kLatentWidth)
    return unsupported(why, why_size, "head_size %d (needs a multiple of 16 up to %d)",
                       p->head_size, kLatentWidth);
  if (p->v_head_size % 8 != 0 || p->v_head_size > kLatentValueWidth)
    return unsupported(why, why_size, "v_head_size %d (needs a multiple of 8 up to %d)",
                       p->v_head_size, kLatentValueWidth);
  latent_variant v;
  if (!variant_for(p, caps, &v))
    return unsupported(why, why_size, "key_cache dtype %s",
                       pa_dtype_size(p->k_cache_dtype) == 1 ? "float8e4m3fn (not built)"
                                                            : "other than T, int8, float8e4m3fn");
  if (caps->compute_capability_major < 8)
    return unsupported(why, why_size, "compute capability %d.%d (needs 8.0 or newer)",
                       caps->compute_capability_major, caps->compute_capability_minor);
  const int smem_bytes = v.smem_bytes;
  if (smem_bytes > caps->max_shared_memory_per_block_optin)
    return unsupported(why, why_size,
                       "key_cache dtype %s (needs %d bytes of shared memory per block, the "
                       "device allows %lld)",
                       pa_dtype_size(p->k_cache_dtype) == 1 ? "8-bit" : "16-bit", smem_bytes,
                       (long long)caps->max_shared_memory_per_block_optin);
  // the merge grid is (token_count, num_heads); work units are counted in int32
  if (p->num_heads > 65535)
    return unsupported(why, why_size, "num_heads %d (the merge grid allows 65535)", p->num_heads);
  if (p->token_count > INT32_MAX)
    return unsupported(why, why_size, "token_count %lld (the merge grid allows 2^31 - 1)",
                       (long long)p->token_count);
  const row_geometry g = row_geometry_of(p, caps);
  if ((ceil_div(p->token_count, g.tokens_per_block) + p->batch_size) * g.head_blocks >
      INT32_MAX / 64)
    return unsupported(why, why_size, "token_count %lld (too many work units)",
                       (long long)p->token_count);
  return PA_SUCCESS;
}

pa_status latent_plan(pa_plan *plan, int setup_device) {
  const pa__problem *p = &plan->problem;
  latent_state *s = (latent_state *)calloc(1, sizeof *s);
  if (!s) return pa__fail(PA_ERROR_OUT_OF_MEMORY, "plan: host allocation failed");
  plan->backend_state = s;
  if (!variant_for(p, &plan->caps, &s->variant))
    return pa__fail(PA_ERROR_INTERNAL, "LATENT: no kernel for this problem after check passed");
  s->smem_bytes = s->variant.smem_bytes;
  s->chained = plan->caps.compute_capability_major >= 9;
  const row_geometry g = row_geometry_of(p, &plan->caps);
  s->geometry = g;
  // One CTA per multiprocessor (launch bounds and shared memory). The 32-row mma.sync tile's
  // units cost their bytes, so finer splits (about four units per CTA instead of two) keep the
  // last wave from leaving a third of the device idle. The wgmma kernels and the 64-row mma.sync
  // tile pay a Q load, partials and their merge per split (the narrow wgmma kernel waits for each
  // unit's Q: ncu, eighteenth measurement), so the split count balances the CTAs' tiles
  // (balanced_split_tiles_for).
  const int64_t row_blocks = row_blocks_of(p, g.tokens_per_block, g.head_blocks);
  const int64_t tiles_per_split =
      s->variant.balanced_splits
          ? balanced_split_tiles_for(p, plan->caps.multiprocessor_count, row_blocks,
                                     kLatentTileKeys, kMinTilesPerSplit, kMaxPartialBytes,
                                     kUnitCostTiles)
          : split_tiles_for(p, &plan->caps, 2, row_blocks, kLatentTileKeys, kMinTilesPerSplit,
                            kMaxPartialBytes);
  const int64_t bound_tiles = std::max<int64_t>(1, ceil_div(p->max_kv_len, kLatentTileKeys));
  const int64_t slots = std::min<int64_t>(ceil_div(bound_tiles, tiles_per_split), INT32_MAX / 2);
  if (setup_device) {
    cudaError_t err = s->variant.set_smem(s->smem_bytes);
    if (err != cudaSuccess)
      return pa__fail(PA_ERROR_CUDA, "LATENT: cudaFuncSetAttribute(%d bytes of shared memory): %s",
                      s->smem_bytes, cudaGetErrorString(err));
  }

  // A persistent grid: one CTA per multiprocessor, at most one per unit. Row blocks are at most
  // token_count (each holds a token) and ceil(token_count / tokens_per_block) + batch_size (each
  // sequence's last may be partial); where that many units fit the grid, the Hopper kernels take
  // each unit by their CTA's index, with no schedule kernel (prefill_params::units_by_index).
  const int64_t resident = std::max(1, plan->caps.multiprocessor_count);
  const int64_t row_block_bound = ceil_div(p->token_count, g.tokens_per_block) + p->batch_size;
  const int64_t max_units = row_block_bound * g.head_blocks * slots;
  s->grid = dim3((unsigned)std::max<int64_t>(1, std::min(resident, max_units)));
  const bool schedule =
      !s->variant.units_by_index ||
      std::min<int64_t>(p->token_count, row_block_bound) * g.head_blocks * slots > s->grid.x;

  static const char *const kRegionNames[5] = {
      "LATENT partial outputs [item][head][v_head_size]", "LATENT partial (max, sum) [item][head]",
      "LATENT splits per token", "LATENT schedule: first unit per sequence",
      "LATENT schedule: counter"};
  // one KV head for every query head; V is a view of the latent row, which k_scale dequantizes
  plan_row_block_launch(plan,
                        {1, p->num_heads, p->v_head_size, p->k_quant, g, tiles_per_split, slots,
                         kRegionNames, schedule},
                        s);
  s->params.q_before_wait = plan->q_staged_region < 0;  // the first unit's Q (Hopper producers)
  if (s->variant.q_boxes) s->params.q_box_bytes = query_box_bytes(kLatentHopperWidth, g);
  const prefill_params &P = s->params;
  if (setup_device && (s->variant.page_boxes || s->variant.q_boxes)) {
    const pa_status st = plan_step_maps(boxes_of(s->variant), P.kv, pa__query_row_elems(p),
                                        p->head_size, p->num_heads, p->token_count, g, "LATENT",
                                        &s->page_map_encoder);
    if (st != PA_SUCCESS) return st;
  }

  s->merge_launch = split_merge_launch_for<kMergeVecs>(p->dtype, p->token_count, p->num_heads,
                                                       p->v_head_size, P.num_split_slots);
  s->merge_in_kernel = s->variant.merges_few_splits && P.num_split_slots > 1 &&
                       P.num_split_slots <= kLatentNarrowMergeSplits;
  if (s->merge_in_kernel) {  // one counter per row block
    const uint64_t counters = (uint64_t)p->token_count * g.head_blocks;
    plan->arrivals_region = pa__workspace_add(
        &plan->workspace, "LATENT merge arrivals [token][head block] (zeroed by the write path)",
        counters, sizeof(unsigned int), PA_WORKSPACE_ALIGNMENT);
    plan->arrival_count = (uint32_t)counters;
  }

  const char *env = getenv("PA_DEBUG");
  if (env && strcmp(env, "1") == 0)
    fprintf(stderr,
            "[pagedattn] LATENT (%s): grid %u, %d threads, %d B shared, %d-row tile, row blocks "
            "of %d tokens x %d heads (%d per token), %d tiles of %d keys per split, %d split "
            "slots%s%s\n",
            s->variant.family, s->grid.x, s->variant.threads, s->smem_bytes,
            rows_of(p, &plan->caps), g.tokens_per_block, g.heads_per_block, g.head_blocks,
            P.tiles_per_split, kLatentTileKeys, P.num_split_slots,
            P.num_split_slots < 2       ? ""
            : s->merge_in_kernel        ? ", merged in the kernel"
                                        : " + merge",
            P.units_by_index ? ", units by CTA index (no schedule kernel)" : "");
  return PA_SUCCESS;
}

pa_status latent_run(const pa_plan *plan, const pa__io *io, pa__stream stream) {
  const latent_state *s = (const latent_state *)plan->backend_state;
  prefill_params P = s->params;
  set_call_inputs(P, io);
  P.v_scale = io->k_scale;  // the values are the latent rows' first channels
  if (s->merge_in_kernel)
    P.merge_arrivals =
        (unsigned int *)pa__workspace_at(&plan->workspace, plan->arrivals_region, io->workspace);
  kv_page_maps maps;
  const pa_status st =
      encode_step_maps(s->page_map_encoder, boxes_of(s->variant), P, s->geometry, "LATENT", &maps);
  if (st != PA_SUCCESS) return st;
  const cudaError_t err = launch_row_block_step(
      *s, P,
      [&](const prefill_params &params, dim3 grid, int smem_bytes, cudaStream_t on, bool chained) {
        return s->variant.launch(params, maps, grid, smem_bytes, on, chained);
      },
      &plan->workspace, io->workspace, (cudaStream_t)stream);
  if (err != cudaSuccess)
    return pa__fail(PA_ERROR_CUDA, "LATENT: kernel launch failed: %s", cudaGetErrorString(err));
  return PA_SUCCESS;
}

void latent_destroy(pa_plan *plan) {
  free(plan->backend_state);
  plan->backend_state = nullptr;
}

}  // namespace
}  // namespace detail
}  // namespace pa

extern "C" const char *pa__latent_kernel_family(const pa_plan *plan) {
  if (!plan || plan->backend != PA_BACKEND_LATENT || !plan->backend_state) return NULL;
  return static_cast<const pa::detail::latent_state *>(plan->backend_state)->variant.family;
}

extern "C" const pa__backend_ops pa__latent_backend = {
    PA_BACKEND_LATENT, pa::detail::latent_check, pa::detail::latent_plan,
    pa::detail::latent_run, pa::detail::latent_destroy};
