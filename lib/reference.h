/*
 * The reference executor's internal pieces (lib/reference*.c): the host oracle of doc/semantics.md.
 * Written from the semantics page, never from a kernel.
 *
 * Untrusted device data (the caller's contract says such data gives an unspecified result; here it
 * gives a defined one and never an out-of-bounds access):
 *   - cumulative_sequence_length: token t belongs to the lowest b with cu[b] <= t < cu[b+1]; ranges
 *     are clipped to [0, token_count), so a non-monotonic or out-of-range cu just leaves tokens
 *     without a sequence. Such tokens write nothing and output zero rows (output_qk: -inf / 0 rows).
 *   - past_seqlens: used in 64-bit arithmetic. A negative position writes nothing, is not rotated and
 *     admits no key (a zero row); a huge one only reaches keys that the block table maps.
 *   - block ids outside [0, num_blocks) and keys at or beyond block_table.shape[1] * block_size are
 *     unmapped: masked, never read. Slots outside [0, num_blocks * block_size) are not written.
 *   - query_positions: any value; outside the cos/sin table the channels pass through unrotated.
 *   - Two tokens writing the same slot: the later token (in token order) wins.
 */
#ifndef PAGEDATTN_REFERENCE_H
#define PAGEDATTN_REFERENCE_H

#include <stdint.h>

#include "internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One pa_execute_reference call: the plan's problem, its host pointers and the host scratch. */
typedef struct pa__ref_call {
  const pa__problem *p;
  pa__io io;
  int32_t *sequence_of_token; /* token_count entries; -1: the token belongs to no sequence */
  int64_t *position_of_token; /* token_count entries; meaningful where sequence_of_token >= 0 */
  float *q;                   /* token_count * num_heads * head_size: Q after the write path, in T */
  float *kv_rows;             /* 2 * kv_num_heads * head_size: the write path's K and V of one token */
} pa__ref_call;

/* The write path of doc/semantics.md (unpack, QK-Norm, RoPE, round to T, quantize, slot write)
 * for every token; fills call->q. */
void pa__ref_write(pa__ref_call *call);

/* Attention from the cache into output (and output_qk). PA_ERROR_OUT_OF_MEMORY when host scratch
 * cannot be allocated. */
pa_status pa__ref_attention(const pa__ref_call *call);

/* The scale of channel c of KV head h for a quant type (1 when NONE). */
static inline float pa__ref_cache_scale(const float *scale, pa_quant_type quant, int64_t kv_head,
                                        int64_t head_size, int64_t channel) {
  if (quant == PA_QUANT_PER_CHANNEL) return scale[kv_head * head_size + channel];
  if (quant == PA_QUANT_PER_TENSOR) return scale[0];
  return 1.0f;
}

#ifdef __cplusplus
}
#endif

#endif /* PAGEDATTN_REFERENCE_H */
