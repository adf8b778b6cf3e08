// The PREFILL backend's Hopper kernels (sm_90a; fp16 / bf16 caches at every head size, int8 / fp8
// caches at 64..256): the work units, row blocks, splits and schedule of prefill_kernel.cuh,
// computed by warpgroups with wgmma and fed by a producer. (8-bit caches below 64 channels stay on
// mma.sync: prefill.cu's family_for.)
//
// A CTA is three warpgroups. The producer (warpgroup 0, registers given back with setmaxnreg) takes
// units from the schedule's counter, writes each unit's rows (admitted key ranges, per 16-row group
// their union and intersection) and loads its Q rows into one of kQSlots unit slots, then gathers
// the unit's K and V tiles (hopper_geometry's kTileKeys) from the pages into a kStages ring at
// their 128-byte-swizzled places (wgmma.cuh), rows outside the unit's keys or in unmapped blocks
// zero-filled and left out of the stage's loaded-keys word. With 16-bit caches Q comes as one box
// per 64-channel panel of a tensor map of the call's Q (encode_q_map), its bytes counted on the
// slot's "full" barrier, and a tile's 16-key run wholly in the unit's keys and mapped as one page
// box per 64-channel panel (kv_page_maps, encode_kv_page_maps), as LATENT's Hopper kernels load
// theirs; any other run, and with 8-bit caches Q, come with every producer thread's 16-byte
// cp.async. Completion is counted on mbarriers (each producer thread's tile cp.async tracked on,
// and the boxes' bytes announced to, the stage's "full" barrier); consumers free a stage on its
// "empty" barrier once their wgmmas have read it. The producer thus runs up to kStages tiles and
// one unit ahead of the consumers, across units.
// 8-bit caches (int8, fp8 e4m3): the producer stages each thread's codes (8 bytes of a row, the
// channels of its 16-byte T chunk) with cp.async into a kStagingSlots ring of its own, a tile
// ahead, converts each landed tile exactly to fp16 (codes8_to_t8; the wgmmas of 8-bit caches
// run in fp16 whatever T is, mma_input_t) at the same swizzled places, then fences the
// generic-proxy stores for wgmma and arrives on the stage's "full" barrier. No scale is applied
// there: as in the mma.sync kernel, a per-tensor k_scale goes into the score scale, a per-channel
// one into Q, v_scale into the output. The producer takes the unit's landed Q to fp16 in place,
// times a power of two that puts its largest element in [2^14, 2^15) (fp16_q_shift), and the unit's
// score scale takes that back.
// Two consumer warpgroups own 64 rows each of the 128-row block: S = Q K^T with wgmma m64nNk16,
// N the tile's keys (Q as registers or from shared memory: hopper_geometry's kQInRegisters; K
// K-major), scale / softcap /
// masks and the online softmax in registers (prefill_kernel.cuh's functions, on the same fragment
// layout as mma.sync), then O += P V with P from registers and V N-major (the transpose bit). A
// warpgroup whose rows admit no key of a tile skips it; tiles inside every row's range and fully
// mapped skip the masks. Results leave from the accumulators as in the mma.sync kernel (finalized
// rows, or split partials for split_merge_kernel).
#pragma once

#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include <type_traits>

#include "../common/block_scan.cuh"
#include "../common/bulk_copy.cuh"
#include "../common/chained_launch.cuh"
#include "../common/mbarrier.cuh"
#include "../common/tensor_core.cuh"
#include "../common/wgmma.cuh"
#include "prefill_kernel.cuh"

namespace pa {
namespace detail {

constexpr int kHopperRows = 128;  // a row block: two consumer warpgroups of 64 rows
constexpr int kHopperWarpgroupThreads = 128;
constexpr int kHopperThreads = 3 * kHopperWarpgroupThreads;  // producer + two consumers
constexpr int kHopperConsumerWarps = 8;
constexpr int kHopperRowGroups = kHopperRows / 16;  // 16-row groups: one per consumer warp
// 384 threads start with 168 registers (65536 / 384, rounded down to 8); the producer gives some
// back and the consumers take them (hopper_geometry: kProducerRegisters, kConsumerRegisters).
constexpr int kHopperStartRegisters = 168;
constexpr int kHopperProducerBarrier = 1;  // the producer warpgroup's named barrier
// + wg: consumer warpgroup wg's turn to issue wgmmas (both consumer warpgroups' threads)
constexpr int kHopperTurnBarrier = 2;
// + wg: consumer warpgroup wg's rows written out for its box stores (its own threads)
constexpr int kHopperStoreBarrier = 4;

// A unit as the producer hands it to the consumers (one per Q slot).
struct hopper_unit {
  int64_t first_token, key_base, tile_begin, tile_end;
  int32_t kv_head, split, splits, first_head, valid_rows, done;
  // the score scale (prefill_qk_scale), read from here at each tile: a register held across the
  // unit would spill at 256 channels
  float qk_scale;
  int32_t row_lo[kHopperRows], row_hi[kHopperRows];  // admitted keys, relative to key_base
  // per 16-row group: the union of its rows' ranges (a warpgroup skips tiles outside its groups'
  // unions) and their intersection over the existing rows (tiles inside it need no mask)
  int32_t group_lo[kHopperRowGroups], group_hi[kHopperRowGroups];
  int32_t common_lo[kHopperRowGroups], common_hi[kHopperRowGroups];
};

// The producer's exchange: the unit taken, each warp's part of the key union.
struct hopper_scratch {
  int64_t taken;
  int32_t lo[4], hi[4];  // hopper_unit_row_keys: each warp's union
  float q_max[4];  // 8-bit caches: each warp's largest |Q| element of the unit (after k_scale)
  // hopper_work_before_wait: each warp's units, and the sequence found (its row blocks, splits)
  int32_t warp_units[4];
  int32_t found_b, found_local, found_row_blocks, found_splits;
};

// Shared memory of the kernel for head sizes up to DMAX, from a 1024-byte aligned base: the Q
// slots ([128 rows] x DMAX, swizzled), the K/V stage ring (K then V, [kTileKeys keys] x DMAX,
// swizzled), the unit slots, the stages' admitted-key flags, the barriers and the producer's
// scratch. 8-bit caches (C of one byte) add the producer's code staging after the ring (a tile's K
// and V codes per slot) and take fewer stages, within the 227 KB a block may have.
template <typename C, int DMAX>
struct hopper_geometry {
  static_assert(DMAX == 64 || DMAX == 128 || DMAX == 256, "the Hopper layouts' channel counts");
  static constexpr bool kCodes = sizeof(C) == 1;  // the producer converts codes to fp16
  static constexpr int kChunks = DMAX / 8;        // 16-byte chunks of a T row
  static constexpr int kQSlots = DMAX == 256 ? 1 : 2;
  // Keys per tile: 128 for 16-bit caches up to 128 channels and for 8-bit ones at 64 (S as
  // m64n128k16: the n64 shape left the tensor cores idle between small GEMMs, and each tile's
  // barriers, row maxima and rescaling count once per 128 keys; at 64 channels it also gives 8-bit
  // producer threads runs of 8 rows, whole bytes of the loaded-keys words), else 64 (two stages of
  // 128 keys at 256 channels would leave no prefetch; 8-bit caches' staging would not fit at 128
  // channels). A tile is kTileKeys / 64 of the schedule's 64-key tiles (kPrefillTileKeys), the
  // last one past the unit's tile_end not loaded.
  static constexpr int kTileKeys = DMAX == 64 || (DMAX == 128 && !kCodes) ? 128 : 64;
  static constexpr int kTileSpan = kTileKeys / kPrefillTileKeys;  // schedule tiles per tile
  // With 128-key tiles a stage's K and V land and are freed on barriers of their own (a tile's K
  // is free once its S has run, its V a turn later), and two stages keep about two tiles of loads
  // in flight, as four 64-key stages did (at 64 channels, where a tile is half the bytes, four
  // stages fit). Otherwise one pair of barriers guards the whole stage: the 8-bit kernels ran
  // 4-5 % slower with the split (sixth call of session 17), and their producer converts a
  // stage's K and V together.
  static constexpr bool kSplitStages = kTileKeys == 128 && !kCodes;
  static constexpr int kStages = DMAX == 256 ? 2 : DMAX == 128 && kSplitStages ? 2 : 4;
  // Up to 128 channels the two consumer warpgroups take turns on the tensor cores (at 256, the
  // pipelined loop's extra score and P registers would spill)
  static constexpr bool kTurns = DMAX <= 128;
  // The registers after setmaxnreg: the 16-bit producer keeps a tile's row predicates from its K
  // copies to its V copies (waits between) and spilled at 56; the 8-bit consumers at 256 channels
  // spill at 216 (ptxas -v); at 64 channels the 8-bit producer, whose runs are 8 rows of a 128-key
  // tile, spilled at 56, and the consumers need fewer
  static constexpr bool kWideCodes = kCodes && DMAX > 64;
  static constexpr int kProducerRegisters = kWideCodes ? 56 : 64;
  static constexpr int kConsumerRegisters = kWideCodes ? 224 : 216;
  static_assert(kProducerRegisters + 2 * kConsumerRegisters <= 3 * kHopperStartRegisters,
                "the registers the CTA started with");
  // 8-bit caches: one tile of codes staged ahead; at 128 channels 4 stages + 1 staging slot ran
  // 2 % faster than 3 + 2 (doc/performance.md, fifteenth measurement)
  static constexpr int kStagingSlots = kCodes ? 1 : 0;
  // Q as the A operand from registers (wgmma reads only K from shared memory); at 256 channels,
  // and at 128 beside 128-key scores and their P, the fragments would not fit beside the
  // accumulators (112 bytes of spills), and Q stays in shared memory (at 64 channels the
  // accumulators are half as many)
  static constexpr bool kQInRegisters = DMAX == 64 || (DMAX == 128 && kTileKeys == 64);
  static constexpr int kQBytes = kHopperRows * DMAX * 2;
  static constexpr int kTileBytes = kTileKeys * DMAX * 2;  // K or V
  static constexpr int kStageOffset = kQSlots * kQBytes;
  static constexpr int kStagingBytes = 2 * kTileKeys * DMAX;  // K and V codes of a tile
  static constexpr int kStagingOffset = kStageOffset + kStages * 2 * kTileBytes;
  static constexpr int kUnitOffset = kStagingOffset + kStagingSlots * kStagingBytes;
  static constexpr int kFlagOffset = (kUnitOffset + kQSlots * (int)sizeof(hopper_unit) + 7) / 8 * 8;
  static constexpr int kFlagWords = kTileKeys / 64;  // a stage's loaded-keys bits
  static constexpr int kBarrierOffset = kFlagOffset + kStages * kFlagWords * 8;
  static constexpr int kStageBarriers = (kSplitStages ? 4 : 2) * kStages;
  static constexpr int kScratchOffset = kBarrierOffset + (kStageBarriers + 2 * kQSlots) * 8;
  // + 1024: the dynamic base is aligned at run time
  static constexpr int kSmemBytes = kScratchOffset + (int)sizeof(hopper_scratch) + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "a block of sm_90 has at most 227 KB of shared memory");
};

template <typename C, int DMAX>
struct hopper_smem {
  using G = hopper_geometry<C, DMAX>;
  unsigned char *base;  // 1024-byte aligned
  __device__ unsigned char *q(int slot) const { return base + slot * G::kQBytes; }
  __device__ unsigned char *k_tile(int stage) const {
    return base + G::kStageOffset + stage * 2 * G::kTileBytes;
  }
  __device__ unsigned char *v_tile(int stage) const { return k_tile(stage) + G::kTileBytes; }
  __device__ unsigned char *staging(int slot) const {
    return base + G::kStagingOffset + slot * G::kStagingBytes;
  }
  __device__ hopper_unit *unit(int slot) const {
    return reinterpret_cast<hopper_unit *>(base + G::kUnitOffset) + slot;
  }
  // bit k % 64 of word k / 64: key k of the stage's tile was loaded (in the unit's keys and in a
  // mapped block); written with the stage's K
  __device__ uint64_t *loaded_keys(int stage) const {
    return reinterpret_cast<uint64_t *>(base + G::kFlagOffset) + stage * G::kFlagWords;
  }
  __device__ uint64_t *barrier(int i) const {
    return reinterpret_cast<uint64_t *>(base + G::kBarrierOffset) + i;
  }
  // a stage's K (with its loaded-keys bits) and its V have landed; the consumers have read them.
  // Without kSplitStages the V barriers are the K ones, which then guard the whole stage: a side
  // that waits or arrives on both does so only with kSplitStages.
  __device__ uint64_t *k_full(int stage) const { return barrier(stage); }
  __device__ uint64_t *k_empty(int stage) const { return barrier(G::kStages + stage); }
  __device__ uint64_t *v_full(int stage) const {
    return G::kSplitStages ? barrier(2 * G::kStages + stage) : k_full(stage);
  }
  __device__ uint64_t *v_empty(int stage) const {
    return G::kSplitStages ? barrier(3 * G::kStages + stage) : k_empty(stage);
  }
  __device__ uint64_t *unit_full(int slot) const { return barrier(G::kStageBarriers + slot); }
  __device__ uint64_t *unit_empty(int slot) const {
    return barrier(G::kStageBarriers + G::kQSlots + slot);
  }
  __device__ hopper_scratch *scratch() const {
    return reinterpret_cast<hopper_scratch *>(base + G::kScratchOffset);
  }
};

// A place in a ring of kSlots slots and the parity of its current round.
template <int kSlots>
struct ring_position {
  int slot;
  uint32_t phase;
  __device__ void advance() {
    if (++slot == kSlots) {
      slot = 0;
      phase ^= 1u;
    }
  }
};

// Descriptors of k-step s of a swizzled tile of panel_rows rows at shared address `tile`:
// K-major (16 channels of each row) and N-major (rows 16 s .. 16 s + 15, from 64-channel panel
// first_panel on). wgmma.cuh describes the layout. Each is the tile's descriptor plus the k-step's
// constant offset (>> 4), so the tile's descriptor is computed once for all its k-steps.
__host__ __device__ constexpr uint64_t hopper_k_major_desc(uint32_t tile, int panel_rows, int s) {
  return wgmma_descriptor_plus(wgmma_descriptor(tile, 16, 1024),
                               (uint32_t)(((s / 4) * panel_rows * 128 + (s % 4) * 32) >> 4));
}
__host__ __device__ constexpr uint64_t hopper_n_major_desc(uint32_t tile, int panel_rows, int s,
                                                           int first_panel) {
  return wgmma_descriptor_plus(wgmma_descriptor(tile, panel_rows * 128, 1024),
                               (uint32_t)((first_panel * panel_rows * 128 + s * 16 * 128) >> 4));
}

#if PA_SM90A

// This thread's A fragment of k-step s for the warpgroup rows starting at row0 of a tile whose
// 16-bit element (row, k) lies at byte offset_of(row, k) (wgmma.cuh, "Register fragments").
template <typename OffsetOf>
__device__ __forceinline__ void load_a_fragment_at(const unsigned char *tile, int row0, int s,
                                                   uint32_t (&a)[4], OffsetOf &&offset_of) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int row = row0 + warp * 16 + lane / 4 + 8 * (i % 2);
    const int k = s * 16 + (lane % 4) * 2 + 8 * (i / 2);
    a[i] = *reinterpret_cast<const uint32_t *>(tile + offset_of(row, k));
  }
}
// The same from a swizzled tile of panel_rows rows.
__device__ __forceinline__ void hopper_load_a_fragment(const unsigned char *tile, int panel_rows,
                                                       int row0, int s, uint32_t (&a)[4]) {
  load_a_fragment_at(tile, row0, s, a, [&](int row, int k) {
    return swizzle128_chunk_offset(panel_rows, row, k / 8) + (k % 8) * 2;
  });
}

// Issues k-steps kFirst .. kEnd - 1 (16 channels each; k-step 0 overwrites S) of S (64 rows x
// kKeys keys, 64 or 128) = Q K^T with Q from the swizzled tile at q_tile (panel_rows rows, the
// warpgroup's first row row0) and K at k_tile (kKeys rows), after a wgmma_fence of the caller.
template <typename T, int kKeys, int kFirst, int kEnd>
__device__ __forceinline__ void hopper_issue_scores_shared(float (&score)[kKeys / 8][4],
                                                           uint32_t q_tile, int q_panel_rows,
                                                           int row0, uint32_t k_tile) {
  static_assert(kKeys == 64 || kKeys == 128, "the S shapes built");
  using mma = wgmma_m64k16<T>;
#pragma unroll
  for (int s = kFirst; s < kEnd; s++) {
    const uint64_t k_desc = hopper_k_major_desc(k_tile, kKeys, s);
    const uint64_t q_desc = hopper_k_major_desc(q_tile + row0 * 128, q_panel_rows, s);
    if (s == 0)
      mma::template shared_a<0>(score, q_desc, k_desc);
    else
      mma::template shared_a<1>(score, q_desc, k_desc);
  }
}
// The same over DMAX channels, Q from q_frag (kQInRegisters) or from shared memory as above.
// hopper_scores also fences, commits and waits.
template <typename T, int DMAX, bool kQInRegisters, int kKeys>
__device__ __forceinline__ void hopper_issue_scores(float (&score)[kKeys / 8][4],
                                                    uint32_t (&q_frag)[DMAX / 16][4],
                                                    uint32_t q_tile, int q_panel_rows, int row0,
                                                    uint32_t k_tile) {
  if constexpr (kQInRegisters) {
    static_assert(kKeys == 64 || kKeys == 128, "the S shapes built");
    using mma = wgmma_m64k16<T>;
#pragma unroll
    for (int s = 0; s < DMAX / 16; s++) {
      const uint64_t k_desc = hopper_k_major_desc(k_tile, kKeys, s);
      if (s == 0)
        mma::template registers_a<0, 0>(score, q_frag[s], k_desc);
      else
        mma::template registers_a<1, 0>(score, q_frag[s], k_desc);
    }
  } else {
    hopper_issue_scores_shared<T, kKeys, 0, DMAX / 16>(score, q_tile, q_panel_rows, row0, k_tile);
  }
}
template <typename T, int DMAX, bool kQInRegisters, int kKeys>
__device__ __forceinline__ void hopper_scores(float (&score)[kKeys / 8][4],
                                              uint32_t (&q_frag)[DMAX / 16][4], uint32_t q_tile,
                                              int q_panel_rows, int row0, uint32_t k_tile) {
  wgmma_fence();
  hopper_issue_scores<T, DMAX, kQInRegisters, kKeys>(score, q_frag, q_tile, q_panel_rows, row0,
                                                     k_tile);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operands(score);
  if constexpr (kQInRegisters) wgmma_fence_operands(q_frag);
}

// Issues O (64 rows x DMAX channels) += P V for the 16 kKeySteps keys of the V tile at v_tile,
// after a wgmma_fence of the caller; P as kKeySteps k-steps of A fragments; V N-major in panels of
// v_panel_rows rows, its channels from 64-channel panel first_panel on. One wgmma covers up to 128
// channels. hopper_add_values also fences, commits and waits.
template <typename T, int DMAX, int kKeySteps = kPrefillTileKeys / 16>
__device__ __forceinline__ void hopper_issue_values(float (&out_acc)[DMAX / 8][4],
                                                    const uint32_t (&p_frag)[kKeySteps][4],
                                                    uint32_t v_tile,
                                                    int v_panel_rows = kPrefillTileKeys,
                                                    int first_panel = 0) {
  using mma = wgmma_m64k16<T>;
  constexpr int kN = DMAX < 128 ? DMAX : 128;
#pragma unroll
  for (int s = 0; s < kKeySteps; s++)
#pragma unroll
    for (int part = 0; part < DMAX / kN; part++)
      mma::template registers_a<1, 1>(
          *reinterpret_cast<float(*)[kN / 8][4]>(&out_acc[part * kN / 8]), p_frag[s],
          hopper_n_major_desc(v_tile, v_panel_rows, s, first_panel + part * kN / 64));
}
template <typename T, int DMAX, int kKeySteps>
__device__ __forceinline__ void hopper_add_values(float (&out_acc)[DMAX / 8][4],
                                                  uint32_t (&p_frag)[kKeySteps][4],
                                                  uint32_t v_tile) {
  wgmma_fence();
  hopper_issue_values<T, DMAX, kKeySteps>(out_acc, p_frag, v_tile, 16 * kKeySteps);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operands(out_acc);
  wgmma_fence_operands(p_frag);
}

// The producer warpgroup's part of a unit's setup that both Hopper kernels share: thread tid's
// row's admitted keys, the union over the unit's rows (each warp's part through the scratch, met at
// the producer's named barrier, which also orders the read of `taken` before the next unit's
// write), and the row's keys relative to that union (0 / 0 for a row the unit does not have).
// kBeforeWait: load_step_input's.
struct hopper_row_keys {
  prefill_key_union keys_union;
  int32_t row_lo, row_hi;
};
template <bool kBeforeWait = false>
__device__ __forceinline__ hopper_row_keys hopper_unit_row_keys(const prefill_params &P,
                                                                const prefill_unit_rows &rows,
                                                                hopper_scratch *scratch,
                                                                int producer_barrier) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const bool row_exists = tid < rows.valid_rows;
  key_span keys = {0, 0};
  if (row_exists) keys = prefill_row_keys<kBeforeWait>(P, rows, tid);
  // The union in 32 bits, a warp's in one redux.sync each (64-bit shuffles and compares were
  // about 150 instructions of the chain): keys are never negative, and within the contract below
  // kv_len <= INT32_MAX (doc/api.md), so the clamp changes nothing there; lengths past it get a
  // union cut at INT32_MAX keys, as wrong as theirs and as bounded (prefill_cut_union).
  const bool admits = keys.lo < keys.hi;
  int32_t lo = admits ? (int32_t)min(keys.lo, (int64_t)INT32_MAX) : INT32_MAX;
  int32_t hi = admits ? (int32_t)min(keys.hi, (int64_t)INT32_MAX) : 0;
  lo = __reduce_min_sync(0xffffffffu, lo);
  hi = __reduce_max_sync(0xffffffffu, hi);
  if (lane == 0) {
    scratch->lo[warp] = lo;
    scratch->hi[warp] = hi;
  }
  named_barrier_sync(producer_barrier, kHopperWarpgroupThreads);
#pragma unroll
  for (int i = 0; i < 4; i++) {
    lo = min(lo, scratch->lo[i]);
    hi = max(hi, scratch->hi[i]);
  }
  hopper_row_keys r = {prefill_cut_union(lo, hi), 0, 0};
  if (row_exists) prefill_relative_keys(keys, r.keys_union, &r.row_lo, &r.row_hi);
  return r;
}

// The producer warpgroup's (threads 0-127) search for the taken-th (unit, KV head) pair of the
// schedule from the step's lengths alone, as prefill_schedule_kernel numbers the units, so that a
// CTA can set up its first unit before the kernel's wait (the schedule kernel may still be writing
// unit_begin then). The sequences are counted 128 at a time, a running sum, until the one that
// holds the unit: a CTA's first unit, taken <= its index, lies in the first chunk unless many
// sequences have no units. Returns false when the schedule has fewer units (and then *w is unset).
// (Malformed lengths whose units pass 2^31 in all wrap in the schedule's 32-bit sum, not in this
// 64-bit one: their units may then be numbered apart, which gives wrong rows, as such lengths do
// anyway, and reads nothing out of bounds: rows and keys are clamped as for any unit.)
// kOneKvHead: prefill_kv_heads's.
template <bool kOneKvHead = false>
__device__ __forceinline__ bool hopper_work_before_wait(const prefill_params &P, int64_t taken,
                                                        hopper_scratch *scratch,
                                                        int producer_barrier, prefill_work *w) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int64_t unit = taken / prefill_kv_heads<kOneKvHead>(P);
  int64_t carry = 0;
  for (int32_t chunk = 0; chunk < P.batch_size && carry <= unit;
       chunk += kHopperWarpgroupThreads) {
    const int32_t b = chunk + tid;
    prefill_sequence_work work = {0, 1};
    if (b < P.batch_size)
      work = prefill_sequence_work_of(
          P, load_sequence_span<true>(P.cu_seqlens, P.past_seqlens, b));
    const int32_t units = work.units();
    const int32_t inclusive = warp_inclusive_scan(units);
    if (lane == 31) scratch->warp_units[warp] = inclusive;
    named_barrier_sync(producer_barrier, kHopperWarpgroupThreads);
    int64_t first = carry + inclusive - units;
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const int32_t warp_units = scratch->warp_units[i];
      if (i < warp) first += warp_units;
      carry += warp_units;
    }
    if (unit >= first && unit < first + units) {  // one thread at most
      scratch->found_b = b;
      scratch->found_local = (int32_t)(unit - first);
      scratch->found_row_blocks = work.row_blocks;
      scratch->found_splits = work.splits;
    }
    // the found sequence written, and warp_units read before the next chunk's writes
    named_barrier_sync(producer_barrier, kHopperWarpgroupThreads);
  }
  if (carry <= unit) return false;  // (uniform)
  *w = prefill_work_in_sequence(scratch->found_b, scratch->found_local, scratch->found_row_blocks,
                                scratch->found_splits,
                                (int)(taken % prefill_kv_heads<kOneKvHead>(P)));
  return true;
}

// The producer warpgroup: units and their Q rows into the unit slots, their K/V tiles into the
// stage ring, until the schedule runs out (then a slot says done). maps: the call's page and query
// maps (16-bit caches).
template <typename T, typename C, int DMAX>
__device__ __forceinline__ void hopper_produce(const prefill_params &P,
                                               const hopper_smem<C, DMAX> &S,
                                               const kv_page_maps &maps) {
  using G = hopper_geometry<C, DMAX>;
  // thread (run, chunk) loads 16-byte chunk `chunk` of kRunRows consecutive rows of each tile: a
  // run lies in one page (tiles start at multiples of 64 keys, kRunRows divides 16 <= block_size).
  // 16-bit caches take a page box's 16 rows per run; at 64 channels a tile's runs then need only
  // the first kLoaders threads (the others load no tile rows). The 8-bit staging needs every
  // thread.
  constexpr int kRunRows =
      G::kCodes ? G::kTileKeys * G::kChunks / kHopperWarpgroupThreads : kPageBoxRows;
  constexpr int kLoaders = G::kTileKeys / kRunRows * G::kChunks;
  static_assert(kRunRows >= 1 && 16 % kRunRows == 0, "a run of rows lies in one 16-key page");
  static_assert(kRunRows == 8 || kRunRows == 16, "a run's bits are whole bytes of loaded_keys");
  static_assert(kLoaders <= kHopperWarpgroupThreads && (!G::kCodes || kLoaders == kHopperWarpgroupThreads),
                "the producer's threads cover a tile's runs");
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int chunk = tid % G::kChunks, run = tid / G::kChunks;
  const bool loader = kLoaders == kHopperWarpgroupThreads || tid < kLoaders;
  const int head_size = P.kv.head_size;
  const bool real_chunk = chunk * 8 < head_size;
  const int64_t slot_bytes = (int64_t)P.kv.kv_num_heads * head_size * (int64_t)sizeof(C);
  const unsigned char *k_base = reinterpret_cast<const unsigned char *>(P.k_cache);
  const unsigned char *v_base = reinterpret_cast<const unsigned char *>(P.v_cache);
  const T *q = reinterpret_cast<const T *>(P.q);
  const int64_t total = (int64_t)P.unit_begin[P.batch_size] * P.kv_num_heads;
  hopper_scratch *scratch = S.scratch();
  ring_position<G::kQSlots> unit_pos = {0, 0u};
  ring_position<G::kStages> tile_pos = {0, 0u};
  for (;;) {
    mbarrier_wait(S.unit_empty(unit_pos.slot), unit_pos.phase ^ 1u);
    hopper_unit *U = S.unit(unit_pos.slot);
    if (tid == 0) scratch->taken = atomicAdd(P.work_counter, 1u);
    named_barrier_sync(kHopperProducerBarrier, kHopperWarpgroupThreads);
    const int64_t taken = scratch->taken;
    if (taken >= total) {
      if (tid == 0) U->done = 1;
      mbarrier_arrive(S.unit_full(unit_pos.slot));
      break;
    }
    const prefill_work w = prefill_work_of(P, taken);
    prefill_unit_rows rows = {};  // none for malformed lengths
    if (w.valid) rows = prefill_unit_rows_of(P, w.b, w.row_block, w.kv_head);

    const bool row_exists = tid < rows.valid_rows;
    const hopper_row_keys row_keys = hopper_unit_row_keys(P, rows, scratch, kHopperProducerBarrier);
    const prefill_key_union keys_union = row_keys.keys_union;
    const int32_t row_lo = row_keys.row_lo, row_hi = row_keys.row_hi;
    U->row_lo[tid] = row_lo;
    U->row_hi[tid] = row_hi;
    int32_t group_lo = row_lo < row_hi ? row_lo : INT32_MAX;
    int32_t group_hi = row_lo < row_hi ? row_hi : INT32_MIN;
    int32_t common_lo = row_exists ? row_lo : INT32_MIN;
    int32_t common_hi = row_exists ? row_hi : INT32_MAX;
#pragma unroll
    for (int offset = 8; offset > 0; offset /= 2) {  // within each half warp: a 16-row group
      group_lo = min(group_lo, __shfl_xor_sync(0xffffffffu, group_lo, offset));
      group_hi = max(group_hi, __shfl_xor_sync(0xffffffffu, group_hi, offset));
      common_lo = max(common_lo, __shfl_xor_sync(0xffffffffu, common_lo, offset));
      common_hi = min(common_hi, __shfl_xor_sync(0xffffffffu, common_hi, offset));
    }
    if (lane % 16 == 0) {
      U->group_lo[tid / 16] = group_lo;
      U->group_hi[tid / 16] = group_hi;
      U->common_lo[tid / 16] = common_lo;
      U->common_hi[tid / 16] = common_hi;
    }
    int64_t tile_begin, tile_end;
    prefill_unit_tiles(P, keys_union, w.split, w.splits, &tile_begin, &tile_end);
    if (tid == 0) {
      U->first_token = rows.first_token;
      U->key_base = keys_union.key_base;
      U->tile_begin = tile_begin;
      U->tile_end = tile_end;
      U->kv_head = w.kv_head;
      U->split = w.split;
      U->splits = w.splits;
      U->first_head = rows.first_head;
      U->valid_rows = rows.valid_rows;
      U->done = 0;
      U->qk_scale = prefill_qk_scale<C>(P);
    }

    // The Q rows, zero for channels past head_size. Rows past valid_rows hold other tokens' or
    // heads' Q, zeros, or (16-bit caches, past heads_per_block x tokens_per_block) whatever the
    // slot held, possibly not finite: every consumer step is row by row, and such rows are never
    // stored.
    unsigned char *q_slot = S.q(unit_pos.slot);
    if constexpr (!G::kCodes) {
      // 16-bit caches: one box per 64-channel panel (encode_q_map), issued by one thread, its
      // bytes counted on the slot's barrier beside the producer's arrivals
      if (tid == 0) {
        constexpr int kPanels = DMAX / kPageBoxChannels;
        mbarrier_expect_bytes(S.unit_full(unit_pos.slot), (uint32_t)P.q_box_bytes);
#pragma unroll
        for (int panel = 0; panel < kPanels; panel++)
          q_box_load(q_slot + panel * kHopperRows * 128, &maps.q, S.unit_full(unit_pos.slot),
                     panel * kPageBoxChannels, rows.first_head, (int)rows.first_token);
      }
    } else {
      // 8-bit caches: every thread's cp.async, then the conversion below
      // not unrolled: unrolled, the producer spilled at its 56 / 64 registers
#pragma unroll 1
      for (int i = tid; i < kHopperRows * G::kChunks; i += kHopperWarpgroupThreads) {
        const int r = i / G::kChunks, c = i % G::kChunks;
        const bool fill = r < rows.valid_rows && c * 8 < head_size;
        const T *src = q;
        if (fill)
          src = q + (rows.first_token + prefill_row_token(P, r)) * P.q_row_stride +
                (int64_t)(rows.first_head + prefill_row_head(P, r)) * head_size + c * 8;
        cp_async_16(q_slot + swizzle128_chunk_offset(kHopperRows, r, c), src, fill);
      }

      // Q to fp16 (mma_input_t) in place, the per-channel k_scale folded in: each thread its own
      // landed chunks, twice (their largest element, then the conversion with the unit's power of
      // two), then fenced for wgmma like the converted tiles below
      cp_async_commit();  // the Q chunks' group (nothing else is in flight between units)
      cp_async_wait<0>();
      const float *k_scale = P.k_quant == PA_QUANT_PER_CHANNEL
                                 ? P.k_scale + (int64_t)w.kv_head * head_size
                                 : nullptr;
      auto chunk_of = [&](int i) {
        return reinterpret_cast<uint4 *>(
            q_slot + swizzle128_chunk_offset(kHopperRows, i / G::kChunks, i % G::kChunks));
      };
      auto in_rows = [&](int i) {
        return i / G::kChunks < rows.valid_rows && (i % G::kChunks) * 8 < head_size;
      };
      float q_max = 0.0f;
      for (int i = tid; i < kHopperRows * G::kChunks; i += kHopperWarpgroupThreads)
        if (in_rows(i))
          q_max = fmaxf(q_max, q_chunk_max<T>(*chunk_of(i), k_scale, (i % G::kChunks) * 8));
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2)
        q_max = fmaxf(q_max, __shfl_xor_sync(0xffffffffu, q_max, offset));
      if (lane == 0) scratch->q_max[warp] = q_max;
      named_barrier_sync(kHopperProducerBarrier, kHopperWarpgroupThreads);
#pragma unroll
      for (int i = 0; i < 4; i++) q_max = fmaxf(q_max, scratch->q_max[i]);
      const int shift = fp16_q_shift(q_max);
      const float down = ldexpf(1.0f, -shift);
      for (int i = tid; i < kHopperRows * G::kChunks; i += kHopperWarpgroupThreads)
        if (in_rows(i))
          *chunk_of(i) = q_chunk_to_half<T>(*chunk_of(i), k_scale, (i % G::kChunks) * 8, down);
      fence_async_proxy();
      if (tid == 0) U->qk_scale = prefill_qk_scale<C>(P) * ldexpf(1.0f, shift);
    }
    mbarrier_arrive(S.unit_full(unit_pos.slot));
    unit_pos.advance();

    // The K/V tiles (`tile` counts the schedule's 64-key tiles, G::kTileSpan per tile); each
    // run's block-table entry is read a tile ahead. Keys from tile_end on are another split's.
    const int32_t *table_row = P.block_table + (int64_t)w.b * P.kv.max_blocks_per_seq;
    const int64_t key_end = min(keys_union.hi, tile_end * kPrefillTileKeys);
    auto entry = [&](int64_t tile) {
      const int64_t key = tile * kPrefillTileKeys + run * kRunRows;
      return loader && key < key_end ? kv_block_entry(P.kv, table_row, key) : -1;
    };
    // The loaded-key bits of this thread's run of `tile` in block block_id (its rows in the unit's
    // keys and mapped), whatever the thread's chunk
    auto run_bits = [&](int64_t tile, int32_t block_id) -> uint32_t {
      if (block_id < 0) return 0u;
      const int64_t key0 = tile * kPrefillTileKeys + run * kRunRows;
      const int first_valid =
          (int)max((int64_t)0, min((int64_t)kRunRows, keys_union.lo - key0));
      const int end_valid = (int)max((int64_t)0, min((int64_t)kRunRows, key_end - key0));
      return ((1u << end_valid) - 1u) & ~((1u << first_valid) - 1u);
    };
    // This thread's run of `tile` in block block_id: the rows its chunk loads (run_bits) and the
    // byte offset of its chunk in the run's first row (rows are slot_bytes apart); a thread's chunk
    // is 16 bytes of T, or the 8 codes of those channels. A chunk past head_size or an unmapped
    // block loads no row, from offset 0 (the cache's first row).
    auto run_source = [&](int64_t tile, int32_t block_id, uint32_t *valid) -> int64_t {
      *valid = 0u;
      if (!real_chunk || block_id < 0) return 0;
      const int64_t key0 = tile * kPrefillTileKeys + run * kRunRows;
      *valid = run_bits(tile, block_id);
      return kv_row_offset(P.kv, block_id, key0, w.kv_head) * (int64_t)sizeof(C) +
             chunk * 8 * (int)sizeof(C);
    };
    // the run's bits of the stage's loaded-keys word
    auto write_run_bits = [&](int stage, uint32_t valid) {
      using run_bits = std::conditional_t<kRunRows == 8, uint8_t, uint16_t>;
      if (loader && chunk == 0)
        reinterpret_cast<run_bits *>(S.loaded_keys(stage))[run] = (run_bits)valid;
    };
    int32_t next_entry = tile_begin < tile_end ? entry(tile_begin) : -1;
    if constexpr (G::kCodes) {
      // Staging slot s holds, for thread tid, its K codes of row i of the run at
      // (i * kHopperWarpgroupThreads + tid) * 8 and the V codes kRunRows such rows later: each
      // thread reads back only what it loaded (its cp.async.wait_group suffices), and a warp's
      // 8-byte accesses are contiguous.
      constexpr int kVCodes = kRunRows * kHopperWarpgroupThreads * 8;
      static_assert(2 * kVCodes == G::kStagingBytes, "a slot holds a tile's K and V codes");
      int64_t staged_tile = tile_begin;  // the next tile to stage (in schedule tiles)
      static_assert(!G::kSplitStages, "8-bit caches convert a whole stage at once");
      auto stage_codes = [&](int slot) {  // stages tile staged_tile (if any); its run bits
        uint32_t valid = 0u;
        if (staged_tile < tile_end) {
          const int32_t block_id = kv_block_mapped(P.kv, next_entry);
          if (staged_tile + G::kTileSpan < tile_end)
            next_entry = entry(staged_tile + G::kTileSpan);
          // row i from the run's first row, loaded or not (as the 16-bit tiles below)
          const int64_t offset = run_source(staged_tile, block_id, &valid);
          const unsigned char *k_rows = k_base + offset, *v_rows = v_base + offset;
          unsigned char *codes = S.staging(slot) + tid * 8;
#pragma unroll
          for (int i = 0; i < kRunRows; i++) {
            const bool fill = valid >> i & 1u;
            unsigned char *dst = codes + i * kHopperWarpgroupThreads * 8;
            cp_async_8(dst, k_rows + i * slot_bytes, fill);
            cp_async_8(dst + kVCodes, v_rows + i * slot_bytes, fill);
          }
        }
        cp_async_commit();  // empty past the unit's tiles: one group per tile position
        staged_tile += G::kTileSpan;
        return valid;
      };
      uint32_t staged_valid[G::kStagingSlots];  // the staged tiles' run bits, oldest first
#pragma unroll
      for (int s = 0; s < G::kStagingSlots; s++) staged_valid[s] = stage_codes(s);
      for (int64_t tile = tile_begin; tile < tile_end; tile += G::kTileSpan) {
        const int slot = (int)((tile - tile_begin) / G::kTileSpan % G::kStagingSlots);
        cp_async_wait<G::kStagingSlots - 1>();  // this thread's codes of `tile` have landed
        mbarrier_wait(S.k_empty(tile_pos.slot), tile_pos.phase ^ 1u);  // the whole stage
        const unsigned char *codes = S.staging(slot) + tid * 8;
        unsigned char *k_tile = S.k_tile(tile_pos.slot), *v_tile = S.v_tile(tile_pos.slot);
        // kBatch rows' codes loaded before any is converted and stored: ptxas cannot move a
        // shared load above a shared store it may alias, and one load in flight at a time left
        // the producer stalled on each (ncu, fifteenth measurement)
        constexpr int kBatch = DMAX == 256 ? 1 : 4;  // more at 256 channels spills
#pragma unroll
        for (int i0 = 0; i0 < kRunRows; i0 += kBatch) {
          uint2 k_codes[kBatch], v_codes[kBatch];
#pragma unroll
          for (int i = 0; i < kBatch; i++) {
            const unsigned char *src = codes + (i0 + i) * kHopperWarpgroupThreads * 8;
            k_codes[i] = *reinterpret_cast<const uint2 *>(src);
            v_codes[i] = *reinterpret_cast<const uint2 *>(src + kVCodes);
          }
#pragma unroll
          for (int i = 0; i < kBatch; i++) {
            const int dst =
                swizzle128_chunk_offset(G::kTileKeys, run * kRunRows + i0 + i, chunk);
            *reinterpret_cast<uint4 *>(k_tile + dst) =
                codes8_to_t8<mma_input_t<T, C>, C>(k_codes[i]);
            *reinterpret_cast<uint4 *>(v_tile + dst) =
                codes8_to_t8<mma_input_t<T, C>, C>(v_codes[i]);
          }
        }
        write_run_bits(tile_pos.slot, staged_valid[0]);
        // generic-proxy stores that the consumers' wgmmas (the async proxy) read: the writer
        // fences them before its release (the consumers' own fence after the wait stays, for the
        // cp.async-filled Q and 16-bit tiles)
        fence_async_proxy();
        mbarrier_arrive(S.k_full(tile_pos.slot));  // the whole stage
        tile_pos.advance();
#pragma unroll
        for (int s = 0; s + 1 < G::kStagingSlots; s++) staged_valid[s] = staged_valid[s + 1];
        staged_valid[G::kStagingSlots - 1] = stage_codes(slot);  // into the slot just read
      }
    } else {
      // A whole run (every row loaded) goes as one page box per 64-channel panel, as in LATENT's
      // Hopper kernels: the copy engine takes the issue slots that 16 cp.async per thread took,
      // and writes zeros for channels past head_size as the cp.async path does
      static_assert(kRunRows == kPageBoxRows, "a whole run is one page box's rows");
      static_assert(G::kChunks % 8 == 0, "each panel's box has its thread, chunk 8 p");
      for (int64_t tile = tile_begin; tile < tile_end; tile += G::kTileSpan) {
        const int32_t block_id = kv_block_mapped(P.kv, next_entry);
        if (tile + G::kTileSpan < tile_end) next_entry = entry(tile + G::kTileSpan);
        uint32_t valid;
        // The run's rows from its first one: inside the cache whether loaded or not, so no row
        // picks its address by its fill; a row not filled reads nothing (src-size 0)
        const int64_t offset = run_source(tile, block_id, &valid);
        // the same for every thread of the run, chunks past head_size included
        const bool whole = run_bits(tile, block_id) == (1u << kRunRows) - 1u;
        const int page_row =
            (int)((tile * kPrefillTileKeys + run * kRunRows) & (int64_t)(P.kv.block_size - 1));
        // K, then V: with split stages a stage's K is freed a turn before its V (hopper_consume).
        // A box lands at chunk 8 p of the run's first row (a multiple of 8 rows into the 1024-byte
        // aligned tile): its row r at r * 128 from there, chunk c at c ^ r % 8, as wgmma.cuh's
        // layout. Its issuing thread announces the bytes on `full` before its own arrive, so the
        // phase cannot complete without them.
        auto load_rows = [&](const unsigned char *rows, unsigned char *tile_smem,
                             const CUtensorMap *map, uint64_t *full) {
          if (!loader) return;
          if (whole) {
            if (chunk % 8 == 0) {  // panel chunk / 8
              mbarrier_expect_bytes(full, kPageBoxBytes);
              page_box_load(
                  tile_smem + swizzle128_chunk_offset(G::kTileKeys, run * kRunRows, chunk), map,
                  full, chunk / 8 * kPageBoxChannels, w.kv_head, page_row, block_id);
            }
          } else {
#pragma unroll
            for (int i = 0; i < kRunRows; i++)
              cp_async_16(
                  tile_smem + swizzle128_chunk_offset(G::kTileKeys, run * kRunRows + i, chunk),
                  rows + i * slot_bytes, valid >> i & 1u);
          }
        };
        mbarrier_wait(S.k_empty(tile_pos.slot), tile_pos.phase ^ 1u);
        load_rows(k_base + offset, S.k_tile(tile_pos.slot), &maps.k, S.k_full(tile_pos.slot));
        write_run_bits(tile_pos.slot, valid);
        if constexpr (G::kSplitStages) {
          mbarrier_track_cp_async(S.k_full(tile_pos.slot));
          mbarrier_arrive(S.k_full(tile_pos.slot));
          mbarrier_wait(S.v_empty(tile_pos.slot), tile_pos.phase ^ 1u);
        }
        load_rows(v_base + offset, S.v_tile(tile_pos.slot), &maps.v, S.v_full(tile_pos.slot));
        mbarrier_track_cp_async(S.v_full(tile_pos.slot));
        mbarrier_arrive(S.v_full(tile_pos.slot));
        tile_pos.advance();
      }
    }
  }
  asm volatile("cp.async.wait_all;" ::: "memory");  // nothing lands after the thread has left
}

// A consumer warpgroup (wg 0 or 1: rows 64 wg .. 64 wg + 63 of each row block).
// The landed stage's loaded-keys words, 32 keys each, to every lane of the warp. Lane 0 alone
// reads them: the lane that reads is the one that frees the stage's K (mbarrier_arrive on its
// "empty" barrier), so the read is ordered before the producer's next write by that thread's own
// arrive, not through __syncwarp.
template <typename C, int DMAX>
__device__ __forceinline__ void hopper_loaded_keys(
    const hopper_smem<C, DMAX> &S, int stage, int lane,
    uint32_t (&mapped)[hopper_geometry<C, DMAX>::kTileKeys / 32]) {
  constexpr int kWords = hopper_geometry<C, DMAX>::kFlagWords;
#pragma unroll
  for (int i = 0; i < kWords; i++) {
    const uint64_t word = lane == 0 ? S.loaded_keys(stage)[i] : 0u;
    mapped[2 * i] = __shfl_sync(0xffffffffu, (uint32_t)word, 0);
    mapped[2 * i + 1] = __shfl_sync(0xffffffffu, (uint32_t)(word >> 32), 0);
  }
}

template <typename T, typename C, int DMAX>
__device__ __forceinline__ void hopper_consume(const prefill_params &P,
                                               const hopper_smem<C, DMAX> &S,
                                               const kv_page_maps &maps) {
  using G = hopper_geometry<C, DMAX>;
  using M = mma_input_t<T, C>;
  constexpr int kSteps = DMAX / 16;
  constexpr int kOutTiles = DMAX / 8;
  constexpr int kKeys = G::kTileKeys;
  constexpr int kKeySteps = kKeys / 16;  // k-steps of P V
  const int consumer = threadIdx.x - kHopperWarpgroupThreads;
  const int wg = consumer / kHopperWarpgroupThreads, group = consumer / 32, lane = threadIdx.x % 32;
  const int group_id = lane / 4, col = (lane % 4) * 2;
  const int row0 = group * 16;  // this warp's rows
  constexpr bool kPingPong = G::kTurns;
  // The softmax's rescale unconditional, in its MUFU run's issue gaps (softmax_step_to_max):
  // 0.5-1.2 % faster with 16-bit caches at 64 and 128 channels, 1-3 % slower at 256 channels and
  // with 8-bit caches (forty-second measurement, when the step ran on every tile; since
  // prefill_softmax_to_p it runs on a unit's first tile and where a reference moves)
  constexpr bool kRescaleInGaps = sizeof(C) == 2 && DMAX <= 128;
  const int my_turn = kHopperTurnBarrier + wg, other_turn = kHopperTurnBarrier + 1 - wg;
  if (kPingPong && wg == 1)
    named_barrier_arrive(kHopperTurnBarrier, 2 * kHopperWarpgroupThreads);  // warpgroup 0 first
  ring_position<G::kQSlots> unit_pos = {0, 0u};
  ring_position<G::kStages> tile_pos = {0, 0u};
  // A warpgroup's rows stored as output boxes (below) come from its half of a Q slot: its first
  // thread frees that slot for the warpgroup's four warps once the box stores have read it, at
  // the next unit's start, where they have (with one Q slot, at once: the next unit needs it)
  const bool box_issuer = consumer % kHopperWarpgroupThreads == 0;
  bool boxed_pending = false;
  int boxed_slot = 0;
  auto release_boxed = [&]() {
    if (boxed_pending && box_issuer) {
      bulk_group_wait_read();
      mbarrier_arrive_count(S.unit_empty(boxed_slot), 4);
    }
    boxed_pending = false;
  };
  for (;;) {
    mbarrier_wait(S.unit_full(unit_pos.slot), unit_pos.phase);
    hopper_unit *U = S.unit(unit_pos.slot);
    if (U->done) {
      release_boxed();  // (the stores' reads done before the thread leaves)
      break;
    }
    const prefill_row_block R = {U->first_token, U->key_base, U->row_lo,      U->row_hi,
                                 U->first_head,  U->valid_rows, U->qk_scale};
    const int64_t tile_begin = U->tile_begin, tile_end = U->tile_end;
    const int kv_head = U->kv_head, split = U->split;
    const int32_t splits = U->splits;
    int32_t my_lo[2], my_hi[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
      my_lo[h] = U->row_lo[row0 + group_id + 8 * h];
      my_hi[h] = U->row_hi[row0 + group_id + 8 * h];
    }
    const int32_t common_lo = U->common_lo[group], common_hi = U->common_hi[group];
    int32_t wg_lo = INT32_MAX, wg_hi = INT32_MIN;
#pragma unroll
    for (int i = 0; i < 4; i++) {
      wg_lo = min(wg_lo, U->group_lo[wg * 4 + i]);
      wg_hi = max(wg_hi, U->group_hi[wg * 4 + i]);
    }
    const bool wg_has_rows = wg * 64 < R.valid_rows;  // the same for the whole warpgroup
    release_boxed();
    // (Q reaches the wgmmas, the async proxy, as TMA boxes or as the producer's converted stores,
    // which it fenced: no fence here)
    const unsigned char *q_slot = S.q(unit_pos.slot);
    uint32_t q_frag[kSteps][4];
    if constexpr (G::kQInRegisters) {
#pragma unroll
      for (int s = 0; s < kSteps; s++)
        hopper_load_a_fragment(q_slot, kHopperRows, wg * 64, s, q_frag[s]);
    }

    float out_acc[kOutTiles][4];
#pragma unroll
    for (int n = 0; n < kOutTiles; n++)
#pragma unroll
      for (int i = 0; i < 4; i++) out_acc[n][i] = 0.0f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
    // The tiles: tile j holds keys from (tile_begin + j kTileSpan) 64-key tiles on
    const int64_t tiles = (tile_end - tile_begin + G::kTileSpan - 1) / G::kTileSpan;
    auto key0_of = [&](int64_t j) {  // tile j's first key, relative to key_base
      return (int32_t)((tile_begin + j * G::kTileSpan) * kPrefillTileKeys - R.key_base);
    };
    // A landed tile's scores (keys from key0) into P for P V: the score transform, the masks
    // unless the tile is loaded whole and inside every row's range, the online-softmax step.
    // The score scale: with turns (128 channels) held in a register for the unit, not read from
    // the unit slot at every tile, where a shared load under the tiles' traffic sat at the head
    // of each softmax (at 256 channels the register would spill)
    const float held_qk_scale = kPingPong ? U->qk_scale : 0.0f;
    auto scores_to_p = [&](int32_t key0, const uint32_t (&mapped)[kKeys / 32],
                           float (&score)[1][kKeys / 8][4], uint32_t (&p_frag)[kKeySteps][4]) {
      const float score_scale =
          softmax_step_scores(score, kPingPong ? held_qk_scale : U->qk_scale, P.softcap);
      uint32_t all_mapped = 0xffffffffu;
#pragma unroll
      for (int i = 0; i < kKeys / 32; i++) all_mapped &= mapped[i];
      const bool unmasked =
          all_mapped == 0xffffffffu && key0 >= common_lo && key0 + kKeys <= common_hi;
      if (!unmasked) prefill_mask_scores(score[0], key0, mapped, my_lo, my_hi, col);
      prefill_softmax_to_p<M, kRescaleInGaps>(score[0], row_max, row_sum, out_acc, score_scale,
                                              p_frag);
    };

    if constexpr (kPingPong) {
      // Blocks of GEMMs, one warpgroup's at a time: block j issues P V of tile j - 1 and S of tile
      // j; the softmax of tile j follows, while the other warpgroup's block runs. Every unit has
      // tiles + 1 blocks in both warpgroups (without rows, a warpgroup only takes its turns). A
      // stage's K is freed after the block of its S, its V after the block of its P V.
      ring_position<G::kStages> pv_pos = tile_pos;  // the stage P V reads
      float score[1][kKeys / 8][4];
      uint32_t p_frag[kKeySteps][4];
      uint32_t mapped[kKeys / 32] = {};
      auto block = [&](auto values, auto scores) {  // std::bool_constant: no run-time branch
        if constexpr (decltype(scores)::value) {  // the next tile's K landed
          mbarrier_wait(S.k_full(tile_pos.slot), tile_pos.phase);
          __syncwarp();
        }
        if constexpr (decltype(values)::value && G::kSplitStages) {  // the previous tile's V landed
          mbarrier_wait(S.v_full(pv_pos.slot), pv_pos.phase);
          __syncwarp();
        }
        fence_async_proxy();  // the tiles landed through cp.async
        named_barrier_sync(my_turn, 2 * kHopperWarpgroupThreads);
        if (wg_has_rows) {
          wgmma_fence();
          if constexpr (decltype(values)::value)
            hopper_issue_values<M, DMAX, kKeySteps>(
                out_acc, p_frag, warp_uniform(shared_address(S.v_tile(pv_pos.slot))), kKeys);
          if constexpr (decltype(scores)::value)
            hopper_issue_scores<M, DMAX, G::kQInRegisters, kKeys>(
                score[0], q_frag, warp_uniform(shared_address(q_slot) + wg * 64 * 128),
                kHopperRows, 0, warp_uniform(shared_address(S.k_tile(tile_pos.slot))));
          wgmma_commit();
          named_barrier_arrive(other_turn, 2 * kHopperWarpgroupThreads);
          // the tile's loaded keys (for its softmax), read while the GEMMs run, and before the
          // reading lane frees the stage's K below
          if constexpr (decltype(scores)::value) hopper_loaded_keys(S, tile_pos.slot, lane, mapped);
          wgmma_wait<0>();
          wgmma_fence_operands(out_acc);
          wgmma_fence_operands(p_frag);
          wgmma_fence_operands(score[0]);
          if constexpr (G::kQInRegisters) wgmma_fence_operands(q_frag);
        } else {
          named_barrier_arrive(other_turn, 2 * kHopperWarpgroupThreads);
        }
        __syncwarp();
        if constexpr (decltype(scores)::value && G::kSplitStages) {  // this tile's K has been read
          if (lane == 0) mbarrier_arrive(S.k_empty(tile_pos.slot));
        }
        if constexpr (decltype(values)::value) {  // the previous tile's V (stage) has been read
          if (lane == 0) mbarrier_arrive(S.v_empty(pv_pos.slot));
          pv_pos.advance();
        }
      };
      auto softmax = [&](int64_t j) {
        if (wg_has_rows) scores_to_p(key0_of(j), mapped, score, p_frag);
        tile_pos.advance();
      };
      if (tiles > 0) {
        block(std::false_type(), std::true_type());
        softmax(0);
        for (int64_t j = 1; j < tiles; j++) {
          block(std::true_type(), std::true_type());
          softmax(j);
        }
        block(std::true_type(), std::false_type());
      }
    } else {
      for (int64_t j = 0; j < tiles; j++) {
        mbarrier_wait(S.k_full(tile_pos.slot), tile_pos.phase);
        if constexpr (G::kSplitStages) mbarrier_wait(S.v_full(tile_pos.slot), tile_pos.phase);
        __syncwarp();
        const int32_t key0 = key0_of(j);
        if (wg_has_rows && wg_lo < key0 + kKeys && wg_hi > key0) {
          fence_async_proxy();  // the tile landed through cp.async
          uint32_t mapped[kKeys / 32];
          hopper_loaded_keys(S, tile_pos.slot, lane, mapped);
          float score[1][kKeys / 8][4];
          hopper_scores<M, DMAX, G::kQInRegisters, kKeys>(
              score[0], q_frag, warp_uniform(shared_address(q_slot) + wg * 64 * 128),
              kHopperRows, 0, warp_uniform(shared_address(S.k_tile(tile_pos.slot))));
          uint32_t p_frag[kKeySteps][4];
          scores_to_p(key0, mapped, score, p_frag);
          hopper_add_values<M, DMAX, kKeySteps>(
              out_acc, p_frag, warp_uniform(shared_address(S.v_tile(tile_pos.slot))));
        }
        __syncwarp();
        if (lane == 0) {
          mbarrier_arrive(S.k_empty(tile_pos.slot));
          if constexpr (G::kSplitStages) mbarrier_arrive(S.v_empty(tile_pos.slot));
        }
        tile_pos.advance();
      }
    }
    __syncwarp();
    // A warpgroup whose 64 rows all exist, with one split, stores them as boxes of the output
    // map: finalized into its half of the unit's Q slot (rows 64 wg .., which no wgmma reads any
    // more: the other warpgroup's S reads its own rows), a box's layout, fenced for the copy
    // engine, then one thread's stores, which go out while the warpgroup runs on. Otherwise
    // every thread stores its rows' n-tiles itself.
    // (never with 8-bit caches: a constant there, so the code stays out of their tighter kernels)
    const bool boxed =
        !G::kCodes && P.output_boxes && splits == 1 && (wg + 1) * 64 <= R.valid_rows;
    if (!boxed && lane == 0) mbarrier_arrive(S.unit_empty(unit_pos.slot));
    if (boxed) {
      unsigned char *q_rows = S.q(unit_pos.slot);
      // the warp's 16 rows (all exist) stored straight from the accumulator layout: stmatrix x4
      // takes n-tiles n and n + 1 of rows 0-7 and 8-15 (lane l addresses row l % 8 of matrix
      // l / 8), with none of quad_transpose_words' exchanges
      prefill_row_state rows[2];
#pragma unroll
      for (int h = 0; h < 2; h++)
        rows[h] = prefill_final_row_state<T>(P, R, row0, row_max, row_sum, lane, h);
      const int matrix = lane / 8;
      const int matrix_row = row0 + (matrix % 2) * 8 + lane % 8;
      auto pair = [&](int n, int h) {
        return prefill_final_pair<T, C>(P, kv_head, 8 * n + col, rows[h], out_acc[n][2 * h],
                                        out_acc[n][2 * h + 1]);
      };
#pragma unroll
      for (int n = 0; n < kOutTiles; n += 2)
        stmatrix_x4(q_rows + swizzle128_chunk_offset(kHopperRows, matrix_row, n + matrix / 2),
                    pair(n, 0), pair(n, 1), pair(n + 1, 0), pair(n + 1, 1));
      fence_async_proxy();  // generic stores the copy engine reads
      named_barrier_sync(kHopperStoreBarrier + wg, kHopperWarpgroupThreads);
      if (box_issuer) {
        const int r0 = wg * 64;  // the box's first row: its token and head
        const int64_t token = R.first_token + prefill_row_token(P, r0);
        const int head = R.first_head + prefill_row_head(P, r0);
#pragma unroll
        for (int p = 0; p < DMAX / kPageBoxChannels; p++)  // (a panel past head_size: no-op)
          output_box_store(&maps.out, q_rows + p * kHopperRows * 128 + r0 * 128,
                           p * kPageBoxChannels, head, (int)token);
        bulk_group_commit();
      }
      boxed_pending = true;
      boxed_slot = unit_pos.slot;
      if constexpr (G::kQSlots == 1) release_boxed();
    } else if (wg_has_rows) {
      prefill_store_m16<T, C, M, true>(P, R, row0, out_acc, row_max, row_sum, kv_head, split,
                                       splits, lane);
    }
    unit_pos.advance();
  }
}

#endif  // PA_SM90A

// A persistent grid of one CTA per multiprocessor; the producer takes the units. maps: the call's
// page maps of the caches (encode_kv_page_maps), query map (encode_q_map) and output map
// (encode_output_map, where P.output_boxes) for 16-bit caches; unused (zero) for 8-bit ones.
template <typename T, typename C, int DMAX>
__global__ void __launch_bounds__(kHopperThreads, 1)
    prefill_hopper_kernel(const prefill_params P, const __grid_constant__ kv_page_maps maps) {
#if PA_SM90A
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  using G = hopper_geometry<C, DMAX>;
  const hopper_smem<C, DMAX> S = {smem_raw + swizzle_align_bytes(smem_raw)};
  if (threadIdx.x == 0) {
    for (int i = 0; i < G::kStages; i++) {
      mbarrier_init(S.k_full(i), kHopperWarpgroupThreads);
      mbarrier_init(S.k_empty(i), kHopperConsumerWarps);
      if constexpr (G::kSplitStages) {
        mbarrier_init(S.v_full(i), kHopperWarpgroupThreads);
        mbarrier_init(S.v_empty(i), kHopperConsumerWarps);
      }
    }
    for (int i = 0; i < G::kQSlots; i++) {
      mbarrier_init(S.unit_full(i), kHopperWarpgroupThreads);
      mbarrier_init(S.unit_empty(i), kHopperConsumerWarps);
    }
    mbarrier_init_fence();
  }
  __syncthreads();
  wait_for_previous_kernel();
  if (threadIdx.x < kHopperWarpgroupThreads) {
    warpgroup_registers_release<G::kProducerRegisters>();
    hopper_produce<T, C, DMAX>(P, S, maps);
  } else {
    warpgroup_registers_claim<G::kConsumerRegisters>();
    hopper_consume<T, C, DMAX>(P, S, maps);
  }
#endif
}

// Per-instantiation entry points, defined in the prefill_hopper*.cu translation units.
template <typename T, typename C, int DMAX>
cudaError_t prefill_hopper_set_smem(int smem_bytes);
template <typename T, typename C, int DMAX>
cudaError_t prefill_hopper_occupancy(int smem_bytes, int *ctas_per_sm);
template <typename T, typename C, int DMAX>
cudaError_t prefill_hopper_launch(const prefill_params &P, const kv_page_maps &maps, dim3 grid,
                                  int smem_bytes, cudaStream_t stream, bool chained);

#define PA_PREFILL_HOPPER_INSTANTIATE(T, C, DMAX)                                                  \
  template <>                                                                                      \
  cudaError_t prefill_hopper_set_smem<T, C, DMAX>(int smem_bytes) {                                \
    return cudaFuncSetAttribute(prefill_hopper_kernel<T, C, DMAX>,                                 \
                                cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);          \
  }                                                                                                \
  template <>                                                                                      \
  cudaError_t prefill_hopper_occupancy<T, C, DMAX>(int smem_bytes, int *ctas_per_sm) {             \
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(                                          \
        ctas_per_sm, prefill_hopper_kernel<T, C, DMAX>, kHopperThreads, smem_bytes);               \
  }                                                                                                \
  template <>                                                                                      \
  cudaError_t prefill_hopper_launch<T, C, DMAX>(const prefill_params &P,                          \
                                                const kv_page_maps &maps, dim3 grid,               \
                                                int smem_bytes, cudaStream_t stream,               \
                                                bool chained) {                                    \
    return launch_chained(prefill_hopper_kernel<T, C, DMAX>, grid, kHopperThreads,                 \
                          (size_t)smem_bytes, stream, chained, P, maps);                           \
  }

}  // namespace detail
}  // namespace pa
