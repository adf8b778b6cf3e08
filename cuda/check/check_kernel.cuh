// The device contract checker's kernel (the launcher, check.cu, plans it; doc/api.md, "Checking
// device data", lists the rules). One launch per checked pa_execute scans the call's device
// metadata and records the first violation: each thread keeps the lowest violation key of the
// elements it visits, each CTA the lowest of its threads (its partial), and the last CTA to finish
// folds the partials into the status at the start of the workspace. A kernel header: sees only
// cuda/common/.
#pragma once

#include <stdint.h>

#include <cuda_runtime.h>

#include "../common/attention_rules.cuh"
#include "../common/chained_launch.cuh"

namespace pa {
namespace detail {

constexpr int kCheckThreads = 256;
// "pa check": a status whose magic differs (a fresh or reused workspace) counts as clear.
constexpr uint64_t kCheckMagic = 0x6b63656863206170ull;
constexpr uint64_t kNoViolation = ~0ull;

// What a violation broke. Its message is check.cu's (violation_message).
enum check_rule : int32_t {
  kCheckClear = 0,
  kCuFirstNotZero,        // cumulative_sequence_length[0] != 0
  kCuOutOfRange,          // cumulative_sequence_length[b] outside [0, token_count]
  kCuDecreasing,          // cumulative_sequence_length[b] < [b - 1]
  kPastNegative,          // past_seqlens[b] < 0
  kKvLenOverflow,         // past_seqlens[b] + the sequence's new tokens > INT32_MAX
  kBlockIdOutOfRange,     // a block_table entry the sequence reads: not -1, outside [0, num_blocks)
  kPositionBeyondRotary,  // a token's position at or beyond cos_cache's rows
  kSlotOutOfRange,        // slot_mapping[t]: not -1, outside [0, num_blocks * block_size)
  kSlotWrittenTwice,      // two tokens of the call write one slot
  kQueryLenAboveBound,    // a sequence's new tokens > attention_metadata[0]
  kKvLenAboveBound,       // a sequence's kv length > attention_metadata[1]
  kPositionNegative,      // query_positions[t] < 0
  kBiasQueryCapacity,     // a sequence's new tokens > attention_bias.shape[2]
  kBiasKeyCapacity,       // a sequence's kv length > attention_bias.shape[3]
  kQkCapacity,            // a sequence's kv length > output_qk.shape[2]
};

// Which violation comes first: the key's high byte orders the groups (roughly the inputs'
// order), the rest is the element's index in its tensor (a table entry's flat index, a token, a
// sequence). Every element is checked by one thread, which evaluates its rules in a fixed order,
// so the lowest key, and the record that goes with it, is the same whatever the schedule.
enum check_group : uint64_t {
  kGroupCumulative = 0,  // cumulative_sequence_length[b]
  kGroupPast,            // past_seqlens[b]
  kGroupBlockTable,      // block_table[b][i]
  kGroupRotary,          // the position of token t against cos_cache / sin_cache
  kGroupSlot,            // slot_mapping[t]
  kGroupSlotTwice,       // the slot token t writes (explicit or derived)
  kGroupBounds,          // attention_metadata against sequence b
  kGroupPositions,       // query_positions[t]
  kGroupBias,            // attention_bias against sequence b
  kGroupQk,              // output_qk against sequence b
};

// One violation; also a CTA's partial (slot_twice: a slot written twice was seen).
struct check_record {
  uint64_t key;  // kNoViolation when none
  int32_t rule;  // check_rule
  int32_t slot_twice;
  int64_t index, index2;  // b, t or (b, i); index2 -1 when unused
  int64_t value, limit;   // the offending value and what bounds it
};

// The status at offset 0 of the workspace: kept across calls until pa_plan_check_status clears it.
struct check_status {
  uint64_t magic;
  uint64_t checked_calls, violating_calls;
  check_record first;  // the first violation (rule kCheckClear while none)
};

// Per-call scratch, cleared by a memset node before each launch: the CTAs' finish counter, then
// the two slot bitmaps (written once, written again), then the partials.
struct check_params {
  const int32_t *cu_seqlens, *past_seqlens, *block_table, *slot_mapping, *query_positions;
  check_status *status;
  unsigned *finished_ctas;
  uint32_t *slots_written, *slots_twice;  // a bit per cache slot
  check_record *partials;                 // one per CTA
  int64_t token_count, num_blocks, cache_slots;
  int64_t table_entries;  // batch_size * max_blocks_per_seq
  int64_t elements;       // batch_size + 1 sequence checks, table entries, tokens
  int32_t batch_size, max_blocks_per_seq, block_size, window;
  int64_t rotary_positions;                        // cos_cache rows; 0 without rotary
  int64_t query_len_bound, kv_len_bound;           // attention_metadata; 0 = none
  int64_t bias_query_capacity, bias_key_capacity;  // attention_bias dims 2, 3; 0 = absent
  int64_t qk_capacity;                             // output_qk dim 2; 0 = absent
};

__device__ __forceinline__ uint64_t check_key(check_group group, int64_t index) {
  return ((uint64_t)group << 56) | ((uint64_t)index & ((1ull << 56) - 1));
}

// Keeps the violation when it comes before the one held.
__device__ __forceinline__ void note(check_record &best, check_group group, int64_t key_index,
                                     check_rule rule, int64_t index, int64_t index2,
                                     int64_t value, int64_t limit) {
  const uint64_t key = check_key(group, key_index);
  if (key >= best.key) return;
  best.key = key;
  best.rule = rule;
  best.index = index;
  best.index2 = index2;
  best.value = value;
  best.limit = limit;
}

// A sequence's lengths as the rules need them; usable when neither is negative (the rules of
// groups cumulative and past report the rest).
__device__ __forceinline__ bool usable_lengths(const sequence_span &s) {
  return s.q_len >= 0 && s.past >= 0;
}

// The slot token t of sequence span s (position pos) writes in this call, or -1 when it writes
// none (doc/semantics.md, the write path: -1 or out-of-range slots, unmapped blocks, positions
// outside the table). The derived slot's block id is returned through table_entry (-1 if none).
__device__ __forceinline__ int64_t token_slot(const check_params &p, int32_t b, int64_t pos,
                                              int64_t t, int64_t &table_entry) {
  table_entry = -1;
  if (p.slot_mapping) {
    const int64_t slot = __ldg(p.slot_mapping + t);
    return slot >= 0 && slot < p.cache_slots ? slot : -1;
  }
  if (pos < 0 || pos / p.block_size >= p.max_blocks_per_seq) return -1;
  table_entry = (int64_t)b * p.max_blocks_per_seq + pos / p.block_size;
  const int64_t id = __ldg(p.block_table + table_entry);
  return id >= 0 && id < p.num_blocks ? id * p.block_size + pos % p.block_size : -1;
}

// Rules of sequence element b (b <= batch_size: cumulative_sequence_length has batch_size + 1).
__device__ void check_sequence(const check_params &p, int32_t b, check_record &best) {
  const int64_t cu = __ldg(p.cu_seqlens + b);
  if (b == 0 && cu != 0)
    note(best, kGroupCumulative, b, kCuFirstNotZero, b, -1, cu, 0);
  else if (cu < 0 || cu > p.token_count)
    note(best, kGroupCumulative, b, kCuOutOfRange, b, -1, cu, p.token_count);
  else if (b > 0 && cu < __ldg(p.cu_seqlens + b - 1))
    note(best, kGroupCumulative, b, kCuDecreasing, b, -1, cu, __ldg(p.cu_seqlens + b - 1));
  if (b == p.batch_size) return;
  const sequence_span s = load_sequence_span(p.cu_seqlens, p.past_seqlens, b);
  if (s.past < 0)
    note(best, kGroupPast, b, kPastNegative, b, -1, s.past, 0);
  else if (s.kv_len > INT32_MAX)
    note(best, kGroupPast, b, kKvLenOverflow, b, -1, s.past, s.q_len);
  if (!usable_lengths(s)) return;
  if (p.query_len_bound && s.q_len > p.query_len_bound)
    note(best, kGroupBounds, b, kQueryLenAboveBound, b, -1, s.q_len, p.query_len_bound);
  else if (p.kv_len_bound && s.kv_len > p.kv_len_bound)
    note(best, kGroupBounds, b, kKvLenAboveBound, b, -1, s.kv_len, p.kv_len_bound);
  if (p.bias_query_capacity && s.q_len > p.bias_query_capacity)
    note(best, kGroupBias, b, kBiasQueryCapacity, b, -1, s.q_len, p.bias_query_capacity);
  else if (p.bias_key_capacity && s.kv_len > p.bias_key_capacity)
    note(best, kGroupBias, b, kBiasKeyCapacity, b, -1, s.kv_len, p.bias_key_capacity);
  if (p.qk_capacity && s.kv_len > p.qk_capacity)
    note(best, kGroupQk, b, kQkCapacity, b, -1, s.kv_len, p.qk_capacity);
}

// block_table[b][i], when sequence b reads it: a key of [lowest, kv_len) lies in it, lowest being
// 0, or with a window and derived positions the first token's lowest admitted key.
__device__ void check_table_entry(const check_params &p, int64_t entry, check_record &best) {
  const int32_t b = (int32_t)(entry / p.max_blocks_per_seq);
  const int64_t i = entry - (int64_t)b * p.max_blocks_per_seq;
  const sequence_span s = load_sequence_span(p.cu_seqlens, p.past_seqlens, b);
  if (!usable_lengths(s)) return;
  const int64_t lowest =
      p.window > 0 && !p.query_positions ? max((int64_t)0, s.past - p.window + 1) : 0;
  if (i * p.block_size >= s.kv_len || (i + 1) * p.block_size <= lowest) return;
  const int64_t id = __ldg(p.block_table + entry);
  if (id != -1 && (id < 0 || id >= p.num_blocks))
    note(best, kGroupBlockTable, entry, kBlockIdOutOfRange, b, i, id, p.num_blocks);
}

// Token t: its position (query_positions, the rotary tables) and the slot it writes (range, and
// marked in the bitmaps to find slots written twice). Tokens of no sequence are not checked:
// nothing of theirs is read or written.
__device__ void check_token(const check_params &p, int64_t t, check_record &best,
                            bool &slot_twice) {
  const int32_t b = token_sequence(p.cu_seqlens, p.batch_size, t);
  if (b < 0) return;
  const sequence_span s = load_sequence_span(p.cu_seqlens, p.past_seqlens, b);
  const int64_t pos = token_position(p.query_positions, s, t);
  if (p.query_positions && pos < 0) note(best, kGroupPositions, t, kPositionNegative, t, -1, pos, 0);
  if (p.rotary_positions && pos >= p.rotary_positions)
    note(best, kGroupRotary, t, kPositionBeyondRotary, t, p.query_positions ? -1 : b, pos,
         p.rotary_positions);
  if (p.slot_mapping) {
    const int64_t slot = __ldg(p.slot_mapping + t);
    if (slot != -1 && (slot < 0 || slot >= p.cache_slots))
      note(best, kGroupSlot, t, kSlotOutOfRange, t, -1, slot, p.cache_slots);
  }
  int64_t table_entry;
  const int64_t slot = token_slot(p, b, pos, t, table_entry);
  if (table_entry >= 0) {  // the write reads this entry even where attention does not
    const int64_t id = __ldg(p.block_table + table_entry);
    if (id != -1 && (id < 0 || id >= p.num_blocks))
      note(best, kGroupBlockTable, table_entry, kBlockIdOutOfRange, b,
           table_entry - (int64_t)b * p.max_blocks_per_seq, id, p.num_blocks);
  }
  if (slot < 0) return;
  const uint32_t bit = 1u << (slot & 31);
  if (atomicOr(p.slots_written + (slot >> 5), bit) & bit) {
    atomicOr(p.slots_twice + (slot >> 5), bit);
    slot_twice = true;
  }
}

// The lowest key of the block into `out`, every other field from its holder: one thread writes it
// (the lowest-numbered holder; several threads may hold equal records of one table entry).
__device__ void block_lowest(const check_record &mine, check_record &out) {
  __shared__ unsigned long long lowest;
  __shared__ unsigned writer;
  if (threadIdx.x == 0) {
    lowest = kNoViolation;
    writer = blockDim.x;
  }
  __syncthreads();
  atomicMin(&lowest, (unsigned long long)mine.key);
  __syncthreads();
  if (mine.key == lowest && mine.key != kNoViolation) atomicMin(&writer, threadIdx.x);
  __syncthreads();
  if (threadIdx.x == writer) out = mine;
  __syncthreads();
}

// The slot token t writes in this call, or -1 (a token of no sequence writes nothing).
__device__ int64_t token_write_slot(const check_params &p, int64_t t) {
  const int32_t b = token_sequence(p.cu_seqlens, p.batch_size, t);
  if (b < 0) return -1;
  const sequence_span s = load_sequence_span(p.cu_seqlens, p.past_seqlens, b);
  int64_t table_entry;
  return token_slot(p, b, token_position(p.query_positions, s, t), t, table_entry);
}

// The lowest token t >= start for which hit(t, its slot) holds, or -1; called by the whole CTA.
template <typename Hit>
__device__ int64_t lowest_token(const check_params &p, int64_t start, Hit hit) {
  __shared__ unsigned long long lowest;
  if (threadIdx.x == 0) lowest = kNoViolation;
  __syncthreads();
  for (int64_t t0 = start; t0 < p.token_count; t0 += blockDim.x) {
    const int64_t t = t0 + threadIdx.x;
    const bool found = t < p.token_count && hit(t, token_write_slot(p, t));
    if (found) atomicMin(&lowest, (unsigned long long)t);
    if (__syncthreads_or(found)) break;
  }
  const unsigned long long result = lowest;
  __syncthreads();
  return result == kNoViolation ? -1 : (int64_t)result;
}

// The lowest token whose slot another token of the call writes too, and the next such token
// (the last CTA, when the bitmaps saw a slot written twice and no lower group has a violation).
__device__ check_record find_slot_written_twice(const check_params &p) {
  const int64_t first = lowest_token(p, 0, [&](int64_t, int64_t slot) {
    return slot >= 0 && ((__ldcg(p.slots_twice + (slot >> 5)) >> (slot & 31)) & 1u);
  });
  const int64_t slot = first >= 0 ? token_write_slot(p, first) : -1;
  const int64_t second =
      first >= 0 ? lowest_token(p, first + 1, [&](int64_t, int64_t s) { return s == slot; }) : -1;
  check_record r;
  r.key = first >= 0 ? check_key(kGroupSlotTwice, first) : kNoViolation;
  r.rule = kSlotWrittenTwice;
  r.slot_twice = 1;
  r.index = first;
  r.index2 = second;
  r.value = slot;
  r.limit = p.slot_mapping ? 1 : 0;  // 1: slot_mapping's, 0: derived from block_table
  return r;
}

// The last CTA: folds the partials, looks for a slot written twice when that would come first,
// and updates the status (thread 0; one launch at a time per stream, so no atomics are needed).
__device__ void fold_into_status(const check_params &p, int partial_count) {
  check_record mine;
  mine.key = kNoViolation;
  bool slot_twice = false;
  for (int i = threadIdx.x; i < partial_count; i += blockDim.x) {
    const check_record *r = p.partials + i;
    slot_twice |= __ldcg((const int *)&r->slot_twice) != 0;
    const uint64_t key = __ldcg((const unsigned long long *)&r->key);
    if (key < mine.key) {
      mine.key = key;
      mine.rule = __ldcg((const int *)&r->rule);
      mine.index = __ldcg((const long long *)&r->index);
      mine.index2 = __ldcg((const long long *)&r->index2);
      mine.value = __ldcg((const long long *)&r->value);
      mine.limit = __ldcg((const long long *)&r->limit);
    }
  }
  __shared__ check_record first;
  if (threadIdx.x == 0) first.key = kNoViolation;
  __syncthreads();
  block_lowest(mine, first);
  const bool any_twice = __syncthreads_or(slot_twice);
  if (any_twice && first.key > check_key(kGroupSlotTwice, 0)) {
    const check_record twice = find_slot_written_twice(p);
    if (threadIdx.x == 0 && twice.key != kNoViolation) first = twice;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  check_status *st = p.status;
  if (st->magic != kCheckMagic) {
    st->checked_calls = st->violating_calls = 0;
    st->first.key = kNoViolation;
    st->first.rule = kCheckClear;
    st->magic = kCheckMagic;
  }
  st->checked_calls++;
  if (first.key == kNoViolation) return;
  st->violating_calls++;
  if (st->first.rule == kCheckClear) st->first = first;
}

__global__ void __launch_bounds__(kCheckThreads) check_kernel(const check_params p) {
  wait_for_previous_kernel();
  check_record best;
  best.key = kNoViolation;
  best.rule = kCheckClear;
  best.slot_twice = 0;
  bool slot_twice = false;
  const int64_t sequences = (int64_t)p.batch_size + 1;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < p.elements;
       e += (int64_t)gridDim.x * blockDim.x) {
    if (e < sequences)
      check_sequence(p, (int32_t)e, best);
    else if (e - sequences < p.table_entries)
      check_table_entry(p, e - sequences, best);
    else
      check_token(p, e - sequences - p.table_entries, best, slot_twice);
  }
  __shared__ check_record partial;
  __shared__ bool last;
  if (threadIdx.x == 0) partial.key = kNoViolation;
  __syncthreads();
  block_lowest(best, partial);
  const bool any_twice = __syncthreads_or(slot_twice);
  if (threadIdx.x == 0) {
    partial.slot_twice = any_twice;
    p.partials[blockIdx.x] = partial;
    __threadfence();
    last = atomicAdd(p.finished_ctas, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  fold_into_status(p, gridDim.x);
}

}  // namespace detail
}  // namespace pa
