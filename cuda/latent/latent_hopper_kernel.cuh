// The LATENT backend's half-stage Hopper kernel (sm_90a, fp16 / bf16 caches, head_size 576,
// v_head_size 512), for 17-32 rows per sequence (latent.cu; more rows take
// latent_whole_kernel.cuh): absorbed MLA decode on wgmma. Work units, row blocks of 64 (query
// token, query head) rows, splits and schedule are LATENT's (PREFILL's prefill_work_of /
// prefill_unit_rows_of / prefill_unit_tiles, the split merge); the compute is warpgroups fed by a
// producer, as in prefill_hopper_kernel.cuh. The producer (latent_hopper_produce), the unit slot
// and the page runs here serve the three LATENT Hopper kernels.
//
// A CTA is three warpgroups. The producer (warpgroup 0, registers given back with setmaxnreg) takes
// a unit and gathers each of its 64-key latent tiles as two 32-key halves into a ring of two tile
// slots (four half stages): each of its warps owns a 16-key run (one page: block sizes >= 16),
// warps 0-1 the first half, 2-3 the second; a run wholly in the unit's keys and mapped goes as one
// page box per 64-channel panel (kv_page_maps, TMA), any other with every lane's 16-byte cp.async,
// each at its 128-byte-swizzled place (wgmma.cuh: a 576-channel row is nine 64-channel panels),
// rows outside the unit's keys or in unmapped blocks zero-filled and left out of the half's
// loaded-keys word. A tile slot is free again once the consumers are done with both halves, so one
// tile loads while the other is computed. The unit slot (its rows' admitted keys and its 64 Q rows)
// is written once the consumers have freed it, after the unit's first two tiles (a CTA's first
// unit: before them): the ring stays full across unit boundaries.
// Two consumer warpgroups share the 64 rows and each tile, a "seesaw" (FlashMLA's schedule): each
// holds half of the output, O_w for value channels [256 w, 256 w + 256), and scores one half of the
// tile, so one warpgroup's softmax runs while the other's GEMMs do.
//   0. warpgroup w scores half w (S = Q K^T, wgmma m64n32k16 with Q and K from shared memory, 36
//      k-steps), scaled and masked;
//   1. warpgroup 0 takes its online-softmax step (from the reference m both hold; P0, O_0
//      rescaled), publishes its new reference m0 and adds P0 V0_0 (P0 from registers);
//   2. warpgroup 1 takes its step from m given max(m0, its scores' max), to m1 (its O_1 rescaled
//      from m, so by both halves' factors), writes P1 into its half's last panel (channels
//      512..575, whose scores are done) and m1, and issues O_1 += P1 V1_1;
//   3. warpgroup 0 steps to the reference m1 (softmax_step_to_reference: m1 >= m0, whatever the
//      slack of online_softmax_step decided) and writes P0 times that step's factor into its
//      half's last panel, rescales O_0 and adds P1 V1_0; warpgroup 1 adds P0 V0_1.
// Both then hold m1 and their O relative to it; each keeps the sum over its own half's keys,
// rescaled at each step.
// At the end of a unit the two halves of each row's sum meet through shared memory and each
// warpgroup stores its channels (finalized, or as a split partial for split_merge_kernel).
// Shared memory: Q 72 KB + four 36 KB half stages + the unit slot, under the 227 KB of an H200
// CTA.
#pragma once

#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "../common/bulk_copy.cuh"
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
constexpr int kLatentHopperKeys = kPrefillTileKeys;  // a tile: the schedule's
constexpr int kLatentHopperHalfKeys = kLatentHopperKeys / 2;
constexpr int kLatentHopperTileSlots = 2;
constexpr int kLatentHopperStages = 2 * kLatentHopperTileSlots;  // half stages
constexpr int kLatentHopperWarpgroupThreads = 128;
constexpr int kLatentHopperThreads = 3 * kLatentHopperWarpgroupThreads;
// Every consumer thread arrives on the "empty" barriers: each has read P (or the unit's rows)
// from shared memory itself, so its own arrive orders those reads before the producer's next write.
constexpr int kLatentHopperConsumerThreads = 2 * kLatentHopperWarpgroupThreads;
constexpr int kLatentHopperRunKeys = 16;  // a producer warp's keys of a tile: one page
constexpr int kLatentHopperRunsPerHalf = kLatentHopperHalfKeys / kLatentHopperRunKeys;
constexpr int kLatentHopperHalfThreads = kLatentHopperRunsPerHalf * 32;  // "full" arrivals
// as PREFILL's Hopper kernel: 128 x (56 + 2 x 224) <= 65536
constexpr int kLatentHopperProducerRegisters = 56;
constexpr int kLatentHopperConsumerRegisters = 224;
// Named barriers: the producer's; the consumers' row sums at the end of a unit; and the seesaw's
// three messages per tile, each a bar.sync of both consumer warpgroups (the writer's bar.arrive
// would do, and measured no faster, but racecheck then reports the P panel's reuse).
constexpr int kLatentHopperProducerBarrier = 1;
constexpr int kLatentHopperSumBarrier = 2;
constexpr int kLatentHopperMax0Barrier = 3;  // warpgroup 0's maxima after its half
constexpr int kLatentHopperMax1Barrier = 4;  // warpgroup 1's maxima and P after its half
constexpr int kLatentHopperP0Barrier = 5;    // warpgroup 0's P, rescaled to warpgroup 1's maxima

// A unit as the producer hands it to the consumers.
struct latent_hopper_unit {
  int64_t first_token, key_base, tile_begin, tile_end;
  int32_t split, splits, first_head, valid_rows, done;
  int32_t row_lo[kLatentHopperRows], row_hi[kLatentHopperRows];  // relative to key_base
};

// Shared memory from a 1024-byte aligned base: Q ([64 rows] x 576, swizzled: nine panels of
// [64 rows][128 bytes]), the half stages (nine panels of [32 keys][128 bytes]; half h of tile slot
// t is stage 2 t + h), the unit slot, each row's maximum (then sum) per consumer warpgroup, the
// half stages' loaded-keys words, the barriers ("full" per half stage, "empty" per tile slot, the
// unit slot's) and the producer's scratch.
struct latent_hopper_geometry {
  static constexpr int kQRows = kLatentHopperRows;
  static constexpr int kChunks = kLatentHopperWidth / 8;  // 16-byte chunks of a row
  static constexpr int kQBytes = kLatentHopperRows * kLatentHopperWidth * 2;
  static constexpr int kStageBytes = kLatentHopperHalfKeys * kLatentHopperWidth * 2;
  static constexpr int kPanelBytes = kLatentHopperHalfKeys * 128;  // of a half stage
  static constexpr int kPPanel = kLatentHopperValueWidth / 64;  // P's panel: past the values
  static_assert(kLatentHopperRows * kLatentHopperHalfKeys * 2 == kPanelBytes,
                "a half's P fills its last panel");
  static constexpr int kStageOffset = kQBytes;
  static constexpr int kUnitOffset = kStageOffset + kLatentHopperStages * kStageBytes;
  static constexpr int kStatsOffset =
      (kUnitOffset + (int)sizeof(latent_hopper_unit) + 15) / 16 * 16;
  static constexpr int kFlagOffset = kStatsOffset + 2 * kLatentHopperRows * 4;
  static constexpr int kBarrierOffset = kFlagOffset + kLatentHopperStages * 4;
  static constexpr int kBarriers = kLatentHopperStages + kLatentHopperTileSlots + 2;
  static constexpr int kScratchOffset = kBarrierOffset + kBarriers * 8;
  // + 1024: the dynamic base is aligned at run time
  static constexpr int kSmemBytes = kScratchOffset + (int)sizeof(hopper_scratch) + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "one CTA fits an H200 multiprocessor");
};

struct latent_hopper_smem {
  using G = latent_hopper_geometry;  // (the producer's view of the layout)
  using tile_ring = ring_position<kLatentHopperTileSlots>;
  unsigned char *base;  // 1024-byte aligned
  __device__ unsigned char *q() const { return base; }
  __device__ unsigned char *stage(int s) const {
    return base + G::kStageOffset + s * G::kStageBytes;
  }
  __device__ unsigned char *p_panel(int s) const { return stage(s) + G::kPPanel * G::kPanelBytes; }
  __device__ latent_hopper_unit *unit() const {
    return reinterpret_cast<latent_hopper_unit *>(base + G::kUnitOffset);
  }
  // [consumer warpgroup][row]
  __device__ float *row_stats() const { return reinterpret_cast<float *>(base + G::kStatsOffset); }
  __device__ uint32_t *loaded_keys(int s) const {
    return reinterpret_cast<uint32_t *>(base + G::kFlagOffset) + s;
  }
  __device__ uint64_t *barrier(int i) const {
    return reinterpret_cast<uint64_t *>(base + G::kBarrierOffset) + i;
  }
  __device__ uint64_t *full(int s) const { return barrier(s); }
  __device__ uint64_t *empty(int t) const { return barrier(kLatentHopperStages + t); }
  __device__ uint64_t *unit_full() const { return barrier(G::kBarriers - 2); }
  __device__ uint64_t *unit_empty() const { return barrier(G::kBarriers - 1); }
  __device__ hopper_scratch *scratch() const {
    return reinterpret_cast<hopper_scratch *>(base + G::kScratchOffset);
  }
};

#if PA_SM90A

// Where P (64 rows x 32 keys, T) keeps (row, key) in a half's last panel ([32 rows][128 bytes]):
// rows 32 apart share a 128-byte line, each 16-byte chunk swizzled by the line, so that both the
// accumulator-layout stores and the A-fragment loads of a warp touch 32 different banks.
__device__ __forceinline__ int latent_p_offset(int row, int key) {
  const int line = row % kLatentHopperHalfKeys;
  const int chunk = (row / kLatentHopperHalfKeys) * (kLatentHopperHalfKeys / 8) + key / 8;
  return line * 128 + ((chunk ^ (line % 8)) * 16) + (key % 8) * 2;
}

// P (rounded to T) of this thread's scores (the accumulator layout of m64n32k16) into p_panel.
template <typename T>
__device__ __forceinline__ void latent_hopper_store_p(
    unsigned char *p_panel, const float (&p)[kLatentHopperHalfKeys / 8][4]) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  const int group_id = lane / 4, col = (lane % 4) * 2;
#pragma unroll
  for (int n = 0; n < kLatentHopperHalfKeys / 8; n++)
#pragma unroll
    for (int h = 0; h < 2; h++)
      *reinterpret_cast<uint32_t *>(p_panel +
                                    latent_p_offset(warp * 16 + group_id + 8 * h, 8 * n + col)) =
          pack_t2<T>(p[n][2 * h], p[n][2 * h + 1]);
}

// This thread's A fragment of k-step s (keys 16 s .. 16 s + 15) of the P at p_panel.
__device__ __forceinline__ void latent_hopper_load_p(const unsigned char *p_panel, int s,
                                                     uint32_t (&a)[4]) {
  load_a_fragment_at(p_panel, 0, s, a, latent_p_offset);
}

// S (64 rows x 32 keys) = Q K^T over kSteps k-steps of 16 channels, fenced, committed and waited:
// Q from the swizzled tile at q_tile (q_panel_rows rows, the warpgroup's from q_row0 on), K's 32
// keys from k_tile, whose panels are k_panel_rows rows (a half stage: 32).
template <typename T, int kSteps>
__device__ __forceinline__ void latent_hopper_scores(float (&score)[kLatentHopperHalfKeys / 8][4],
                                                     uint32_t q_tile, int q_panel_rows, int q_row0,
                                                     uint32_t k_tile, int k_panel_rows) {
  using mma = wgmma_m64k16<T>;
  wgmma_fence();
#pragma unroll
  for (int s = 0; s < kSteps; s++) {
    const uint64_t q_desc = hopper_k_major_desc(q_tile + q_row0 * 128, q_panel_rows, s);
    const uint64_t k_desc = hopper_k_major_desc(k_tile, k_panel_rows, s);
    if (s == 0)
      mma::template shared_ab<0>(score, q_desc, k_desc);
    else
      mma::template shared_ab<1>(score, q_desc, k_desc);
  }
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operands(score);
}

// A producer warp's 16 keys of a tile (one page's run): rows of `src`, slot_bytes apart, of which
// `valid` says which are loaded (in the unit's keys and mapped; the others are zero-filled). A run
// with every row valid goes as page boxes of `map` (the latent cache; block block_id from row
// page_row, one box per 64-channel panel) on the copy engine, counted in bytes on the "full"
// barrier, where each producer thread's cp.async took issue slots that the consumers share.
struct latent_page_run {
  const unsigned char *src;
  uint32_t valid;
  int32_t block_id, page_row;
  const CUtensorMap *map;
  __device__ bool whole() const { return valid == (1u << kLatentHopperRunKeys) - 1u; }
};

// A run that is not whole, with cp.async into the half stage at `stage` (rows from half_row0 on).
// Row by row, lane l takes chunks l, l + 32 and (below 72) l + 64: every place and source is then
// a per-lane base plus constants (a division by 72 per chunk cost ~35 producer instructions per
// cp.async).
__device__ __forceinline__ void latent_produce_rows(unsigned char *stage, int half_row0,
                                                    const latent_page_run &R, int64_t slot_bytes,
                                                    const unsigned char *cache) {
  constexpr int kChunks = latent_hopper_geometry::kChunks;
  const int lane = threadIdx.x % 32;
#pragma unroll 2
  for (int row = 0; row < kLatentHopperRunKeys; row++) {
    const bool fill = R.valid >> row & 1u;
    // (a row not filled reads nothing; its address stays inside the cache's first row)
    const unsigned char *src_row = fill ? R.src + row * slot_bytes : cache;
#pragma unroll
    for (int j = 0; j < (kChunks + 31) / 32; j++) {
      const unsigned chunk = (unsigned)lane + 32u * j;
      if (j < kChunks / 32 || chunk < (unsigned)kChunks)
        cp_async_16(
            stage + swizzle128_chunk_offset(kLatentHopperHalfKeys, half_row0 + row, (int)chunk),
            src_row + chunk * 16, fill);
    }
  }
}

// One latent tile into this kernel's ring (the producer's part for it, latent_hopper_produce): warp
// `run`'s 16 keys into half run / 2 of the tile slot at `pos`, once the consumers have freed it.
__device__ __forceinline__ void latent_produce_tile(const latent_hopper_smem &S,
                                                    ring_position<kLatentHopperTileSlots> &pos,
                                                    const latent_page_run &R, int64_t slot_bytes,
                                                    const unsigned char *cache) {
  using G = latent_hopper_geometry;
  const int lane = threadIdx.x % 32, run = threadIdx.x / 32;
  const int half_row0 = (run % kLatentHopperRunsPerHalf) * kLatentHopperRunKeys;
  mbarrier_wait(S.empty(pos.slot), pos.phase ^ 1u);
  const int stage_index = 2 * pos.slot + run / kLatentHopperRunsPerHalf;
  unsigned char *stage = S.stage(stage_index);
  if (R.whole()) {
    if (lane == 0) {
      mbarrier_expect_bytes(S.full(stage_index), G::kChunks / 8 * kPageBoxBytes);
#pragma unroll 1
      for (int p = 0; p < G::kChunks / 8; p++)
        page_box_load(stage + swizzle128_chunk_offset(kLatentHopperHalfKeys, half_row0, p * 8),
                      R.map, S.full(stage_index), p * kPageBoxChannels, 0, R.page_row,
                      R.block_id);
    }
  } else {
    latent_produce_rows(stage, half_row0, R, slot_bytes, cache);
  }
  if (lane == 0)  // the run's bits of the half's loaded-keys word
    reinterpret_cast<uint16_t *>(S.loaded_keys(stage_index))[run % kLatentHopperRunsPerHalf] =
        (uint16_t)R.valid;
  mbarrier_track_cp_async(S.full(stage_index));
  mbarrier_arrive(S.full(stage_index));
  pos.advance();
}

// The producer warpgroup of both LATENT Hopper kernels: units, their rows and Q (G::kQRows rows)
// into the unit slot, their latent tiles into the kernel's ring (latent_produce_tile of its
// layout: half stages here, 64-channel panels in latent_narrow_kernel.cuh), until the schedule
// runs out (then the slot says done).
// The kernel's wait for the previous one (wait_for_previous_kernel) is the producer's to make: a
// CTA's first unit is the schedule's unit blockIdx.x, which the producer finds from the step's
// lengths (hopper_work_before_wait) and sets up, Q included unless the write kernel stages it
// (P.q_before_wait), while the write and schedule kernels still run; its tiles, and every later
// unit (from the schedule's counter, past the grid's first units; none with P.units_by_index,
// where the grid covers every unit and no schedule kernel runs), come after the wait. The unit
// setup's reads of step inputs go through L2 (load_step_input<true>), before the wait or not.
// kUnitsByIndex: the kernel may run without the schedule (the half-stage kernel does not: with
// that path compiled in, it measured 1.5 % slower, doc/performance.md, thirty-first measurement).
template <typename T, bool kUnitsByIndex, typename Smem>
__device__ __forceinline__ void latent_hopper_produce(const prefill_params &P,
                                                      const kv_page_maps &maps, const Smem &S) {
  using G = typename Smem::G;
  const int tid = threadIdx.x, run = tid / 32;
  const int64_t slot_bytes = (int64_t)kLatentHopperWidth * sizeof(T);
  const unsigned char *cache = reinterpret_cast<const unsigned char *>(P.k_cache);
  hopper_scratch *scratch = S.scratch();
  latent_hopper_unit *U = S.unit();
  ring_position<1> unit_pos = {0, 0u};
  typename Smem::tile_ring tile_pos = {0, 0u};
  bool first_unit = true;
  for (;;) {
    prefill_work w;
    // before_wait: the CTA's first unit, found before the kernel's wait, which the setup below
    // still owes; nothing says "waited" past the setup (such a flag, held across the tile loop,
    // spilled at the producer's 56 registers)
    const bool before_wait =
        first_unit &&
        hopper_work_before_wait<true>(P, blockIdx.x, scratch, kLatentHopperProducerBarrier, &w);
    if (!before_wait) {
      if (first_unit) wait_for_previous_kernel();  // a CTA past the schedule's units
      if (tid == 0) {  // -1: the schedule's units are all taken (no more units by index)
        int64_t taken = -1;
        if (!(kUnitsByIndex && P.units_by_index)) {
          taken = gridDim.x + (int64_t)atomicAdd(P.work_counter, 1u);
          if (taken >= P.unit_begin[P.batch_size]) taken = -1;
        }
        scratch->taken = taken;
      }
      named_barrier_sync(kLatentHopperProducerBarrier, kLatentHopperWarpgroupThreads);
      const int64_t taken = scratch->taken;
      if (taken < 0) {
        mbarrier_wait(S.unit_empty(), unit_pos.phase ^ 1u);
        if (tid == 0) U->done = 1;
        mbarrier_arrive(S.unit_full());
        break;
      }
      w = prefill_work_of<true>(P, taken);
    }
    prefill_unit_rows rows = {};  // none for malformed lengths
    if (w.valid) rows = prefill_unit_rows_of<true>(P, w.b, w.row_block, 0);

    const hopper_row_keys row_keys =
        hopper_unit_row_keys<true>(P, rows, scratch, kLatentHopperProducerBarrier);
    const prefill_key_union keys_union = row_keys.keys_union;
    const int32_t row_lo = row_keys.row_lo, row_hi = row_keys.row_hi;
    int64_t tile_begin, tile_end;
    prefill_unit_tiles(P, keys_union, w.split, w.splits, &tile_begin, &tile_end);

    // The unit's latent tiles; each run's block-table entry is read a tile ahead.
    const int32_t *table_row = P.block_table + (int64_t)w.b * P.kv.max_blocks_per_seq;
    auto entry = [&](int64_t tile) {
      const int64_t key = tile * kLatentHopperKeys + run * kLatentHopperRunKeys;
      return key < keys_union.hi ? kv_block_entry<true>(P.kv, table_row, key) : -1;
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
        const latent_page_run R = {cache + row_offset, valid, block_id,
                                   (int)(key0 & (P.kv.block_size - 1)), &maps.k};
        latent_produce_tile(S, tile_pos, R, slot_bytes, cache);
      }
    };
    // The unit's first tiles go into the ring as the consumers free it, before the unit slot
    // (which they hold until the previous unit's last scores are done): the ring stays full across
    // the unit boundary. The consumers read the ring in order, so these tiles wait for the slot.
    // A CTA's first unit finds the slot free, and its consumers need Q as much as the first
    // tile: there Q goes first.
    const int64_t early_end =
        first_unit ? tile_begin : min(tile_end, tile_begin + kLatentHopperTileSlots);
    first_unit = false;
    load_tiles(tile_begin, early_end);  // (none before the wait)

    // The unit slot: the rows, the unit, and the Q rows (rows past valid_rows hold other tokens'
    // or heads' Q, zeros, or what the slot held, possibly not finite: every consumer step is row
    // by row, and such rows are never stored).
    mbarrier_wait(S.unit_empty(), unit_pos.phase ^ 1u);
    if (tid < G::kQRows) {
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
    if (before_wait && !P.q_before_wait) wait_for_previous_kernel();  // the write kernel stages Q
    // Q: one box per 64-channel panel of the call's query map (maps.q, encode_q_map), issued by
    // one thread, its bytes counted on the slot's barrier beside the producer's arrivals
    if (tid == 0) {
      mbarrier_expect_bytes(S.unit_full(), (uint32_t)P.q_box_bytes);
#pragma unroll 1
      for (int panel = 0; panel < kLatentHopperWidth / kPageBoxChannels; panel++)
        q_box_load(S.q() + panel * G::kQRows * 128, &maps.q, S.unit_full(),
                   panel * kPageBoxChannels, rows.first_head, (int)rows.first_token);
    }
    mbarrier_arrive(S.unit_full());
    unit_pos.advance();

    if (before_wait && P.q_before_wait) wait_for_previous_kernel();  // the cache, written
    load_tiles(early_end, tile_end);
  }
  asm volatile("cp.async.wait_all;" ::: "memory");  // nothing lands after the thread has left
}

// Without the schedule kernel (P.units_by_index) the CTAs zero the rows of no sequence: the
// consumer threads' share (consumer_threads of them per CTA), once their units are done.
template <typename T, bool kUnitsByIndex>
__device__ __forceinline__ void latent_zero_rows_of_no_sequence(const prefill_params &P,
                                                                int consumer_threads) {
  if (!(kUnitsByIndex && P.units_by_index)) return;
  const int consumer = threadIdx.x - kLatentHopperWarpgroupThreads;
  zero_rows_of_no_sequence<false>(P, P.num_heads * P.v_head_size, (int)sizeof(T),
                                  (int64_t)blockIdx.x * consumer_threads + consumer,
                                  (int64_t)gridDim.x * consumer_threads);
}

// The end of a unit in the 64-row Hopper kernels, whose two consumer warpgroups hold the same
// rows and half of the value channels each (warpgroup cw: channels 256 cw ..): each row's sum over
// both warpgroups' keys through shared memory (my_sums / their_sums: this thread's first row,
// row0 + group_id, in this warpgroup's area and the other's; its second row is 8 further; the
// second barrier
// orders every read of the sums before the next unit's writes), then this warpgroup's channels
// of every valid row, finalized or as a split partial.
template <typename T>
__device__ __forceinline__ void latent_pair_store(
    const prefill_params &P, const float (&out_acc)[kLatentHopperValueWidth / 16][4],
    const float (&row_max)[2], const float (&row_sum)[2], float *my_sums, const float *their_sums,
    int64_t first_token, int32_t first_head, int32_t split, int32_t splits, int valid_rows,
    int row0, int group_id, int lane, int col, int cw) {
  constexpr int kPairThreads = 2 * kLatentHopperWarpgroupThreads;
  float l[2];
#pragma unroll
  for (int h = 0; h < 2; h++) {
    l[h] = row_sum[h];
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    if (lane % 4 == 0) my_sums[8 * h] = l[h];
  }
  named_barrier_sync(kLatentHopperSumBarrier, kPairThreads);
#pragma unroll
  for (int h = 0; h < 2; h++) l[h] += their_sums[8 * h];
  named_barrier_sync(kLatentHopperSumBarrier, kPairThreads);
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int r = row0 + group_id + 8 * h;
    if (r >= valid_rows) continue;
    const int64_t token = first_token + prefill_row_token(P, r);
    const int head = first_head + prefill_row_head(P, r);
    const prefill_row_state state = prefill_row_state_of<T>(P, head, splits, row_max[h], l[h]);
    // (v_head_size is kLatentHopperValueWidth: every channel is stored)
    prefill_store_row<T, T>(P, token, head, 0, split, splits, state, cw == 0 && col == 0,
                            [&](auto &&visit) {
                              for_each_out_pair<T>(out_acc, h, col, [&](int c, float o0, float o1) {
                                visit(c + cw * (kLatentHopperValueWidth / 2), o0, o1);
                              });
                            });
  }
}

// The consumer warpgroups (see the header comment): consumer warpgroup cw scores half cw of each
// tile and owns value channels 256 cw .. 256 cw + 255; its warp `quad` the rows 16 quad ..
// 16 quad + 15. Each publishes its maxima in row_stats[cw][row].
template <typename T>
__device__ __forceinline__ void latent_hopper_consume(const prefill_params &P,
                                                      const latent_hopper_smem &S) {
  using G = latent_hopper_geometry;
  constexpr int kOutTiles = kLatentHopperValueWidth / 2 / 8;  // 32 n8 tiles: 256 channels
  constexpr int kScoreTiles = kLatentHopperHalfKeys / 8;
  constexpr int kPSteps = kLatentHopperHalfKeys / 16;
  constexpr int kPairThreads = 2 * kLatentHopperWarpgroupThreads;
  const int consumer = threadIdx.x - kLatentHopperWarpgroupThreads;
  const int cw = consumer / kLatentHopperWarpgroupThreads, quad = (consumer / 32) % 4;
  const int lane = threadIdx.x % 32, group_id = lane / 4, col = (lane % 4) * 2;
  const int row0 = quad * 16;
  float *const my_stats = S.row_stats() + cw * kLatentHopperRows + row0 + group_id;
  const float *const their_stats = S.row_stats() + (1 - cw) * kLatentHopperRows + row0 + group_id;
  const latent_hopper_unit *U = S.unit();
  const uint32_t q_tile = warp_uniform(shared_address(S.q()));
  ring_position<1> unit_pos = {0, 0u};
  ring_position<kLatentHopperTileSlots> tile_pos = {0, 0u};
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

    float out_acc[kOutTiles][4], row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < kOutTiles; n++)
#pragma unroll
      for (int i = 0; i < 4; i++) out_acc[n][i] = 0.0f;
    for (int64_t tile = tile_begin; tile < tile_end; tile++) {
      const int mine = 2 * tile_pos.slot + cw, theirs = 2 * tile_pos.slot + 1 - cw;
      if (has_rows) {
        // 0. the scores of this warpgroup's half
        mbarrier_wait(S.full(mine), tile_pos.phase);
        fence_async_proxy();  // the half landed through cp.async
        const uint32_t mapped = __shfl_sync(0xffffffffu, lane == 0 ? *S.loaded_keys(mine) : 0u, 0);
        const uint32_t mine_stage = warp_uniform(shared_address(S.stage(mine)));
        const uint32_t their_stage = warp_uniform(shared_address(S.stage(theirs)));
        float scores[1][kScoreTiles][4];  // softmax_step_scores takes m16 tiles of rows
        float(&score)[kScoreTiles][4] = scores[0];
        latent_hopper_scores<T, kLatentHopperWidth / 16>(score, q_tile, kLatentHopperRows, 0,
                                                         mine_stage, kLatentHopperHalfKeys);
        const float score_scale = softmax_step_scores(scores, P.scale, P.softcap);
        const int32_t key0 =
            (int32_t)(tile * kLatentHopperKeys - key_base) + cw * kLatentHopperHalfKeys;
        prefill_mask_scores(score, key0, mapped, 0u, my_lo, my_hi, col);
        float new_max[2];
        row_tile_max(score, new_max);
        new_max[0] *= score_scale;
        new_max[1] *= score_scale;

        // P fragments: this warpgroup's own half (p_own), then the other's (p_other)
        uint32_t p_own[kPSteps][4], p_other[kPSteps][4];
        if (cw == 0) {
          // 1. the step to m0, published; O_0 += P0 V0_0 (waited before the barrier: warpgroup
          // 1's softmax runs meanwhile, and P0's fragments are not held beside P0 itself)
          softmax_step_to_max(score, row_max, row_sum, out_acc, score_scale, new_max);
          if (lane % 4 == 0) my_stats[0] = row_max[0], my_stats[8] = row_max[1];
          named_barrier_sync(kLatentHopperMax0Barrier, kPairThreads);
#pragma unroll
          for (int g = 0; g < kPSteps; g++) prefill_p_fragment<T>(score, g, p_own[g]);
          wgmma_fence();
          hopper_issue_values<T, kLatentHopperValueWidth / 2, kPSteps>(
              out_acc, p_own, mine_stage, kLatentHopperHalfKeys, 4 * cw);
          wgmma_commit();
          wgmma_wait<0>();
          wgmma_fence_operands(out_acc);
          wgmma_fence_operands(p_own);
          // 3. the step to m1; P0 rescaled to it for warpgroup 1; O_0 += P1 V1_0
          named_barrier_sync(kLatentHopperMax1Barrier, kPairThreads);
          float rescale[2];
#pragma unroll
          for (int h = 0; h < 2; h++) {
            rescale[h] = softmax_step_to_reference(row_max[h], their_stats[8 * h]).rescale;
            row_sum[h] *= rescale[h];
          }
#pragma unroll
          for (int n = 0; n < kScoreTiles; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) score[n][i] *= rescale[i / 2];
          latent_hopper_store_p<T>(S.p_panel(mine), score);
          named_barrier_sync(kLatentHopperP0Barrier, kPairThreads);
          rescale_accumulator_rows(out_acc, rescale);
          mbarrier_wait(S.full(theirs), tile_pos.phase);  // half 1's values, seen here too
          fence_async_proxy();
#pragma unroll
          for (int s = 0; s < kPSteps; s++) latent_hopper_load_p(S.p_panel(theirs), s, p_other[s]);
        } else {
          // 2. the step to m1 = max(m0, these scores' max), published with P1; O_1 += P1 V1_1
          named_barrier_sync(kLatentHopperMax0Barrier, kPairThreads);
#pragma unroll
          for (int h = 0; h < 2; h++) new_max[h] = fmaxf(new_max[h], their_stats[8 * h]);
          softmax_step_to_max(score, row_max, row_sum, out_acc, score_scale, new_max);
          latent_hopper_store_p<T>(S.p_panel(mine), score);
          if (lane % 4 == 0) my_stats[0] = row_max[0], my_stats[8] = row_max[1];
          named_barrier_sync(kLatentHopperMax1Barrier, kPairThreads);
#pragma unroll
          for (int g = 0; g < kPSteps; g++) prefill_p_fragment<T>(score, g, p_own[g]);
          wgmma_fence();
          hopper_issue_values<T, kLatentHopperValueWidth / 2, kPSteps>(
              out_acc, p_own, mine_stage, kLatentHopperHalfKeys, 4 * cw);
          // then P0 V0_1 with P0 from warpgroup 0 (the same accumulators: no wait between)
          named_barrier_sync(kLatentHopperP0Barrier, kPairThreads);
          mbarrier_wait(S.full(theirs), tile_pos.phase);  // half 0's values, seen here too
          fence_async_proxy();
#pragma unroll
          for (int s = 0; s < kPSteps; s++) latent_hopper_load_p(S.p_panel(theirs), s, p_other[s]);
        }
        // O_w += P V_w of the other warpgroup's half (warpgroup 1's own P V may still run: the
        // fences after the wait keep both fragment sets in their registers until then)
        wgmma_fence();
        hopper_issue_values<T, kLatentHopperValueWidth / 2, kPSteps>(
            out_acc, p_other, their_stage, kLatentHopperHalfKeys, 4 * cw);
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_operands(out_acc);
        wgmma_fence_operands(p_own);
        wgmma_fence_operands(p_other);
      } else {
        mbarrier_wait(S.full(2 * tile_pos.slot), tile_pos.phase);
        mbarrier_wait(S.full(2 * tile_pos.slot + 1), tile_pos.phase);
      }
      // Every consumer thread frees the tile slot: its own reads of it (P included) are done.
      mbarrier_arrive(S.empty(tile_pos.slot));
      tile_pos.advance();
    }
    mbarrier_arrive(S.unit_empty());  // Q and the rows are no longer read
    unit_pos.advance();
    if (!has_rows) continue;

    // (the last pair's barriers ordered every read of the maxima before the sums' writes)
    latent_pair_store<T>(P, out_acc, row_max, row_sum, my_stats, their_stats, first_token,
                         first_head, split, splits, valid_rows, row0, group_id, lane, col, cw);
  }
}

// The barriers of the half-stage kernel's shared memory, by one thread before anything waits.
__device__ __forceinline__ void latent_init_barriers(const latent_hopper_smem &S) {
  for (int i = 0; i < kLatentHopperStages; i++) mbarrier_init(S.full(i), kLatentHopperHalfThreads);
  for (int i = 0; i < kLatentHopperTileSlots; i++)
    mbarrier_init(S.empty(i), kLatentHopperConsumerThreads);
  mbarrier_init(S.unit_full(), kLatentHopperWarpgroupThreads);
  mbarrier_init(S.unit_empty(), kLatentHopperConsumerThreads);
}

// The body of both 64-row kernels (this one and latent_whole_kernel.cuh's) once their shared
// memory S is placed: its barriers (latent_init_barriers), then the producer warpgroup
// (registers given back; it makes the chained wait after its first unit's setup) and the two
// consumer warpgroups (registers taken, the chained wait, consume()).
template <typename T, bool kUnitsByIndex, typename Smem, typename Consume>
__device__ __forceinline__ void latent_hopper_roles(const prefill_params &P,
                                                    const kv_page_maps &maps, const Smem &S,
                                                    Consume &&consume) {
  if (threadIdx.x == 0) {
    latent_init_barriers(S);
    mbarrier_init_fence();
  }
  __syncthreads();
  if (threadIdx.x < kLatentHopperWarpgroupThreads) {
    warpgroup_registers_release<kLatentHopperProducerRegisters>();
    latent_hopper_produce<T, kUnitsByIndex>(P, maps, S);  // waits for the previous kernel itself
  } else {
    warpgroup_registers_claim<kLatentHopperConsumerRegisters>();
    wait_for_previous_kernel();  // before the unit's stores
    consume();
    latent_zero_rows_of_no_sequence<T, kUnitsByIndex>(P, 2 * kLatentHopperWarpgroupThreads);
  }
}

#endif  // PA_SM90A

// A persistent grid of one CTA per multiprocessor; the producer takes the units.
template <typename T>
__global__ void __launch_bounds__(kLatentHopperThreads, 1) latent_hopper_kernel(
    const prefill_params P, const __grid_constant__ kv_page_maps maps) {
#if PA_SM90A
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const latent_hopper_smem S = {smem_raw + swizzle_align_bytes(smem_raw)};
  latent_hopper_roles<T, false>(P, maps, S, [&] { latent_hopper_consume<T>(P, S); });
#endif
}

// Per-instantiation entry points, defined in latent_hopper.cu.
template <typename T>
cudaError_t latent_hopper_set_smem(int smem_bytes);
template <typename T>
cudaError_t latent_hopper_launch(const prefill_params &P, const kv_page_maps &maps, dim3 grid,
                                 int smem_bytes, cudaStream_t stream, bool chained);

// The entry points NAME##_set_smem<T> and NAME##_launch<T> of the 64-row kernel NAME##_kernel<T>
// (latent_hopper or latent_whole).
#define PA_LATENT_HOPPER_ENTRY_POINTS(NAME, T)                                                 \
  template <>                                                                                  \
  cudaError_t NAME##_set_smem<T>(int smem_bytes) {                                             \
    return cudaFuncSetAttribute(NAME##_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, \
                                smem_bytes);                                                   \
  }                                                                                            \
  template <>                                                                                  \
  cudaError_t NAME##_launch<T>(const prefill_params &P, const kv_page_maps &maps, dim3 grid,   \
                               int smem_bytes, cudaStream_t stream, bool chained) {            \
    return launch_chained(NAME##_kernel<T>, grid, kLatentHopperThreads, (size_t)smem_bytes,    \
                          stream, chained, P, maps);                                           \
  }

}  // namespace detail
}  // namespace pa
