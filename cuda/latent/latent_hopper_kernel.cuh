// The LATENT backend's Hopper kernel (sm_90a, fp16 / bf16 caches, head_size 576, v_head_size 512):
// absorbed MLA decode on wgmma. Work units, row blocks of 64 (query token, query head) rows, splits
// and schedule are LATENT's (PREFILL's prefill_work_of / prefill_unit_rows_of / prefill_unit_tiles,
// the split merge); the compute is warpgroups fed by a producer, as in prefill_hopper_kernel.cuh.
//
// A CTA is three warpgroups. The producer (warpgroup 0, registers given back with setmaxnreg)
// takes a unit and gathers its 64-key latent tiles into a two-stage ring: each of its warps owns a
// 16-key run (one page: block sizes >= 16), every 16-byte chunk with cp.async at its
// 128-byte-swizzled place (wgmma.cuh: a 576-channel row is nine 64-channel panels), rows outside
// the unit's keys or in unmapped blocks zero-filled and left out of the stage's loaded-keys word.
// The unit slot (its rows' admitted keys and its 64 Q rows) is written once the consumers have
// freed it, after the unit's first two tiles: the ring stays full across unit boundaries.
// Two consumer warpgroups share the 64 rows and split the work of each tile:
//   1. scores: warpgroup w computes S_w = Q K^T for keys 32 w .. 32 w + 31 (wgmma m64n32k16, Q and
//      K from shared memory, 36 k-steps), scales and masks it;
//   2. each row's maximum over its 32 keys goes through shared memory (named barrier of the two
//      warpgroups), so both apply the same running max and rescale (the same arithmetic on the
//      same values: their softmax states agree bit for bit); each keeps the sum over its own keys;
//   3. P (rounded to T) of its keys goes into the stage's last panel (channels 512..575, whose
//      scores are done) at the A operand's place; after a second named barrier each warpgroup
//      loads all of P as register fragments and computes O_w += P V_w for its 256 value channels
//      [256 w, 256 w + 256) (wgmma m64n128k16, V N-major from the same stage: nothing is loaded
//      twice), 128 fp32 accumulators per thread.
// At the end of a unit the two halves of each row's sum meet through shared memory and each
// warpgroup stores its channels (finalized, or as a split partial for split_merge_kernel).
// Shared memory: Q 72 KB + two 72 KB stages + the unit slot, under the 227 KB of an H200 CTA.
#pragma once

#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "../common/chained_launch.cuh"
#include "../common/mbarrier.cuh"
#include "../common/tensor_core.cuh"
#include "../common/wgmma.cuh"
#include "../prefill/prefill_hopper_kernel.cuh"
#include "../prefill/prefill_kernel.cuh"

namespace pa {
namespace detail {

constexpr int kLatentHopperWidth = 576;       // the only head_size this kernel serves
constexpr int kLatentHopperValueWidth = 512;  // and v_head_size
constexpr int kLatentHopperRows = 64;
constexpr int kLatentHopperKeys = kPrefillTileKeys;
constexpr int kLatentHopperStages = 2;
constexpr int kLatentHopperWarpgroupThreads = 128;
constexpr int kLatentHopperThreads = 3 * kLatentHopperWarpgroupThreads;
// Every consumer thread arrives on the "empty" barriers: each has read P (or the unit's rows)
// from shared memory itself, so its own arrive orders those reads before the producer's next write.
constexpr int kLatentHopperConsumerThreads = 2 * kLatentHopperWarpgroupThreads;
constexpr int kLatentHopperRunKeys = 16;  // a producer warp's keys of a tile: one page
// as PREFILL's Hopper kernel: 128 x (56 + 2 x 224) <= 65536
constexpr int kLatentHopperProducerRegisters = 56;
constexpr int kLatentHopperConsumerRegisters = 224;
constexpr int kLatentHopperProducerBarrier = 1;  // the producer warpgroup's named barrier
constexpr int kLatentHopperMaxBarrier = 2;       // both consumer warpgroups: row maxima (or sums)
constexpr int kLatentHopperPBarrier = 3;         // both consumer warpgroups: P written

// A unit as the producer hands it to the consumers.
struct latent_hopper_unit {
  int64_t first_token, key_base, tile_begin, tile_end;
  int32_t split, splits, first_head, valid_rows, done;
  int32_t row_lo[kLatentHopperRows], row_hi[kLatentHopperRows];  // relative to key_base
};

// Shared memory from a 1024-byte aligned base: Q ([64 rows] x 576, swizzled: nine panels of
// [64 rows][128 bytes]), the stages (the same layout, keys as rows), the unit slot, each row's
// maximum (then sum) per consumer warpgroup, the stages' loaded-keys words, the barriers and the
// producer's scratch.
struct latent_hopper_geometry {
  static constexpr int kChunks = kLatentHopperWidth / 8;  // 16-byte chunks of a row
  static constexpr int kPanels = kLatentHopperWidth / 64;
  static constexpr int kTileBytes = kLatentHopperRows * kLatentHopperWidth * 2;  // Q or a stage
  static_assert(kLatentHopperRows == kLatentHopperKeys, "Q and the stages share one layout");
  static constexpr int kPanelBytes = kLatentHopperKeys * 128;
  static constexpr int kPPanel = kLatentHopperValueWidth / 64;  // P's panel: past the values
  static constexpr int kStageOffset = kTileBytes;
  static constexpr int kUnitOffset = kStageOffset + kLatentHopperStages * kTileBytes;
  static constexpr int kStatsOffset =
      (kUnitOffset + (int)sizeof(latent_hopper_unit) + 15) / 16 * 16;
  static constexpr int kFlagOffset = kStatsOffset + 2 * kLatentHopperRows * 4;
  static constexpr int kBarrierOffset = kFlagOffset + kLatentHopperStages * 8;
  static constexpr int kScratchOffset = kBarrierOffset + (2 * kLatentHopperStages + 2) * 8;
  // + 1024: the dynamic base is aligned at run time
  static constexpr int kSmemBytes = kScratchOffset + (int)sizeof(hopper_scratch) + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "one CTA fits an H200 multiprocessor");
};

struct latent_hopper_smem {
  using G = latent_hopper_geometry;
  unsigned char *base;  // 1024-byte aligned
  __device__ unsigned char *q() const { return base; }
  __device__ unsigned char *stage(int s) const {
    return base + G::kStageOffset + s * G::kTileBytes;
  }
  __device__ unsigned char *p_panel(int s) const { return stage(s) + G::kPPanel * G::kPanelBytes; }
  __device__ latent_hopper_unit *unit() const {
    return reinterpret_cast<latent_hopper_unit *>(base + G::kUnitOffset);
  }
  // [consumer warpgroup][row]
  __device__ float *row_stats() const { return reinterpret_cast<float *>(base + G::kStatsOffset); }
  __device__ uint64_t *loaded_keys(int s) const {
    return reinterpret_cast<uint64_t *>(base + G::kFlagOffset) + s;
  }
  __device__ uint64_t *barrier(int i) const {
    return reinterpret_cast<uint64_t *>(base + G::kBarrierOffset) + i;
  }
  __device__ uint64_t *full(int s) const { return barrier(s); }
  __device__ uint64_t *empty(int s) const { return barrier(kLatentHopperStages + s); }
  __device__ uint64_t *unit_full() const { return barrier(2 * kLatentHopperStages); }
  __device__ uint64_t *unit_empty() const { return barrier(2 * kLatentHopperStages + 1); }
  __device__ hopper_scratch *scratch() const {
    return reinterpret_cast<hopper_scratch *>(base + G::kScratchOffset);
  }
};

#if PA_SM90A

// S (64 rows x 32 keys) = Q K^T over kSteps k-steps of 16 channels, fenced, committed and waited:
// Q from the swizzled tile at q_tile (panel_rows rows, the warpgroup's rows from row0 on), K from
// the swizzled tile at k_tile (kLatentHopperKeys rows), keys first_key .. first_key + 31.
template <typename T, int kSteps>
__device__ __forceinline__ void latent_hopper_scores(float (&score)[4][4], uint32_t q_tile,
                                                     int q_panel_rows, int row0, uint32_t k_tile,
                                                     int first_key) {
  using mma = wgmma_m64k16<T>;
  wgmma_fence();
#pragma unroll
  for (int s = 0; s < kSteps; s++) {
    const uint64_t q_desc = hopper_k_major_desc(q_tile + row0 * 128, q_panel_rows, s);
    const uint64_t k_desc = hopper_k_major_desc(k_tile + first_key * 128, kLatentHopperKeys, s);
    if (s == 0)
      mma::template shared_a_n32<0>(score, q_desc, k_desc);
    else
      mma::template shared_a_n32<1>(score, q_desc, k_desc);
  }
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operands(score);
}

// P (rounded to T) of this thread's scores, keys first_key .. first_key + 31 (the accumulator
// layout of latent_hopper_scores), into the swizzled [64 rows][64 keys] panel at p_panel, where
// hopper_load_a_fragment reads it as A fragments.
template <typename T>
__device__ __forceinline__ void latent_hopper_store_p(unsigned char *p_panel,
                                                      const float (&p)[4][4], int first_key) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  const int group_id = lane / 4, col = (lane % 4) * 2;
#pragma unroll
  for (int n = 0; n < 4; n++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int row = warp * 16 + group_id + 8 * h, key = first_key + 8 * n + col;
      const int at = swizzle128_chunk_offset(kLatentHopperKeys, row, key / 8) + (key % 8) * 2;
      *reinterpret_cast<uint32_t *>(p_panel + at) = pack_t2<T>(p[n][2 * h], p[n][2 * h + 1]);
    }
}

// The producer warpgroup: units, their rows and Q into the unit slot, their latent tiles into the
// stage ring, until the schedule runs out (then the slot says done).
template <typename T>
__device__ __forceinline__ void latent_hopper_produce(const prefill_params &P,
                                                      const latent_hopper_smem &S) {
  using G = latent_hopper_geometry;
  constexpr int kRunChunks = kLatentHopperRunKeys * G::kChunks;  // a warp's chunks of a tile
  static_assert(kRunChunks % 32 == 0, "whole chunks per lane");
  const int tid = threadIdx.x, lane = tid % 32, run = tid / 32;
  const int64_t slot_bytes = (int64_t)kLatentHopperWidth * sizeof(T);
  const unsigned char *cache = reinterpret_cast<const unsigned char *>(P.k_cache);
  const T *q = reinterpret_cast<const T *>(P.q);
  const int64_t total = (int64_t)P.unit_begin[P.batch_size];
  hopper_scratch *scratch = S.scratch();
  latent_hopper_unit *U = S.unit();
  ring_position<1> unit_pos = {0, 0u};
  ring_position<kLatentHopperStages> tile_pos = {0, 0u};
  for (;;) {
    if (tid == 0) scratch->taken = atomicAdd(P.work_counter, 1u);
    named_barrier_sync(kLatentHopperProducerBarrier, kLatentHopperWarpgroupThreads);
    const int64_t taken = scratch->taken;
    if (taken >= total) {
      mbarrier_wait(S.unit_empty(), unit_pos.phase ^ 1u);
      if (tid == 0) U->done = 1;
      mbarrier_arrive(S.unit_full());
      break;
    }
    const prefill_work w = prefill_work_of(P, taken);
    prefill_unit_rows rows = {};  // none for malformed lengths
    if (w.valid) rows = prefill_unit_rows_of(P, w.b, w.row_block, 0);

    const hopper_row_keys row_keys =
        hopper_unit_row_keys(P, rows, scratch, kLatentHopperProducerBarrier);
    const prefill_key_union keys_union = row_keys.keys_union;
    const int32_t row_lo = row_keys.row_lo, row_hi = row_keys.row_hi;
    int64_t tile_begin, tile_end;
    prefill_unit_tiles(P, keys_union, w.split, w.splits, &tile_begin, &tile_end);

    // The unit's latent tiles; each run's block-table entry is read a tile ahead.
    const int32_t *table_row = P.block_table + (int64_t)w.b * P.kv.max_blocks_per_seq;
    auto entry = [&](int64_t tile) {
      const int64_t key = tile * kLatentHopperKeys + run * kLatentHopperRunKeys;
      return key < keys_union.hi ? kv_block_entry(P.kv, table_row, key) : -1;
    };
    int32_t next_entry = tile_begin < tile_end ? entry(tile_begin) : -1;
    auto load_tiles = [&](int64_t first, int64_t end) {
      for (int64_t tile = first; tile < end; tile++) {
        const int32_t block_id = kv_block_mapped(P.kv, next_entry);
        if (tile + 1 < tile_end) next_entry = entry(tile + 1);
        const int64_t key0 = tile * kLatentHopperKeys + run * kLatentHopperRunKeys;
        const int first_valid =
            (int)max((int64_t)0, min((int64_t)kLatentHopperRunKeys, keys_union.lo - key0));
        const int end_valid =
            (int)max((int64_t)0, min((int64_t)kLatentHopperRunKeys, keys_union.hi - key0));
        const uint32_t valid =
            block_id >= 0 ? ((1u << end_valid) - 1u) & ~((1u << first_valid) - 1u) : 0u;
        const int64_t row_offset =
            block_id >= 0 ? kv_row_offset(P.kv, block_id, key0, 0) * (int64_t)sizeof(T) : 0;
        const unsigned char *src = cache + row_offset;
        mbarrier_wait(S.empty(tile_pos.slot), tile_pos.phase ^ 1u);
        unsigned char *stage = S.stage(tile_pos.slot);
#pragma unroll 4
        for (int i = lane; i < kRunChunks; i += 32) {
          const int row = i / G::kChunks, chunk = i % G::kChunks;
          const bool fill = valid >> row & 1u;
          cp_async_16(stage + swizzle128_chunk_offset(kLatentHopperKeys,
                                                      run * kLatentHopperRunKeys + row, chunk),
                      fill ? src + row * slot_bytes + chunk * 16 : cache, fill);
        }
        if (lane == 0)  // the run's bits of the tile's loaded-keys word
          reinterpret_cast<uint16_t *>(S.loaded_keys(tile_pos.slot))[run] = (uint16_t)valid;
        mbarrier_track_cp_async(S.full(tile_pos.slot));
        mbarrier_arrive(S.full(tile_pos.slot));
        tile_pos.advance();
      }
    };
    // The unit's first tiles go into the ring as the consumers free it, before the unit slot
    // (which they hold until the previous unit's last scores are done): the ring stays full across
    // the unit boundary. The consumers read the ring in order, so these tiles wait for the slot.
    const int64_t early_end = min(tile_end, tile_begin + kLatentHopperStages);
    load_tiles(tile_begin, early_end);

    // The unit slot: the rows, the unit, and the Q rows (zero for other rows: finite scores,
    // discarded).
    mbarrier_wait(S.unit_empty(), unit_pos.phase ^ 1u);
    if (tid < kLatentHopperRows) {
      U->row_lo[tid] = row_lo;
      U->row_hi[tid] = row_hi;
    }
    if (tid == 0) {
      U->first_token = rows.first_token;
      U->key_base = keys_union.key_base;
      U->tile_begin = tile_begin;
      U->tile_end = tile_end;
      U->split = w.split;
      U->splits = w.splits;
      U->first_head = rows.first_head;
      U->valid_rows = rows.valid_rows;
      U->done = 0;
    }
    for (int i = tid; i < kLatentHopperRows * G::kChunks; i += kLatentHopperWarpgroupThreads) {
      const int r = i / G::kChunks, c = i % G::kChunks;
      const bool fill = r < rows.valid_rows;
      const T *src = q;
      if (fill)
        src = q + (rows.first_token + r / P.heads_per_block) * P.q_row_stride +
              (int64_t)(rows.first_head + r % P.heads_per_block) * kLatentHopperWidth + c * 8;
      cp_async_16(S.q() + swizzle128_chunk_offset(kLatentHopperRows, r, c), src, fill);
    }
    mbarrier_track_cp_async(S.unit_full());
    mbarrier_arrive(S.unit_full());
    unit_pos.advance();

    load_tiles(early_end, tile_end);
  }
  asm volatile("cp.async.wait_all;" ::: "memory");  // nothing lands after the thread has left
}

// The consumer warpgroups (see the header comment). Consumer warpgroup cw owns keys
// 32 cw .. 32 cw + 31 of every tile's scores and value channels 256 cw .. 256 cw + 255; its warp
// `quad` the rows 16 quad .. 16 quad + 15.
template <typename T>
__device__ __forceinline__ void latent_hopper_consume(const prefill_params &P,
                                                      const latent_hopper_smem &S) {
  using G = latent_hopper_geometry;
  using mma = wgmma_m64k16<T>;
  constexpr int kOutTiles = kLatentHopperValueWidth / 2 / 8;  // 32 n8 tiles: 256 channels
  constexpr int kPairThreads = 2 * kLatentHopperWarpgroupThreads;
  const int consumer = threadIdx.x - kLatentHopperWarpgroupThreads;
  const int cw = consumer / kLatentHopperWarpgroupThreads, quad = (consumer / 32) % 4;
  const int lane = threadIdx.x % 32, group_id = lane / 4, col = (lane % 4) * 2;
  const int row0 = quad * 16;
  float *row_stats = S.row_stats();
  const latent_hopper_unit *U = S.unit();
  const uint32_t q_tile = shared_address(S.q());
  ring_position<1> unit_pos = {0, 0u};
  ring_position<kLatentHopperStages> tile_pos = {0, 0u};
  for (;;) {
    mbarrier_wait(S.unit_full(), unit_pos.phase);
    if (U->done) break;
    const int64_t first_token = U->first_token, key_base = U->key_base;
    const int64_t tile_begin = U->tile_begin, tile_end = U->tile_end;
    const int32_t split = U->split, splits = U->splits, first_head = U->first_head;
    const int valid_rows = U->valid_rows;
    int32_t my_lo[2], my_hi[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
      my_lo[h] = U->row_lo[row0 + group_id + 8 * h];
      my_hi[h] = U->row_hi[row0 + group_id + 8 * h];
    }
    const bool has_rows = valid_rows > 0;  // the same in both warpgroups: they meet at barriers
    fence_async_proxy();  // Q landed through cp.async; wgmma reads through the async proxy

    float out_acc[kOutTiles][4], row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < kOutTiles; n++)
#pragma unroll
      for (int i = 0; i < 4; i++) out_acc[n][i] = 0.0f;
    for (int64_t tile = tile_begin; tile < tile_end; tile++) {
      mbarrier_wait(S.full(tile_pos.slot), tile_pos.phase);
      __syncwarp();
      if (has_rows) {
        fence_async_proxy();  // the tile landed through cp.async
        const uint64_t word = lane == 0 ? *S.loaded_keys(tile_pos.slot) : 0u;
        const uint32_t mapped = __shfl_sync(0xffffffffu, (uint32_t)(word >> (32 * cw)), 0);
        const uint32_t stage = shared_address(S.stage(tile_pos.slot));

        // 1. this warpgroup's 32 keys of the scores
        float score[1][4][4];
        latent_hopper_scores<T, kLatentHopperWidth / 16>(score[0], q_tile, kLatentHopperRows, 0,
                                                         stage, 32 * cw);
        transform_scores(score, P.scale, P.softcap);
        const int32_t key0 = (int32_t)(tile * kLatentHopperKeys - key_base) + 32 * cw;
        prefill_mask_scores(score[0], key0, mapped, 0u, my_lo, my_hi, col);

        // 2. the rows' maxima over both warpgroups' keys, the same running max in both
        float pass_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < 4; n++)
#pragma unroll
          for (int i = 0; i < 4; i++) pass_max[i / 2] = fmaxf(pass_max[i / 2], score[0][n][i]);
#pragma unroll
        for (int h = 0; h < 2; h++) {
          pass_max[h] = fmaxf(pass_max[h], __shfl_xor_sync(0xffffffffu, pass_max[h], 1));
          pass_max[h] = fmaxf(pass_max[h], __shfl_xor_sync(0xffffffffu, pass_max[h], 2));
          if (lane % 4 == 0)
            row_stats[cw * kLatentHopperRows + row0 + group_id + 8 * h] = pass_max[h];
        }
        named_barrier_sync(kLatentHopperMaxBarrier, kPairThreads);
        float rescale[2], base[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const int r = row0 + group_id + 8 * h;
          const softmax_step step = online_softmax_step(
              row_max[h], fmaxf(row_stats[r], row_stats[kLatentHopperRows + r]));
          base[h] = step.base;
          rescale[h] = step.rescale;
          row_sum[h] *= rescale[h];
        }
#pragma unroll
        for (int n = 0; n < 4; n++)
#pragma unroll
          for (int i = 0; i < 4; i++) {
            const float p = softmax_exp2(score[0][n][i] - base[i / 2]);
            score[0][n][i] = p;
            row_sum[i / 2] += p;
          }
        rescale_accumulator_rows(out_acc, rescale);

        // 3. P of this warpgroup's keys into the stage's last panel (its scores are done in both
        // warpgroups: they passed the barrier after their waits), then all of P back as A
        // fragments and O += P V over this warpgroup's value channels
        unsigned char *p_panel = S.p_panel(tile_pos.slot);
        latent_hopper_store_p<T>(p_panel, score[0], 32 * cw);
        named_barrier_sync(kLatentHopperPBarrier, kPairThreads);
        uint32_t p_frag[4][4];
#pragma unroll
        for (int s = 0; s < 4; s++)
          hopper_load_a_fragment(p_panel, kLatentHopperKeys, 0, s, p_frag[s]);
        wgmma_fence();
#pragma unroll
        for (int s = 0; s < 4; s++)
#pragma unroll
          for (int part = 0; part < 2; part++)
            mma::template registers_a<1, 1>(
                *reinterpret_cast<float(*)[16][4]>(&out_acc[part * 16]), p_frag[s],
                hopper_n_major_desc(stage, kLatentHopperKeys, s, 4 * cw + 2 * part));
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_operands(out_acc);
        wgmma_fence_operands(p_frag);
      }
      mbarrier_arrive(S.empty(tile_pos.slot));
      tile_pos.advance();
    }
    mbarrier_arrive(S.unit_empty());  // Q and the rows are no longer read
    unit_pos.advance();
    if (!has_rows) continue;

    // Each row's sum over both warpgroups' keys (the last P barrier ordered every read of the
    // maxima before these writes; the second barrier every read of the sums before the next
    // unit's maxima), then this warpgroup's channels of every valid row.
    float l[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
      l[h] = row_sum[h];
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
      if (lane % 4 == 0) row_stats[cw * kLatentHopperRows + row0 + group_id + 8 * h] = l[h];
    }
    named_barrier_sync(kLatentHopperMaxBarrier, kPairThreads);
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int r = row0 + group_id + 8 * h;
      l[h] = row_stats[r] + row_stats[kLatentHopperRows + r];
    }
    named_barrier_sync(kLatentHopperMaxBarrier, kPairThreads);
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int r = row0 + group_id + 8 * h;
      if (r >= valid_rows) continue;
      const int64_t token = first_token + r / P.heads_per_block;
      const int head = first_head + r % P.heads_per_block;
      const prefill_row_state row = prefill_row_state_of<T>(P, head, splits, row_max[h], l[h]);
      for_each_out_pair<T>(out_acc, h, col, [&](int c, float o0, float o1) {
        c += cw * (kLatentHopperValueWidth / 2);
        if (c < P.v_head_size)
          prefill_store_pair<T, T>(P, token, head, 0, split, splits, c, row, o0, o1);
      });
    }
  }
}

#endif  // PA_SM90A

// A persistent grid of one CTA per multiprocessor; the producer takes the units.
template <typename T>
__global__ void __launch_bounds__(kLatentHopperThreads, 1) latent_hopper_kernel(
    const prefill_params P) {
#if PA_SM90A
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const latent_hopper_smem S = {smem_raw +
                                ((1024u - (shared_address(smem_raw) & 1023u)) & 1023u)};
  if (threadIdx.x == 0) {
    for (int i = 0; i < kLatentHopperStages; i++) {
      mbarrier_init(S.full(i), kLatentHopperWarpgroupThreads);
      mbarrier_init(S.empty(i), kLatentHopperConsumerThreads);
    }
    mbarrier_init(S.unit_full(), kLatentHopperWarpgroupThreads);
    mbarrier_init(S.unit_empty(), kLatentHopperConsumerThreads);
    mbarrier_init_fence();
  }
  __syncthreads();
  wait_for_previous_kernel();
  if (threadIdx.x < kLatentHopperWarpgroupThreads) {
    warpgroup_registers_release<kLatentHopperProducerRegisters>();
    latent_hopper_produce<T>(P, S);
  } else {
    warpgroup_registers_claim<kLatentHopperConsumerRegisters>();
    latent_hopper_consume<T>(P, S);
  }
#endif
}

// Per-instantiation entry points, defined in latent_hopper.cu.
template <typename T>
cudaError_t latent_hopper_set_smem(int smem_bytes);
template <typename T>
cudaError_t latent_hopper_launch(const prefill_params &P, dim3 grid, int smem_bytes,
                                 cudaStream_t stream, bool chained);

#define PA_LATENT_HOPPER_INSTANTIATE(T)                                                        \
  template <>                                                                                  \
  cudaError_t latent_hopper_set_smem<T>(int smem_bytes) {                                      \
    return cudaFuncSetAttribute(latent_hopper_kernel<T>,                                       \
                                cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);      \
  }                                                                                            \
  template <>                                                                                  \
  cudaError_t latent_hopper_launch<T>(const prefill_params &P, dim3 grid, int smem_bytes,      \
                                      cudaStream_t stream, bool chained) {                     \
    return launch_chained(latent_hopper_kernel<T>, grid, kLatentHopperThreads,                 \
                          (size_t)smem_bytes, stream, chained, P);                             \
  }

}  // namespace detail
}  // namespace pa
