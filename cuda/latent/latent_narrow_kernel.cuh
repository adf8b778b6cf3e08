// The LATENT backend's Hopper kernel for narrow row blocks (sm_90a, fp16 / bf16 caches, head_size
// 576, v_head_size 512, at most 16 (query token, query head) rows per sequence: 16 heads of one
// token, DeepSeek's 128 heads on 8 devices). These steps are memory-bound, and the 64-row kernel
// (latent_hopper_kernel.cuh) would compute 48 padding rows. Here the keys are the M dimension of
// both products, so the rows are wgmma's N (kRows = 16) and no product is padded. (At N = 32, with
// a ring of 22 panels, it measured 10 % slower than the 64-row kernel, doc/performance.md,
// eighteenth measurement: 17-32 rows take that one.)
//   Sᵀ (64 keys x kRows)  = K Qᵀ: wgmma m64nRk16, K (the tile) and Q from shared memory, 36 k-steps;
//   Oᵀ (512 x kRows)     += Vᵀ Pᵀ: eight m64nRk16 blocks of 64 value channels per k-step of 16
//                           keys, Vᵀ the tile's first 512 channels read M-major (the transpose
//                           bit), Pᵀ (rounded to T) through shared memory.
// A CTA is two warpgroups. The producer is the 64-row kernel's (latent_hopper_produce); its
// latent_produce_tile for this layout loads each 64-key tile as nine 64-channel panels into a ring
// of panels, each with its own barriers, so that 2.8 tiles fit where two 72 KB tile slots would
// (ncu: with two slots about one tile was in flight per multiprocessor). The consumer warpgroup
// takes each tile in turn: its softmax (each row's maximum over the tile's keys: the thread's two,
// the warp's sixteen by shuffles, the four warps' through shared memory), Pᵀ written, then its
// P V issued with the next tile's scores; the tile's panels are freed as soon as its P V is done.
// The output is 64 fp32 accumulators per thread (16 rows), stored at the end of
// the unit as PREFILL's pairs of channels (a shuffle pairs channel c with c + 1).
// Work units, row blocks, splits, the schedule and the merge are LATENT's (latent.cu).
#pragma once

#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "../common/split_merge.cuh"
#include "latent_hopper_kernel.cuh"

namespace pa {
namespace detail {

constexpr int kLatentNarrowThreads = 2 * kLatentHopperWarpgroupThreads;
constexpr int kLatentNarrowRows = 16;  // the rows the launcher plans it at
// Named barrier of the consumer warpgroup (the producer's is kLatentHopperProducerBarrier).
constexpr int kLatentNarrowConsumerBarrier = 2;
// Plans of at most this many split slots merge in the kernel (P.merge_arrivals): a warp holds
// every split's row (merge_row_in_warp, the merge kernel's bits).
constexpr int kLatentNarrowMergeSplits = 4;

// Shared memory from a 1024-byte aligned base: Q ([kRows] x 576, nine swizzled panels of [kRows
// rows][128 bytes]), the ring of kPanels latent panels (64 keys x 64 channels, [64 rows][128
// bytes] swizzled; a tile is nine consecutive ones, wrapping around), Pᵀ ([kRows rows][64 keys],
// one swizzled panel), the unit slot, each warp's row maxima (then sums), each panel slot's
// loaded-keys word (a tile's first panel holds the tile's), the barriers and the producer's
// scratch. The ring takes what the rest leaves of the 227 KB: 2.8 tiles.
template <int kRows>
struct latent_narrow_geometry {
  static_assert(kRows == kLatentNarrowRows, "wgmma's N: the 16 rows of the narrow tile");
  static constexpr int kQRows = kRows;
  static constexpr int kChunks = kLatentHopperWidth / 8;
  static constexpr int kTilePanels = kLatentHopperWidth / 64;  // 9
  static constexpr int kPanels = 25;
  static constexpr int kPanelBytes = kLatentHopperKeys * 128;
  static constexpr int kQBytes = kRows * kLatentHopperWidth * 2;
  static constexpr int kPanelOffset = kQBytes;
  static constexpr int kPOffset = kPanelOffset + kPanels * kPanelBytes;
  static constexpr int kUnitOffset = kPOffset + kRows * 128;
  static constexpr int kStatsOffset =
      (kUnitOffset + (int)sizeof(latent_hopper_unit) + 15) / 16 * 16;
  static constexpr int kFlagOffset = kStatsOffset + 4 * kRows * 4;
  static constexpr int kBarrierOffset = kFlagOffset + kPanels * 8;
  static constexpr int kBarriers = 2 * kPanels + 2;
  static constexpr int kScratchOffset = kBarrierOffset + kBarriers * 8;
  // + 1024: the dynamic base is aligned at run time
  static constexpr int kSmemBytes = kScratchOffset + (int)sizeof(hopper_scratch) + 1024;
  static_assert(kQBytes % 1024 == 0 && kPOffset % 1024 == 0, "swizzled tiles are 1024-aligned");
  static_assert(kPanels >= 2 * kTilePanels, "the ring holds two tiles");
  static_assert(kSmemBytes <= 227 * 1024, "one CTA fits an H200 multiprocessor");
};

template <int kRows>
struct latent_narrow_smem {
  using G = latent_narrow_geometry<kRows>;
  using tile_ring = ring_position<G::kPanels>;  // counts panels
  unsigned char *base;  // 1024-byte aligned
  __device__ unsigned char *q() const { return base; }
  __device__ unsigned char *panel(int i) const {
    return base + G::kPanelOffset + i * G::kPanelBytes;
  }
  __device__ unsigned char *p_tile() const { return base + G::kPOffset; }
  __device__ latent_hopper_unit *unit() const {
    return reinterpret_cast<latent_hopper_unit *>(base + G::kUnitOffset);
  }
  // [consumer warp][row]
  __device__ float *warp_stats() const {
    return reinterpret_cast<float *>(base + G::kStatsOffset);
  }
  // bit k: key k of the tile starting at panel slot i was loaded (in the unit's keys and in a
  // mapped block)
  __device__ uint64_t *loaded_keys(int i) const {
    return reinterpret_cast<uint64_t *>(base + G::kFlagOffset) + i;
  }
  __device__ uint64_t *barrier(int i) const {
    return reinterpret_cast<uint64_t *>(base + G::kBarrierOffset) + i;
  }
  __device__ uint64_t *full(int i) const { return barrier(i); }
  __device__ uint64_t *empty(int i) const { return barrier(G::kPanels + i); }
  __device__ uint64_t *unit_full() const { return barrier(2 * G::kPanels); }
  __device__ uint64_t *unit_empty() const { return barrier(2 * G::kPanels + 1); }
  __device__ hopper_scratch *scratch() const {
    return reinterpret_cast<hopper_scratch *>(base + G::kScratchOffset);
  }
};

#if PA_SM90A

// One latent tile into the panel ring (the producer's part for it, latent_hopper_produce): warp
// `run`'s 16 keys (latent_page_run; its page map unused: with a box per panel this kernel ran 3-8 %
// slower, doc/performance.md, twenty-first measurement) into rows 16 run .. 16 run + 15 of the
// tile's nine panels, each once the consumers have freed its slot and each with its own "full"
// barrier, so a panel lands while the next waits for room. Lane l takes chunk l % 8 of rows
// l / 8 + 4 i of each panel: 128 contiguous bytes per eight lanes.
template <int kRows>
__device__ __forceinline__ void latent_produce_tile(const latent_narrow_smem<kRows> &S,
                                                    ring_position<latent_narrow_geometry<kRows>::kPanels> &pos,
                                                    const latent_page_run &R, int64_t slot_bytes,
                                                    const unsigned char *cache) {
  using G = latent_narrow_geometry<kRows>;
  const int lane = threadIdx.x % 32, run = threadIdx.x / 32;
  const int chunk = lane % 8;
  const unsigned char *src_rows[kLatentHopperRunKeys / 4];
  bool fill[kLatentHopperRunKeys / 4];
#pragma unroll
  for (int i = 0; i < kLatentHopperRunKeys / 4; i++) {
    const int row = lane / 8 + 4 * i;
    fill[i] = R.valid >> row & 1u;
    // (a row not filled reads nothing; its address stays inside the cache's first row)
    src_rows[i] = (fill[i] ? R.src + row * slot_bytes : cache) + chunk * 16;
  }
#pragma unroll 1
  for (int p = 0; p < G::kTilePanels; p++) {
    mbarrier_wait(S.empty(pos.slot), pos.phase ^ 1u);
    unsigned char *panel = S.panel(pos.slot);
#pragma unroll
    for (int i = 0; i < kLatentHopperRunKeys / 4; i++)
      cp_async_16(panel + swizzle128_chunk_offset(kLatentHopperKeys,
                                                  run * kLatentHopperRunKeys + lane / 8 + 4 * i,
                                                  chunk),
                  src_rows[i] + p * 128, fill[i]);
    if (p == 0 && lane == 0)  // the run's bits of the tile's loaded-keys word
      reinterpret_cast<uint16_t *>(S.loaded_keys(pos.slot))[run] = (uint16_t)R.valid;
    mbarrier_track_cp_async(S.full(pos.slot));
    mbarrier_arrive(S.full(pos.slot));
    pos.advance();
  }
}

// The merge without a merge kernel (P.merge_arrivals): the last unit of a row block to finish
// merges its `splits` splits, a warp per row, in the merge kernel's arithmetic (the same bits,
// split_merge.cuh), reading the other units' partial rows through L2. At 16 heads x 64 x 4k
// (two splits per sequence) this saves the merge kernel's launch and its wait for the whole grid.
// Called by the consumer warpgroup after the unit's partial stores.
template <typename T>
__device__ __forceinline__ void latent_narrow_merge_if_last(const prefill_params &P,
                                                            int64_t first_token, int first_head,
                                                            int valid_rows, int32_t splits) {
  const int consumer = threadIdx.x - kLatentHopperWarpgroupThreads;
  const int warp = consumer / 32, lane = consumer % 32;
  // every consumer thread's partial stores, before the arrival's release
  named_barrier_sync(kLatentNarrowConsumerBarrier, kLatentHopperWarpgroupThreads);
  bool last = false;
  if (consumer == 0) {
    unsigned int *counter =
        P.merge_arrivals + first_token * P.head_blocks + first_head / P.heads_per_block;
    last = arrive_after_partials(counter) + 1u == (unsigned)splits;
  }
  // (no thread's arrival was the last: return)
  if (named_barrier_and(kLatentNarrowConsumerBarrier, kLatentHopperWarpgroupThreads, !last))
    return;
  split_merge_params M = {};
  M.partial_out = P.partial_out;
  M.partial_ml = P.partial_ml;
  M.num_split_slots = P.num_split_slots;
  M.num_heads = P.num_heads;
  M.group_size = P.num_heads;  // one KV head
  M.head_size = P.v_head_size;
  M.head_sink = P.head_sink;
  M.output = P.output;  // a 16-bit cache: no value scale
  for (int r = warp; r < valid_rows; r += kLatentHopperWarpgroupThreads / 32) {
    const int64_t token = first_token + prefill_row_token(P, r);
    merge_row_in_warp<T, kLatentHopperValueWidth / 128, kLatentNarrowMergeSplits>(
        M, token, first_head + prefill_row_head(P, r), token * P.num_split_slots, splits, lane);
  }
}

// The masks of this thread's scores Sᵀ (accumulator layout of m64nRk16: score[j][i] is key
// key_in_tile + 8 (i / 2) of the tile, row 8 j + col + i % 2): a key is kept when it was loaded
// (bit k of `mapped`) and lies in its row's admitted range [U->row_lo, U->row_hi) (relative to the
// unit's key_base; key0 is the tile's first key relative to it). The ranges are read from the
// unit slot: held in registers across the unit they spilled at N = 32 (not measured at 16).
template <int kN>
__device__ __forceinline__ void latent_narrow_mask(float (&score)[kN][4], int32_t key0,
                                                   int key_in_tile, uint64_t mapped,
                                                   const latent_hopper_unit *U, int col) {
#pragma unroll
  for (int j = 0; j < kN; j++)
#pragma unroll
    for (int e = 0; e < 2; e++) {
      const int32_t lo = U->row_lo[8 * j + col + e], hi = U->row_hi[8 * j + col + e];
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int k = key_in_tile + 8 * h;
        const int32_t key = key0 + k;
        if (!(((mapped >> k) & 1u) && key >= lo && key < hi)) score[j][2 * h + e] = -INFINITY;
      }
    }
}

// Byte offset of Pᵀ's element (row, key) in its panel ([kRows rows][128 bytes], swizzled): the
// B operand of O += Vᵀ Pᵀ, K-major.
__device__ __forceinline__ int latent_narrow_p_offset(int row, int key) {
  return swizzle128_chunk_offset(0, row, key / 8) + (key % 8) * 2;
}

// The consumer warpgroup (see the header comment). Its warp w holds keys 16 w .. 16 w + 15 of each
// tile's scores and value channels 64 b + 16 w .. 64 b + 16 w + 15 of each block b of Oᵀ.
template <typename T, int kRows>
__device__ __forceinline__ void latent_narrow_consume(const prefill_params &P,
                                                      const latent_narrow_smem<kRows> &S) {
  using mma = wgmma_m64k16<T>;
  constexpr int kN = kRows / 8;                                 // n8 tiles of rows
  constexpr int kValueBlocks = kLatentHopperValueWidth / 64;    // m64 blocks of Oᵀ
  constexpr int kScoreSteps = kLatentHopperWidth / 16;          // k-steps of Sᵀ
  constexpr int kValueSteps = kLatentHopperKeys / 16;           // k-steps of Oᵀ
  constexpr int kThreads = kLatentHopperWarpgroupThreads;
  const int consumer = threadIdx.x - kLatentHopperWarpgroupThreads;
  const int warp = consumer / 32, lane = consumer % 32, group_id = lane / 4, col = (lane % 4) * 2;
  const int key_in_tile = warp * 16 + group_id;  // and + 8
  const bool odd = group_id & 1;                 // the epilogue's channel pairs
  const latent_hopper_unit *U = S.unit();
  const uint32_t q_tile = shared_address(S.q()), p_tile = shared_address(S.p_tile());
  unsigned char *const p_bytes = S.p_tile();
  float *const stats = S.warp_stats();
  ring_position<1> unit_pos = {0, 0u};
  using panel_ring = ring_position<latent_narrow_geometry<kRows>::kPanels>;
  constexpr int kTilePanels = latent_narrow_geometry<kRows>::kTilePanels;
  panel_ring tile_pos = {0, 0u};  // the current tile's first panel
  // f(p, position of the tile's panel p) for the nine panels of the tile starting at `first`
  auto for_each_panel = [&](panel_ring first, auto &&f) {
#pragma unroll
    for (int p = 0; p < kTilePanels; p++) {
      f(p, first);
      first.advance();
    }
  };
  auto next_tile = [&](panel_ring &pos) {
#pragma unroll
    for (int p = 0; p < kTilePanels; p++) pos.advance();
  };
  for (;;) {
    mbarrier_wait(S.unit_full(), unit_pos.phase);
    if (U->done) break;
    const int64_t first_token = U->first_token, key_base = U->key_base;
    const int64_t tile_begin = U->tile_begin, tile_end = U->tile_end;
    const int32_t split = U->split, splits = U->splits, first_head = U->first_head;
    const int valid_rows = U->valid_rows;
    const bool has_rows = valid_rows > 0;

    float out_acc[kValueBlocks][kN][4], row_max[kN][2], row_sum[kN][2];
#pragma unroll
    for (int j = 0; j < kN; j++) {
#pragma unroll
      for (int b = 0; b < kValueBlocks; b++)
#pragma unroll
        for (int i = 0; i < 4; i++) out_acc[b][j][i] = 0.0f;
      row_max[j][0] = row_max[j][1] = -INFINITY;
      row_sum[j][0] = row_sum[j][1] = 0.0f;
    }
    float scores[1][kN][4];  // softmax_step_scores takes m16 tiles
    float(&score)[kN][4] = scores[0];
    // the odd k-steps' half of the scores: two accumulation chains of 18 wgmmas instead of one of
    // 36, which N = 16 leaves bound by each wgmma's latency, summed before the softmax
    float score_odd[kN][4];
    // The tile at tile_pos landed, all its panels (converged again after the waits' loops).
    auto acquire = [&]() {
      for_each_panel(tile_pos, [&](int, const panel_ring &at) {
        mbarrier_wait(S.full(at.slot), at.phase);
      });
      __syncwarp();
      fence_async_proxy();  // the tile landed through cp.async
    };
    // A block of GEMMs (std::bool_constant flags: no run-time branch around a wgmma, which would
    // make ptxas serialize them all, C7518 / C7520): P V of the tile at pv_pos, then the scores
    // of the tile at tile_pos queued behind it once that tile landed, so the tensor cores go from
    // one to the other without draining; P V's panels are freed as soon as it is done.
    // Q's and Pᵀ's addresses pass through an empty asm at each block: their 40 descriptors,
    // hoisted out of the loop, would hold 80 registers (they spilled at N = 32).
    auto block = [&](auto values, auto scores_next, panel_ring pv_pos) {
      uint32_t q_at = q_tile, p_at = p_tile;
      asm volatile("" : "+r"(q_at), "+r"(p_at));
      q_at = warp_uniform(q_at);
      p_at = warp_uniform(p_at);
      if constexpr (decltype(values)::value) {
        uint32_t v_panel[kValueBlocks];
        for_each_panel(pv_pos, [&](int p, const panel_ring &at) {
          if (p < kValueBlocks) v_panel[p] = warp_uniform(shared_address(S.panel(at.slot)));
        });
        wgmma_fence();
#pragma unroll
        for (int s = 0; s < kValueSteps; s++)
#pragma unroll
          for (int b = 0; b < kValueBlocks; b++)
            mma::template shared_ab<1, 1>(out_acc[b],
                                          hopper_n_major_desc(v_panel[b], kLatentHopperKeys, s, 0),
                                          hopper_k_major_desc(p_at, kRows, s));
        wgmma_commit();
      }
      if constexpr (decltype(scores_next)::value) {
        acquire();
        uint32_t k_panel[kTilePanels];
        for_each_panel(tile_pos, [&](int p, const panel_ring &at) {
          k_panel[p] = warp_uniform(shared_address(S.panel(at.slot)));
        });
        wgmma_fence();
#pragma unroll
        for (int s = 0; s < kScoreSteps; s++) {
          const uint64_t k_desc = hopper_k_major_desc(k_panel[s / 4], kLatentHopperKeys, s % 4);
          const uint64_t q_desc = hopper_k_major_desc(q_at, kRows, s);
          if (s < 2)
            mma::template shared_ab<0>(s % 2 ? score_odd : score, k_desc, q_desc);
          else
            mma::template shared_ab<1>(s % 2 ? score_odd : score, k_desc, q_desc);
        }
        wgmma_commit();
      }
      if constexpr (decltype(values)::value) {
        // P V has read the tile and Pᵀ (the scores may still run)
        if constexpr (decltype(scores_next)::value)
          wgmma_wait<1>();
        else
          wgmma_wait<0>();
        for_each_panel(pv_pos,
                       [&](int, const panel_ring &at) { mbarrier_arrive(S.empty(at.slot)); });
      }
      wgmma_wait<0>();
      wgmma_fence_operands(score);
      wgmma_fence_operands(score_odd);
#pragma unroll
      for (int b = 0; b < kValueBlocks; b++) wgmma_fence_operands(out_acc[b]);
      if constexpr (decltype(scores_next)::value) {
#pragma unroll
        for (int j = 0; j < kN; j++)
#pragma unroll
          for (int i = 0; i < 4; i++) score[j][i] += score_odd[j][i];
      }
    };
    // The online-softmax step of the scores of the tile at tile_pos (keys from key0, relative
    // to key_base): Pᵀ into its panel, the output rescaled.
    auto softmax = [&](int32_t key0) {
      const uint64_t mapped = *S.loaded_keys(tile_pos.slot);
      const float score_scale = softmax_step_scores(scores, P.scale, P.softcap);
      latent_narrow_mask(score, key0, key_in_tile, mapped, U, col);
      // each row's maximum over the tile: the thread's two keys, the warp's sixteen, then the
      // four warps' in one order for all (the barrier after Pᵀ orders these reads before the
      // next tile's writes)
#pragma unroll
      for (int j = 0; j < kN; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
          float m = fmaxf(score[j][e], score[j][2 + e]);
          m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 4));
          m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 8));
          m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 16));
          if (group_id == 0) stats[warp * kRows + 8 * j + col + e] = m;
        }
      named_barrier_sync(kLatentNarrowConsumerBarrier, kThreads);
      float rescale[kN][2], base[kN][2];
#pragma unroll
      for (int j = 0; j < kN; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
          const float *row_stats = stats + 8 * j + col + e;
          const float m = fmaxf(fmaxf(row_stats[0], row_stats[kRows]),
                                fmaxf(row_stats[2 * kRows], row_stats[3 * kRows]));
          const softmax_step step = online_softmax_step<false>(row_max[j][e], m * score_scale);
          rescale[j][e] = step.rescale;
          base[j][e] = step.base;
          row_sum[j][e] *= step.rescale;
        }
      // Pᵀ, rounded to T, into its panel (the previous tile's P V has read it)
#pragma unroll
      for (int j = 0; j < kN; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
          const float p = softmax_weight(score[j][i], score_scale, base[j][i % 2]);
          row_sum[j][i % 2] += p;
          *reinterpret_cast<T *>(p_bytes + latent_narrow_p_offset(8 * j + col + i % 2,
                                                                  key_in_tile + 8 * (i / 2))) =
              from_float<T>(p);
        }
      bool any_rescale = false;
#pragma unroll
      for (int j = 0; j < kN; j++) any_rescale |= rescale[j][0] != 1.0f || rescale[j][1] != 1.0f;
      if (__any_sync(0xffffffffu, any_rescale)) {
#pragma unroll
        for (int b = 0; b < kValueBlocks; b++)
#pragma unroll
          for (int j = 0; j < kN; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) out_acc[b][j][i] *= rescale[j][i % 2];
      }
      fence_async_proxy();  // Pᵀ was written through the generic proxy
      named_barrier_sync(kLatentNarrowConsumerBarrier, kThreads);
    };
    const int64_t tiles = tile_end - tile_begin;
    if (!has_rows) {  // (uniform) the unit's tiles pass through
      for (int64_t j = 0; j < tiles; j++) {
        for_each_panel(tile_pos, [&](int, const panel_ring &at) {
          mbarrier_wait(S.full(at.slot), at.phase);
          mbarrier_arrive(S.empty(at.slot));
        });
        next_tile(tile_pos);
      }
    } else if (tiles > 0) {
      // Tile j's softmax, then its P V issued with tile j + 1's scores behind it (the wait for
      // tile j + 1 overlaps the P V), both done before the next softmax.
      block(std::false_type(), std::true_type(), tile_pos);
      for (int64_t j = 0; j + 1 < tiles; j++) {
        softmax((int32_t)((tile_begin + j) * kLatentHopperKeys - key_base));
        const panel_ring pv_pos = tile_pos;
        next_tile(tile_pos);
        block(std::true_type(), std::true_type(), pv_pos);
      }
      softmax((int32_t)((tile_end - 1) * kLatentHopperKeys - key_base));
      const panel_ring pv_pos = tile_pos;
      next_tile(tile_pos);
      block(std::true_type(), std::false_type(), pv_pos);
    }
    mbarrier_arrive(S.unit_empty());  // Q and the rows are no longer read
    unit_pos.advance();
    if (!has_rows) continue;

    // Each row's sum: the thread's keys, the warp's, then the four warps' (the last tile's
    // barrier ordered every read of the maxima before these writes; the second barrier every read
    // of the sums before the next unit's maxima).
    float l[kN][2];
#pragma unroll
    for (int j = 0; j < kN; j++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        float x = row_sum[j][e];
        x += __shfl_xor_sync(0xffffffffu, x, 4);
        x += __shfl_xor_sync(0xffffffffu, x, 8);
        x += __shfl_xor_sync(0xffffffffu, x, 16);
        if (group_id == 0) stats[warp * kRows + 8 * j + col + e] = x;
      }
    named_barrier_sync(kLatentNarrowConsumerBarrier, kThreads);
#pragma unroll
    for (int j = 0; j < kN; j++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const float *row_stats = stats + 8 * j + col + e;
        l[j][e] = (row_stats[0] + row_stats[kRows]) + (row_stats[2 * kRows] + row_stats[3 * kRows]);
      }
    named_barrier_sync(kLatentNarrowConsumerBarrier, kThreads);

    // Oᵀ's element [b][j][2 h + e] is channel 64 b + 16 warp + group_id + 8 h of row 8 j + col + e.
    // Lanes 4 apart hold channels c and c ^ 1 of the same two rows: one shuffle gives the even
    // lane the pair (c, c + 1) of row 8 j + col and the odd lane that of row 8 j + col + 1.
    // Each row's pairs go out through prefill_store_row (its choices made once per row).
    const int pair_c0 = 16 * warp + group_id - (odd ? 1 : 0);  // channel 64 b + 8 h + pair_c0
#pragma unroll
    for (int j = 0; j < kN; j++) {
      const int r = 8 * j + col + (odd ? 1 : 0);
      float2 pairs[kValueBlocks][2];
#pragma unroll
      for (int b = 0; b < kValueBlocks; b++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const float v0 = out_acc[b][j][2 * h], v1 = out_acc[b][j][2 * h + 1];
          const float x = __shfl_xor_sync(0xffffffffu, odd ? v0 : v1, 4);
          pairs[b][h] = make_float2(odd ? x : v0, odd ? v1 : x);
        }
      if (r >= valid_rows) continue;
      const int64_t token = first_token + prefill_row_token(P, r);
      const int head = first_head + prefill_row_head(P, r);
      const prefill_row_state row = prefill_row_state_of<T>(
          P, head, splits, odd ? row_max[j][1] : row_max[j][0], odd ? l[j][1] : l[j][0]);
      prefill_store_row<T, T>(P, token, head, 0, split, splits, row, pair_c0 == 0,
                              [&](auto &&visit) {
#pragma unroll
                                for (int b = 0; b < kValueBlocks; b++)
#pragma unroll
                                  for (int h = 0; h < 2; h++)
                                    visit(64 * b + 8 * h + pair_c0, pairs[b][h].x, pairs[b][h].y);
                              });
    }
    if (P.merge_arrivals && splits > 1)
      latent_narrow_merge_if_last<T>(P, first_token, first_head, valid_rows, splits);
  }
}

#endif  // PA_SM90A

// A persistent grid of one CTA per multiprocessor; the producer takes the units.
template <typename T, int kRows>
__global__ void __launch_bounds__(kLatentNarrowThreads, 1) latent_narrow_kernel(
    const prefill_params P, const __grid_constant__ kv_page_maps maps) {
#if PA_SM90A
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const latent_narrow_smem<kRows> S = {smem_raw + swizzle_align_bytes(smem_raw)};
  if (threadIdx.x == 0) {
    for (int i = 0; i < latent_narrow_geometry<kRows>::kPanels; i++) {
      mbarrier_init(S.full(i), kLatentHopperWarpgroupThreads);  // the four runs' warps
      mbarrier_init(S.empty(i), kLatentHopperWarpgroupThreads);
    }
    mbarrier_init(S.unit_full(), kLatentHopperWarpgroupThreads);
    mbarrier_init(S.unit_empty(), kLatentHopperWarpgroupThreads);
    mbarrier_init_fence();
  }
  __syncthreads();
  if (threadIdx.x < kLatentHopperWarpgroupThreads) {
    latent_hopper_produce<T, true>(P, maps, S);  // waits for the previous kernel itself
  } else {
    wait_for_previous_kernel();  // before the unit's stores
    latent_narrow_consume<T, kRows>(P, S);
    latent_zero_rows_of_no_sequence<T, true>(P, kLatentHopperWarpgroupThreads);
  }
#endif
}

// Per-instantiation entry points, defined in latent_hopper.cu.
template <typename T, int kRows>
cudaError_t latent_narrow_set_smem(int smem_bytes);
template <typename T, int kRows>
cudaError_t latent_narrow_launch(const prefill_params &P, const kv_page_maps &maps, dim3 grid,
                                 int smem_bytes, cudaStream_t stream, bool chained);

#define PA_LATENT_NARROW_INSTANTIATE(T, ROWS)                                                  \
  template <>                                                                                  \
  cudaError_t latent_narrow_set_smem<T, ROWS>(int smem_bytes) {                                \
    return cudaFuncSetAttribute(latent_narrow_kernel<T, ROWS>,                                 \
                                cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);      \
  }                                                                                            \
  template <>                                                                                  \
  cudaError_t latent_narrow_launch<T, ROWS>(const prefill_params &P, const kv_page_maps &maps, \
                                            dim3 grid, int smem_bytes, cudaStream_t stream,    \
                                            bool chained) {                                    \
    return launch_chained(latent_narrow_kernel<T, ROWS>, grid, kLatentNarrowThreads,           \
                          (size_t)smem_bytes, stream, chained, P, maps);                       \
  }

}  // namespace detail
}  // namespace pa
