/*
 * Valid requests for the unit tests: case_config describes one (mode, types, quantization, optional
 * inputs), case_build turns it into attributes and descriptors, and each negative test then mutates
 * exactly one thing and asserts the status and the message.
 *
 * cases.c needs only pa__validate and the attribute/status functions (the fp8-less build of
 * validate.c links it alone); cases_plan.c adds what goes through pa_plan_create.
 */
#ifndef PAGEDATTN_TEST_UNIT_CASES_H
#define PAGEDATTN_TEST_UNIT_CASES_H

/* cmocka needs these before its header */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "internal.h"

typedef enum case_mode { CASE_SEPARATE, CASE_PACKED, CASE_LATENT } case_mode;

/* Where a plan is made: on the host (REFERENCE), for a described device, or for device 0. */
typedef enum case_device { CASE_HOST, CASE_H200, CASE_A100, CASE_DEVICE_0 } case_device;

typedef struct case_config {
  case_mode mode;
  pa_dtype dtype;       /* T */
  pa_dtype cache_dtype; /* T_CACHE; PA_DTYPE_UNDEFINED = T */
  pa_quant_type quant;  /* of a quantized cache: k_quant_type, and v_quant_type outside LATENT */
  int32_t num_heads, kv_num_heads, head_size;
  int32_t v_head_size; /* attribute (LATENT); 0 = head_size */
  float scale;         /* attribute; 0 = default */
  int64_t token_count;
  int32_t batch_size;
  int64_t num_blocks;
  int32_t block_size, blocks_per_seq;
  int32_t rotary_dim; /* 0 = no rotary; else do_rotary 1 and cos/sin (rotary_positions, dim/2) */
  int32_t rotary_offset;
  int64_t rotary_positions;
  int slot_mapping, head_sink, qk_norm, query_positions, cache_outputs;
  int bias;     /* 0 absent; else (batch_size, num_heads, max tokens, KV capacity) */
  int metadata; /* attention_metadata descriptor present, values metadata_values */
  int32_t metadata_values[2];
  int32_t qk_output; /* 1 or 2 adds output_qk of qk_dtype with capacity KV capacity */
  pa_dtype qk_dtype;
} case_config;

/* SEPARATE, float16, 8/2 heads, head_size 64, 5 tokens over 3 sequences, 32 blocks of 16,
 * 4 blocks per sequence; no optional input. */
case_config case_config_default(void);
/* Absorbed MLA (DeepSeek-like, smaller): LATENT, bfloat16, 16/1 heads, head_size 576,
 * v_head_size 512, explicit scale, RoPE of 64 channels at offset 512. */
case_config case_config_latent(void);
/* A decode step: token_count == batch_size (the brief's benchmark shape: 32/8 heads, d128, block
 * 16, batch 64, 4k context, float16). */
case_config case_config_decode(void);

typedef struct pa_case {
  pa_attributes attrs;
  pa_tensor_desc in[PA_NUM_INPUTS];
  pa_tensor_desc out[PA_NUM_OUTPUTS];
  int32_t metadata[2];
  int pass_metadata; /* pass metadata[] as pa_plan_options.attention_metadata */
  case_device device;
  pa_backend backend; /* forced backend; AUTO by default */
  uint64_t max_output_qk_bytes;
  int32_t contract_check; /* pa_plan_options.contract_check */
} pa_case;

void case_build(pa_case *c, const case_config *cfg);
/* case_build of case_config_default(), for tests that mutate one thing of the default case. */
pa_case case_default(void);

/* pa__validate on the case (host plans' threshold rules: max_output_qk_bytes 0 = default). */
pa_status case_validate(const pa_case *c, pa__problem *p);

/* Asserts status == want and that the thread's last error message contains every needle
 * (NULL-terminated list); prints the message on mismatch. */
void case_assert_status(pa_status status, pa_status want, const char *const *needles);
#define CASE_ASSERT_STATUS(status, want, ...)                                                      \
  case_assert_status((status), (want), (const char *const[]){__VA_ARGS__, NULL})

/* Runs the group, or with argv[1] only the test of that name (meson registers each test by name):
 * an unknown name fails rather than running nothing. */
int case_run_tests(const char *group, const struct CMUnitTest *tests, size_t count, int argc,
                   char **argv);
#define CASE_RUN_TESTS(group, tests, argc, argv)                                                   \
  case_run_tests((group), (tests), sizeof(tests) / sizeof((tests)[0]), (argc), (argv))

/* ---- cases_plan.c: through the public API ---------------------------------------------------- */

/* pa_plan_create with the case's options (device, described caps, metadata, backend). */
pa_status case_plan(const pa_case *c, pa_plan **plan);
/* pa_plan_create must fail with want and a message naming every needle. */
#define CASE_EXPECT_PLAN_FAILURE(c, want, ...)                                                     \
  do {                                                                                             \
    pa_plan *case_plan_ = NULL;                                                                    \
    CASE_ASSERT_STATUS(case_plan((c), &case_plan_), (want), __VA_ARGS__);                          \
    assert_null(case_plan_);                                                                       \
  } while (0)
/* pa_plan_create must succeed; returns the plan. */
pa_plan *case_plan_ok(const pa_case *c);

/* The described devices of the dispatch tests. */
pa_device_caps case_caps_h200(void);
pa_device_caps case_caps_a100(void);

#endif /* PAGEDATTN_TEST_UNIT_CASES_H */
