// The LATENT backend's kernel: absorbed MLA decode on tensor cores (mma.sync m16n8k16, sm_80 and
// newer). One KV head: every cached row is a latent row of head_size (<= 576) channels; Q·K runs
// over all of them and V is the first v_head_size (<= 512) channels of the same row, so one latent
// tile in shared memory feeds both products and nothing is loaded twice.
//
// Work units, splits, schedule and prologue are PREFILL's (prefill_kernel.cuh: prefill_params,
// prefill_unit_prologue, prefill_take_units, prefill_schedule_kernel, split_merge_kernel): a row
// block is up to kLatentRows (query token, query head) rows of one sequence, heads innermost (128
// heads: two blocks per token; 16 heads: four tokens per block). What differs is the compute: one
// m16 tile of rows over 512 output channels would be 256 fp32 accumulators per thread, so the
// output channels are split across the 8 warps instead. Per 64-key tile:
//   1. scores: warp (row_warp, key_warp) computes 32 rows x 16 keys over the 576 channels;
//   2. each row's tile max goes through shared memory (one barrier), so every warp rescales with
//      the same running max; each warp turns its scores into P (rounded to T) in shared memory;
//   3. after a barrier, warp w multiplies the tile's P (all rows x 64 keys) by its 64 value
//      channels [64 w, 64 w + 64) of the same tile (128 accumulators per thread).
// 16-bit caches keep P in the tile itself, in the channels past the value channels (512..575 of
// every row: their scores are done by then), which keeps a 64-row, two-stage ring within 227 KB;
// 8-bit caches (half the bytes) give it a buffer of its own. The loader owns 16-key runs (one page
// each, block sizes >= 16): one block-table lookup per run and tile, 16-byte cp.async loads.
//
// Quantized caches: raw codes are exact in T, so the MMAs run on codes; a per-tensor k_scale goes
// into the score scale, a per-channel one into Q (rounded to T once), and the same k_scale
// dequantizes V at the output (prefill_store_pair / split_merge_kernel with v_scale = k_scale).
#pragma once

#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "../prefill/prefill_kernel.cuh"

namespace pa {
namespace detail {

constexpr int kLatentWidth = 576;       // Q·K channels of a tile (zero past head_size)
constexpr int kLatentValueWidth = 512;  // P·V channels (outputs past v_head_size are dropped)
constexpr int kLatentRows = 64;
constexpr int kLatentWarps = 8;
constexpr int kLatentThreads = 32 * kLatentWarps;
constexpr int kLatentKeyWarps = 4;                                // scores: warps along the keys
constexpr int kLatentRowWarps = kLatentWarps / kLatentKeyWarps;  // and along the rows
constexpr int kLatentTileKeys = kPrefillTileKeys;                 // the schedule's tiles
constexpr int kLatentStages = 2;
constexpr int kLatentRunKeys = 16;  // a loader run: the smallest page
constexpr int kLatentValueChannelsPerWarp = kLatentValueWidth / kLatentWarps;  // 64
static_assert(kLatentRowWarps * 32 == kLatentRows && kLatentKeyWarps * 16 == kLatentTileKeys,
              "the score warps tile the rows x keys of a tile");

// Shared memory of one CTA (bytes): Q rows | the stage ring | P (8-bit caches) | each row's tile
// max per key warp (then its sum) | row_lo, row_hi | the admitted-key flags of each stage.
template <typename C>
struct latent_smem {
  static constexpr int kRowBytes = kLatentWidth * (int)sizeof(C) + 16;  // staggers rows over banks
  static constexpr int kStageBytes = kLatentTileKeys * kRowBytes;
  static constexpr int kQStride = kLatentWidth + 8;  // elements
  static constexpr bool kPInTile = sizeof(C) == 2;
  static constexpr int kPStride = kPInTile ? kRowBytes : kLatentTileKeys * 2 + 16;  // bytes
  static constexpr int kPInRow = kPInTile ? kLatentValueWidth * 2 : 0;  // P's first byte in a row
  static_assert(!kPInTile || kPInRow + kLatentTileKeys * 2 <= kRowBytes, "P fits past V");
  static constexpr int kQ = 0;
  static constexpr int kStages = kQ + kLatentRows * kQStride * 2;
  static constexpr int kP = kStages + kLatentStages * kStageBytes;
  static constexpr int kRowStats = kP + (kPInTile ? 0 : kLatentRows * kPStride);
  static constexpr int kRowRanges = kRowStats + kLatentRows * kLatentKeyWarps * 4;
  static constexpr int kAdmitted = kRowRanges + 2 * kLatentRows * 4;
  static constexpr int kBytes = kAdmitted + kLatentStages * kLatentTileKeys;
};
__host__ __device__ inline int latent_smem_bytes(int cache_elem_bytes) {
  return cache_elem_bytes == 2 ? latent_smem<__half>::kBytes : latent_smem<int8_t>::kBytes;
}

// The producer side: 64-key latent tiles of one sequence gathered from the pages into the stage
// ring. The 64 threads of run `run` own keys [16 run, 16 run + 16) of every tile (one page, so one
// block id per tile) and their 16-byte chunks in row order, so a run's consecutive threads read
// consecutive bytes. Chunks past the row's real length are zero-filled; rows outside the unit's
// key range [lo, hi) or in an unmapped block are zero-filled (so 0 * V stays finite) and flagged
// not admitted.
template <typename C>
struct latent_kv_loader {
  static constexpr int kChunks = kLatentWidth * (int)sizeof(C) / 16;
  static constexpr int kRunThreads = kLatentThreads / (kLatentTileKeys / kLatentRunKeys);
  static constexpr int kChunksPerThread = kLatentRunKeys * kChunks / kRunThreads;
  static_assert(kLatentRunKeys * kChunks % kRunThreads == 0, "whole chunks per thread");

  const unsigned char *cache;
  const int32_t *table_row;
  paged_kv_layout kv;
  int64_t lo, hi;
  int slot_bytes, real_chunks;
  unsigned char *stages, *admitted;
  int run, thread;  // thread: index among the run's kRunThreads

  __device__ __forceinline__ int32_t entry(int64_t tile) const {
    const int64_t key = tile * kLatentTileKeys + run * kLatentRunKeys;
    return key < hi ? kv_block_entry(kv, table_row, key) : -1;
  }
  __device__ __forceinline__ void issue(int64_t tile, int32_t block_entry) const {
    const int32_t block_id = kv_block_mapped(kv, block_entry);
    const int stage = (int)(tile % kLatentStages);
    const int64_t key0 = tile * kLatentTileKeys + run * kLatentRunKeys;
    const int first_valid = (int)max((int64_t)0, min((int64_t)kLatentRunKeys, lo - key0));
    const int end_valid = (int)max((int64_t)0, min((int64_t)kLatentRunKeys, hi - key0));
    const uint32_t valid =
        block_id >= 0 ? ((1u << end_valid) - 1u) & ~((1u << first_valid) - 1u) : 0u;
    const unsigned char *src =
        cache + (block_id >= 0 ? kv_row_offset(kv, block_id, key0, 0) * (int64_t)sizeof(C) : 0);
    unsigned char *dst = stages + stage * latent_smem<C>::kStageBytes +
                         run * kLatentRunKeys * latent_smem<C>::kRowBytes;
#pragma unroll
    for (int i = 0; i < kChunksPerThread; i++) {
      const int index = thread + i * kRunThreads;
      const int row = index / kChunks, chunk = index % kChunks;
      const bool fill = chunk < real_chunks && (valid >> row & 1u);
      cp_async_16(dst + row * latent_smem<C>::kRowBytes + chunk * 16,
                  fill ? src + row * slot_bytes + chunk * 16 : cache, fill);
    }
    if (thread < kLatentRunKeys)
      admitted[stage * kLatentTileKeys + run * kLatentRunKeys + thread] = valid >> thread & 1u;
  }
};

// One work unit: split `split` of row block `row_block` of sequence b.
template <typename T, typename C>
__device__ __forceinline__ void latent_unit(const prefill_params &P, unsigned char *smem, int32_t b,
                                            int32_t row_block, int32_t split) {
  using S = latent_smem<C>;
  constexpr int kSteps = kLatentWidth / 16;  // k-steps of Q·K^T
  constexpr int kLoads = warp_fragments<T, C>::kLoads;
  constexpr int kOutTiles = kLatentValueChannelsPerWarp / 8;
  constexpr int kMTiles = kLatentRows / 16;
  static_assert(kSteps % kLoads == 0 && kOutTiles % (2 * kLoads) == 0, "whole fragment loads");
  T *q_smem = reinterpret_cast<T *>(smem + S::kQ);
  unsigned char *stages = smem + S::kStages;
  float *row_stats = reinterpret_cast<float *>(smem + S::kRowStats);  // [row][key warp]
  int32_t *row_lo = reinterpret_cast<int32_t *>(smem + S::kRowRanges);
  int32_t *row_hi = row_lo + kLatentRows;
  unsigned char *admitted = smem + S::kAdmitted;
  const prefill_unit_setup U = prefill_unit_prologue<T, C, kLatentWidth, kLatentRows,
                                                     kLatentThreads>(
      P, q_smem, S::kQStride, row_lo, row_hi, b, row_block, split, 0);
  const prefill_row_block &R = U.rows;

  latent_kv_loader<C> loader;
  loader.cache = reinterpret_cast<const unsigned char *>(P.k_cache);
  loader.table_row = P.block_table + (int64_t)b * P.kv.max_blocks_per_seq;
  loader.kv = P.kv;
  loader.lo = U.union_lo;
  loader.hi = U.union_hi;
  loader.slot_bytes = P.kv.head_size * (int)sizeof(C);
  loader.real_chunks = P.kv.head_size * (int)sizeof(C) / 16;
  loader.stages = stages;
  loader.admitted = admitted;
  loader.run = threadIdx.x / latent_kv_loader<C>::kRunThreads;
  loader.thread = threadIdx.x % latent_kv_loader<C>::kRunThreads;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group_id = lane / 4, col = (lane % 4) * 2;  // mma fragment coordinates
  const int row_warp = warp / kLatentKeyWarps, key_warp = warp % kLatentKeyWarps;
  const int active_m_tiles = (R.valid_rows + 15) / 16;  // the m16 tiles with a row

  // Keys that need no per-key mask lie in every valid row's range (an empty row forces the masks).
  int32_t common_lo = INT32_MIN, common_hi = INT32_MAX;
  for (int r = lane; r < R.valid_rows; r += 32) {
    common_lo = max(common_lo, R.row_lo[r]);
    common_hi = min(common_hi, R.row_hi[r]);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    common_lo = max(common_lo, __shfl_xor_sync(0xffffffffu, common_lo, offset));
    common_hi = min(common_hi, __shfl_xor_sync(0xffffffffu, common_hi, offset));
  }
  // the score rows of this thread: m16 tile 2 row_warp + m, row halves h
  int32_t my_lo[2][2], my_hi[2][2];
#pragma unroll
  for (int m = 0; m < 2; m++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int r = (2 * row_warp + m) * 16 + group_id + 8 * h;
      my_lo[m][h] = R.row_lo[r];
      my_hi[m][h] = R.row_hi[r];
    }

  float out_acc[kMTiles][kOutTiles][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; mt++)
#pragma unroll
    for (int n = 0; n < kOutTiles; n++)
#pragma unroll
      for (int i = 0; i < 4; i++) out_acc[mt][n][i] = 0.0f;
  // the running max of every row this thread's accumulators touch (the same in every warp), and
  // the sums of its score rows over its own keys
  float row_max[kMTiles][2], row_sum[2][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; mt++) row_max[mt][0] = row_max[mt][1] = -INFINITY;
#pragma unroll
  for (int m = 0; m < 2; m++) row_sum[m][0] = row_sum[m][1] = 0.0f;

  const T *q_frag_rows = q_smem + (row_warp * 32 + lane % 16) * S::kQStride + (lane / 16) * 8;
  const bool scoring = 2 * row_warp < active_m_tiles;
  cp_async_tile_ring<kLatentStages>(
      U.tile_begin, U.tile_end, [&](int64_t tile) { return loader.entry(tile); },
      [&](int64_t tile, int32_t block_entry) { loader.issue(tile, block_entry); },
      [&](int64_t tile, int stage) {
        unsigned char *tile_rows = stages + stage * S::kStageBytes;
        unsigned char *p_rows = S::kPInTile ? tile_rows + S::kPInRow : smem + S::kP;
        const unsigned char *tile_admitted = admitted + stage * kLatentTileKeys;
        const uint32_t mapped_lo = __ballot_sync(0xffffffffu, tile_admitted[lane] != 0);
        const uint32_t mapped_hi = __ballot_sync(0xffffffffu, tile_admitted[32 + lane] != 0);
        const int32_t key0 = (int32_t)(tile * kLatentTileKeys - R.key_base);
        const bool unmasked = (mapped_lo & mapped_hi) == 0xffffffffu && key0 >= common_lo &&
                              key0 + kLatentTileKeys <= common_hi;

        // 1. scores of this warp's 32 rows x 16 keys
        float score[2][2][4];
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
          for (int n = 0; n < 2; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) score[m][n][i] = 0.0f;
        if (scoring) {
          const warp_fragments<T, C> k_frags = {tile_rows + key_warp * 16 * S::kRowBytes,
                                                S::kRowBytes, lane};
#pragma unroll 4
          for (int ks = 0; ks < kSteps; ks += kLoads) {
            uint32_t a[2][kLoads][4], bk[kLoads][4];
#pragma unroll
            for (int m = 0; m < 2; m++)
#pragma unroll
              for (int s = 0; s < kLoads; s++)
                ldmatrix_x4(a[m][s], q_frag_rows + m * 16 * S::kQStride + (ks + s) * 16);
            k_frags.scores_k(bk, ks);
#pragma unroll
            for (int m = 0; m < 2; m++)
#pragma unroll
              for (int s = 0; s < kLoads; s++) {
                mma_op<T>::run(score[m][0], a[m][s], bk[s][0], bk[s][1]);
                mma_op<T>::run(score[m][1], a[m][s], bk[s][2], bk[s][3]);
              }
          }
        }
        transform_scores(score, R.qk_scale, P.softcap);
        if (!unmasked) {
#pragma unroll
          for (int m = 0; m < 2; m++)
#pragma unroll
            for (int n = 0; n < 2; n++)
#pragma unroll
              for (int i = 0; i < 4; i++) {
                const int k = key_warp * 16 + n * 8 + col + (i & 1);  // key within the tile
                const uint32_t mapped = k < 32 ? mapped_lo >> k : mapped_hi >> (k - 32);
                const int32_t key = key0 + k;
                if (!((mapped & 1u) && key >= my_lo[m][i / 2] && key < my_hi[m][i / 2]))
                  score[m][n][i] = -INFINITY;
              }
        }
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
          for (int h = 0; h < 2; h++) {
            float key_max = fmaxf(fmaxf(score[m][0][2 * h], score[m][0][2 * h + 1]),
                                  fmaxf(score[m][1][2 * h], score[m][1][2 * h + 1]));
            key_max = fmaxf(key_max, __shfl_xor_sync(0xffffffffu, key_max, 1));
            key_max = fmaxf(key_max, __shfl_xor_sync(0xffffffffu, key_max, 2));
            const int r = (2 * row_warp + m) * 16 + group_id + 8 * h;
            if (lane % 4 == 0) row_stats[r * kLatentKeyWarps + key_warp] = key_max;
          }
        __syncthreads();

        // 2. every row's running max from the key warps' maxima; P of this warp's scores
        float rescale[kMTiles][2], base[kMTiles][2];
#pragma unroll
        for (int mt = 0; mt < kMTiles; mt++)
#pragma unroll
          for (int h = 0; h < 2; h++) {
            const float4 w = *reinterpret_cast<const float4 *>(
                row_stats + (mt * 16 + group_id + 8 * h) * kLatentKeyWarps);
            const softmax_step step =
                online_softmax_step(row_max[mt][h], fmaxf(fmaxf(w.x, w.y), fmaxf(w.z, w.w)));
            base[mt][h] = step.base;
            rescale[mt][h] = step.rescale;
          }
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
          for (int h = 0; h < 2; h++) {
            // the m-tile index is warp-dependent: select, so the arrays stay in registers
            const float my_base = row_warp == 0 ? base[m][h] : base[2 + m][h];
            row_sum[m][h] *= row_warp == 0 ? rescale[m][h] : rescale[2 + m][h];
#pragma unroll
            for (int n = 0; n < 2; n++) {
              const float p0 = softmax_exp2(score[m][n][2 * h] - my_base);
              const float p1 = softmax_exp2(score[m][n][2 * h + 1] - my_base);
              row_sum[m][h] += p0 + p1;
              const int r = (2 * row_warp + m) * 16 + group_id + 8 * h;
              const int k = key_warp * 16 + n * 8 + col;
              *reinterpret_cast<uint32_t *>(p_rows + r * S::kPStride + k * 2) = pack_t2<T>(p0, p1);
            }
          }
        __syncthreads();

        // 3. out += P · V over this warp's value channels, for the m16 tiles with a row
        bool rescaled = false;
#pragma unroll
        for (int mt = 0; mt < kMTiles; mt++)
          rescaled |= mt < active_m_tiles && (rescale[mt][0] != 1.0f || rescale[mt][1] != 1.0f);
        if (__any_sync(0xffffffffu, rescaled)) {
#pragma unroll
          for (int mt = 0; mt < kMTiles; mt++)
#pragma unroll
            for (int n = 0; n < kOutTiles; n++) {
              out_acc[mt][n][0] *= rescale[mt][0];
              out_acc[mt][n][1] *= rescale[mt][0];
              out_acc[mt][n][2] *= rescale[mt][1];
              out_acc[mt][n][3] *= rescale[mt][1];
            }
        }
#pragma unroll
        for (int kk = 0; kk < kLatentTileKeys / 16; kk++) {
          uint32_t a[kMTiles][4];
#pragma unroll
          for (int mt = 0; mt < kMTiles; mt++)
            if (mt < active_m_tiles)
              ldmatrix_x4(a[mt], p_rows + (mt * 16 + lane % 16) * S::kPStride +
                                     (kk * 16 + (lane / 16) * 8) * 2);
          const warp_fragments<T, C> v_frags = {tile_rows + kk * 16 * S::kRowBytes, S::kRowBytes,
                                                lane};
#pragma unroll
          for (int n = 0; n < kOutTiles; n += 2 * kLoads) {
            uint32_t bv[kLoads][4];
            v_frags.values_v(bv, warp * kOutTiles + n);
#pragma unroll
            for (int mt = 0; mt < kMTiles; mt++)
              if (mt < active_m_tiles) {
#pragma unroll
                for (int s = 0; s < kLoads; s++) {
                  mma_op<T>::run(out_acc[mt][n + 2 * s], a[mt], bv[s][0], bv[s][1]);
                  mma_op<T>::run(out_acc[mt][n + 2 * s + 1], a[mt], bv[s][2], bv[s][3]);
                }
              }
          }
        }
      });

  // Each row's sum over the key warps (the ring ended with a barrier: row_stats is free), then
  // this warp's channels of every valid row, finalized or written as a partial state.
#pragma unroll
  for (int m = 0; m < 2; m++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      float l = row_sum[m][h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const int r = (2 * row_warp + m) * 16 + group_id + 8 * h;
      if (lane % 4 == 0) row_stats[r * kLatentKeyWarps + key_warp] = l;
    }
  __syncthreads();
#pragma unroll
  for (int mt = 0; mt < kMTiles; mt++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int r = mt * 16 + group_id + 8 * h;
      if (r >= R.valid_rows) continue;
      const float4 w = *reinterpret_cast<const float4 *>(row_stats + r * kLatentKeyWarps);
      const float l = ((w.x + w.y) + w.z) + w.w;
      const int64_t token = R.first_token + r / P.heads_per_block;
      const int head = R.first_head + r % P.heads_per_block;
      for_each_out_pair<C>(out_acc[mt], h, col, [&](int c, float o0, float o1) {
        c += warp * kLatentValueChannelsPerWarp;
        if (c < P.v_head_size)
          prefill_store_pair<T, C>(P, token, head, 0, split, U.splits, c, row_max[mt][h], l, o0,
                                   o1);
      });
    }
}

template <typename T, typename C>
__global__ void __launch_bounds__(kLatentThreads, 1) latent_kernel(const prefill_params P) {
  extern __shared__ __align__(16) unsigned char smem[];
  wait_for_previous_kernel();
  prefill_take_units(P, [&](int32_t b, int32_t row_block, int32_t split, int) {
    latent_unit<T, C>(P, smem, b, row_block, split);
  });
}

// Per-instantiation entry points, defined in the latent_*.cu translation units.
template <typename T, typename C>
cudaError_t latent_set_smem(int smem_bytes);
template <typename T, typename C>
cudaError_t latent_launch(const prefill_params &P, dim3 grid, int smem_bytes, cudaStream_t stream,
                          bool chained);

#define PA_LATENT_INSTANTIATE(T, C)                                                            \
  template <>                                                                                  \
  cudaError_t latent_set_smem<T, C>(int smem_bytes) {                                          \
    return cudaFuncSetAttribute(latent_kernel<T, C>, cudaFuncAttributeMaxDynamicSharedMemorySize, \
                                smem_bytes);                                                   \
  }                                                                                            \
  template <>                                                                                  \
  cudaError_t latent_launch<T, C>(const prefill_params &P, dim3 grid, int smem_bytes,          \
                                  cudaStream_t stream, bool chained) {                         \
    return launch_chained(latent_kernel<T, C>, grid, kLatentThreads, (size_t)smem_bytes, stream, \
                          chained, P);                                                         \
  }

}  // namespace detail
}  // namespace pa
