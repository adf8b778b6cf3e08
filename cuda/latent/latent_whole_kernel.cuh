// The LATENT backend's whole-tile Hopper kernel (sm_90a, fp16 / bf16 caches, head_size 576,
// v_head_size 512), for row blocks of more than 32 rows (latent.cu; up to 32, half-filled row
// blocks run faster on latent_hopper_kernel.cuh's half stages): absorbed MLA decode on wgmma. Work
// units, row blocks of 64 (query token, query head) rows, splits and schedule are LATENT's
// (PREFILL's prefill_work_of / prefill_unit_rows_of / prefill_unit_tiles, the split merge); the
// compute is warpgroups fed by a producer, as in prefill_hopper_kernel.cuh.
//
// A CTA is three warpgroups. The producer (warpgroup 0, registers given back with setmaxnreg) takes
// a unit and gathers each of its 64-key latent tiles into a ring of two tile slots: its warp r owns
// keys 16 r .. 16 r + 15 (one page: block sizes >= 16), a run wholly in the unit's keys and mapped
// as one page box per 64-channel panel (kv_page_maps, TMA), any other with every lane's 16-byte
// cp.async, each at its 128-byte-swizzled place (wgmma.cuh: a 576-channel row is nine 64-channel
// panels), rows outside the unit's keys or in unmapped blocks zero-filled and left out of the
// slot's loaded-keys word. A slot's panels come in two groups with their own barriers: the low one
// (panels 0-3, the value channels of consumer warpgroup 0) is refilled as soon as warpgroup 0 is
// done with it, the high one (panels 4-8) once both are. The unit slot (its rows' admitted keys and
// its 64 Q rows) is written once the consumers have freed it, after the unit's first two tiles (a
// CTA's first unit: before them): the ring stays full across unit boundaries.
// Two consumer warpgroups share the 64 rows, each holding half of the output: O_w for value
// channels [256 w, 256 w + 256). They take whole tiles in turn (FlashMLA's "seesaw"): warpgroup w
// scores the tiles of slot w, so each score GEMM is wgmma m64n64k16 over all 64 keys (Q and K from
// shared memory: a third fewer shared-memory bytes per product than two m64n32k16 halves).
//   own tile (slot w):   S = Q K^T (36 k-steps, the low panels' 16 as soon as they land), scaled
//                        and masked; the online-softmax step from the reference m (the previous
//                        tile's, whoever scored it) given the tile's scores, to m_t (m unless
//                        they pass it by the slack, attention_rules.cuh), which rescales O_w and
//                        the sum (prefill_softmax_to_p: where m is finite, the exponentials
//                        against m first, the step only if one passes the slack); P (rounded to
//                        T) into the tile's last panel (channels 512..575, dead once the scores
//                        are done) and m_t into the slot's maxima, announced to the other
//                        warpgroup (bar.arrive); O_w += P V_w with P from registers.
//   other tile:          wait for that announcement (bar.sync), step m to the published m_t
//                        (softmax_step_to_reference; rescaling O_w and the sum), O_w += P V_w
//                        with P read from the panel;
//                        S of this warpgroup's next tile (the other slot) is issued before all
//                        that when that tile has landed, else after the P V and the slot's
//                        release (so the producer refills it meanwhile).
// With two slots the next tile's slot is the one this warpgroup freed just before (its previous
// tile), so inside a unit the next tile has not landed yet and P V goes first; at a unit's start,
// whose first tiles the producer loads early, the scores often go first, and both warpgroups then
// score at once. One's softmax runs while the other's GEMMs do; every tile's maxima pass once from
// its scorer to the other warpgroup, and both hold the same reference after each tile. Each
// keeps the sum of its own tiles' P; the two meet at the end of the unit, and each warpgroup stores
// its channels (finalized, or as a split partial for split_merge_kernel).
#pragma once

#include "latent_hopper_kernel.cuh"

namespace pa {
namespace detail {

constexpr int kLatentWholeTilePanels = kLatentHopperWidth / 64;  // 9
// The low panel group: consumer warpgroup 0's value channels (and the first 16 score k-steps).
constexpr int kLatentWholeLowPanels = kLatentHopperValueWidth / 2 / 64;
constexpr int kLatentWholeRuns = kLatentHopperKeys / kLatentHopperRunKeys;  // the producer's warps
// "full" arrivals per panel group: every producer thread, its cp.async tracked
constexpr int kLatentWholeLoadThreads = kLatentWholeRuns * 32;
// Named barriers (besides kLatentHopperProducerBarrier and kLatentHopperSumBarrier): each tile
// slot's announcement, from the warpgroup that scored its tile (bar.arrive) to the other
// (bar.sync). An announcement is taken before the next one on the same barrier can be made: within
// a unit the scorer of slot w's next tile first takes the other slot's announcement, which the
// other warpgroup makes only after taking this one; across units, both warpgroups meet at the
// unit's row sums (kLatentHopperSumBarrier) after its last announcement is taken, and a unit
// without rows announces nothing.
constexpr int kLatentWholeTileBarrier = 3;  // + the tile slot
// Each consumer warpgroup's choice of order for the other's tile (latent_whole_consume).
constexpr int kLatentWholeVoteBarrier = 5;  // + the consumer warpgroup

struct latent_whole_geometry {
  static constexpr int kQRows = kLatentHopperRows;
  static constexpr int kChunks = kLatentHopperWidth / 8;  // 16-byte chunks of a row
  static constexpr int kQBytes = kLatentHopperRows * kLatentHopperWidth * 2;
  static constexpr int kPanelBytes = kLatentHopperKeys * 128;
  static constexpr int kSlotBytes = kLatentWholeTilePanels * kPanelBytes;
  static constexpr int kPPanel = kLatentHopperValueWidth / 64;  // P's panel: past the values
  static_assert(kLatentHopperRows * kLatentHopperKeys * 2 == kPanelBytes,
                "a tile's P fills its last panel");
  static constexpr int kSlotOffset = kQBytes;
  static constexpr int kUnitOffset = kSlotOffset + kLatentHopperTileSlots * kSlotBytes;
  static constexpr int kStatsOffset =
      (kUnitOffset + (int)sizeof(latent_hopper_unit) + 15) / 16 * 16;
  // [tile slot][row] maxima, then [consumer warpgroup][row] sums
  static constexpr int kFlagOffset = kStatsOffset + 4 * kLatentHopperRows * 4;
  static constexpr int kBarrierOffset = kFlagOffset + kLatentHopperTileSlots * 8;
  static constexpr int kBarriers = 4 * kLatentHopperTileSlots + 2;
  static constexpr int kScratchOffset = kBarrierOffset + kBarriers * 8;
  // + 1024: the dynamic base is aligned at run time
  static constexpr int kSmemBytes = kScratchOffset + (int)sizeof(hopper_scratch) + 1024;
  static_assert(kQBytes % 1024 == 0 && kPanelBytes % 1024 == 0, "swizzled panels are 1024-aligned");
  static_assert(kSmemBytes <= 227 * 1024, "one CTA fits an H200 multiprocessor");
};

struct latent_whole_smem {
  using G = latent_whole_geometry;  // (the producer's view of the layout)
  using tile_ring = ring_position<kLatentHopperTileSlots>;
  unsigned char *base;  // 1024-byte aligned
  __device__ unsigned char *q() const { return base; }
  __device__ unsigned char *slot(int t) const { return base + G::kSlotOffset + t * G::kSlotBytes; }
  __device__ unsigned char *p_panel(int t) const { return slot(t) + G::kPPanel * G::kPanelBytes; }
  __device__ latent_hopper_unit *unit() const {
    return reinterpret_cast<latent_hopper_unit *>(base + G::kUnitOffset);
  }
  __device__ float *tile_maxima(int t) const {
    return reinterpret_cast<float *>(base + G::kStatsOffset) + t * kLatentHopperRows;
  }
  __device__ float *row_sums(int consumer_warpgroup) const {
    return tile_maxima(kLatentHopperTileSlots) + consumer_warpgroup * kLatentHopperRows;
  }
  // bit k: key k of the slot's tile was loaded (in the unit's keys and in a mapped block)
  __device__ uint64_t *loaded_keys(int t) const {
    return reinterpret_cast<uint64_t *>(base + G::kFlagOffset) + t;
  }
  __device__ uint64_t *barrier(int i) const {
    return reinterpret_cast<uint64_t *>(base + G::kBarrierOffset) + i;
  }
  // group 0: panels 0 .. kLatentWholeLowPanels - 1; group 1: the rest
  __device__ uint64_t *full(int t, int group) const { return barrier(2 * t + group); }
  __device__ uint64_t *empty(int t, int group) const {
    return barrier(2 * kLatentHopperTileSlots + 2 * t + group);
  }
  __device__ uint64_t *unit_full() const { return barrier(G::kBarriers - 2); }
  __device__ uint64_t *unit_empty() const { return barrier(G::kBarriers - 1); }
  __device__ hopper_scratch *scratch() const {
    return reinterpret_cast<hopper_scratch *>(base + G::kScratchOffset);
  }
};

#if PA_SM90A

// The barriers of the whole-tile kernel's shared memory, by one thread before anything waits
// (latent_hopper_roles).
__device__ __forceinline__ void latent_init_barriers(const latent_whole_smem &S) {
  for (int t = 0; t < kLatentHopperTileSlots; t++) {
    mbarrier_init(S.full(t, 0), kLatentWholeLoadThreads);
    mbarrier_init(S.full(t, 1), kLatentWholeLoadThreads);
    mbarrier_init(S.empty(t, 0), kLatentHopperWarpgroupThreads);  // consumer warpgroup 0
    mbarrier_init(S.empty(t, 1), 2 * kLatentHopperWarpgroupThreads);
  }
  mbarrier_init(S.unit_full(), kLatentHopperWarpgroupThreads);
  mbarrier_init(S.unit_empty(), 2 * kLatentHopperWarpgroupThreads);
}

// P's A fragments (prefill_p_fragment's layout: fragment g holds n-tiles 2g and 2g + 1, words
// 2 j + h for n-tile 2g + j and row half h) into a swizzled panel of [64 rows][64 keys], where
// hopper_load_a_fragment reads them back: each warp's stores and loads touch 32 different banks.
__device__ __forceinline__ void latent_whole_store_p(
    unsigned char *p_panel, const uint32_t (&p_frag)[kLatentHopperKeys / 16][4]) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  const int group_id = lane / 4, col = (lane % 4) * 2;
#pragma unroll
  for (int n = 0; n < kLatentHopperKeys / 8; n++)
#pragma unroll
    for (int h = 0; h < 2; h++)
      *reinterpret_cast<uint32_t *>(
          p_panel + swizzle128_chunk_offset(kLatentHopperRows, warp * 16 + group_id + 8 * h, n) +
          col * 2) = p_frag[n / 2][2 * (n % 2) + h];
}

// A producer warp's 16 keys of a tile as the sources of its copies into 64-row swizzled panels:
// lane l takes chunk l % 8 (of the panel's 128 bytes) of rows l / 8 + 4 i; `valid` says which rows
// are loaded (rows of `src`, slot_bytes apart), the others are zero-filled. Every address is the
// lane's first plus constants: a row not filled reads nothing, and stays inside the run's block
// (or the cache's first one, where src is the cache: block sizes are at least the run's 16 keys).
struct latent_run_copies {
  const unsigned char *first;
  int64_t slot_bytes;
  uint32_t fill;  // bit i: row lane / 8 + 4 i

  __device__ latent_run_copies(const unsigned char *src, int64_t slot_bytes, uint32_t valid)
      : slot_bytes(slot_bytes), fill(0u) {
    const int lane = threadIdx.x % 32;
    first = src + (lane / 8) * slot_bytes + (lane % 8) * 16;
#pragma unroll
    for (int i = 0; i < kLatentHopperRunKeys / 4; i++)
      fill |= (valid >> (lane / 8 + 4 * i) & 1u) << i;
  }
  // Channels 64 p .. 64 p + 63 of the run's rows into rows 16 run .. of `panel`.
  __device__ void copy_panel(unsigned char *panel, int run, int p) const {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int i = 0; i < kLatentHopperRunKeys / 4; i++)
      cp_async_16(panel + swizzle128_chunk_offset(kLatentHopperKeys,
                                                  run * kLatentHopperRunKeys + lane / 8 + 4 * i,
                                                  lane % 8),
                  first + 4 * i * slot_bytes + p * 128, fill >> i & 1u);
  }
};


// One latent tile into this kernel's ring (the producer's part for it, latent_hopper_produce): warp
// `run`'s 16 keys into rows 16 run .. of the tile slot at `pos`, each panel group once the
// consumers have freed it, counted on the group's "full" barrier: a whole run as one page box per
// panel (lane 0 issues them, their bytes announced first), any other with every lane's cp.async.
__device__ __forceinline__ void latent_produce_tile(const latent_whole_smem &S,
                                                    ring_position<kLatentHopperTileSlots> &pos,
                                                    const latent_page_run &R, int64_t slot_bytes,
                                                    const unsigned char *) {
  using G = latent_whole_geometry;
  const int lane = threadIdx.x % 32, run = threadIdx.x / 32;
  const bool whole = R.whole();
  unsigned char *slot = S.slot(pos.slot);
#pragma unroll
  for (int group = 0; group < 2; group++) {
    mbarrier_wait(S.empty(pos.slot, group), pos.phase ^ 1u);
    const int first = group == 0 ? 0 : kLatentWholeLowPanels;
    const int end = group == 0 ? kLatentWholeLowPanels : kLatentWholeTilePanels;
    if (whole) {
      if (lane == 0) {
        mbarrier_expect_bytes(S.full(pos.slot, group), (end - first) * kPageBoxBytes);
#pragma unroll 1
        for (int p = first; p < end; p++)
          page_box_load(slot + p * G::kPanelBytes + run * kLatentHopperRunKeys * 128, R.map,
                        S.full(pos.slot, group), p * kPageBoxChannels, 0, R.page_row, R.block_id);
      }
    } else {
      const latent_run_copies copies(R.src, slot_bytes, R.valid);
#pragma unroll
      for (int p = first; p < end; p++) copies.copy_panel(slot + p * G::kPanelBytes, run, p);
    }
    if (group == 0 && lane == 0)  // the run's bits of the slot's loaded-keys word
      reinterpret_cast<uint16_t *>(S.loaded_keys(pos.slot))[run] = (uint16_t)R.valid;
    mbarrier_track_cp_async(S.full(pos.slot, group));
    mbarrier_arrive(S.full(pos.slot, group));
  }
  pos.advance();
}


// The consumer warpgroups (see the header comment): consumer warpgroup cw scores the tiles of slot
// cw and owns value channels 256 cw .. 256 cw + 255; its warp `quad` the rows 16 quad ..
// 16 quad + 15.
template <typename T>
__device__ __forceinline__ void latent_whole_consume(const prefill_params &P,
                                                      const latent_whole_smem &S) {
  constexpr int kOutTiles = kLatentHopperValueWidth / 2 / 8;  // 32 n8 tiles: 256 channels
  constexpr int kScoreTiles = kLatentHopperKeys / 8;
  constexpr int kScoreSteps = kLatentHopperWidth / 16;
  constexpr int kLowSteps = kLatentWholeLowPanels * 4;  // the score k-steps of the low panels
  constexpr int kPSteps = kLatentHopperKeys / 16;
  constexpr int kPairThreads = 2 * kLatentHopperWarpgroupThreads;
  const int consumer = threadIdx.x - kLatentHopperWarpgroupThreads;
  const int cw = consumer / kLatentHopperWarpgroupThreads, quad = (consumer / 32) % 4;
  const int lane = threadIdx.x % 32, group_id = lane / 4, col = (lane % 4) * 2;
  const int row0 = quad * 16;
  float *const my_sums = S.row_sums(cw) + row0 + group_id;
  const float *const their_sums = S.row_sums(1 - cw) + row0 + group_id;
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
    const bool has_rows = valid_rows > 0;  // the same in both warpgroups: they meet at barriers

    float out_acc[kOutTiles][4], row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < kOutTiles; n++)
#pragma unroll
      for (int i = 0; i < 4; i++) out_acc[n][i] = 0.0f;
    // S of this warpgroup's tile at `at` (its scores stay in `score` until its softmax): the low
    // panels' k-steps as soon as they land, then the rest; issued, waited by the caller's block.
    float scores[1][kScoreTiles][4];  // softmax_step_scores takes m16 tiles of rows
    float(&score)[kScoreTiles][4] = scores[0];
    auto issue_scores = [&](const ring_position<kLatentHopperTileSlots> &at) {
      const uint32_t slot_tile = warp_uniform(shared_address(S.slot(at.slot)));
      mbarrier_wait(S.full(at.slot, 0), at.phase);
      fence_async_proxy();  // the panels landed through cp.async
      wgmma_fence();
      hopper_issue_scores_shared<T, kLatentHopperKeys, 0, kLowSteps>(score, q_tile,
                                                                 kLatentHopperRows, 0, slot_tile);
      mbarrier_wait(S.full(at.slot, 1), at.phase);
      fence_async_proxy();
      wgmma_fence();  // (the accumulators crossed the wait's loop: ptxas would add it)
      hopper_issue_scores_shared<T, kLatentHopperKeys, kLowSteps, kScoreSteps>(
          score, q_tile, kLatentHopperRows, 0, slot_tile);
      wgmma_commit();
    };
    // O_w += P V_w over this warpgroup's four value panels of the slot's tile, issued.
    auto issue_values = [&](const uint32_t (&p_frag)[kPSteps][4], int slot) {
      wgmma_fence();
      hopper_issue_values<T, kLatentHopperValueWidth / 2, kPSteps>(
          out_acc, p_frag, warp_uniform(shared_address(S.slot(slot))), kLatentHopperKeys,
          kLatentWholeLowPanels * cw);
      wgmma_commit();
    };
    // Every consumer thread frees what it read of a slot (P included): warpgroup 0 the low panels
    // (the scorer of slot 1 read them before its announcement), both the high ones.
    auto release = [&](int slot) {
      fence_async_proxy();  // P's generic stores and loads before the copy engine's refill
      if (cw == 0) mbarrier_arrive(S.empty(slot, 0));
      mbarrier_arrive(S.empty(slot, 1));
    };
    // Each kind of tile is one straight block of wgmma batches, waited before it ends (a wgmma
    // issue or wait under a run-time branch inside a block makes ptxas serialize them all).
    // This warpgroup's tile (its scores issued before): the step to the tile's max, P and the max
    // announced to the other warpgroup, then its own P V.
    auto own_tile = [&](int64_t tile) {
      const int slot = tile_pos.slot;
      const uint64_t mapped = *S.loaded_keys(slot);
      const float score_scale = softmax_step_scores(scores, P.scale, P.softcap);
      // the rows' admitted keys, read from the unit slot for each tile (registers held across
      // the unit are what the P V of the other warpgroup's tile needs)
      int32_t my_lo[2], my_hi[2];
#pragma unroll
      for (int h = 0; h < 2; h++) {
        my_lo[h] = U->row_lo[row0 + group_id + 8 * h];
        my_hi[h] = U->row_hi[row0 + group_id + 8 * h];
      }
      prefill_mask_scores(score, (int32_t)(tile * kLatentHopperKeys - key_base), (uint32_t)mapped,
                          (uint32_t)(mapped >> 32), my_lo, my_hi, col);
      uint32_t p_frag[kPSteps][4];
      prefill_softmax_to_p<T>(score, row_max, row_sum, out_acc, score_scale, p_frag);
      latent_whole_store_p(S.p_panel(slot), p_frag);
      float *const tile_max = S.tile_maxima(slot) + row0 + group_id;
      if (lane % 4 == 0) tile_max[0] = row_max[0], tile_max[8] = row_max[1];
      named_barrier_arrive(kLatentWholeTileBarrier + slot, kPairThreads);
      issue_values(p_frag, slot);
      wgmma_wait<0>();
      wgmma_fence_operands(out_acc);
      wgmma_fence_operands(p_frag);
      release(slot);
    };
    // The other warpgroup's tile t, with this warpgroup's next tile t + 1 when the unit has one
    // (score_next): the step to the announced max and t's P V with P from its panel. t + 1's
    // scores go first when it has landed (scores_first), so that both warpgroups score while one
    // takes its softmax; else t's P V and its release go first, so that the producer refills t's
    // slot while t + 1 lands. This warpgroup reads only its own value panels of t: warpgroup 1
    // does not wait for the low group, whose barrier may be a phase further on (the producer
    // refills the low panels once warpgroup 0 alone is done with them).
    auto other_tile = [&](auto score_next, auto scores_first) {
      constexpr bool kScoreNext = decltype(score_next)::value;
      constexpr bool kScoresFirst = decltype(scores_first)::value;
      const int slot = tile_pos.slot;
      ring_position<kLatentHopperTileSlots> next = tile_pos;
      next.advance();
      if constexpr (kScoresFirst) issue_scores(next);
      named_barrier_sync(kLatentWholeTileBarrier + slot, kPairThreads);
      const float *const tile_max = S.tile_maxima(slot) + row0 + group_id;
      float rescale[2];
#pragma unroll
      for (int h = 0; h < 2; h++) {
        rescale[h] = softmax_step_to_reference(row_max[h], tile_max[8 * h]).rescale;
        row_sum[h] *= rescale[h];
      }
      rescale_accumulator_rows(out_acc, rescale);
      // its values, seen here too (they landed before the announcement); warpgroup 1 reads no
      // low panel, so it does not wait for that group
      if (cw == 0) mbarrier_wait(S.full(slot, 0), tile_pos.phase);
      mbarrier_wait(S.full(slot, 1), tile_pos.phase);
      fence_async_proxy();
      uint32_t p_frag[kPSteps][4];
#pragma unroll
      for (int st = 0; st < kPSteps; st++)
        hopper_load_a_fragment(S.p_panel(slot), kLatentHopperRows, 0, st, p_frag[st]);
      issue_values(p_frag, slot);
      wgmma_wait<0>();
      wgmma_fence_operands(out_acc);
      wgmma_fence_operands(p_frag);
      if constexpr (kScoresFirst) wgmma_fence_operands(score);
      release(slot);
      if constexpr (kScoreNext && !kScoresFirst) {
        issue_scores(next);
        wgmma_wait<0>();
        wgmma_fence_operands(score);
      }
    };
    if (!has_rows) {  // (the same in both warpgroups) the unit's tiles pass through
      for (int64_t tile = tile_begin; tile < tile_end; tile++) {
        if (cw == 0) mbarrier_wait(S.full(tile_pos.slot, 0), tile_pos.phase);
        mbarrier_wait(S.full(tile_pos.slot, 1), tile_pos.phase);
        release(tile_pos.slot);
        tile_pos.advance();
      }
    } else {
      if (tile_begin < tile_end && tile_pos.slot == cw) {  // the unit's first tile is this one's
        issue_scores(tile_pos);
        wgmma_wait<0>();
        wgmma_fence_operands(score);
      }
      for (int64_t tile = tile_begin; tile < tile_end; tile++) {
        if (tile_pos.slot == cw) {
          own_tile(tile);
        } else if (tile + 1 < tile_end) {
          // whether this warpgroup's next tile has landed, decided by all its threads at once
          // (in practice only at a unit's first tiles: see the header)
          ring_position<kLatentHopperTileSlots> next = tile_pos;
          next.advance();
          const bool landed = mbarrier_test(S.full(next.slot, 0), next.phase) &&
                              mbarrier_test(S.full(next.slot, 1), next.phase);
          if (named_barrier_and(kLatentWholeVoteBarrier + cw, kLatentHopperWarpgroupThreads,
                                landed))
            other_tile(std::true_type(), std::true_type());
          else
            other_tile(std::true_type(), std::false_type());
        } else {
          other_tile(std::false_type(), std::false_type());
        }
        tile_pos.advance();
      }
    }
    mbarrier_arrive(S.unit_empty());  // Q and the rows are no longer read
    unit_pos.advance();
    if (!has_rows) continue;

    latent_pair_store<T>(P, out_acc, row_max, row_sum, my_sums, their_sums, first_token,
                         first_head, split, splits, valid_rows, row0, group_id, lane, col, cw);
  }
}

#endif  // PA_SM90A

// A persistent grid of one CTA per multiprocessor; the producer takes the units.
template <typename T>
__global__ void __launch_bounds__(kLatentHopperThreads, 1) latent_whole_kernel(
    const prefill_params P, const __grid_constant__ kv_page_maps maps) {
#if PA_SM90A
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const latent_whole_smem S = {smem_raw + swizzle_align_bytes(smem_raw)};
  latent_hopper_roles<T, true>(P, maps, S, [&] { latent_whole_consume<T>(P, S); });
#endif
}

// Per-instantiation entry points, defined in latent_hopper.cu.
template <typename T>
cudaError_t latent_whole_set_smem(int smem_bytes);
template <typename T>
cudaError_t latent_whole_launch(const prefill_params &P, const kv_page_maps &maps, dim3 grid,
                                 int smem_bytes, cudaStream_t stream, bool chained);

}  // namespace detail
}  // namespace pa
