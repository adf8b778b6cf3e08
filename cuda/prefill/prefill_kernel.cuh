// The PREFILL backend's kernels: fused paged attention on tensor cores (mma.sync m16n8k16, sm_80
// and newer) for every step shape that is not decode-shaped: prefill, chunked prefill over a
// cached prefix, mixed prefill + decode steps, multi-token verify steps.
//
// Work unit: (sequence, KV head, row block, split). A row block is up to kRows (query token, query
// head) rows of one sequence and one GQA group, the group's heads innermost (row r = token
// r / heads_per_block, head r % heads_per_block), so each K/V tile is read once for the whole
// group, and a 1-token sequence of a mixed step fills group_size rows instead of a padded tile.
// Groups larger than kRows take several row blocks per token (head_blocks).
// Each warp owns kMTiles m16 tiles of rows and runs the whole 64-key tile against them: Q·K^T
// into fp32 scores, scale / softcap / masks, an online softmax per row, P (rounded to the MMAs'
// type) · V into fp32 accumulators. Warps whose rows admit no key of a tile skip its math; tiles wholly inside
// every row's admitted range and fully mapped skip the per-key masks. Tiles start at absolute
// multiples of 64 keys whatever the page size, so each loading thread's run of up to 16 rows lies
// in one page: one block-table lookup per tile and run, prefetched a tile early, and 16-byte
// cp.async loads into a kStages ring (the loads are one producer role; the MMAs the consumers').
//
// Splits: with few work units (a short query over a long cache), a sequence's keys are cut into
// splits of tiles_per_split absolute tiles (fixed at plan time from static shapes, so results do
// not depend on attention_metadata); each split writes unnormalized fp32 partials that
// split_merge_kernel combines. A sequence with one split is finalized in place.
// Schedule: prefill_schedule_kernel lists each sequence's work units from the device-side lengths
// (an exclusive prefix sum over sequences); a persistent grid takes units from an atomic counter,
// a sequence's heaviest row blocks (the last ones under a causal mask) first.
//
// Quantized caches: the MMAs run on raw codes in fp16 (mma_input_t: exact, whatever T is); a
// per-tensor k_scale goes into the score scale, a per-channel one into Q, which goes to fp16 times
// a power of two per row block (prefill_unit_prologue), v_scale into the output.
#pragma once

#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "../common/attention_rules.cuh"
#include "../common/block_scan.cuh"
#include "../common/chained_launch.cuh"
#include "../common/kv_tile_loader.cuh"
#include "../common/numeric.cuh"
#include "../common/paged_kv.cuh"
#include "../common/tensor_core.cuh"

namespace pa {
namespace detail {

constexpr int kPrefillTileKeys = 64;  // also the alignment of every tile's first key
constexpr int kPrefillWarps = 4;
constexpr int kPrefillThreads = 32 * kPrefillWarps;
constexpr int kPrefillStages = 2;
constexpr int kPrefillRowPadBytes = 16;  // staggers shared rows across banks
constexpr int kPrefillScheduleThreads = 1024;

struct prefill_params {
  const void *q;
  int64_t q_row_stride;  // elements between tokens
  const void *k_cache, *v_cache;
  paged_kv_layout kv;
  const int32_t *cu_seqlens, *past_seqlens, *block_table, *query_positions;  // positions: or NULL
  const void *head_sink;                                                     // or NULL
  const float *k_scale, *v_scale;
  pa_quant_type k_quant, v_quant;
  void *output;
  // Partials per (token, split): item = token * num_split_slots + split (split_merge.cuh layout)
  float *partial_out;     // [item][head][head_size], unnormalized
  float2 *partial_ml;     // [item][head]: (running max in log2 units, sum)
  int32_t *split_counts;  // [token]: the splits of the token's sequence (read by the merge)
  // LATENT's narrow kernel with few split slots: the last unit of a row block to finish merges
  // its splits, counted per row block (first_token * head_blocks + head block) and zeroed by the
  // write kernel (pa_plan::arrivals_region); NULL: the merge kernel does
  unsigned int *merge_arrivals;
  // Schedule (prefill_schedule_kernel): the first work unit of each sequence, [batch_size] = the
  // total; a unit is (row block, split) of a sequence, times kv_num_heads
  int32_t *unit_begin;
  unsigned int *work_counter;  // (unit, KV head) pairs taken so far; zeroed by the schedule
  int64_t token_count;
  int32_t batch_size, num_heads, kv_num_heads, group_size;
  int32_t v_head_size;       // channels of an output row: head_size except in LATENT
  int32_t heads_per_block;   // min(group_size, kRows)
  uint32_t heads_per_block_reciprocal;  // prefill_row_reciprocal(heads_per_block)
  int32_t tokens_per_block;  // kRows / heads_per_block
  int32_t head_blocks;       // ceil(group_size / heads_per_block)
  float scale, softcap;      // softcap 0 = off
  int32_t window;            // -1 = off
  int32_t is_causal;
  int32_t tiles_per_split, num_split_slots;
  // the PREFILL Hopper kernel with a 16-bit cache: the bytes of a unit's Q boxes (its panels x
  // 128 x heads_per_block x tokens_per_block; encode_q_map), which its slot's barrier expects
  int32_t q_box_bytes;
  // Q is the step's own input, not staged by the write kernel: a kernel may read it before its
  // wait (the LATENT Hopper producers' first unit)
  bool q_before_wait;
  // Every work unit is the CTA of its index (the plan's bound on units is at most the grid): no
  // schedule kernel, no counter (unit_begin and work_counter NULL); the LATENT Hopper kernels
  // zero the rows of no sequence themselves
  bool units_by_index;
  // The PREFILL Hopper kernel, this call: a warpgroup whose 64 rows all exist, with one split,
  // stores them as boxes of the output map (encode_output_map); the box's heads (the others are
  // its tokens: 64 rows in all)
  bool output_boxes;
  int32_t output_box_heads;
};

// Whether the output starts at a multiple of `bytes`: doc/api.md asks it for its element's alignment
// only, and its rows are 16-byte multiples (head sizes being multiples of 8), so a row's channel
// 8 n is as aligned as the output itself. The stores wider than an element ask this first.
__host__ __device__ inline bool output_aligned(const prefill_params &P, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(P.output) % bytes == 0;
}

// Zeroes the output rows of the tokens past the last sequence (no unit covers them) and marks
// them unsplit for the merge: this thread's share, `thread` of `threads`. The schedule kernel
// does it, or the LATENT Hopper kernels where they run without it (prefill_params::units_by_index).
template <bool kBeforeWait>
__device__ __forceinline__ void zero_rows_of_no_sequence(const prefill_params &P,
                                                         int out_row_elems, int t_bytes,
                                                         int64_t thread, int64_t threads) {
  const int64_t covered =
      min((int64_t)load_step_input<kBeforeWait>(P.cu_seqlens + P.batch_size), P.token_count);
  const int64_t first = max((int64_t)0, covered);
  const int64_t bytes = (P.token_count - first) * out_row_elems * t_bytes;
  char *rows = reinterpret_cast<char *>(P.output) + first * out_row_elems * t_bytes;
  if (output_aligned(P, 4)) {
    for (int64_t i = thread; i < bytes / 4; i += threads) reinterpret_cast<uint32_t *>(rows)[i] = 0u;
  } else {
    for (int64_t i = thread; i < bytes / 2; i += threads) reinterpret_cast<uint16_t *>(rows)[i] = 0u;
  }
  if (P.split_counts)
    for (int64_t t = first + thread; t < P.token_count; t += threads) P.split_counts[t] = 0;
}

// Row r of a row block is the block's packed token r / heads_per_block and head r % heads_per_block
// (above). A division by the run-time group size is about 25 instructions; the Hopper producers'
// Q loads did one per 16-byte chunk, most of a unit's setup (ncu, twentieth measurement). The
// quotient is (r * m) >> 16 with m = 2^16 / heads_per_block + 1, fixed at plan time: exact while
// r * heads_per_block < 2^16 (rows are below 128, heads_per_block at most 128).
__host__ __device__ constexpr uint32_t prefill_row_reciprocal(int32_t heads_per_block) {
  return (uint32_t)((1 << 16) / heads_per_block + 1);
}
__device__ __forceinline__ int32_t prefill_row_token(const prefill_params &P, int32_t r) {
  return (int32_t)(((uint32_t)r * P.heads_per_block_reciprocal) >> 16);
}
__device__ __forceinline__ int32_t prefill_row_head(const prefill_params &P, int32_t r) {
  return r - prefill_row_token(P, r) * P.heads_per_block;
}

// m16 tiles per warp: 2 (128 rows per CTA, each K/V fragment feeds two MMAs) up to 128 channels;
// 1 at 256 channels, where the accumulators of two would not fit the registers.
__host__ __device__ constexpr int prefill_m_tiles(int dmax) { return dmax <= 128 ? 2 : 1; }
__host__ __device__ constexpr int prefill_rows(int dmax) {
  return 16 * prefill_m_tiles(dmax) * kPrefillWarps;
}
__host__ __device__ inline int prefill_dmax(int head_size) {
  return head_size <= 64 ? 64 : head_size <= 128 ? 128 : 256;
}
__host__ __device__ constexpr int prefill_q_row_elems(int dmax) { return dmax + 8; }
__host__ __device__ constexpr int prefill_kv_row_bytes(int dmax, int cache_elem_bytes) {
  return dmax * cache_elem_bytes + kPrefillRowPadBytes;
}
// Dynamic shared memory: Q rows, each row's admitted keys (lo, hi), the admitted-key flags of each
// stage, then the K/V stage ring.
__host__ __device__ inline int prefill_smem_bytes(int head_size, int cache_elem_bytes) {
  const int dmax = prefill_dmax(head_size), rows = prefill_rows(dmax);
  return rows * prefill_q_row_elems(dmax) * 2 + rows * 2 * 4 + kPrefillStages * kPrefillTileKeys +
         kPrefillStages * 2 * kPrefillTileKeys * prefill_kv_row_bytes(dmax, cache_elem_bytes);
}

// The splits of a sequence with kv_len keys: absolute tiles [s * tiles_per_split, +tiles_per_split)
// for s < the count, at most num_split_slots (an under-sized bound drops the tail: wrong, but
// inside the workspace), at least 1.
__device__ __forceinline__ int32_t prefill_sequence_splits(const prefill_params &P, int64_t kv_len) {
  if (P.num_split_slots == 1) return 1;
  const int64_t tiles = (kv_len + kPrefillTileKeys - 1) / kPrefillTileKeys;
  const int64_t splits = (tiles + P.tiles_per_split - 1) / P.tiles_per_split;
  return (int32_t)max((int64_t)1, min(splits, (int64_t)P.num_split_slots));
}
// The row blocks of q_len new tokens, 0 < q_len <= token_count <= INT32_MAX (validate.c): the
// ceiling's sum fits 32 unsigned bits (a 64-bit division was a call and its guard).
__device__ __forceinline__ int32_t prefill_row_blocks(const prefill_params &P, int64_t q_len) {
  const uint32_t tokens_per_block = (uint32_t)P.tokens_per_block;
  return (int32_t)(((uint32_t)q_len + tokens_per_block - 1u) / tokens_per_block) * P.head_blocks;
}
// The row blocks the schedule gives a sequence: none without new tokens, and clamped to the packed
// tokens: malformed lengths must not overflow the count.
__device__ __forceinline__ int32_t prefill_sequence_row_blocks(const prefill_params &P,
                                                               const sequence_span &span) {
  if (span.q_len <= 0) return 0;
  return prefill_row_blocks(P, min(span.q_len, P.token_count));
}
// A sequence's work in the schedule: its row blocks and splits, whose product is its work units (as
// the schedule kernel and the Hopper producers' search both count them).
struct prefill_sequence_work {
  int32_t row_blocks, splits;
  __device__ __forceinline__ int32_t units() const { return row_blocks * splits; }
};
__device__ __forceinline__ prefill_sequence_work prefill_sequence_work_of(const prefill_params &P,
                                                                          const sequence_span &span) {
  return {prefill_sequence_row_blocks(P, span), prefill_sequence_splits(P, span.kv_len)};
}

// The output channel of accumulator column `column` (0..7) of n-tile n: in order for 16-bit
// caches; 8-bit caches' V fragments interleave two n-tiles (tensor_core.cuh, warp_fragments), so
// n-tile n (even) holds channels 8n + 2c and n-tile n + 1 channels 8n + 2c + 1.
template <typename C>
__device__ __forceinline__ int prefill_out_channel(int n, int column) {
  if constexpr (sizeof(C) == 2) return n * 8 + column;
  else return (n & ~1) * 8 + 2 * column + (n & 1);
}

// The producer side of a unit: its 64-key K/V tiles gathered into the stage ring
// (common/kv_tile_loader.cuh).
template <typename C, int DMAX>
using prefill_kv_loader =
    kv_tile_loader<C, DMAX, kPrefillThreads, prefill_kv_row_bytes(DMAX, (int)sizeof(C)),
                   kPrefillStages>;
static_assert(prefill_kv_loader<__half, 128>::kTileKeys == kPrefillTileKeys,
              "the loader's tiles are the kernel's");

// Scores of one warp's rows in log2 units, in place (transform_score_rows with one scale).
template <int A, int B>
__device__ __forceinline__ void transform_scores(float (&score)[A][B][4], float qk_scale,
                                                 float softcap) {
  const float row_scale[2] = {qk_scale, qk_scale};
  transform_score_rows(score, row_scale, softcap);
}

// The scores as prefill_softmax_step takes them, and the factor that step multiplies them by to get
// log2 units. Without softcap and with a positive scale they stay raw and the factor is
// qk_scale * log2(e): the step folds it into its exponent's fma, one multiply less per score, and
// its max over raw scores is the max of the scaled ones (a positive factor and monotonic rounding).
// Otherwise (a softcap, or a zero, negative or NaN qk_scale from a device-side k_scale) they are
// transformed in place and the factor is 1.
template <int A, int B>
__device__ __forceinline__ float softmax_step_scores(float (&score)[A][B][4], float qk_scale,
                                                     float softcap) {
  if (softcap == 0.0f && qk_scale > 0.0f) return qk_scale * kLog2e;
  transform_scores(score, qk_scale, softcap);
  return 1.0f;
}

// The score scale: the attention scale, times a per-tensor k_scale (a per-channel one goes into Q).
template <typename C>
__device__ __forceinline__ float prefill_qk_scale(const prefill_params &P) {
  if (is_quantized<C>::value && P.k_quant == PA_QUANT_PER_TENSOR) return P.scale * __ldg(P.k_scale);
  return P.scale;
}

// What a unit's compute needs besides the loader: its rows (row r of the block is query head
// row_head(r) of packed token row_token(r)), each row's admitted keys relative to the unit's first
// key `key_base` (shared row_lo / row_hi), the score scale and where results go.
struct prefill_row_block {
  int64_t first_token;  // packed index of the block's first token
  int64_t key_base;     // the unit's first admitted key: keys are handled relative to it
  int32_t *row_lo, *row_hi;
  int first_head, valid_rows;
  float qk_scale;
};

// Calls store(c, o0, o1) for each pair of adjacent output channels (c even, relative to the first
// n-tile) that a lane's P·V accumulators hold in row half h (0: row group_id, 1: group_id + 8).
template <typename C, int kOutTiles, typename Store>
__device__ __forceinline__ void for_each_out_pair(const float (&acc)[kOutTiles][4], int h, int col,
                                                  Store &&store) {
#pragma unroll
  for (int n = 0; n < kOutTiles; n++)
#pragma unroll
    for (int e = 0; e < 2; e++) {
      if (sizeof(C) == 2 ? e == 1 : (n & 1)) continue;  // pairs start at even channels
      const float o1 = sizeof(C) == 2 ? acc[n][2 * h + 1] : acc[n + 1][2 * h + e];
      store(prefill_out_channel<C>(n, col + e), acc[n][2 * h + e], o1);
    }
}

// A finished row of one split: its running max and sum and, with one split, the factor of
// finalize_channel (the head's sink read and the division done once per row, not per channel).
struct prefill_row_state {
  float m, l, factor;
};
template <typename T>
__device__ __forceinline__ prefill_row_state prefill_row_state_of(const prefill_params &P, int head,
                                                                  int32_t splits, float m,
                                                                  float l) {
  return {m, l, splits == 1 ? finalize_factor(m, l, sink_log2<T>(P.head_sink, head)) : 0.0f};
}

// A finished row's channel pair (c, c + 1), finalized (one split) and packed as T.
template <typename T, typename C>
__device__ __forceinline__ uint32_t prefill_final_pair(const prefill_params &P, int kv_head, int c,
                                                       const prefill_row_state &row, float o0,
                                                       float o1) {
  float s0 = 1.0f, s1 = 1.0f;
  if (is_quantized<C>::value) {
    s0 = cache_scale(P.v_scale, P.v_quant, kv_head, P.kv.head_size, c);
    s1 = cache_scale(P.v_scale, P.v_quant, kv_head, P.kv.head_size, c + 1);
  }
  return pack_t2<T>(finalize_channel(o0, row.l, row.factor, s0),
                    finalize_channel(o1, row.l, row.factor, s1));
}

// Stores a packed channel pair of the output at dst (an even channel of a row): one 4-byte store,
// or two 2-byte ones where the output is only 2-byte aligned.
template <typename T>
__device__ __forceinline__ void store_output_pair(const prefill_params &P, T *dst, uint32_t pair) {
  if (output_aligned(P, 4)) {
    *reinterpret_cast<uint32_t *>(dst) = pair;
  } else {
    reinterpret_cast<uint16_t *>(dst)[0] = (uint16_t)pair;
    reinterpret_cast<uint16_t *>(dst)[1] = (uint16_t)(pair >> 16);
  }
}

// Stores the channel pairs this thread holds of a finished row of one split: finalized into the
// output (one split) or as the split's partial; the thread that holds channel 0 (holds_c0) also
// writes the partial's (max, sum) and, with split slots, the token's split count (the merge reads
// every token's count: a token finalized here says 1, whatever an earlier step left).
// for_each_pair(visit) calls visit(c, o0, o1) for each pair (c even, below v_head_size). The
// choice between the two layouts is made once per row: made per pair, a row's stores were a
// string of short branching blocks, code run once per unit that the instruction fetch could not
// run ahead of (fortieth measurement, doc/performance.md: the LATENT 1 x 64k step 7 % faster
// without them). (Splitting the row's loop by the output's alignment as well made the sm_80
// mma.sync PREFILL kernels of 8-bit caches spill: store_output_pair's test stays per pair.)
template <typename T, typename C, typename ForEachPair>
__device__ __forceinline__ void prefill_store_row(const prefill_params &P, int64_t token, int head,
                                                  int kv_head, int split, int32_t splits,
                                                  const prefill_row_state &row, bool holds_c0,
                                                  ForEachPair &&for_each_pair) {
  if (P.split_counts && split == 0 && holds_c0) P.split_counts[token] = splits;
  if (splits == 1) {
    T *out = reinterpret_cast<T *>(P.output) + (token * P.num_heads + head) * P.v_head_size;
    for_each_pair([&](int c, float o0, float o1) {
      store_output_pair(P, out + c, prefill_final_pair<T, C>(P, kv_head, c, row, o0, o1));
    });
  } else {
    const int64_t item = (token * P.num_split_slots + split) * P.num_heads + head;
    float *partial = P.partial_out + item * P.v_head_size;
    for_each_pair([&](int c, float o0, float o1) {
      *reinterpret_cast<float2 *>(partial + c) = make_float2(o0, o1);
    });
    if (holds_c0) P.partial_ml[item] = make_float2(row.m, row.l);
  }
}

// One channel pair (c, c + 1) of a finished row: prefill_store_row for that pair alone.
template <typename T, typename C>
__device__ __forceinline__ void prefill_store_pair(const prefill_params &P, int64_t token, int head,
                                                   int kv_head, int split, int32_t splits, int c,
                                                   const prefill_row_state &row, float o0,
                                                   float o1) {
  prefill_store_row<T, C>(P, token, head, kv_head, split, splits, row, c == 0,
                          [&](auto &&visit) { visit(c, o0, o1); });
}

// The per-key masks of one m16 tile's scores (kNTiles 8-key n-tiles from key key0 relative to the
// unit's key_base): a key is kept when it is mapped (bit k % 32 of mapped[k / 32]) and inside its
// row's admitted range (lo[h], hi[h] for rows group_id + 8 h).
template <int kNTiles, int kWords>
__device__ __forceinline__ void prefill_mask_scores(float (&score)[kNTiles][4], int32_t key0,
                                                    const uint32_t (&mapped)[kWords],
                                                    const int32_t (&lo)[2],
                                                    const int32_t (&hi)[2], int col) {
  static_assert(kNTiles <= 4 * kWords, "a mapped bit for every key");
#pragma unroll
  for (int n = 0; n < kNTiles; n++)
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const int k = n * 8 + col + (i & 1);  // col + 1 < 8: key k is in word n / 4
      const int32_t key = key0 + k;
      const uint32_t word = mapped[n / 4] >> (k - 32 * (n / 4));
      if (!((word & 1u) && key >= lo[i / 2] && key < hi[i / 2])) score[n][i] = -INFINITY;
    }
}
// The same for up to 64 keys: keys 0..31 in mapped_lo, 32..63 in mapped_hi.
template <int kNTiles>
__device__ __forceinline__ void prefill_mask_scores(float (&score)[kNTiles][4], int32_t key0,
                                                    uint32_t mapped_lo, uint32_t mapped_hi,
                                                    const int32_t (&lo)[2],
                                                    const int32_t (&hi)[2], int col) {
  const uint32_t mapped[2] = {mapped_lo, mapped_hi};
  prefill_mask_scores(score, key0, mapped, lo, hi, col);
}

// Each of the thread's two rows' maximum over an m16 tile's kNTiles n-tiles of scores (the four
// lanes of a row combined).
template <int kNTiles>
__device__ __forceinline__ void row_tile_max(const float (&score)[kNTiles][4],
                                             float (&tile_max)[2]) {
  tile_max[0] = tile_max[1] = -INFINITY;
#pragma unroll
  for (int n = 0; n < kNTiles; n++)
#pragma unroll
    for (int i = 0; i < 4; i++) tile_max[i / 2] = fmaxf(tile_max[i / 2], score[n][i]);
#pragma unroll
  for (int h = 0; h < 2; h++) {
    tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
    tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));
  }
}

// One online-softmax step of an m16 tile's two rows per thread over kNTiles n-tiles of scores
// (masked; times score_scale > 0 they are in log2 units, softmax_step_scores), given the new
// scores' maximum in log2 units (at least theirs; more where another warpgroup's keys count too):
// the running max, this thread's part of the running sum, the output accumulators rescaled; the
// scores become the unnormalized probabilities. kRescaleAlways: the rescale's multiplies run
// always, before the exponentials, without rescale_accumulator_rows' vote and branch; ptxas then
// issues them, the sums and P's packing in the MUFU run's gaps. Otherwise the branch skips them
// where every factor is 1, and ptxas puts it after the MUFU run, the sums (two dependent FADD
// chains) and the packing after it.
template <bool kRescaleAlways = false, int kNTiles, int kOutTiles>
__device__ __forceinline__ void softmax_step_to_max(float (&score)[kNTiles][4],
                                                    float (&row_max)[2], float (&row_sum)[2],
                                                    float (&out_acc)[kOutTiles][4],
                                                    float score_scale, const float (&new_max)[2]) {
  float rescale[2], base[2];
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const softmax_step step = online_softmax_step<true>(row_max[h], new_max[h]);
    base[h] = step.base;
    rescale[h] = step.rescale;
    row_sum[h] *= rescale[h];
  }
  if constexpr (kRescaleAlways) rescale_accumulator_rows<false>(out_acc, rescale);
#pragma unroll
  for (int n = 0; n < kNTiles; n++)
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const float p = softmax_weight(score[n][i], score_scale, base[i / 2]);
      score[n][i] = p;
      row_sum[i / 2] += p;
    }
  if constexpr (!kRescaleAlways) rescale_accumulator_rows(out_acc, rescale);
}

// The same step with the maximum of the scores themselves.
template <bool kRescaleAlways = false, int kNTiles, int kOutTiles>
__device__ __forceinline__ void prefill_softmax_step(float (&score)[kNTiles][4], float (&row_max)[2],
                                                     float (&row_sum)[2],
                                                     float (&out_acc)[kOutTiles][4],
                                                     float score_scale) {
  float tile_max[2];
  row_tile_max(score, tile_max);
  tile_max[0] *= score_scale;
  tile_max[1] *= score_scale;
  softmax_step_to_max<kRescaleAlways>(score, row_max, row_sum, out_acc, score_scale, tile_max);
}

// The A fragment of P (rounded to T, the MMAs' type, as in every flash kernel) for the 16 keys of
// two n-tiles, lo and hi.
template <typename T>
__device__ __forceinline__ void pack_p_fragment(const float (&lo)[4], const float (&hi)[4],
                                                uint32_t (&p)[4]) {
  p[0] = pack_t2<T>(lo[0], lo[1]);
  p[1] = pack_t2<T>(lo[2], lo[3]);
  p[2] = pack_t2<T>(hi[0], hi[1]);
  p[3] = pack_t2<T>(hi[2], hi[3]);
}
// The same for n-tiles 2g and 2g + 1 of a tile's scores.
template <typename T, int kNTiles>
__device__ __forceinline__ void prefill_p_fragment(const float (&score)[kNTiles][4], int g,
                                                   uint32_t (&p)[4]) {
  pack_p_fragment<T>(score[2 * g], score[2 * g + 1], p);
}

// prefill_softmax_step, then P's A fragments (prefill_p_fragment), without waiting for the
// rows' maxima where the warp can: when every row of the warp has a finite reference (its running
// max; with the lazy reference it rarely moves after a row's first tile), the exponentials are
// taken against it at once, and the pass is kept unless one of them exceeds
// 2^kSoftmaxReferenceSlack (a score past the reference by the slack or more, where the step may
// move it); the maxima's dependent chains (32 FMNMX a row, then shuffles) stay off the path to
// MUFU, and the check's FMNMX run on the exponentials in MUFU's issue gaps. Otherwise the step
// runs as before from the raw scores, which the pass leaves in place. Against an unmoved finite
// reference the step's base is that reference and its rescale exactly 1, so a kept pass gives
// the step's bits; the one case where the step would have moved and the pass is kept is a score
// whose exponent rounds to exactly the slack (every kept P is at most 2^8). An infinite reference
// (+inf: a score times the scale overflowed) takes the step, whose rescale is then NaN.
template <typename T, bool kRescaleAlways = false, int kNTiles, int kOutTiles>
__device__ __forceinline__ void prefill_softmax_to_p(float (&score)[kNTiles][4], float (&row_max)[2],
                                                     float (&row_sum)[2],
                                                     float (&out_acc)[kOutTiles][4],
                                                     float score_scale, uint32_t (&p)[kNTiles / 2][4]) {
  const bool finite_references = fabsf(row_max[0]) != INFINITY && fabsf(row_max[1]) != INFINITY;
  if (__all_sync(0xffffffffu, finite_references)) {
    float sum[2] = {row_sum[0], row_sum[1]}, largest = 0.0f;
#pragma unroll
    for (int g = 0; g < kNTiles / 2; g++) {
      float e[2][4];
#pragma unroll
      for (int j = 0; j < 2; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
          e[j][i] = softmax_weight(score[2 * g + j][i], score_scale, row_max[i / 2]);
          sum[i / 2] += e[j][i];
          largest = fmaxf(largest, e[j][i]);
        }
      pack_p_fragment<T>(e[0], e[1], p[g]);
    }
    constexpr float kLargestKept = 256.0f;  // 2^kSoftmaxReferenceSlack
    static_assert(kSoftmaxReferenceSlack == 8.0f, "kLargestKept is 2^kSoftmaxReferenceSlack");
    if (!__any_sync(0xffffffffu, largest > kLargestKept)) {
      row_sum[0] = sum[0];
      row_sum[1] = sum[1];
      return;
    }
  }
  prefill_softmax_step<kRescaleAlways>(score, row_max, row_sum, out_acc, score_scale);
#pragma unroll
  for (int g = 0; g < kNTiles / 2; g++) prefill_p_fragment<T>(score, g, p[g]);
}

// A 4 x 4 transpose of 32-bit words across the 4 lanes of a row (lane_in_row q holds words
// w[j] = a[q][j]): returns a[0][q], a[1][q], a[2][q], a[3][q]. Two exchanges, across bit 1 of q
// (the columns of q's half kept, the other half's sent) and then across bit 0. Every lane of
// the warp must call it.
__device__ __forceinline__ uint4 quad_transpose_words(uint32_t w0, uint32_t w1, uint32_t w2,
                                                      uint32_t w3, int lane_in_row) {
  const bool high = lane_in_row & 2, odd = lane_in_row & 1;
  // after the first exchange: a[q][2 hi], a[q][2 hi + 1], a[q ^ 2][2 hi], a[q ^ 2][2 hi + 1]
  const uint32_t c0 = high ? w2 : w0, c1 = high ? w3 : w1;
  const uint32_t c2 = __shfl_xor_sync(0xffffffffu, high ? w0 : w2, 2);
  const uint32_t c3 = __shfl_xor_sync(0xffffffffu, high ? w1 : w3, 2);
  // column q kept (rows q, q ^ 2), the partner's column q received (rows q ^ 1, q ^ 3)
  const uint32_t own = odd ? c1 : c0, own2 = odd ? c3 : c2;
  const uint32_t got = __shfl_xor_sync(0xffffffffu, odd ? c0 : c1, 1);
  const uint32_t got2 = __shfl_xor_sync(0xffffffffu, odd ? c2 : c3, 1);
  // rows in order: (q, q ^ 1) is (even, odd) or (odd, even); q ^ 2 the other pair
  const uint32_t x0 = odd ? got : own, x1 = odd ? own : got;
  const uint32_t y0 = odd ? got2 : own2, y1 = odd ? own2 : got2;
  return high ? make_uint4(y0, y1, x0, x1) : make_uint4(x0, x1, y0, y1);
}

// Row h (0 or 1) of this lane's pair in an m16 tile of rows from row0: its block row, token and
// head, and its softmax sum, reduced over the row's four lanes (every lane of the warp calls it).
struct prefill_lane_row {
  int r;
  int64_t token;
  int head;
  float sum;
};
__device__ __forceinline__ prefill_lane_row prefill_lane_row_of(const prefill_params &P,
                                                                const prefill_row_block &R,
                                                                int row0, int lane, int h,
                                                                float row_sum) {
  float l = row_sum;
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  const int r = row0 + lane / 4 + 8 * h;
  return {r, R.first_token + prefill_row_token(P, r), R.first_head + prefill_row_head(P, r), l};
}

// Row h (0 or 1) of this lane's pair in a final m16 tile of rows row0 .. row0 + 15 of the block
// (one split): its finalization (prefill_final_pair takes its channels) and, in *r where given,
// its block row, which exists where it is below R.valid_rows (the same for the 4 lanes of a row;
// a row past them finalizes to zeros). Marks the row's token as finalized (split_counts). Every
// lane of the warp must call it.
template <typename T>
__device__ __forceinline__ prefill_row_state prefill_final_row_state(const prefill_params &P,
                                                                     const prefill_row_block &R,
                                                                     int row0,
                                                                     const float (&row_max)[2],
                                                                     const float (&row_sum)[2],
                                                                     int lane, int h,
                                                                     int *r = nullptr) {
  const prefill_lane_row lr = prefill_lane_row_of(P, R, row0, lane, h, row_sum[h]);
  if (r) *r = lr.r;
  if (lr.r >= R.valid_rows) return prefill_row_state{0.0f, 1.0f, 0.0f};
  if (P.split_counts && lane % 4 == 0) P.split_counts[lr.token] = 1;
  return prefill_row_state_of<T>(P, lr.head, 1, row_max[h], lr.sum);
}

// A final m16 tile of rows row0 .. row0 + 15 (16-bit fragments, the accumulators' pairs at
// channels 8 n + col; prefill_final_row_state), each row packed whole before any of it is stored
// (no store waits for the registers of the one before: ncu, nineteenth measurement), then handed
// out as whole n-tiles: store16(r, n, v) gets n-tile n (channels 8 n .. 8 n + 7, 16 bytes) of block
// row r from one lane of the row's four, after a 4-lane exchange (quad_transpose_words). Every
// lane of the warp must call it; rows past valid_rows hand out nothing.
template <typename T, typename C, int kOutTiles, typename Store16>
__device__ __forceinline__ void prefill_final_rows_m16(const prefill_params &P,
                                                       const prefill_row_block &R, int row0,
                                                       const float (&out_acc)[kOutTiles][4],
                                                       const float (&row_max)[2],
                                                       const float (&row_sum)[2], int kv_head,
                                                       int lane, Store16 &&store16) {
  static_assert(kOutTiles % 4 == 0, "n-tiles in quads");
  const int col = (lane % 4) * 2, lane_in_row = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    int r;
    const prefill_row_state row =
        prefill_final_row_state<T>(P, R, row0, row_max, row_sum, lane, h, &r);
    uint32_t packed[kOutTiles];
#pragma unroll
    for (int n = 0; n < kOutTiles; n++)
      packed[n] = prefill_final_pair<T, C>(P, kv_head, 8 * n + col, row, out_acc[n][2 * h],
                                           out_acc[n][2 * h + 1]);
#pragma unroll
    for (int g = 0; g < kOutTiles / 4; g++) {
      const uint4 v = quad_transpose_words(packed[4 * g], packed[4 * g + 1], packed[4 * g + 2],
                                           packed[4 * g + 3], lane_in_row);
      if (r < R.valid_rows) store16(r, 4 * g + lane_in_row, v);
    }
  }
}

// Finalizes (or writes as partials) an m16 tile of rows row0 .. row0 + 15 of the block straight
// from the accumulators, each thread its rows' pairs of adjacent channels. C: the cache type (its
// v_scale); Fragments: the type whose V fragments the accumulators follow (prefill_out_channel; T
// where the V tile was converted to T before the MMA, as in the wgmma kernels); kPackRows: a final
// row (one split, 16-bit fragments) is packed whole before it is stored (the wgmma kernel).
template <typename T, typename C, typename Fragments = C, bool kPackRows = false, int kOutTiles>
__device__ __forceinline__ void prefill_store_m16(const prefill_params &P,
                                                  const prefill_row_block &R, int row0,
                                                  const float (&out_acc)[kOutTiles][4],
                                                  const float (&row_max)[2],
                                                  const float (&row_sum)[2], int kv_head,
                                                  int split, int32_t splits, int lane) {
  const int head_size = P.kv.head_size;
  const int col = (lane % 4) * 2;
  if (kPackRows && sizeof(Fragments) == 2 && splits == 1) {  // (uniform)
    // The wgmma kernel's choice: in the mma.sync kernel at 128 channels the packed row took
    // registers its tile loop then spilled (sm_80: 52 bytes of spill stores against 24), not
    // measurable on the H200, where that kernel serves head sizes up to 64 only. Each lane
    // stores whole n-tiles (16 bytes: 4 store instructions per 16 n-tiles instead of 16, and 64
    // contiguous bytes per row and warp instruction instead of 16), or their pairs where the
    // output is not 16-byte aligned.
    const bool quad_vector_stores = output_aligned(P, 16);
    const bool every_channel = head_size >= 8 * kOutTiles;
    prefill_final_rows_m16<T, C>(
        P, R, row0, out_acc, row_max, row_sum, kv_head, lane, [&](int r, int n, uint4 v) {
          if (!every_channel && 8 * n >= head_size) return;
          const int64_t token = R.first_token + prefill_row_token(P, r);
          const int head = R.first_head + prefill_row_head(P, r);
          T *out = reinterpret_cast<T *>(P.output) + (token * P.num_heads + head) * P.v_head_size +
                   8 * n;
          if (quad_vector_stores) {
            *reinterpret_cast<uint4 *>(out) = v;
          } else {
            store_output_pair(P, out, v.x);
            store_output_pair(P, out + 2, v.y);
            store_output_pair(P, out + 4, v.z);
            store_output_pair(P, out + 6, v.w);
          }
        });
    return;
  }
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const prefill_lane_row lr = prefill_lane_row_of(P, R, row0, lane, h, row_sum[h]);
    if (lr.r >= R.valid_rows) continue;  // (the same for the 4 lanes of a row)
    const prefill_row_state row = prefill_row_state_of<T>(P, lr.head, splits, row_max[h], lr.sum);
    // (pair by pair: prefill_store_row here made the sm_80 kernels spill more)
    for_each_out_pair<Fragments>(out_acc, h, col, [&](int c, float o0, float o1) {
      if (c < head_size)
        prefill_store_pair<T, C>(P, lr.token, lr.head, kv_head, split, splits, c, row, o0, o1);
    });
  }
}

// Row-split compute (more than 16 rows): warp w owns kMTiles m16 tiles of rows and runs every key
// of a tile against them, 64 keys per pass with one m16 tile, 32 with two (their scores would not
// fit the registers beside the accumulators otherwise). A warp skips the passes its rows cannot
// see, and the per-key masks of passes wholly inside every row's range and fully mapped. Tiles
// [tile_begin, tile_end) are numbered as the loader numbers them (from loader.first_tile).
template <typename T, typename C, int DMAX>
__device__ __forceinline__ void prefill_rows_split(const prefill_params &P,
                                                   const prefill_kv_loader<C, DMAX> &loader,
                                                   const prefill_row_block &R,
                                                   const mma_input_t<T, C> *q_smem,
                                                   int tile_begin, int tile_end,
                                                   int kv_head, int split, int32_t splits) {
  using M = mma_input_t<T, C>;  // the tensor cores' element type (Q, K, V and P)
  constexpr int kMTiles = prefill_m_tiles(DMAX);
  constexpr int kPassKeys = kMTiles == 1 ? 64 : 32;
  constexpr int kPasses = kPrefillTileKeys / kPassKeys;
  constexpr int kPassGroups = kPassKeys / 16;  // 16-key groups of a pass (k-steps of P·V)
  constexpr int kSteps = DMAX / 16;            // k-steps of Q·K^T
  constexpr int kOutTiles = DMAX / 8;          // n-tiles of P·V
  constexpr int kLoads = warp_fragments<M, C>::kLoads;
  constexpr int q_stride = prefill_q_row_elems(DMAX);
  constexpr int row_bytes = prefill_kv_row_bytes(DMAX, (int)sizeof(C));
  constexpr int stage_bytes = prefill_kv_loader<C, DMAX>::kStageBytes;
  static_assert(kSteps % kLoads == 0 && kOutTiles % (2 * kLoads) == 0, "whole fragment loads");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group_id = lane / 4, col = (lane % 4) * 2;  // mma fragment coordinates
  const int warp_row0 = warp * 16 * kMTiles;

  // This warp's rows: their union (the keys it computes) and their intersection (keys that need
  // no per-key mask; an empty valid row forces the masked path), relative to key_base.
  int32_t warp_lo = INT32_MAX, warp_hi = INT32_MIN, common_lo = INT32_MIN, common_hi = INT32_MAX;
  if (lane < 16 * kMTiles) {
    const int r = warp_row0 + lane;
    const int32_t lo = R.row_lo[r], hi = R.row_hi[r];
    if (lo < hi) {
      warp_lo = lo;
      warp_hi = hi;
    }
    if (r < R.valid_rows) {
      common_lo = lo;
      common_hi = hi;
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    warp_lo = min(warp_lo, __shfl_xor_sync(0xffffffffu, warp_lo, offset));
    warp_hi = max(warp_hi, __shfl_xor_sync(0xffffffffu, warp_hi, offset));
    common_lo = max(common_lo, __shfl_xor_sync(0xffffffffu, common_lo, offset));
    common_hi = min(common_hi, __shfl_xor_sync(0xffffffffu, common_hi, offset));
  }
  int32_t my_lo[kMTiles][2], my_hi[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; mt++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int r = warp_row0 + mt * 16 + group_id + 8 * h;
      my_lo[mt][h] = R.row_lo[r];
      my_hi[mt][h] = R.row_hi[r];
    }

  float out_acc[kMTiles][kOutTiles][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; mt++)
#pragma unroll
    for (int n = 0; n < kOutTiles; n++)
#pragma unroll
      for (int i = 0; i < 4; i++) out_acc[mt][n][i] = 0.0f;
  float row_max[kMTiles][2], row_sum[kMTiles][2];  // row_sum: this thread's columns only
#pragma unroll
  for (int mt = 0; mt < kMTiles; mt++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      row_max[mt][h] = -INFINITY;
      row_sum[mt][h] = 0.0f;
    }

  const M *q_frag_rows = q_smem + (warp_row0 + lane % 16) * q_stride + (lane / 16) * 8;
  loader.run_tiles(tile_begin, tile_end, [&](int tile, int stage) {
    const unsigned char *k_tile = loader.stages + stage * stage_bytes;
    const unsigned char *v_tile = k_tile + kPrefillTileKeys * row_bytes;
    const unsigned char *tile_admitted = loader.admitted + stage * kPrefillTileKeys;
    const uint32_t mapped_lo = __ballot_sync(0xffffffffu, tile_admitted[lane] != 0);
    const uint32_t mapped_hi = __ballot_sync(0xffffffffu, tile_admitted[32 + lane] != 0);
#pragma unroll 1
    for (int pass = 0; pass < kPasses; pass++) {
      const int32_t key0 = tile * kPrefillTileKeys - loader.lo_in_tile + pass * kPassKeys;
      if (warp_hi <= key0 || warp_lo >= key0 + kPassKeys) continue;  // no row of mine sees it
      const uint32_t pass_mapped =
          kPassKeys == 64 ? (mapped_lo & mapped_hi) : (pass == 0 ? mapped_lo : mapped_hi);
      const bool unmasked =
          pass_mapped == 0xffffffffu && key0 >= common_lo && key0 + kPassKeys <= common_hi;
      const unsigned char *k_pass = k_tile + pass * kPassKeys * row_bytes;
      const unsigned char *v_pass = v_tile + pass * kPassKeys * row_bytes;

      // scores of this warp's rows x the pass's keys (8-key n-tiles)
      float score[kMTiles][2 * kPassGroups][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; mt++)
#pragma unroll
        for (int n = 0; n < 2 * kPassGroups; n++)
#pragma unroll
          for (int i = 0; i < 4; i++) score[mt][n][i] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < kSteps; ks += kLoads) {
        uint32_t a[kMTiles][kLoads][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; mt++)
#pragma unroll
          for (int s = 0; s < kLoads; s++)
            ldmatrix_x4(a[mt][s], q_frag_rows + mt * 16 * q_stride + (ks + s) * 16);
#pragma unroll
        for (int g = 0; g < kPassGroups; g++) {
          uint32_t bk[kLoads][4];
          const warp_fragments<M, C> k_frags = {k_pass + g * 16 * row_bytes, row_bytes, lane};
          k_frags.scores_k(bk, ks);
#pragma unroll
          for (int mt = 0; mt < kMTiles; mt++)
#pragma unroll
            for (int s = 0; s < kLoads; s++) {
              mma_op<M>::run(score[mt][2 * g], a[mt][s], bk[s][0], bk[s][1]);
              mma_op<M>::run(score[mt][2 * g + 1], a[mt][s], bk[s][2], bk[s][3]);
            }
        }
      }

      const float score_scale = softmax_step_scores(score, R.qk_scale, P.softcap);
      if (!unmasked) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; mt++)
          prefill_mask_scores(score[mt], key0, kPassKeys == 64 ? mapped_lo : pass_mapped,
                              mapped_hi, my_lo[mt], my_hi[mt], col);
      }

      // online softmax per row (log2 units)
#pragma unroll
      for (int mt = 0; mt < kMTiles; mt++)
        prefill_softmax_step(score[mt], row_max[mt], row_sum[mt], out_acc[mt], score_scale);

      // out += P · V, 16 keys per k-step (P rounded to M, as in every flash kernel)
#pragma unroll
      for (int g = 0; g < kPassGroups; g++) {
        uint32_t p_frag[kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; mt++) prefill_p_fragment<M>(score[mt], g, p_frag[mt]);
        const warp_fragments<M, C> v_frags = {v_pass + g * 16 * row_bytes, row_bytes, lane};
#pragma unroll
        for (int n = 0; n < kOutTiles; n += 2 * kLoads) {
          uint32_t bv[kLoads][4];
          v_frags.values_v(bv, n);
#pragma unroll
          for (int mt = 0; mt < kMTiles; mt++)
#pragma unroll
            for (int s = 0; s < kLoads; s++) {
              mma_op<M>::run(out_acc[mt][n + 2 * s], p_frag[mt], bv[s][0], bv[s][1]);
              mma_op<M>::run(out_acc[mt][n + 2 * s + 1], p_frag[mt], bv[s][2], bv[s][3]);
            }
        }
      }
    }
  });

  // Each row's pairs of adjacent channels, straight from the accumulators.
#pragma unroll
  for (int mt = 0; mt < kMTiles; mt++)
    prefill_store_m16<T, C>(P, R, warp_row0 + mt * 16, out_acc[mt], row_max[mt], row_sum[mt],
                            kv_head, split, splits, lane);
}

// Key-split compute (at most 16 rows: decode tokens of a mixed step, verify steps): the block's
// rows are one m16 tile, and warp w takes keys [16 w, 16 w + 16) of every tile with its own
// online softmax, so all four warps work; they are merged through shared memory at the end. Tiles
// are numbered as in prefill_rows_split.
template <typename T, typename C, int DMAX>
__device__ __forceinline__ void prefill_keys_split(const prefill_params &P,
                                                   const prefill_kv_loader<C, DMAX> &loader,
                                                   const prefill_row_block &R,
                                                   const mma_input_t<T, C> *q_smem,
                                                   int tile_begin, int tile_end,
                                                   int kv_head, int split, int32_t splits) {
  using M = mma_input_t<T, C>;  // the tensor cores' element type (Q, K, V and P)
  constexpr int kSteps = DMAX / 16;
  constexpr int kOutTiles = DMAX / 8;
  constexpr int kLoads = warp_fragments<M, C>::kLoads;
  constexpr int q_stride = prefill_q_row_elems(DMAX);
  constexpr int row_bytes = prefill_kv_row_bytes(DMAX, (int)sizeof(C));
  constexpr int stage_bytes = prefill_kv_loader<C, DMAX>::kStageBytes;
  constexpr int kKeysPerWarp = kPrefillTileKeys / kPrefillWarps;  // 16
  static_assert(kPrefillWarps * 16 * DMAX * 4 + kPrefillWarps * 16 * 8 <=
                    kPrefillStages * stage_bytes,
                "the warps' partial rows fit in the stage ring");
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int group_id = lane / 4, col = (lane % 4) * 2;
  int32_t my_lo[2], my_hi[2];
#pragma unroll
  for (int h = 0; h < 2; h++) {
    my_lo[h] = R.row_lo[group_id + 8 * h];
    my_hi[h] = R.row_hi[group_id + 8 * h];
  }
  float out_acc[kOutTiles][4];
#pragma unroll
  for (int n = 0; n < kOutTiles; n++)
#pragma unroll
    for (int i = 0; i < 4; i++) out_acc[n][i] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};

  const M *q_frag_row = q_smem + (lane % 16) * q_stride + (lane / 16) * 8;
  loader.run_tiles(tile_begin, tile_end, [&](int tile, int stage) {
    const unsigned char *k_keys =
        loader.stages + stage * stage_bytes + warp * kKeysPerWarp * row_bytes;
    const unsigned char *v_keys = k_keys + kPrefillTileKeys * row_bytes;
    const unsigned char *keys_admitted =
        loader.admitted + stage * kPrefillTileKeys + warp * kKeysPerWarp;
    const int32_t key0 = tile * kPrefillTileKeys - loader.lo_in_tile + warp * kKeysPerWarp;
    float scores[1][2][4] = {{{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}}};
    float(&score)[2][4] = scores[0];
    const warp_fragments<M, C> k_frags = {k_keys, row_bytes, lane};
#pragma unroll
    for (int ks = 0; ks < kSteps; ks += kLoads) {
      uint32_t a[kLoads][4], b[kLoads][4];
#pragma unroll
      for (int s = 0; s < kLoads; s++) ldmatrix_x4(a[s], q_frag_row + (ks + s) * 16);
      k_frags.scores_k(b, ks);
#pragma unroll
      for (int s = 0; s < kLoads; s++) {
        mma_op<M>::run(score[0], a[s], b[s][0], b[s][1]);
        mma_op<M>::run(score[1], a[s], b[s][2], b[s][3]);
      }
    }
    const float score_scale = softmax_step_scores(scores, R.qk_scale, P.softcap);
#pragma unroll
    for (int n = 0; n < 2; n++)
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const int k = n * 8 + col + (i & 1);
        const int32_t key = key0 + k;
        if (!(keys_admitted[k] && key >= my_lo[i / 2] && key < my_hi[i / 2]))
          score[n][i] = -INFINITY;
      }
    prefill_softmax_step(score, row_max, row_sum, out_acc, score_scale);
    const uint32_t p_frag[4] = {
        pack_t2<M>(score[0][0], score[0][1]), pack_t2<M>(score[0][2], score[0][3]),
        pack_t2<M>(score[1][0], score[1][1]), pack_t2<M>(score[1][2], score[1][3])};
    const warp_fragments<M, C> v_frags = {v_keys, row_bytes, lane};
#pragma unroll
    for (int n = 0; n < kOutTiles; n += 2 * kLoads) {
      uint32_t b[kLoads][4];
      v_frags.values_v(b, n);
#pragma unroll
      for (int s = 0; s < kLoads; s++) {
        mma_op<M>::run(out_acc[n + 2 * s], p_frag, b[s][0], b[s][1]);
        mma_op<M>::run(out_acc[n + 2 * s + 1], p_frag, b[s][2], b[s][3]);
      }
    }
  });

  // Merge the 4 warps through the (now free) stage ring, then finalize or write partials with
  // every thread on consecutive channels.
#pragma unroll
  for (int h = 0; h < 2; h++) {
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
  }
  float *warp_out = reinterpret_cast<float *>(loader.stages);  // [warp][16][DMAX]
  float2 *warp_ml = reinterpret_cast<float2 *>(warp_out + kPrefillWarps * 16 * DMAX);
  {
    float *mine = warp_out + warp * 16 * DMAX;
    warp_fragments<M, C>::store_out(mine + group_id * DMAX, mine + (group_id + 8) * DMAX, out_acc,
                                    col);
    if (lane % 4 == 0) {
      warp_ml[warp * 16 + group_id] = make_float2(row_max[0], row_sum[0]);
      warp_ml[warp * 16 + group_id + 8] = make_float2(row_max[1], row_sum[1]);
    }
  }
  __syncthreads();
  const int head_size = P.kv.head_size;
  const int pairs = head_size / 2;
  for (int i = tid; i < R.valid_rows * pairs; i += kPrefillThreads) {
    const int r = i / pairs, c = (i % pairs) * 2;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kPrefillWarps; w++) {
      const float2 ml = warp_ml[w * 16 + r];
      if (partial_has_keys(ml.y)) m = fmaxf(m, ml.x);
    }
    float l = 0.0f, o0 = 0.0f, o1 = 0.0f;
#pragma unroll
    for (int w = 0; w < kPrefillWarps; w++) {
      const float2 ml = warp_ml[w * 16 + r];
      if (partial_has_keys(ml.y)) {
        const float weight = softmax_rescale(ml.x, m);
        const float2 o = *reinterpret_cast<const float2 *>(warp_out + (w * 16 + r) * DMAX + c);
        l += ml.y * weight;
        o0 += o.x * weight;
        o1 += o.y * weight;
      }
    }
    const int64_t token = R.first_token + prefill_row_token(P, r);
    const int head = R.first_head + prefill_row_head(P, r);
    prefill_store_pair<T, C>(P, token, head, kv_head, split, splits, c,
                             prefill_row_state_of<T>(P, head, splits, m, l), o0, o1);
  }
}

// The rows of a work unit's row block: row r is query head first_head + r % heads_per_block of
// the sequence's packed token first_token + r / heads_per_block; rows [0, valid_rows) exist
// (bounded by the packed token count too: malformed lengths must never send a read out of bounds).
struct prefill_unit_rows {
  sequence_span span;
  int64_t first_token;
  int valid_rows, first_head;
};
// kBeforeWait: load_step_input's (the lengths, and positions in prefill_row_keys).
template <bool kBeforeWait = false>
__device__ __forceinline__ prefill_unit_rows prefill_unit_rows_of(const prefill_params &P,
                                                                  int32_t b, int32_t row_block,
                                                                  int kv_head) {
  prefill_unit_rows u;
  u.span = load_sequence_span<kBeforeWait>(P.cu_seqlens, P.past_seqlens, b);
  // (row_block >= 0: a valid unit's; unsigned division, a few instructions less than signed)
  const int token_block = (int)((uint32_t)row_block / (uint32_t)P.head_blocks);
  const int head_block = row_block - token_block * P.head_blocks;
  const int64_t token_index0 = (int64_t)token_block * P.tokens_per_block;
  u.first_token = u.span.first_token + token_index0;
  const int64_t tokens =
      max((int64_t)0, min(min((int64_t)P.tokens_per_block, u.span.q_len - token_index0),
                          P.token_count - u.first_token));
  const int heads = min(P.heads_per_block, P.group_size - head_block * P.heads_per_block);
  u.valid_rows = u.first_token >= 0 ? (int)tokens * heads : 0;
  u.first_head = kv_head * P.group_size + head_block * P.heads_per_block;
  return u;
}
// The keys row r (< valid_rows) admits.
template <bool kBeforeWait = false>
__device__ __forceinline__ key_span prefill_row_keys(const prefill_params &P,
                                                     const prefill_unit_rows &u, int r) {
  return admitted_keys(
      token_position<kBeforeWait>(P.query_positions, u.span,
                                  u.first_token + prefill_row_token(P, r)),
      u.span.kv_len, P.is_causal, P.window);
}

// The keys a unit visits: the union [lo, hi) of its rows' admitted keys (lo >= hi: none). Rows are
// handled relative to key_base, the union's first key; a range past 2^30 keys is cut there (such
// lengths break the operator's contract, and nothing is read out of bounds either way).
struct prefill_key_union {
  int64_t lo, hi, key_base;
};
__device__ __forceinline__ prefill_key_union prefill_cut_union(int64_t lo, int64_t hi) {
  prefill_key_union u = {lo, hi, 0};
  if (lo < hi) {
    u.hi = min(hi, lo + (int64_t)INT32_MAX / 2);
    u.key_base = lo;
  }
  return u;
}
// A row's admitted keys relative to the union's key_base (both 0 for an empty row).
__device__ __forceinline__ void prefill_relative_keys(const key_span &keys,
                                                      const prefill_key_union &u, int32_t *lo,
                                                      int32_t *hi) {
  *lo = (int32_t)(max(keys.lo, u.key_base) - u.key_base);
  *hi = (int32_t)(max(min(keys.hi, u.hi), u.key_base) - u.key_base);
}
// The unit's tiles: the union cut to split `split`'s absolute tiles.
__device__ __forceinline__ void prefill_unit_tiles(const prefill_params &P,
                                                   const prefill_key_union &u, int32_t split,
                                                   int32_t splits, int64_t *tile_begin,
                                                   int64_t *tile_end) {
  *tile_begin = *tile_end = 0;
  if (u.lo < u.hi) {
    *tile_begin = u.lo / kPrefillTileKeys;
    *tile_end = (u.hi + kPrefillTileKeys - 1) / kPrefillTileKeys;
    if (splits > 1) {
      *tile_begin = max(*tile_begin, (int64_t)split * P.tiles_per_split);
      *tile_end = min(*tile_end, (int64_t)(split + 1) * P.tiles_per_split);
    }
  }
}

// The work unit of the taken-th (unit, KV head) pair of the schedule: split `split` of row block
// `row_block` of sequence b (the heaviest row blocks first), or valid = false for malformed
// lengths.
struct prefill_work {
  int32_t b, row_block, split, splits;
  int kv_head;
  bool valid;
};
// Unit `local` of sequence b's row_blocks x splits (prefill_sequence_row_blocks,
// prefill_sequence_splits).
__device__ __forceinline__ prefill_work prefill_work_in_sequence(int32_t b, int32_t local,
                                                                 int32_t row_blocks,
                                                                 int32_t splits, int kv_head) {
  prefill_work w;
  w.b = b;
  w.kv_head = kv_head;
  w.splits = splits;
  w.valid = local >= 0 && local < row_blocks * splits;
  w.row_block = row_blocks - 1 - local / splits;
  w.split = local % splits;
  return w;
}
// The KV heads of the schedule's (unit, KV head) pairs: kOneKvHead (LATENT's one, whose pairs are
// its units) spares the 64-bit division and remainder of `taken` by a run-time count.
template <bool kOneKvHead>
__device__ __forceinline__ int32_t prefill_kv_heads(const prefill_params &P) {
  return kOneKvHead ? 1 : P.kv_num_heads;
}
template <bool kOneKvHead = false>
__device__ __forceinline__ prefill_work prefill_work_of(const prefill_params &P, int64_t taken) {
  const int32_t unit = (int32_t)(taken / prefill_kv_heads<kOneKvHead>(P));
  // the sequence: the last b with unit_begin[b] <= unit (zero-unit sequences are skipped)
  int32_t lo = 0, hi = P.batch_size;
  while (hi - lo > 1) {
    const int32_t mid = (lo + hi) / 2;
    if (P.unit_begin[mid] <= unit)
      lo = mid;
    else
      hi = mid;
  }
  // kv_len in 64 bits, as the schedule counts it (prefill_sequence_work_of)
  const int64_t kv_len = load_sequence_span(P.cu_seqlens, P.past_seqlens, lo).kv_len;
  const int32_t splits = prefill_sequence_splits(P, kv_len);
  return prefill_work_in_sequence(lo, unit - P.unit_begin[lo],
                                  (P.unit_begin[lo + 1] - P.unit_begin[lo]) / splits, splits,
                                  (int)(taken % prefill_kv_heads<kOneKvHead>(P)));
}

// What a work unit's prologue decides (prefill_unit_prologue): its rows, each row's admitted keys
// (in shared memory, relative to rows.key_base), their union [union_lo, union_hi) in absolute keys,
// and the split's tiles [tile_begin, tile_end) of that union.
struct prefill_unit_setup {
  prefill_row_block rows;
  int64_t union_lo, union_hi, tile_begin, tile_end;
  int32_t splits;
};

// The prologue the mma.sync row-block kernels share (PREFILL, LATENT): the rows of split `split`
// of row block `row_block` of sequence b for KV head kv_head, their Q rows into q_smem (kRows rows
// of q_stride elements, kQWidth channels each, zero past head_size and valid_rows), and their
// admitted keys into row_lo / row_hi (kRows each). Q is stored as the tensor cores take it
// (mma_input_t): T for 16-bit caches; fp16 for 8-bit caches, each element times its channel's
// k_scale (per channel) and the power of two that brings the unit's largest into [2^14, 2^15),
// rounded once, the score scale taking the power back (a per-channel scale rounded into a bf16 Q
// lost more than the tolerance of doc/development.md on sharp rows). Ends with a barrier: the
// shared rows are ready.
template <typename T, typename C, int kQWidth, int kRows, int kThreads>
__device__ __forceinline__ prefill_unit_setup prefill_unit_prologue(
    const prefill_params &P, mma_input_t<T, C> *q_smem, int q_stride, int32_t *row_lo,
    int32_t *row_hi, int32_t b, int32_t row_block, int32_t split, int kv_head) {
  using M = mma_input_t<T, C>;
  const int head_size = P.kv.head_size;
  const int tid = threadIdx.x, lane = tid % 32;
  const prefill_unit_rows rows = prefill_unit_rows_of(P, b, row_block, kv_head);
  const int64_t first_token = rows.first_token;
  const int valid_rows = rows.valid_rows, first_head = rows.first_head;

  // Q rows into shared memory; other rows and channels beyond head_size are zero (their scores
  // are finite and discarded).
  float qk_scale = prefill_qk_scale<C>(P);
  constexpr int vecs_per_row = kQWidth / 8;
  // chunk i of the rows (row i / vecs_per_row, channels c .. c + 7), or none
  auto q_chunk = [&](int i, uint4 *v) {
    const int r = i / vecs_per_row, c = (i % vecs_per_row) * 8;
    if (r >= valid_rows || c >= head_size) return false;
    const int64_t token = first_token + prefill_row_token(P, r);
    const int head = first_head + prefill_row_head(P, r);
    *v = *reinterpret_cast<const uint4 *>(reinterpret_cast<const T *>(P.q) +
                                          token * P.q_row_stride + (int64_t)head * head_size + c);
    return true;
  };
  // 8-bit caches: the per-channel k_scale, and the power of two 2^-shift of the unit's largest
  // element (the score scale takes 2^shift back)
  const float *k_scale = nullptr;
  float down = 1.0f;
  if constexpr (sizeof(C) == 1) {
    __shared__ float warp_q_max[kThreads / 32];
    if (P.k_quant == PA_QUANT_PER_CHANNEL) k_scale = P.k_scale + (int64_t)kv_head * head_size;
    float q_max = 0.0f;
    for (int i = tid; i < kRows * vecs_per_row; i += kThreads) {
      uint4 v;
      if (q_chunk(i, &v)) q_max = fmaxf(q_max, q_chunk_max<T>(v, k_scale, (i % vecs_per_row) * 8));
    }
    q_max = block_reduce<kThreads>(q_max, warp_q_max, [](float a, float b) { return fmaxf(a, b); });
    const int shift = fp16_q_shift(q_max);
    down = ldexpf(1.0f, -shift);
    qk_scale *= ldexpf(1.0f, shift);
  }
  for (int i = tid; i < kRows * vecs_per_row; i += kThreads) {
    uint4 v = make_uint4(0, 0, 0, 0);
    if (q_chunk(i, &v)) {
      if constexpr (sizeof(C) == 1)
        v = q_chunk_to_half<T>(v, k_scale, (i % vecs_per_row) * 8, down);
    }
    warp_fragments<M, C>::store_q(q_smem + (i / vecs_per_row) * q_stride, (i % vecs_per_row) * 8,
                                  v);
  }

  // Each row's admitted keys, and their union: the keys this unit visits.
  int64_t union_lo = INT64_MAX, union_hi = INT64_MIN;
  for (int r = lane; r < valid_rows; r += 32) {
    const key_span keys = prefill_row_keys(P, rows, r);
    if (keys.lo < keys.hi) {
      union_lo = min(union_lo, keys.lo);
      union_hi = max(union_hi, keys.hi);
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    union_lo = min(union_lo, __shfl_xor_sync(0xffffffffu, union_lo, offset));
    union_hi = max(union_hi, __shfl_xor_sync(0xffffffffu, union_hi, offset));
  }
  const prefill_key_union keys_union = prefill_cut_union(union_lo, union_hi);
  if (tid < 32) {  // warp 0 writes the rows' ranges relative to key_base (none for other rows)
    for (int r = lane; r < kRows; r += 32) {
      int32_t lo = 0, hi = 0;
      if (r < valid_rows)
        prefill_relative_keys(prefill_row_keys(P, rows, r), keys_union, &lo, &hi);
      row_lo[r] = lo;
      row_hi[r] = hi;
    }
  }
  __syncthreads();

  prefill_unit_setup U;
  U.splits = prefill_sequence_splits(P, rows.span.kv_len);
  prefill_unit_tiles(P, keys_union, split, U.splits, &U.tile_begin, &U.tile_end);
  U.union_lo = keys_union.lo;
  U.union_hi = keys_union.hi;
  U.rows = {first_token, keys_union.key_base, row_lo, row_hi, first_head, valid_rows, qk_scale};
  return U;
}

// One work unit: split `split` of row block `row_block` of sequence b, for KV head kv_head.
template <typename T, typename C, int DMAX>
__device__ __forceinline__ void prefill_unit(const prefill_params &P, unsigned char *smem, int32_t b,
                                             int32_t row_block, int32_t split, int kv_head) {
  constexpr int kRows = prefill_rows(DMAX);
  constexpr int q_stride = prefill_q_row_elems(DMAX);
  mma_input_t<T, C> *q_smem = reinterpret_cast<mma_input_t<T, C> *>(smem);
  int32_t *row_lo = reinterpret_cast<int32_t *>(smem + kRows * q_stride * 2);
  int32_t *row_hi = row_lo + kRows;
  unsigned char *admitted = reinterpret_cast<unsigned char *>(row_hi + kRows);
  unsigned char *stages = admitted + kPrefillStages * kPrefillTileKeys;
  const prefill_unit_setup U = prefill_unit_prologue<T, C, DMAX, kRows, kPrefillThreads>(
      P, q_smem, q_stride, row_lo, row_hi, b, row_block, split, kv_head);

  const prefill_kv_loader<C, DMAX> loader(
      P.k_cache, P.v_cache, P.kv, P.block_table + (int64_t)b * P.kv.max_blocks_per_seq, kv_head,
      U.union_lo, U.union_hi, stages, admitted);
  // the split's tiles as the loader numbers them, from the tile of the union's first key; a tile's
  // first key relative to R.key_base is then tile * 64 - loader.lo_in_tile (key_base is the
  // union's lo, as the loader's)
  const int tile_begin = (int)(U.tile_begin - loader.first_tile);
  const int tile_end = (int)(U.tile_end - loader.first_tile);

  if (U.rows.valid_rows <= 16)
    prefill_keys_split<T, C, DMAX>(P, loader, U.rows, q_smem, tile_begin, tile_end, kv_head,
                                   split, U.splits);
  else
    prefill_rows_split<T, C, DMAX>(P, loader, U.rows, q_smem, tile_begin, tile_end, kv_head,
                                   split, U.splits);
}

// The persistent loop of the mma.sync row-block kernels: each CTA takes the next (unit, KV head)
// pair from the schedule's atomic counter, the KV heads of a unit adjacent, and calls
// unit(b, row_block, split, kv_head), a sequence's heaviest row blocks (the last ones under a
// causal mask) first, until every sequence's units are done.
template <typename Unit>
__device__ __forceinline__ void prefill_take_units(const prefill_params &P, Unit &&unit) {
  __shared__ int64_t next;
  const int64_t total = (int64_t)P.unit_begin[P.batch_size] * P.kv_num_heads;
  for (;;) {
    if (threadIdx.x == 0) next = atomicAdd(P.work_counter, 1u);
    __syncthreads();
    const int64_t taken = next;
    if (taken >= total) break;
    const prefill_work w = prefill_work_of(P, taken);
    if (w.valid)  // else malformed lengths: skip
      unit(w.b, w.row_block, w.split, w.kv_head);
    __syncthreads();  // the next unit rewrites `next` and the shared memory this one read
  }
}

template <typename T, typename C, int DMAX>
__global__ void __launch_bounds__(kPrefillThreads, DMAX <= 128 ? 2 : 1)
    prefill_kernel(const prefill_params P) {
  extern __shared__ __align__(16) unsigned char smem[];
  wait_for_previous_kernel();
  prefill_take_units(P, [&](int32_t b, int32_t row_block, int32_t split, int kv_head) {
    prefill_unit<T, C, DMAX>(P, smem, b, row_block, split, kv_head);
  });
}

// Per-instantiation entry points, defined in the prefill_*.cu translation units.
template <typename T, typename C, int DMAX>
cudaError_t prefill_set_smem(int smem_bytes);
template <typename T, typename C, int DMAX>
cudaError_t prefill_occupancy(int smem_bytes, int *ctas_per_sm);
template <typename T, typename C, int DMAX>
cudaError_t prefill_launch(const prefill_params &P, dim3 grid, int smem_bytes, cudaStream_t stream,
                           bool chained);

#define PA_PREFILL_INSTANTIATE(T, C, DMAX)                                                   \
  template <>                                                                                \
  cudaError_t prefill_set_smem<T, C, DMAX>(int smem_bytes) {                                 \
    return cudaFuncSetAttribute(prefill_kernel<T, C, DMAX>,                                  \
                                cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);    \
  }                                                                                          \
  template <>                                                                                \
  cudaError_t prefill_occupancy<T, C, DMAX>(int smem_bytes, int *ctas_per_sm) {              \
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(                                    \
        ctas_per_sm, prefill_kernel<T, C, DMAX>, kPrefillThreads, smem_bytes);               \
  }                                                                                          \
  template <>                                                                                \
  cudaError_t prefill_launch<T, C, DMAX>(const prefill_params &P, dim3 grid, int smem_bytes, \
                                         cudaStream_t stream, bool chained) {                \
    return launch_chained(prefill_kernel<T, C, DMAX>, grid, kPrefillThreads,                 \
                          (size_t)smem_bytes, stream, chained, P);                           \
  }

}  // namespace detail
}  // namespace pa
