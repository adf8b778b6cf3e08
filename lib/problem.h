/*
 * The validated, resolved request: every quantity planning derives from the attributes and the
 * descriptors, in one C struct shared by the host code (lib/) and the launchers (the launcher .cu
 * of each cuda/ folder, and cuda/launch_common.cuh). Kernels never see it: each launcher copies
 * what its kernels need into their own parameter struct at plan time. Filled once by
 * pa__validate() in pa_plan_create; read-only afterwards.
 */
#ifndef PAGEDATTN_PROBLEM_H
#define PAGEDATTN_PROBLEM_H

#include <stddef.h>
#include <stdint.h>

#include "pagedattn/pagedattn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pa__input_mode {
  PA__MODE_SEPARATE = 0, /* query, key, value */
  PA__MODE_PACKED,       /* query holds [Q heads | K heads | V heads] per token */
  PA__MODE_LATENT        /* absorbed MLA: query, key = latent row; V = leading v_head_size of K */
} pa__input_mode;

typedef struct pa__problem {
  /* attributes, defaults resolved */
  int32_t num_heads, kv_num_heads, group_size; /* group_size = num_heads / kv_num_heads */
  int32_t head_size;                           /* of Q and K */
  int32_t v_head_size;                         /* effective: head_size except in LATENT */
  float scale;                                 /* resolved: never 0 */
  float softcap;                               /* 0 = off */
  int32_t window;                              /* -1 = off, else >= 1 */
  int32_t is_causal;                           /* 0 or 1 */
  int32_t do_rotary, rotary_interleaved;
  int32_t rotary_dim;                          /* 2 * cos_cache.dims[1]; 0 without rotary */
  int32_t rotary_offset;
  int64_t rotary_max_positions;                /* cos_cache.dims[0]; rows beyond are never read */
  int32_t has_qk_norm;
  float qk_norm_epsilon;                       /* resolved: > 0 */
  pa_quant_type k_quant, v_quant;
  int32_t qk_output;                           /* 0, 1, 2 */
  pa__input_mode input_mode;

  /* element types */
  pa_dtype dtype;          /* T: query, key, value, output, cos/sin, head_sink, norm weights, bias */
  pa_dtype k_cache_dtype;  /* key_cache element type */
  pa_dtype v_cache_dtype;  /* value_cache element type (== k_cache_dtype; UNDEFINED in LATENT) */
  pa_dtype qk_dtype;       /* output_qk element type, UNDEFINED when absent */

  /* shapes */
  int64_t token_count;
  int32_t batch_size;
  int64_t num_blocks;
  int32_t block_size;
  int32_t max_blocks_per_seq;  /* block_table.dims[1] */
  int64_t qk_capacity;         /* output_qk.dims[2] (C), 0 when absent */
  int32_t bias_batch;          /* attention_bias dims: 1 or batch_size; 0 when absent */
  int32_t bias_heads;          /* 1 or num_heads */
  int64_t bias_q_capacity, bias_kv_capacity;

  /* presence of optional inputs */
  int32_t has_slot_mapping, has_head_sink, has_query_positions, has_bias;

  /* replay-wide bounds, clamped to the static limits (host use only: launch extents, workspace) */
  int64_t max_query_len;  /* metadata[0] clamped to token_count, else token_count */
  int64_t max_kv_len;     /* metadata[1] clamped to max_blocks_per_seq * block_size, else that */
  int64_t query_len_bound, kv_len_bound; /* metadata[0], [1] as given (0 = none): the caller's
                                          * promise, which the contract checker holds it to */
} pa__problem;

/* Element counts per token of each stream the operator reads or writes. */
static inline int64_t pa__q_row_elems(const pa__problem *p) {
  return (int64_t)p->num_heads * p->head_size;
}
static inline int64_t pa__kv_row_elems(const pa__problem *p) {
  return (int64_t)p->kv_num_heads * p->head_size;
}
static inline int64_t pa__out_row_elems(const pa__problem *p) {
  return (int64_t)p->num_heads * p->v_head_size;
}
/* Row length of the query tensor: packed mode carries K and V after the Q heads. */
static inline int64_t pa__query_row_elems(const pa__problem *p) {
  return p->input_mode == PA__MODE_PACKED
             ? (int64_t)(p->num_heads + 2 * p->kv_num_heads) * p->head_size
             : pa__q_row_elems(p);
}

/* Device pointers of one pa_execute call, typed loosely (the kernels cast by dtype). */
typedef struct pa__io {
  const void *query, *key, *value;
  void *key_cache, *value_cache;
  const int32_t *cu_seqlens, *past_seqlens, *block_table;
  const void *cos_cache, *sin_cache;
  const int32_t *slot_mapping;
  const void *head_sink, *q_norm_weight, *k_norm_weight;
  const float *k_scale, *v_scale;
  const int32_t *query_positions;
  const void *attention_bias;
  void *output;
  void *output_qk;
  /* Q as attention reads it: the staged workspace copy or the query input itself */
  const void *q_attn;
  int64_t q_attn_row_stride; /* elements between tokens in q_attn */
  void *q_staged;            /* where the write path writes Q (== q_attn) when staged, else NULL */
  void *workspace;           /* the caller's workspace (pa__workspace_at finds a region in it) */
} pa__io;

#ifdef __cplusplus
}
#endif

#endif /* PAGEDATTN_PROBLEM_H */
