/*
 * Case builder: turns a described configuration into seeded random host tensors, their descriptors
 * and attributes, ready for pa_plan_create / pa_execute_reference (or for copying to a device).
 *
 * Every tensor draws from its own random stream, derived from the seed and the tensor, so two
 * configurations that differ only in layout (block order, explicit slots, window, ...) get the very
 * same query/key/value and the very same logical cache contents:
 *   - the cached past (positions [0, past_len[b]) of every sequence) is generated per sequence and
 *     position, then stored where the block table maps it (unmapped positions are not stored);
 *   - every other cache byte is a random canary, valid for the cache type (fp8: never NaN).
 * Nothing is zero: values are uniform in [-1, 1] (norm weights in [0.5, 1.5]), rounded to T;
 * cos/sin are real rotary tables (theta 10000); scales are positive and sized for the type.
 * output and output_qk are poisoned with NaN before each run (pa_case_poison_outputs).
 *
 * Typical use:
 *   pa_case_config cfg;
 *   pa_case_config_init(&cfg);          // fp16, 4/2 heads, head_size 16, block 16, one sequence
 *   int32_t q_lens[] = {1, 3}, past[] = {40, 0};
 *   cfg.batch_size = 2; cfg.q_lens = q_lens; cfg.past_lens = past;
 *   cfg.attrs.softcap = 30.0f;
 *   pa_case c;
 *   if (pa_case_build(&c, &cfg) != PA_SUCCESS) ...;
 *   pa_status st = pa_case_run_reference(&c);   // host plan + pa_execute_reference
 *   float y = pa_case_output(&c, token, head, channel);
 *   pa_case_free(&c);
 *
 * Not thread-safe per case object; distinct cases are independent.
 *
 * Build: meson's reference_case_builder_dep (test/reference/meson.build) links it with the static
 * library (it uses the internal host conversions of lib/host_numeric.h).
 */
#ifndef PAGEDATTN_TEST_CASE_BUILDER_H
#define PAGEDATTN_TEST_CASE_BUILDER_H

#include <stddef.h>
#include <stdint.h>

#include "pagedattn/pagedattn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pa_case_block_order {
  PA_CASE_BLOCKS_IDENTITY = 0, /* sequence b owns blocks b*M .. b*M + M - 1, in order */
  PA_CASE_BLOCKS_SHUFFLED      /* a seeded random permutation of all blocks, M per sequence */
} pa_case_block_order;

typedef enum pa_case_slots {
  PA_CASE_SLOTS_NONE = 0, /* slot_mapping absent: the operator derives slots */
  PA_CASE_SLOTS_DERIVED,  /* present, equal to the derived slots (-1 where those write nothing) */
  PA_CASE_SLOTS_EXPLICIT  /* present, copied from config.slot_mapping */
} pa_case_slots;

typedef struct pa_case_config {
  uint64_t seed;
  /* Every attribute (num_heads, kv_num_heads, scale, softcap, window, rotary, quant types, layout,
   * v_head_size, qk_output, is_causal, ...). Start from pa_case_config_init, which calls
   * pa_attributes_init. With do_rotary = 1 the builder makes cos/sin tables. */
  pa_attributes attrs;
  pa_dtype dtype;       /* T: PA_DTYPE_FLOAT16 or PA_DTYPE_BFLOAT16 */
  pa_dtype cache_dtype; /* PA_DTYPE_UNDEFINED = T; INT8 / FLOAT8_E4M3FN need quant types set */
  int32_t head_size;
  int32_t packed_qkv; /* SEPARATE layout: Q, K and V packed in query */

  int32_t batch_size;
  const int32_t *q_lens;    /* batch_size new-token counts (zeros allowed) */
  const int32_t *past_lens; /* batch_size cached-token counts */

  int32_t block_size;
  int32_t blocks_per_seq; /* M = block_table.shape[1]; 0 = just enough for the longest kv_len */
  int64_t num_blocks;     /* 0 = batch_size * M + 3 spare blocks */
  pa_case_block_order block_order;
  const int32_t *block_table; /* batch_size * M entries: overrides block_order when non-NULL */

  int32_t rotary_dim;       /* with attrs.do_rotary: 0 = head_size - attrs.rotary_offset */
  int64_t rotary_positions; /* rows of cos/sin; 0 = M * block_size */

  int32_t qk_norm;   /* q_norm_weight and k_norm_weight present */
  int32_t head_sink; /* head_sink present */
  pa_case_slots slots;
  const int32_t *slot_mapping;    /* token_count entries, with PA_CASE_SLOTS_EXPLICIT */
  const int32_t *query_positions; /* token_count entries, or NULL (absent) */

  int32_t bias_batch, bias_heads;              /* 0 = no attention_bias; else 1 or B / 1 or H */
  int64_t bias_q_capacity, bias_kv_capacity;   /* 0 = the longest q_len / kv_len */

  pa_dtype qk_dtype;   /* output_qk type when attrs.qk_output != 0; UNDEFINED = float32 */
  int64_t qk_capacity; /* C; 0 = M * block_size */

  /* Caller-owned caches (already filled), used as they are: neither filled nor freed. NULL = the
   * builder allocates and fills them. */
  void *key_cache, *value_cache;
} pa_case_config;

typedef struct pa_case {
  pa_case_config config;        /* as given, with every 0 default resolved */
  pa_tensor_desc inputs_desc[PA_NUM_INPUTS];
  pa_tensor_desc outputs_desc[PA_NUM_OUTPUTS];
  void *inputs[PA_NUM_INPUTS];  /* host buffers (NULL when absent) */
  void *outputs[PA_NUM_OUTPUTS]; /* output, NULL, NULL, output_qk (or NULL) */
  size_t inputs_bytes[PA_NUM_INPUTS];
  size_t outputs_bytes[PA_NUM_OUTPUTS];
  int64_t token_count;
  int32_t blocks_per_seq;
  int64_t num_blocks;
  int32_t v_head_size; /* effective */
  int owns_caches;
} pa_case;

/* Defaults: seed 1, fp16, 4 heads / 2 KV heads, head_size 16, block_size 16, one sequence of
 * 3 new tokens after 20 cached ones, identity block table, nothing optional. */
void pa_case_config_init(pa_case_config *config);

/* Allocates and fills every tensor. PA_ERROR_INVALID_ARGUMENT for a configuration the builder cannot
 * express (missing q_lens / past_lens / slot_mapping, fewer than batch_size * blocks_per_seq blocks
 * without an explicit block_table), PA_ERROR_OUT_OF_MEMORY. On failure nothing stays allocated. */
pa_status pa_case_build(pa_case *c, const pa_case_config *config);
void pa_case_free(pa_case *c);

/* pa_plan_create for the case on PA_DEVICE_HOST, backend AUTO (= REFERENCE). */
pa_status pa_case_plan(const pa_case *c, pa_plan **plan);
/* Fills output and output_qk with NaN. */
void pa_case_poison_outputs(pa_case *c);
/* Plans, poisons the outputs and runs pa_execute_reference; updates the case's caches. */
pa_status pa_case_run_reference(pa_case *c);

/* Element readers as float: output[t, h * v_head_size + channel]; output_qk[h, t, k]. */
float pa_case_output(const pa_case *c, int64_t token, int32_t head, int32_t channel);
float pa_case_output_qk(const pa_case *c, int32_t head, int64_t token, int64_t key);
/* Element i of input `input` as float (its own dtype). */
float pa_case_input(const pa_case *c, int input, int64_t i);

/* The slot the operator derives for token t (-1 when it writes nothing), from the case's tensors. */
int64_t pa_case_derived_slot(const pa_case *c, int64_t token);

#ifdef __cplusplus
}
#endif

#endif /* PAGEDATTN_TEST_CASE_BUILDER_H */
