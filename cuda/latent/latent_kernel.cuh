// The LATENT backend's kernel: absorbed MLA decode on tensor cores (mma.sync m16n8k16, sm_80 and
// newer). One KV head: every cached row is a latent row of head_size (<= 576) channels; Q·K runs
// over all of them and V is the first v_head_size (<= 512) channels of the same row, so one latent
// tile in shared memory feeds both products and nothing is loaded twice.
//
// Work units, splits, schedule and prologue are PREFILL's (prefill_kernel.cuh: prefill_params,
// prefill_unit_prologue, prefill_take_units, prefill_schedule_kernel, split_merge_kernel): a row
// block is up to kRows (query token, query head) rows of one sequence, heads innermost. Two row
// tiles, chosen at plan time (latent.cu: rows_of), one kernel template (latent_geometry):
//   - 64 rows (128 heads: two blocks per token; 64 heads; 16 heads of three or four tokens):
//     64-key steps (one schedule tile each) through a two-stage ring, all that fits beside Q;
//   - 32 rows (16-32 heads of one token, 16 heads of two): the smaller Q leaves room for a deeper
//     ring (5 stages of 16-bit rows, 6 of 8-bit), so it goes in 32-key steps, several in flight
//     while one is computed; these steps are memory-bound and need the loads in flight more than
//     rows (measured on the H200: +24 % at 16 heads 64 x 4k). 32-key steps with 64 rows would
//     double the barriers per key of the compute-bound 128-head steps (-11 % measured).
// One m16 tile of rows over 512 output channels would be 256 fp32 accumulators per thread, so the
// output channels are split across the 8 warps instead. Per step:
//   1. scores: score warp (row_warp, key_warp) computes its m16 tiles (two with 64 rows, one with
//      32, over two mma chains: even and odd k-steps) x 16 keys over the 576 channels; with 32
//      rows and 32-key steps half the warps score;
//   2. each row's step max goes through shared memory (one barrier), so every warp rescales with
//      the same running max; each score warp turns its scores into P (rounded to the MMAs' type)
//      in shared memory;
//   3. after a barrier, warp w multiplies the step's P (all rows x the step's keys) by its 64 value
//      channels [64 w, 64 w + 64) of the same rows (2 kRows accumulators per thread).
// 16-bit caches keep P in the step's rows themselves, in the channels past the value channels
// (512..575 of every row, 128 bytes: one P row of 64 keys or two of 32; their scores are done by
// then), which keeps the ring within 227 KB; 8-bit caches (half the bytes) give it a buffer of its
// own. The loader owns 16-key runs (one page each, block sizes >= 16): one block-table lookup per
// run and step, 16-byte cp.async loads.
//
// Quantized caches: the MMAs run on raw codes in fp16 (mma_input_t: exact, whatever T is); a
// per-tensor k_scale goes into the score scale, a per-channel one into Q, which goes to fp16 times
// a power of two per row block (prefill_unit_prologue), and the same k_scale dequantizes V at the
// output (prefill_store_pair / split_merge_kernel with v_scale = k_scale).
#pragma once

#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "../prefill/prefill_kernel.cuh"

namespace pa {
namespace detail {

constexpr int kLatentWidth = 576;       // Q·K channels of a tile (zero past head_size)
constexpr int kLatentValueWidth = 512;  // P·V channels (outputs past v_head_size are dropped)
constexpr int kLatentWarps = 8;
constexpr int kLatentThreads = 32 * kLatentWarps;
constexpr int kLatentTileKeys = kPrefillTileKeys;  // the schedule's tiles
constexpr int kLatentRunKeys = 16;                 // a loader run: the smallest page
constexpr int kLatentValueChannelsPerWarp = kLatentValueWidth / kLatentWarps;  // 64
constexpr int kLatentMaxStages = 8;
// The ring takes what the rest leaves of a shared-memory budget, up to kLatentMaxStages stages:
// 16-bit caches the sm_90 opt-in limit (227 KB; smaller devices refuse the plan), 8-bit caches the
// A100's (163 KB, so that it keeps serving them).
template <typename C>
constexpr int kLatentSmemBudget = sizeof(C) == 2 ? 227 * 1024 : 163 * 1024;

// What a row tile of kRows (64 or 32) rows fixes: the keys of a ring stage and compute step, and
// how the score warps tile the step's rows x keys.
template <int kRows>
struct latent_geometry {
  static_assert(kRows == 64 || kRows == 32, "the 64-row and the 32-row tile");
  static constexpr int kStepKeys = kRows == 64 ? kLatentTileKeys : 32;
  static constexpr int kStepsPerTile = kLatentTileKeys / kStepKeys;
  static constexpr int kMTiles = kRows / 16;
  static constexpr int kKeyWarps = kStepKeys / 16;  // score warps along the keys, 16 each
  static constexpr int kScoreWarps =
      kMTiles * kKeyWarps < kLatentWarps ? kMTiles * kKeyWarps : kLatentWarps;
  static constexpr int kRowWarps = kScoreWarps / kKeyWarps;  // and along the rows
  static constexpr int kScoreMTiles = kMTiles / kRowWarps;    // per score warp
  // independent mma chains per score n-tile: the m16 tiles, else even and odd k-steps
  static constexpr int kScoreChains = 2 / kScoreMTiles;
  static constexpr int kScoreUnroll = kScoreChains == 1 ? 4 : 3;  // of the Q·K^T k-loop (tuned)
  static constexpr int kAdmittedWords = kStepKeys / 32;           // ballots of a step's keys
  static_assert(kLatentTileKeys % kStepKeys == 0 && kStepKeys % kLatentRunKeys == 0,
                "steps tile the schedule's tiles, runs tile the steps");
  static_assert(kRowWarps * kScoreMTiles == kMTiles && kScoreChains * kScoreMTiles == 2,
                "the score warps tile the rows x keys of a step");
};

// Bits k.. of a step's admitted flags (one ballot word per 32 keys).
template <int kWords>
__device__ __forceinline__ uint32_t latent_admitted_bits(const uint32_t (&mapped)[kWords], int k) {
  if constexpr (kWords == 1)
    return mapped[0] >> k;
  else
    return k < 32 ? mapped[0] >> k : mapped[1] >> (k - 32);
}

// A row's entries of row_stats, one per key warp (their maxima, later their sums), in one load.
template <int kKeyWarps>
__device__ __forceinline__ void latent_row_stats(const float *row, float (&v)[kKeyWarps]) {
  static_assert(kKeyWarps == 4 || kKeyWarps == 2, "a float4 or a float2");
  if constexpr (kKeyWarps == 4) {
    const float4 w = *reinterpret_cast<const float4 *>(row);
    v[0] = w.x, v[1] = w.y, v[2] = w.z, v[3] = w.w;
  } else {
    const float2 w = *reinterpret_cast<const float2 *>(row);
    v[0] = w.x, v[1] = w.y;
  }
}
template <int kKeyWarps>
__device__ __forceinline__ float latent_row_stats_max(const float *row) {
  float v[kKeyWarps];
  latent_row_stats(row, v);
#pragma unroll
  for (int stride = 1; stride < kKeyWarps; stride *= 2)
#pragma unroll
    for (int i = 0; i + stride < kKeyWarps; i += 2 * stride) v[i] = fmaxf(v[i], v[i + stride]);
  return v[0];
}
template <int kKeyWarps>
__device__ __forceinline__ float latent_row_stats_sum(const float *row) {
  float v[kKeyWarps];
  latent_row_stats(row, v);
  float sum = v[0];
#pragma unroll
  for (int i = 1; i < kKeyWarps; i++) sum += v[i];
  return sum;
}

// Shared memory of one CTA with kRows rows (bytes): Q rows | the stage ring | P (8-bit caches) |
// each row's step max per key warp (then its sum) | row_lo, row_hi | the admitted-key flags of each
// stage.
template <typename C, int kRows>
struct latent_smem {
  using G = latent_geometry<kRows>;
  static constexpr int kRowBytes = kLatentWidth * (int)sizeof(C) + 16;  // staggers rows over banks
  static constexpr int kStageBytes = G::kStepKeys * kRowBytes;
  static constexpr int kQStride = kLatentWidth + 8;  // elements
  static constexpr bool kPInTile = sizeof(C) == 2;
  static constexpr int kPRowBytes = G::kStepKeys * 2;
  static constexpr int kPInRow = kLatentValueWidth * 2;  // P's first byte in a stage row (16-bit)
  // 16-bit: the P rows past the value channels of one stage row (one of 64 keys, two of 32)
  static constexpr int kPRowsPerStageRow = kPInTile ? (kRowBytes - 16 - kPInRow) / kPRowBytes : 1;
  static constexpr int kPStride = kPRowBytes + 16;  // P's own buffer (8-bit)
  static_assert(!kPInTile || kRows <= kPRowsPerStageRow * G::kStepKeys, "P fits past V");
  static constexpr int kQBytes = kRows * kQStride * 2;
  static constexpr int kPBytes = kPInTile ? 0 : kRows * kPStride;
  static constexpr int kFixedBytes = kQBytes + kPBytes + kRows * G::kKeyWarps * 4 + 2 * kRows * 4;
  static constexpr int kStagesFit =
      (kLatentSmemBudget<C> - kFixedBytes) / (kStageBytes + G::kStepKeys);
  static constexpr int kStages = kStagesFit < kLatentMaxStages ? kStagesFit : kLatentMaxStages;
  static_assert(kStages >= 2, "a step in flight while one is computed");
  static constexpr int kQ = 0;
  static constexpr int kRing = kQ + kQBytes;
  static constexpr int kP = kRing + kStages * kStageBytes;
  static constexpr int kRowStats = kP + kPBytes;
  static constexpr int kRowRanges = kRowStats + kRows * G::kKeyWarps * 4;
  static constexpr int kAdmitted = kRowRanges + 2 * kRows * 4;
  static constexpr int kBytes = kAdmitted + kStages * G::kStepKeys;
  // Byte offset of P row r from P's base (the step's first row + kPInRow, or the buffer).
  __device__ static __forceinline__ int p_row(int r) {
    return kPInTile ? r / kPRowsPerStageRow * kRowBytes + r % kPRowsPerStageRow * kPRowBytes
                    : r * kPStride;
  }
};
__host__ __device__ inline int latent_smem_bytes(int cache_elem_bytes, int rows) {
  if (cache_elem_bytes == 2)
    return rows == 32 ? latent_smem<__half, 32>::kBytes : latent_smem<__half, 64>::kBytes;
  return rows == 32 ? latent_smem<int8_t, 32>::kBytes : latent_smem<int8_t, 64>::kBytes;
}

// The producer side: a step's latent rows of one sequence gathered from the pages into the stage
// ring. The threads of run `run` own keys [16 run, 16 run + 16) of every step (one page, so one
// block id per step) and their 16-byte chunks in row order, so a run's consecutive threads read
// consecutive bytes. Chunks past the row's real length are zero-filled; rows outside the unit's
// key range [lo, hi) or in an unmapped block are zero-filled (so 0 * V stays finite) and flagged
// not admitted.
template <typename C, int kRows>
struct latent_kv_loader {
  using S = latent_smem<C, kRows>;
  static constexpr int kStepKeys = latent_geometry<kRows>::kStepKeys;
  static constexpr int kChunks = kLatentWidth * (int)sizeof(C) / 16;
  static constexpr int kRunThreads = kLatentThreads / (kStepKeys / kLatentRunKeys);
  static constexpr int kRunChunks = kLatentRunKeys * kChunks;
  static constexpr int kChunksPerThread = (kRunChunks + kRunThreads - 1) / kRunThreads;

  const unsigned char *cache;
  const int32_t *table_row;
  paged_kv_layout kv;
  int64_t lo, hi;
  int slot_bytes, real_chunks;
  unsigned char *stages, *admitted;
  int run, thread;  // thread: index among the run's kRunThreads

  __device__ __forceinline__ int32_t entry(int64_t step) const {
    const int64_t key = step * kStepKeys + run * kLatentRunKeys;
    return key < hi ? kv_block_entry(kv, table_row, key) : -1;
  }
  __device__ __forceinline__ void issue(int64_t step, int32_t block_entry) const {
    const int32_t block_id = kv_block_mapped(kv, block_entry);
    const int stage = (int)(step % S::kStages);
    const int64_t key0 = step * kStepKeys + run * kLatentRunKeys;
    const int first_valid = (int)max((int64_t)0, min((int64_t)kLatentRunKeys, lo - key0));
    const int end_valid = (int)max((int64_t)0, min((int64_t)kLatentRunKeys, hi - key0));
    const uint32_t valid =
        block_id >= 0 ? ((1u << end_valid) - 1u) & ~((1u << first_valid) - 1u) : 0u;
    const unsigned char *src =
        cache + (block_id >= 0 ? kv_row_offset(kv, block_id, key0, 0) * (int64_t)sizeof(C) : 0);
    unsigned char *dst = stages + stage * S::kStageBytes + run * kLatentRunKeys * S::kRowBytes;
#pragma unroll
    for (int i = 0; i < kChunksPerThread; i++) {
      const int index = thread + i * kRunThreads;
      if (kRunChunks % kRunThreads != 0 && index >= kRunChunks) break;
      const int row = index / kChunks, chunk = index % kChunks;
      const bool fill = chunk < real_chunks && (valid >> row & 1u);
      cp_async_16(dst + row * S::kRowBytes + chunk * 16,
                  fill ? src + row * slot_bytes + chunk * 16 : cache, fill);
    }
    if (thread < kLatentRunKeys)
      admitted[stage * kStepKeys + run * kLatentRunKeys + thread] = valid >> thread & 1u;
  }
};

// One work unit: split `split` of row block `row_block` of sequence b.
template <typename T, typename C, int kRows>
__device__ __forceinline__ void latent_unit(const prefill_params &P, unsigned char *smem, int32_t b,
                                            int32_t row_block, int32_t split) {
  using G = latent_geometry<kRows>;
  using S = latent_smem<C, kRows>;
  using Loader = latent_kv_loader<C, kRows>;
  using M = mma_input_t<T, C>;  // the tensor cores' element type (Q, the latent rows and P)
  constexpr int kSteps = kLatentWidth / 16;  // k-steps of Q·K^T
  constexpr int kLoads = warp_fragments<M, C>::kLoads;
  constexpr int kOutTiles = kLatentValueChannelsPerWarp / 8;
  constexpr int kMTiles = G::kMTiles;
  constexpr int kKeyWarps = G::kKeyWarps;
  constexpr int kScoreMTiles = G::kScoreMTiles;
  constexpr int kChains = G::kScoreChains;
  static_assert(kSteps % (kChains * kLoads) == 0 && kOutTiles % (2 * kLoads) == 0,
                "whole fragment loads");
  M *q_smem = reinterpret_cast<M *>(smem + S::kQ);
  unsigned char *stages = smem + S::kRing;
  float *row_stats = reinterpret_cast<float *>(smem + S::kRowStats);  // [row][key warp]
  int32_t *row_lo = reinterpret_cast<int32_t *>(smem + S::kRowRanges);
  int32_t *row_hi = row_lo + kRows;
  unsigned char *admitted = smem + S::kAdmitted;
  const prefill_unit_setup U = prefill_unit_prologue<T, C, kLatentWidth, kRows, kLatentThreads>(
      P, q_smem, S::kQStride, row_lo, row_hi, b, row_block, split, 0);
  const prefill_row_block &R = U.rows;

  Loader loader;
  loader.cache = reinterpret_cast<const unsigned char *>(P.k_cache);
  loader.table_row = P.block_table + (int64_t)b * P.kv.max_blocks_per_seq;
  loader.kv = P.kv;
  loader.lo = U.union_lo;
  loader.hi = U.union_hi;
  loader.slot_bytes = P.kv.head_size * (int)sizeof(C);
  loader.real_chunks = P.kv.head_size * (int)sizeof(C) / 16;
  loader.stages = stages;
  loader.admitted = admitted;
  loader.run = threadIdx.x / Loader::kRunThreads;
  loader.thread = threadIdx.x % Loader::kRunThreads;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group_id = lane / 4, col = (lane % 4) * 2;  // mma fragment coordinates
  // score warps: warp (row_warp, key_warp) owns m16 tiles [kScoreMTiles row_warp, +kScoreMTiles)
  // x keys [16 key_warp, +16) of a step (warp-uniform; every warp with 64 rows)
  const bool score_warp = G::kScoreWarps == kLatentWarps || warp < G::kScoreWarps;
  const int row_warp = warp / kKeyWarps, key_warp = warp % kKeyWarps;
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
  // the score rows of a score warp's thread: m16 tile kScoreMTiles row_warp + m, row halves h
  // (read by score warps only)
  int32_t my_lo[kScoreMTiles][2], my_hi[kScoreMTiles][2];
  if (score_warp) {
#pragma unroll
    for (int m = 0; m < kScoreMTiles; m++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int r = (kScoreMTiles * row_warp + m) * 16 + group_id + 8 * h;
        my_lo[m][h] = R.row_lo[r];
        my_hi[m][h] = R.row_hi[r];
      }
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
  float row_max[kMTiles][2], row_sum[kScoreMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; mt++) row_max[mt][0] = row_max[mt][1] = -INFINITY;
#pragma unroll
  for (int m = 0; m < kScoreMTiles; m++) row_sum[m][0] = row_sum[m][1] = 0.0f;

  const M *q_frag_rows =
      q_smem + (row_warp * kScoreMTiles * 16 + lane % 16) * S::kQStride + (lane / 16) * 8;
  const bool scoring = score_warp && kScoreMTiles * row_warp < active_m_tiles;
  cp_async_tile_ring<S::kStages>(
      U.tile_begin * G::kStepsPerTile, U.tile_end * G::kStepsPerTile,
      [&](int64_t step) { return loader.entry(step); },
      [&](int64_t step, int32_t block_entry) { loader.issue(step, block_entry); },
      [&](int64_t step, int stage) {
        unsigned char *step_rows = stages + stage * S::kStageBytes;
        unsigned char *p_base = S::kPInTile ? step_rows + S::kPInRow : smem + S::kP;
        const unsigned char *step_admitted = admitted + stage * G::kStepKeys;
        uint32_t mapped[G::kAdmittedWords], all_mapped = 0xffffffffu;
#pragma unroll
        for (int w = 0; w < G::kAdmittedWords; w++) {
          mapped[w] = __ballot_sync(0xffffffffu, step_admitted[32 * w + lane] != 0);
          all_mapped &= mapped[w];
        }
        const int32_t key0 = (int32_t)(step * G::kStepKeys - R.key_base);
        const bool unmasked = all_mapped == 0xffffffffu && key0 >= common_lo &&
                              key0 + G::kStepKeys <= common_hi;

        // 1. scores of this warp's m16 tiles x 16 keys (chain 0 collects the others), each row's
        // max into row_stats
        float score[kChains][kScoreMTiles][2][4];
#pragma unroll
        for (int e = 0; e < kChains; e++)
#pragma unroll
          for (int m = 0; m < kScoreMTiles; m++)
#pragma unroll
            for (int n = 0; n < 2; n++)
#pragma unroll
              for (int i = 0; i < 4; i++) score[e][m][n][i] = 0.0f;
        if (score_warp) {
          if (scoring) {
            const warp_fragments<M, C> k_frags = {step_rows + key_warp * 16 * S::kRowBytes,
                                                  S::kRowBytes, lane};
#pragma unroll G::kScoreUnroll
            for (int ks = 0; ks < kSteps; ks += kChains * kLoads) {
              uint32_t a[kChains][kScoreMTiles][kLoads][4], bk[kChains][kLoads][4];
#pragma unroll
              for (int e = 0; e < kChains; e++) {
#pragma unroll
                for (int m = 0; m < kScoreMTiles; m++)
#pragma unroll
                  for (int s = 0; s < kLoads; s++)
                    ldmatrix_x4(a[e][m][s],
                                q_frag_rows + m * 16 * S::kQStride + (ks + e * kLoads + s) * 16);
                k_frags.scores_k(bk[e], ks + e * kLoads);
              }
#pragma unroll
              for (int e = 0; e < kChains; e++)
#pragma unroll
                for (int m = 0; m < kScoreMTiles; m++)
#pragma unroll
                  for (int s = 0; s < kLoads; s++) {
                    mma_op<M>::run(score[e][m][0], a[e][m][s], bk[e][s][0], bk[e][s][1]);
                    mma_op<M>::run(score[e][m][1], a[e][m][s], bk[e][s][2], bk[e][s][3]);
                  }
            }
#pragma unroll
            for (int e = 1; e < kChains; e++)
#pragma unroll
              for (int m = 0; m < kScoreMTiles; m++)
#pragma unroll
                for (int n = 0; n < 2; n++)
#pragma unroll
                  for (int i = 0; i < 4; i++) score[0][m][n][i] += score[e][m][n][i];
          }
          transform_scores(score[0], R.qk_scale, P.softcap);
          if (!unmasked) {
#pragma unroll
            for (int m = 0; m < kScoreMTiles; m++)
#pragma unroll
              for (int n = 0; n < 2; n++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                  const int k = key_warp * 16 + n * 8 + col + (i & 1);  // key within the step
                  const uint32_t bits = latent_admitted_bits(mapped, k);
                  const int32_t key = key0 + k;
                  if (!((bits & 1u) && key >= my_lo[m][i / 2] && key < my_hi[m][i / 2]))
                    score[0][m][n][i] = -INFINITY;
                }
          }
#pragma unroll
          for (int m = 0; m < kScoreMTiles; m++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
              float key_max = fmaxf(fmaxf(score[0][m][0][2 * h], score[0][m][0][2 * h + 1]),
                                    fmaxf(score[0][m][1][2 * h], score[0][m][1][2 * h + 1]));
              key_max = fmaxf(key_max, __shfl_xor_sync(0xffffffffu, key_max, 1));
              key_max = fmaxf(key_max, __shfl_xor_sync(0xffffffffu, key_max, 2));
              const int r = (kScoreMTiles * row_warp + m) * 16 + group_id + 8 * h;
              if (lane % 4 == 0) row_stats[r * kKeyWarps + key_warp] = key_max;
            }
        }
        __syncthreads();

        // 2. every row's running max from the key warps' maxima; P of the score warps' scores
        float rescale[kMTiles][2], base[kMTiles][2];
#pragma unroll
        for (int mt = 0; mt < kMTiles; mt++)
#pragma unroll
          for (int h = 0; h < 2; h++) {
            const float step_max = latent_row_stats_max<kKeyWarps>(
                row_stats + (mt * 16 + group_id + 8 * h) * kKeyWarps);
            const softmax_step next = online_softmax_step<false>(row_max[mt][h], step_max);
            base[mt][h] = next.base;
            rescale[mt][h] = next.rescale;
          }
        if (score_warp) {
#pragma unroll
          for (int m = 0; m < kScoreMTiles; m++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
              // the m-tile index is warp-dependent: select, so the arrays stay in registers
              float my_base = base[(G::kRowWarps - 1) * kScoreMTiles + m][h];
              float my_rescale = rescale[(G::kRowWarps - 1) * kScoreMTiles + m][h];
#pragma unroll
              for (int rw = G::kRowWarps - 2; rw >= 0; rw--)
                if (row_warp == rw) {
                  my_base = base[rw * kScoreMTiles + m][h];
                  my_rescale = rescale[rw * kScoreMTiles + m][h];
                }
              row_sum[m][h] *= my_rescale;
#pragma unroll
              for (int n = 0; n < 2; n++) {
                const float p0 = softmax_exp2(score[0][m][n][2 * h] - my_base);
                const float p1 = softmax_exp2(score[0][m][n][2 * h + 1] - my_base);
                row_sum[m][h] += p0 + p1;
                const int r = (kScoreMTiles * row_warp + m) * 16 + group_id + 8 * h;
                const int k = key_warp * 16 + n * 8 + col;
                *reinterpret_cast<uint32_t *>(p_base + S::p_row(r) + k * 2) = pack_t2<M>(p0, p1);
              }
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
        for (int kk = 0; kk < G::kStepKeys / 16; kk++) {
          uint32_t a[kMTiles][4];
#pragma unroll
          for (int mt = 0; mt < kMTiles; mt++)
            if (mt < active_m_tiles)
              ldmatrix_x4(a[mt], p_base + S::p_row(mt * 16 + lane % 16) +
                                     (kk * 16 + (lane / 16) * 8) * 2);
          const warp_fragments<M, C> v_frags = {step_rows + kk * 16 * S::kRowBytes, S::kRowBytes,
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
                  mma_op<M>::run(out_acc[mt][n + 2 * s], a[mt], bv[s][0], bv[s][1]);
                  mma_op<M>::run(out_acc[mt][n + 2 * s + 1], a[mt], bv[s][2], bv[s][3]);
                }
              }
          }
        }
      });

  // Each row's sum over the key warps (the ring ended with a barrier: row_stats is free), then
  // this warp's channels of every valid row, finalized or written as a partial state.
  if (score_warp) {
#pragma unroll
    for (int m = 0; m < kScoreMTiles; m++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        float l = row_sum[m][h];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const int r = (kScoreMTiles * row_warp + m) * 16 + group_id + 8 * h;
        if (lane % 4 == 0) row_stats[r * kKeyWarps + key_warp] = l;
      }
  }
  __syncthreads();
#pragma unroll
  for (int mt = 0; mt < kMTiles; mt++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int r = mt * 16 + group_id + 8 * h;
      if (r >= R.valid_rows) continue;
      const float l = latent_row_stats_sum<kKeyWarps>(row_stats + r * kKeyWarps);
      const int64_t token = R.first_token + prefill_row_token(P, r);
      const int head = R.first_head + prefill_row_head(P, r);
      const prefill_row_state row = prefill_row_state_of<T>(P, head, U.splits, row_max[mt][h], l);
      // (pair by pair: prefill_store_row here made this kernel spill four times as much)
      for_each_out_pair<C>(out_acc[mt], h, col, [&](int c, float o0, float o1) {
        c += warp * kLatentValueChannelsPerWarp;
        if (c < P.v_head_size)
          prefill_store_pair<T, C>(P, token, head, 0, split, U.splits, c, row, o0, o1);
      });
    }
}

template <typename T, typename C, int kRows>
__global__ void __launch_bounds__(kLatentThreads, 1) latent_kernel(const prefill_params P) {
  extern __shared__ __align__(16) unsigned char smem[];
  wait_for_previous_kernel();
  prefill_take_units(P, [&](int32_t b, int32_t row_block, int32_t split, int) {
    latent_unit<T, C, kRows>(P, smem, b, row_block, split);
  });
}

// Per-instantiation entry points, defined in the latent_*.cu translation units; kRows 32 or 64.
template <typename T, typename C, int kRows>
cudaError_t latent_set_smem(int smem_bytes);
template <typename T, typename C, int kRows>
cudaError_t latent_launch(const prefill_params &P, dim3 grid, int smem_bytes, cudaStream_t stream,
                          bool chained);

#define PA_LATENT_INSTANTIATE_ROWS(T, C, ROWS)                                                 \
  template <>                                                                                  \
  cudaError_t latent_set_smem<T, C, ROWS>(int smem_bytes) {                                    \
    return cudaFuncSetAttribute(latent_kernel<T, C, ROWS>,                                     \
                                cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);      \
  }                                                                                            \
  template <>                                                                                  \
  cudaError_t latent_launch<T, C, ROWS>(const prefill_params &P, dim3 grid, int smem_bytes,    \
                                        cudaStream_t stream, bool chained) {                   \
    return launch_chained(latent_kernel<T, C, ROWS>, grid, kLatentThreads, (size_t)smem_bytes, \
                          stream, chained, P);                                                 \
  }
#define PA_LATENT_INSTANTIATE(T, C)    \
  PA_LATENT_INSTANTIATE_ROWS(T, C, 64) \
  PA_LATENT_INSTANTIATE_ROWS(T, C, 32)

}  // namespace detail
}  // namespace pa
