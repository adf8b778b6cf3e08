/*
 * Every request rule (doc/semantics.md, doc/api.md), one or more tests per rule, named after its
 * id. Each negative test starts from a request that is checked to be valid, changes one thing, and
 * asserts the status and the words of the message that name the tensor or attribute. Rules checked
 * outside pa__validate live in test_plan.c (V43, V44, V46, V49), test_execute.c (V32, V45, V47) and
 * test_no_fp8.c (V24 in a build without fp8). The resolved problem (defaults, bounds) is checked
 * at the end.
 */
#include <math.h>
#include <string.h>

#include "cases.h"

/* Builds cfg and asserts that it plans (on the host) before the test breaks it. */
static pa_case valid(case_config cfg) {
  pa_case c;
  case_build(&c, &cfg);
  pa_plan_destroy(case_plan_ok(&c));
  return c;
}

static pa_case valid_default(void) { return valid(case_config_default()); }

static pa_case valid_quantized(pa_dtype cache_dtype, pa_quant_type quant) {
  case_config cfg = case_config_default();
  cfg.cache_dtype = cache_dtype;
  cfg.quant = quant;
  return valid(cfg);
}

#define EXPECT_INVALID(c, ...) CASE_EXPECT_PLAN_FAILURE((c), PA_ERROR_INVALID_ARGUMENT, __VA_ARGS__)

/* ---- V01 heads ------------------------------------------------------------------------------- */

static void V01_num_heads_positive(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.attrs.num_heads = 0;
  EXPECT_INVALID(&c, "num_heads", "> 0", "got 0");
}

static void V01_kv_num_heads_positive(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.attrs.kv_num_heads = -2;
  EXPECT_INVALID(&c, "kv_num_heads", "> 0", "got -2");
}

static void V01_kv_num_heads_divides_num_heads(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.attrs.kv_num_heads = 3;
  EXPECT_INVALID(&c, "kv_num_heads", "divide num_heads (8)", "got 3");
}

/* ---- V02 query ------------------------------------------------------------------------------- */

static void V02_query_required(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_QUERY].dtype = PA_DTYPE_UNDEFINED;
  EXPECT_INVALID(&c, "query", "required");
}

static void V02_query_rank_two(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_QUERY].rank = 3;
  EXPECT_INVALID(&c, "query: rank must be 2, got 3");
}

static void V02_query_dtype_float16_or_bfloat16(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_QUERY].dtype = PA_DTYPE_FLOAT32;
  EXPECT_INVALID(&c, "query", "float16 or bfloat16", "got float32");
}

static void V02_bfloat16_accepted(void **state) {
  (void)state;
  case_config cfg = case_config_default();
  cfg.dtype = PA_DTYPE_BFLOAT16;
  valid(cfg);
}

/* ---- V03 head_size --------------------------------------------------------------------------- */

static void V03_query_width_multiple_of_num_heads(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_QUERY].dims[1] += 1;
  EXPECT_INVALID(&c, "query", "multiple of num_heads (8)", "got 513");
}

static void V03_head_size_multiple_of_8(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_QUERY].dims[1] = 8 * 60;
  EXPECT_INVALID(&c, "head_size", "multiple of 8", "got 60");
}

static void V03_head_size_at_most_256_in_separate(void **state) {
  (void)state;
  case_config cfg = case_config_default();
  cfg.head_size = 256;
  pa_case c = valid(cfg);
  cfg.head_size = 264;
  case_build(&c, &cfg);
  EXPECT_INVALID(&c, "head_size", "up to 256", "got 264");
}

static void V03_head_size_at_most_576_in_latent(void **state) {
  (void)state;
  case_config cfg = case_config_latent();
  pa_case c = valid(cfg); /* 576 itself is accepted */
  cfg.head_size = 584;
  case_build(&c, &cfg);
  EXPECT_INVALID(&c, "head_size", "up to 576", "LATENT", "got 584");
}

static void V03_head_sizes_accepted(void **state) {
  (void)state;
  const int32_t sizes[] = {8, 64, 80, 96, 128, 256};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    case_config cfg = case_config_default();
    cfg.head_size = sizes[i];
    valid(cfg);
  }
}

/* ---- V04 key / value ------------------------------------------------------------------------- */

static void V04_key_without_value(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_VALUE].dtype = PA_DTYPE_UNDEFINED;
  EXPECT_INVALID(&c, "value", "both present or both absent");
}

static void V04_value_without_key(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_KEY].dtype = PA_DTYPE_UNDEFINED;
  EXPECT_INVALID(&c, "key", "both present or both absent");
}

static void V04_key_rank_two(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_KEY].rank = 1;
  EXPECT_INVALID(&c, "key: rank must be 2, got 1");
}

static void V04_key_token_count(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_KEY].dims[0] = 6;
  EXPECT_INVALID(&c, "key", "token_count (5)", "got 6");
}

static void V04_value_width(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_VALUE].dims[1] = 64;
  EXPECT_INVALID(&c, "value", "kv_num_heads * head_size (128)", "got 64");
}

static void V04_value_dtype_is_query_type(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_VALUE].dtype = PA_DTYPE_BFLOAT16;
  EXPECT_INVALID(&c, "value", "float16", "got bfloat16");
}

/* ---- V05 packed QKV -------------------------------------------------------------------------- */

static void V05_packed_width_multiple_of_all_heads(void **state) {
  (void)state;
  case_config cfg = case_config_default();
  cfg.mode = CASE_PACKED;
  pa_case c = valid(cfg);
  c.in[PA_IN_QUERY].dims[1] += 8;
  EXPECT_INVALID(&c, "query", "num_heads + 2 * kv_num_heads (12)");
}

/* ---- V06 input presence pattern -------------------------------------------------------------- */

static void V06_separate_requires_value_cache(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_VALUE_CACHE].dtype = PA_DTYPE_UNDEFINED;
  EXPECT_INVALID(&c, "value_cache", "kv_cache_layout", "SEPARATE");
}

static void V06_packed_requires_value_cache(void **state) {
  (void)state;
  case_config cfg = case_config_default();
  cfg.mode = CASE_PACKED;
  pa_case c = valid(cfg);
  c.in[PA_IN_VALUE_CACHE].dtype = PA_DTYPE_UNDEFINED;
  EXPECT_INVALID(&c, "value_cache", "kv_cache_layout", "SEPARATE");
}

static void V06_latent_rejects_value_cache(void **state) {
  (void)state;
  pa_case c = valid(case_config_latent());
  c.in[PA_IN_VALUE_CACHE] = c.in[PA_IN_KEY_CACHE];
  EXPECT_INVALID(&c, "value_cache", "kv_cache_layout", "LATENT");
}

static void V06_latent_key_absent_is_not_packed(void **state) {
  (void)state;
  case_config cfg = case_config_latent();
  pa_case c = valid(cfg);
  c.in[PA_IN_KEY].dtype = PA_DTYPE_UNDEFINED;
  EXPECT_INVALID(&c, "key", "kv_cache_layout is LATENT");
}

/* ---- V07 key_cache --------------------------------------------------------------------------- */

static void V07_key_cache_required(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_KEY_CACHE].dtype = PA_DTYPE_UNDEFINED;
  EXPECT_INVALID(&c, "key_cache", "required");
}

static void V07_key_cache_rank_four(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_KEY_CACHE].rank = 3;
  EXPECT_INVALID(&c, "key_cache: rank must be 4, got 3");
}

static void V07_key_cache_heads(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_KEY_CACHE].dims[2] = 8;
  c.in[PA_IN_VALUE_CACHE].dims[2] = 8;
  EXPECT_INVALID(&c, "key_cache", "dim2", "kv_num_heads (2)", "got 8");
}

static void V07_key_cache_head_size(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_KEY_CACHE].dims[3] = 128;
  c.in[PA_IN_VALUE_CACHE].dims[3] = 128;
  EXPECT_INVALID(&c, "key_cache", "dim3", "head_size (64)", "got 128");
}

static void V07_key_cache_dtype(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_KEY_CACHE].dtype = PA_DTYPE_UINT8;
  c.in[PA_IN_VALUE_CACHE].dtype = PA_DTYPE_UINT8;
  EXPECT_INVALID(&c, "key_cache", "int8 or float8e4m3fn", "got uint8");
}

/* ---- V08 value_cache ------------------------------------------------------------------------- */

static void V08_value_cache_shape_of_key_cache(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_VALUE_CACHE].dims[0] = 31;
  EXPECT_INVALID(&c, "value_cache", "key_cache's dtype and shape", "float16 (32, 16, 2, 64)",
                 "got float16 (31, 16, 2, 64)");
}

static void V08_value_cache_dtype_of_key_cache(void **state) {
  (void)state;
  pa_case c = valid_quantized(PA_DTYPE_INT8, PA_QUANT_PER_TENSOR);
  c.in[PA_IN_VALUE_CACHE].dtype = PA_DTYPE_FLOAT8_E4M3FN;
  EXPECT_INVALID(&c, "value_cache", "int8", "got float8e4m3fn");
}

/* ---- V09..V11 sequence metadata -------------------------------------------------------------- */

static void V09_cumulative_sequence_length_rank_one(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH].rank = 2;
  EXPECT_INVALID(&c, "cumulative_sequence_length: rank must be 1, got 2");
}

static void V09_cumulative_sequence_length_int32(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH].dtype = PA_DTYPE_FLOAT32;
  EXPECT_INVALID(&c, "cumulative_sequence_length", "int32", "got float32");
}

static void V09_cumulative_sequence_length_at_least_two(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH].dims[0] = 1;
  EXPECT_INVALID(&c, "cumulative_sequence_length", "batch_size + 1", "got 1");
}

static void V09_cumulative_sequence_length_required(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH].dtype = PA_DTYPE_UNDEFINED;
  EXPECT_INVALID(&c, "cumulative_sequence_length", "required");
}

static void V10_past_seqlens_batch_size(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_PAST_SEQLENS].dims[0] = 4;
  EXPECT_INVALID(&c, "past_seqlens", "batch_size (3)", "got 4");
}

static void V10_past_seqlens_int32_rank_one(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_PAST_SEQLENS].dtype = PA_DTYPE_INT8;
  EXPECT_INVALID(&c, "past_seqlens", "int32", "got int8");
  c = valid_default();
  c.in[PA_IN_PAST_SEQLENS].rank = 0;
  EXPECT_INVALID(&c, "past_seqlens: rank must be 1, got 0");
  c = valid_default();
  c.in[PA_IN_PAST_SEQLENS].dtype = PA_DTYPE_UNDEFINED;
  EXPECT_INVALID(&c, "past_seqlens", "required");
}

static void V11_block_table_rank_two(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_BLOCK_TABLE].rank = 3;
  EXPECT_INVALID(&c, "block_table: rank must be 2, got 3");
}

static void V11_block_table_batch_size(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_BLOCK_TABLE].dims[0] = 2;
  EXPECT_INVALID(&c, "block_table", "batch_size (3)", "got 2");
}

static void V11_block_table_at_least_one_block(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_BLOCK_TABLE].dims[1] = 0;
  EXPECT_INVALID(&c, "block_table", "dim1", "got 0");
}

static void V11_block_table_int32(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_BLOCK_TABLE].dtype = PA_DTYPE_FLOAT16;
  EXPECT_INVALID(&c, "block_table", "int32", "got float16");
  c.in[PA_IN_BLOCK_TABLE].dtype = PA_DTYPE_UNDEFINED;
  EXPECT_INVALID(&c, "block_table", "required");
}

/* ---- V12 block_size -------------------------------------------------------------------------- */

static void set_block_size(pa_case *c, int64_t block_size) {
  c->in[PA_IN_KEY_CACHE].dims[1] = block_size;
  c->in[PA_IN_VALUE_CACHE].dims[1] = block_size;
}

static void V12_block_size_power_of_two(void **state) {
  (void)state;
  pa_case c = valid_default();
  set_block_size(&c, 48);
  EXPECT_INVALID(&c, "block_size", "power of two >= 16", "got 48");
}

static void V12_block_size_at_least_16(void **state) {
  (void)state;
  pa_case c = valid_default();
  set_block_size(&c, 8);
  EXPECT_INVALID(&c, "block_size", "got 8");
}

static void V12_block_sizes_16_to_1024_accepted(void **state) {
  (void)state;
  for (int32_t block_size = 16; block_size <= 1024; block_size *= 2) {
    case_config cfg = case_config_default();
    cfg.block_size = block_size;
    valid(cfg);
  }
}

/* ---- V13..V15 rotary ------------------------------------------------------------------------- */

static pa_case valid_rotary(void) {
  case_config cfg = case_config_default();
  cfg.rotary_dim = 32;
  return valid(cfg);
}

static void V13_cos_cache_without_sin_cache(void **state) {
  (void)state;
  pa_case c = valid_rotary();
  c.in[PA_IN_SIN_CACHE].dtype = PA_DTYPE_UNDEFINED;
  EXPECT_INVALID(&c, "sin_cache", "both present or both absent");
}

static void V13_do_rotary_requires_caches(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.attrs.do_rotary = 1;
  EXPECT_INVALID(&c, "do_rotary", "cos_cache and sin_cache");
}

static void V13_caches_require_do_rotary(void **state) {
  (void)state;
  pa_case c = valid_rotary();
  c.attrs.do_rotary = 0;
  EXPECT_INVALID(&c, "cos_cache", "do_rotary is 0");
}

static void V13_cos_cache_rank_and_dtype(void **state) {
  (void)state;
  pa_case c = valid_rotary();
  c.in[PA_IN_COS_CACHE].rank = 1;
  EXPECT_INVALID(&c, "cos_cache: rank must be 2, got 1");
  c = valid_rotary();
  c.in[PA_IN_SIN_CACHE].dtype = PA_DTYPE_FLOAT32;
  EXPECT_INVALID(&c, "sin_cache", "float16", "got float32");
}

static void V13_sin_cache_shape_of_cos_cache(void **state) {
  (void)state;
  pa_case c = valid_rotary();
  c.in[PA_IN_SIN_CACHE].dims[0] = 64;
  EXPECT_INVALID(&c, "sin_cache", "cos_cache's (128, 16)", "got (64, 16)");
  c = valid_rotary();
  c.in[PA_IN_SIN_CACHE].rank = 3;
  EXPECT_INVALID(&c, "sin_cache: rank must be 2, got 3");
}

static void V14_rotary_dim_positive(void **state) {
  (void)state;
  pa_case c = valid_rotary();
  c.in[PA_IN_COS_CACHE].dims[1] = 0;
  c.in[PA_IN_SIN_CACHE].dims[1] = 0;
  EXPECT_INVALID(&c, "cos_cache", "rotary_dim", "got rotary_dim 0");
}

static void V14_rotary_span_within_head(void **state) {
  (void)state;
  case_config cfg = case_config_default();
  cfg.rotary_dim = 64; /* the whole head */
  pa_case c = valid(cfg);
  c.attrs.rotary_offset = 8;
  EXPECT_INVALID(&c, "cos_cache", "rotary_offset (8) + rotary_dim <= head_size (64)",
                 "got rotary_dim 64");
}

static void V15_rotary_offset_non_negative(void **state) {
  (void)state;
  pa_case c = valid_rotary();
  c.attrs.rotary_offset = -8;
  EXPECT_INVALID(&c, "rotary_offset", "got -8");
}

static void V15_rotary_offset_multiple_of_8(void **state) {
  (void)state;
  pa_case c = valid_rotary();
  c.attrs.rotary_offset = 4;
  EXPECT_INVALID(&c, "rotary_offset", "multiple of 8", "got 4");
}

/* ---- V16 slot_mapping, V17 head_sink, V18/V19 QK-Norm ---------------------------------------- */

static pa_case valid_with_optional_inputs(void) {
  case_config cfg = case_config_default();
  cfg.slot_mapping = cfg.head_sink = cfg.qk_norm = cfg.query_positions = cfg.bias = 1;
  return valid(cfg);
}

static void V16_slot_mapping_token_count(void **state) {
  (void)state;
  pa_case c = valid_with_optional_inputs();
  c.in[PA_IN_SLOT_MAPPING].dims[0] = 4;
  EXPECT_INVALID(&c, "slot_mapping", "token_count (5)", "got 4");
}

static void V16_slot_mapping_int32_rank_one(void **state) {
  (void)state;
  pa_case c = valid_with_optional_inputs();
  c.in[PA_IN_SLOT_MAPPING].dtype = PA_DTYPE_FLOAT32;
  EXPECT_INVALID(&c, "slot_mapping", "int32", "got float32");
  c = valid_with_optional_inputs();
  c.in[PA_IN_SLOT_MAPPING].rank = 2;
  EXPECT_INVALID(&c, "slot_mapping: rank must be 1, got 2");
}

static void V17_head_sink_num_heads(void **state) {
  (void)state;
  pa_case c = valid_with_optional_inputs();
  c.in[PA_IN_HEAD_SINK].dims[0] = 2;
  EXPECT_INVALID(&c, "head_sink", "num_heads (8)", "got 2");
}

static void V17_head_sink_rank_and_dtype(void **state) {
  (void)state;
  pa_case c = valid_with_optional_inputs();
  c.in[PA_IN_HEAD_SINK].dtype = PA_DTYPE_FLOAT32;
  EXPECT_INVALID(&c, "head_sink", "float16", "got float32");
  c = valid_with_optional_inputs();
  c.in[PA_IN_HEAD_SINK].rank = 2;
  EXPECT_INVALID(&c, "head_sink: rank must be 1, got 2");
}

static void V18_q_norm_weight_without_k_norm_weight(void **state) {
  (void)state;
  pa_case c = valid_with_optional_inputs();
  c.in[PA_IN_K_NORM_WEIGHT].dtype = PA_DTYPE_UNDEFINED;
  EXPECT_INVALID(&c, "k_norm_weight", "both present or both absent");
  c = valid_with_optional_inputs();
  c.in[PA_IN_Q_NORM_WEIGHT].dtype = PA_DTYPE_UNDEFINED;
  EXPECT_INVALID(&c, "q_norm_weight", "both present or both absent");
}

static void V18_norm_weight_shape_and_dtype(void **state) {
  (void)state;
  pa_case c = valid_with_optional_inputs();
  c.in[PA_IN_K_NORM_WEIGHT].dims[0] = 128;
  EXPECT_INVALID(&c, "k_norm_weight", "head_size (64)", "got 128");
  c = valid_with_optional_inputs();
  c.in[PA_IN_Q_NORM_WEIGHT].dtype = PA_DTYPE_BFLOAT16;
  EXPECT_INVALID(&c, "q_norm_weight", "float16", "got bfloat16");
  c = valid_with_optional_inputs();
  c.in[PA_IN_Q_NORM_WEIGHT].rank = 2;
  EXPECT_INVALID(&c, "q_norm_weight: rank must be 1, got 2");
}

static void V19_qk_norm_epsilon_positive(void **state) {
  (void)state;
  const float bad[] = {-1e-6f, NAN, INFINITY};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    pa_case c = valid_with_optional_inputs();
    c.attrs.qk_norm_epsilon = bad[i];
    EXPECT_INVALID(&c, "qk_norm_epsilon", "> 0");
  }
}

/* ---- V20..V23 quantization ------------------------------------------------------------------- */

static void V20_scale_float32(void **state) {
  (void)state;
  pa_case c = valid_quantized(PA_DTYPE_INT8, PA_QUANT_PER_TENSOR);
  c.in[PA_IN_K_SCALE].dtype = PA_DTYPE_FLOAT16;
  EXPECT_INVALID(&c, "k_scale", "float32", "got float16");
}

static void V20_per_tensor_scale_shape(void **state) {
  (void)state;
  pa_case c = valid_quantized(PA_DTYPE_INT8, PA_QUANT_PER_TENSOR);
  c.in[PA_IN_V_SCALE].dims[0] = 2;
  EXPECT_INVALID(&c, "v_scale", "PER_TENSOR", "(1,)", "got (2,)");
}

static void V20_per_channel_scale_shape(void **state) {
  (void)state;
  pa_case c = valid_quantized(PA_DTYPE_INT8, PA_QUANT_PER_CHANNEL);
  c.in[PA_IN_K_SCALE].dims[2] = 32;
  EXPECT_INVALID(&c, "k_scale", "(kv_num_heads, 1, head_size) = (2, 1, 64)", "(2, 1, 32)");
  c = valid_quantized(PA_DTYPE_INT8, PA_QUANT_PER_CHANNEL);
  c.in[PA_IN_V_SCALE] = (pa_tensor_desc){PA_DTYPE_FLOAT32, 1, {1, 0, 0, 0}};
  EXPECT_INVALID(&c, "v_scale", "PER_CHANNEL");
}

static void V20_mixed_granularity_accepted(void **state) {
  (void)state;
  pa_case c = valid_quantized(PA_DTYPE_INT8, PA_QUANT_PER_TENSOR);
  c.attrs.v_quant_type = PA_QUANT_PER_CHANNEL;
  c.in[PA_IN_V_SCALE] = (pa_tensor_desc){PA_DTYPE_FLOAT32, 3, {2, 1, 64, 0}};
  pa_plan_destroy(case_plan_ok(&c));
}

static void V21_quant_type_requires_scale(void **state) {
  (void)state;
  pa_case c = valid_quantized(PA_DTYPE_INT8, PA_QUANT_PER_TENSOR);
  c.in[PA_IN_K_SCALE].dtype = PA_DTYPE_UNDEFINED;
  EXPECT_INVALID(&c, "k_scale", "required when k_quant_type is PER_TENSOR");
}

static void V21_scale_requires_quant_type(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_V_SCALE] = (pa_tensor_desc){PA_DTYPE_FLOAT32, 1, {1, 0, 0, 0}};
  EXPECT_INVALID(&c, "v_scale", "absent when v_quant_type is NONE");
}

static void V22_quantized_cache_requires_quant_type(void **state) {
  (void)state;
  pa_case c = valid_quantized(PA_DTYPE_INT8, PA_QUANT_PER_TENSOR);
  c.attrs.k_quant_type = PA_QUANT_NONE;
  c.in[PA_IN_K_SCALE].dtype = PA_DTYPE_UNDEFINED;
  EXPECT_INVALID(&c, "k_quant_type", "key_cache is int8", "got NONE");
  c = valid_quantized(PA_DTYPE_INT8, PA_QUANT_PER_CHANNEL);
  c.attrs.v_quant_type = PA_QUANT_NONE;
  c.in[PA_IN_V_SCALE].dtype = PA_DTYPE_UNDEFINED;
  EXPECT_INVALID(&c, "v_quant_type", "value_cache is int8", "got NONE");
}

static void V22_unquantized_cache_rejects_quant_type(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.attrs.k_quant_type = PA_QUANT_PER_TENSOR;
  c.in[PA_IN_K_SCALE] = (pa_tensor_desc){PA_DTYPE_FLOAT32, 1, {1, 0, 0, 0}};
  EXPECT_INVALID(&c, "k_quant_type", "NONE", "key_cache has query's type float16",
                 "got PER_TENSOR");
}

static void V22_float_cache_of_another_type(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_KEY_CACHE].dtype = PA_DTYPE_BFLOAT16;
  c.in[PA_IN_VALUE_CACHE].dtype = PA_DTYPE_BFLOAT16;
  EXPECT_INVALID(&c, "key_cache", "query's type float16", "got bfloat16");
}

static void V23_cache_dtype_names_the_cache_type(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.attrs.k_cache_dtype = PA_CACHE_DTYPE_INT8;
  EXPECT_INVALID(&c, "k_cache_dtype", "float16", "got int8");
  c = valid_quantized(PA_DTYPE_INT8, PA_QUANT_PER_TENSOR);
  c.attrs.v_cache_dtype = PA_CACHE_DTYPE_FLOAT8E4M3FN;
  EXPECT_INVALID(&c, "v_cache_dtype", "int8", "got float8e4m3fn");
}

static void V23_cache_dtype_naming_own_type_accepted(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.attrs.k_cache_dtype = c.attrs.v_cache_dtype = PA_CACHE_DTYPE_FLOAT16;
  pa_plan_destroy(case_plan_ok(&c));
  c = valid_quantized(PA_DTYPE_INT8, PA_QUANT_PER_CHANNEL);
  c.attrs.k_cache_dtype = c.attrs.v_cache_dtype = PA_CACHE_DTYPE_INT8;
  pa_plan_destroy(case_plan_ok(&c));
}

static void V23_int4_and_float4e2m1_reserved(void **state) {
  (void)state;
  pa_cache_dtype parsed;
  assert_int_equal(pa_cache_dtype_parse("int4", &parsed), PA_SUCCESS);
  pa_case c = valid_quantized(PA_DTYPE_INT8, PA_QUANT_PER_TENSOR);
  c.attrs.k_cache_dtype = parsed;
  EXPECT_INVALID(&c, "k_cache_dtype", "\"int4\" is reserved");
  assert_int_equal(pa_cache_dtype_parse("float4e2m1", &parsed), PA_SUCCESS);
  c = valid_quantized(PA_DTYPE_INT8, PA_QUANT_PER_TENSOR);
  c.attrs.v_cache_dtype = parsed;
  EXPECT_INVALID(&c, "v_cache_dtype", "\"float4e2m1\" is reserved");
}

static void V24_fp8_cache_follows_the_build(void **state) {
  (void)state;
  case_config cfg = case_config_default();
  cfg.cache_dtype = PA_DTYPE_FLOAT8_E4M3FN;
  pa_case c;
  case_build(&c, &cfg);
#if PA_FP8_KV_CACHE
  pa_plan_destroy(case_plan_ok(&c));
#else
  CASE_EXPECT_PLAN_FAILURE(&c, PA_ERROR_NOT_SUPPORTED, "key_cache", "float8e4m3fn");
#endif
}

/* ---- V25 attention_metadata, V26 query_positions --------------------------------------------- */

static pa_case valid_metadata(int32_t max_query_len, int32_t max_kv_len) {
  case_config cfg = case_config_default();
  cfg.metadata = 1;
  cfg.metadata_values[0] = max_query_len;
  cfg.metadata_values[1] = max_kv_len;
  return valid(cfg);
}

static void V25_attention_metadata_shape(void **state) {
  (void)state;
  pa_case c = valid_metadata(2, 40);
  c.in[PA_IN_ATTENTION_METADATA].dims[0] = 3;
  EXPECT_INVALID(&c, "attention_metadata", "dim0", "(2)", "got 3");
  c = valid_metadata(2, 40);
  c.in[PA_IN_ATTENTION_METADATA].rank = 2;
  EXPECT_INVALID(&c, "attention_metadata: rank must be 1, got 2");
  c = valid_metadata(2, 40);
  c.in[PA_IN_ATTENTION_METADATA].dtype = PA_DTYPE_FLOAT32;
  EXPECT_INVALID(&c, "attention_metadata", "int32", "got float32");
}

static void V25_attention_metadata_non_negative(void **state) {
  (void)state;
  pa_case c = valid_metadata(2, 40);
  c.metadata[1] = -1;
  EXPECT_INVALID(&c, "attention_metadata", ">= 0", "[2, -1]");
  c = valid_metadata(2, 40);
  c.metadata[0] = -5;
  EXPECT_INVALID(&c, "attention_metadata", "[-5, 40]");
}

static void V25_attention_metadata_values_without_descriptor(void **state) {
  (void)state;
  pa_case c = valid_metadata(2, 40);
  c.in[PA_IN_ATTENTION_METADATA].dtype = PA_DTYPE_UNDEFINED;
  EXPECT_INVALID(&c, "attention_metadata", "descriptor is absent");
}

static void V25_large_bounds_clamped_not_rejected(void **state) {
  (void)state;
  pa_case c = valid_metadata(INT32_MAX, INT32_MAX);
  pa__problem p;
  assert_int_equal(case_validate(&c, &p), PA_SUCCESS);
  assert_int_equal(p.max_query_len, 5);
  assert_int_equal(p.max_kv_len, 4 * 16);
}

static void V26_query_positions_token_count(void **state) {
  (void)state;
  pa_case c = valid_with_optional_inputs();
  c.in[PA_IN_QUERY_POSITIONS].dims[0] = 3;
  EXPECT_INVALID(&c, "query_positions", "token_count (5)", "got 3");
}

static void V26_query_positions_int32_rank_one(void **state) {
  (void)state;
  pa_case c = valid_with_optional_inputs();
  c.in[PA_IN_QUERY_POSITIONS].dtype = PA_DTYPE_FLOAT16;
  EXPECT_INVALID(&c, "query_positions", "int32", "got float16");
  c = valid_with_optional_inputs();
  c.in[PA_IN_QUERY_POSITIONS].rank = 2;
  EXPECT_INVALID(&c, "query_positions: rank must be 1, got 2");
}

/* ---- V27 attention_bias ---------------------------------------------------------------------- */

static void V27_attention_bias_rank_four(void **state) {
  (void)state;
  pa_case c = valid_with_optional_inputs();
  c.in[PA_IN_ATTENTION_BIAS].rank = 3;
  EXPECT_INVALID(&c, "attention_bias: rank must be 4, got 3");
}

static void V27_attention_bias_batch_dim(void **state) {
  (void)state;
  pa_case c = valid_with_optional_inputs();
  c.in[PA_IN_ATTENTION_BIAS].dims[0] = 2;
  EXPECT_INVALID(&c, "attention_bias", "dim0", "1 or batch_size (3)", "got 2");
}

static void V27_attention_bias_heads_dim(void **state) {
  (void)state;
  pa_case c = valid_with_optional_inputs();
  c.in[PA_IN_ATTENTION_BIAS].dims[1] = 2;
  EXPECT_INVALID(&c, "attention_bias", "dim1", "1 or num_heads (8)", "got 2");
}

static void V27_attention_bias_dtype(void **state) {
  (void)state;
  pa_case c = valid_with_optional_inputs();
  c.in[PA_IN_ATTENTION_BIAS].dtype = PA_DTYPE_FLOAT32;
  EXPECT_INVALID(&c, "attention_bias", "float16", "got float32");
}

static void V27_attention_bias_broadcast_accepted(void **state) {
  (void)state;
  pa_case c = valid_with_optional_inputs();
  c.in[PA_IN_ATTENTION_BIAS] = (pa_tensor_desc){PA_DTYPE_FLOAT16, 4, {1, 1, 7, 100}};
  pa__problem p;
  assert_int_equal(case_validate(&c, &p), PA_SUCCESS);
  assert_int_equal(p.bias_batch, 1);
  assert_int_equal(p.bias_heads, 1);
  assert_int_equal(p.bias_q_capacity, 7);
  assert_int_equal(p.bias_kv_capacity, 100);
}

/* ---- V28, V29 output_qk ---------------------------------------------------------------------- */

static pa_case valid_qk(int32_t mode, pa_dtype dtype) {
  case_config cfg = case_config_default();
  cfg.qk_output = mode;
  cfg.qk_dtype = dtype;
  return valid(cfg);
}

static void V28_qk_output_values(void **state) {
  (void)state;
  pa_case c = valid_qk(2, PA_DTYPE_FLOAT32);
  c.attrs.qk_output = 3;
  EXPECT_INVALID(&c, "qk_output", "0, 1 or 2", "got 3");
  c.attrs.qk_output = -1;
  EXPECT_INVALID(&c, "qk_output", "got -1");
}

static void V28_output_qk_present_iff_qk_output(void **state) {
  (void)state;
  pa_case c = valid_qk(1, PA_DTYPE_FLOAT32);
  c.out[PA_OUT_QK].dtype = PA_DTYPE_UNDEFINED;
  EXPECT_INVALID(&c, "output_qk", "required when qk_output is 1");
  c = valid_qk(1, PA_DTYPE_FLOAT32);
  c.attrs.qk_output = 0;
  EXPECT_INVALID(&c, "output_qk", "absent when qk_output is 0");
}

static void V28_output_qk_dtype(void **state) {
  (void)state;
  valid_qk(1, PA_DTYPE_FLOAT16);
  valid_qk(2, PA_DTYPE_BFLOAT16);
  pa_case c = valid_qk(1, PA_DTYPE_FLOAT32);
  c.out[PA_OUT_QK].dtype = PA_DTYPE_INT32;
  EXPECT_INVALID(&c, "output_qk", "float32, float16 or bfloat16", "got int32");
}

static void V28_output_qk_shape(void **state) {
  (void)state;
  pa_case c = valid_qk(1, PA_DTYPE_FLOAT32);
  c.out[PA_OUT_QK].dims[0] = 2;
  EXPECT_INVALID(&c, "output_qk", "num_heads (8)", "got 2");
  c = valid_qk(1, PA_DTYPE_FLOAT32);
  c.out[PA_OUT_QK].dims[1] = 4;
  EXPECT_INVALID(&c, "output_qk", "token_count (5)", "got 4");
  c = valid_qk(1, PA_DTYPE_FLOAT32);
  c.out[PA_OUT_QK].rank = 4;
  EXPECT_INVALID(&c, "output_qk: rank must be 3, got 4");
}

static void V29_output_qk_byte_threshold(void **state) {
  (void)state;
  pa_case c = valid_qk(2, PA_DTYPE_FLOAT32);
  const uint64_t bytes = 8 * 5 * 64 * 4; /* heads * tokens * capacity * float32 */
  c.max_output_qk_bytes = bytes;
  pa_plan_destroy(case_plan_ok(&c)); /* exactly at the threshold */
  c.max_output_qk_bytes = bytes - 1;
  EXPECT_INVALID(&c, "output_qk", "10240 bytes", "max_output_qk_bytes (10239)");
}

static void V29_default_threshold(void **state) {
  (void)state;
  pa_case c = valid_qk(1, PA_DTYPE_FLOAT16);
  c.out[PA_OUT_QK].dims[2] = ((int64_t)1 << 30) / (8 * 5 * 2) + 1;
  EXPECT_INVALID(&c, "output_qk", "max_output_qk_bytes (1073741824)");
  /* the largest capacity whose byte count fits in int64 (V50 refuses larger ones) */
  c.out[PA_OUT_QK].dims[2] = INT64_MAX / (8 * 5 * 2);
  EXPECT_INVALID(&c, "output_qk", "max_output_qk_bytes (1073741824)");
}

/* ---- V30, V31 outputs ------------------------------------------------------------------------ */

static void V30_output_required(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.out[PA_OUT_OUTPUT].dtype = PA_DTYPE_UNDEFINED;
  EXPECT_INVALID(&c, "output", "required");
}

static void V30_output_dtype_and_shape(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.out[PA_OUT_OUTPUT].dtype = PA_DTYPE_FLOAT32;
  EXPECT_INVALID(&c, "output", "float16", "got float32");
  c = valid_default();
  c.out[PA_OUT_OUTPUT].dims[0] = 4;
  EXPECT_INVALID(&c, "output", "token_count (5)", "got 4");
  c = valid_default();
  c.out[PA_OUT_OUTPUT].rank = 3;
  EXPECT_INVALID(&c, "output: rank must be 2, got 3");
}

static void V30_output_width_uses_effective_v_head_size(void **state) {
  (void)state;
  pa_case c = valid(case_config_latent());
  c.out[PA_OUT_OUTPUT].dims[1] = 16 * 576;
  EXPECT_INVALID(&c, "output", "num_heads * v_head_size (8192)", "got 9216");
}

static void V31_cache_outputs_both_or_neither(void **state) {
  (void)state;
  case_config cfg = case_config_default();
  cfg.cache_outputs = 1;
  pa_case c = valid(cfg);
  c.out[PA_OUT_VALUE_CACHE].dtype = PA_DTYPE_UNDEFINED;
  EXPECT_INVALID(&c, "value_cache_out", "both present or both absent");
  c = valid(cfg);
  c.out[PA_OUT_KEY_CACHE].dtype = PA_DTYPE_UNDEFINED;
  EXPECT_INVALID(&c, "key_cache_out", "both present or both absent");
}

static void V31_latent_value_cache_out_absent(void **state) {
  (void)state;
  case_config cfg = case_config_latent();
  cfg.cache_outputs = 1; /* key_cache_out only: accepted */
  pa_case c = valid(cfg);
  c.out[PA_OUT_VALUE_CACHE] = c.in[PA_IN_KEY_CACHE];
  EXPECT_INVALID(&c, "value_cache_out", "LATENT");
}

static void V31_cache_output_describes_its_input(void **state) {
  (void)state;
  case_config cfg = case_config_default();
  cfg.cache_outputs = 1;
  pa_case c = valid(cfg);
  c.out[PA_OUT_KEY_CACHE].dims[0] = 64;
  EXPECT_INVALID(&c, "key_cache_out", "describe key_cache", "(32, 16, 2, 64)", "got float16 (64,");
}

/* ---- V33 enumerations ------------------------------------------------------------------------ */

static void V33_kv_cache_layout_value(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.attrs.kv_cache_layout = (pa_kv_cache_layout)7;
  EXPECT_INVALID(&c, "kv_cache_layout", "SEPARATE or LATENT", "got value 7");
}

static void V33_quant_type_values(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.attrs.k_quant_type = (pa_quant_type)3;
  EXPECT_INVALID(&c, "k_quant_type", "got value 3");
  c = valid_default();
  c.attrs.v_quant_type = (pa_quant_type)-1;
  EXPECT_INVALID(&c, "v_quant_type", "got value -1");
}

static void V33_cache_dtype_values(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.attrs.k_cache_dtype = (pa_cache_dtype)42;
  EXPECT_INVALID(&c, "k_cache_dtype", "got 42");
  c = valid_default();
  c.attrs.v_cache_dtype = (pa_cache_dtype)-3;
  EXPECT_INVALID(&c, "v_cache_dtype", "got -3");
}

/* ---- V34..V38 MLA ---------------------------------------------------------------------------- */

static void V34_v_head_size_range(void **state) {
  (void)state;
  pa_case c = valid(case_config_latent());
  c.attrs.v_head_size = -1;
  EXPECT_INVALID(&c, "v_head_size", "[0, head_size (576)]", "got -1");
  c.attrs.v_head_size = 584;
  EXPECT_INVALID(&c, "v_head_size", "got 584");
}

static void V34_v_head_size_differs_only_in_latent(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.attrs.scale = 0.125f;
  c.attrs.v_head_size = 32;
  EXPECT_INVALID(&c, "v_head_size", "only when kv_cache_layout is LATENT", "got 32");
  c.attrs.v_head_size = 64; /* equal to head_size: accepted */
  pa_plan_destroy(case_plan_ok(&c));
}

static void V35_v_head_size_requires_explicit_scale(void **state) {
  (void)state;
  pa_case c = valid(case_config_latent());
  c.attrs.scale = 0.0f;
  EXPECT_INVALID(&c, "scale", "explicitly", "v_head_size (512) != head_size (576)");
}

static void V35_latent_without_v_head_size_needs_no_scale(void **state) {
  (void)state;
  case_config cfg = case_config_latent();
  cfg.v_head_size = 0;
  cfg.scale = 0.0f;
  valid(cfg);
}

static void V36_latent_kv_num_heads_one(void **state) {
  (void)state;
  case_config cfg = case_config_latent();
  cfg.kv_num_heads = 2;
  pa_case c;
  case_build(&c, &cfg);
  EXPECT_INVALID(&c, "kv_num_heads", "1 when kv_cache_layout is LATENT", "got 2");
}

static void V36_latent_presence(void **state) {
  (void)state;
  pa_case c = valid(case_config_latent());
  c.in[PA_IN_KEY].dtype = PA_DTYPE_UNDEFINED;
  EXPECT_INVALID(&c, "key", "kv_cache_layout is LATENT");
  c = valid(case_config_latent());
  c.in[PA_IN_VALUE] = c.in[PA_IN_KEY];
  EXPECT_INVALID(&c, "value", "kv_cache_layout is LATENT");
}

static void V37_latent_rejects_head_sink(void **state) {
  (void)state;
  pa_case c = valid(case_config_latent());
  c.in[PA_IN_HEAD_SINK] = (pa_tensor_desc){PA_DTYPE_BFLOAT16, 1, {16, 0, 0, 0}};
  EXPECT_INVALID(&c, "head_sink", "LATENT");
}

static void V37_latent_rejects_qk_norm(void **state) {
  (void)state;
  pa_case c = valid(case_config_latent());
  c.in[PA_IN_Q_NORM_WEIGHT] = (pa_tensor_desc){PA_DTYPE_BFLOAT16, 1, {576, 0, 0, 0}};
  c.in[PA_IN_K_NORM_WEIGHT] = c.in[PA_IN_Q_NORM_WEIGHT];
  EXPECT_INVALID(&c, "q_norm_weight", "LATENT");
}

static pa_case valid_latent_quantized(pa_quant_type quant) {
  case_config cfg = case_config_latent();
  cfg.cache_dtype = PA_DTYPE_FLOAT8_E4M3FN;
#if !PA_FP8_KV_CACHE
  cfg.cache_dtype = PA_DTYPE_INT8;
#endif
  cfg.quant = quant;
  return valid(cfg);
}

static void V38_latent_rejects_v_scale(void **state) {
  (void)state;
  pa_case c = valid_latent_quantized(PA_QUANT_PER_TENSOR);
  c.in[PA_IN_V_SCALE] = c.in[PA_IN_K_SCALE];
  EXPECT_INVALID(&c, "v_scale", "LATENT");
}

static void V38_latent_rejects_v_quant_type(void **state) {
  (void)state;
  pa_case c = valid_latent_quantized(PA_QUANT_PER_TENSOR);
  c.attrs.v_quant_type = PA_QUANT_PER_TENSOR;
  EXPECT_INVALID(&c, "v_quant_type", "LATENT", "got PER_TENSOR");
  c = valid_latent_quantized(PA_QUANT_PER_TENSOR);
  c.attrs.v_cache_dtype = PA_CACHE_DTYPE_INT8;
  EXPECT_INVALID(&c, "v_cache_dtype", "LATENT");
}

static void V38_latent_per_channel_scale_shape(void **state) {
  (void)state;
  pa_case c = valid_latent_quantized(PA_QUANT_PER_CHANNEL); /* (1, 1, 576) */
  c.in[PA_IN_K_SCALE].dims[2] = 512;
  EXPECT_INVALID(&c, "k_scale", "(1, 1, 576)", "(1, 1, 512)");
}

/* ---- V39..V42 scalar attributes -------------------------------------------------------------- */

static void V39_local_window_size(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.attrs.local_window_size = 0;
  EXPECT_INVALID(&c, "local_window_size", "-1 (off) or >= 1", "got 0");
  c.attrs.local_window_size = -2;
  EXPECT_INVALID(&c, "local_window_size", "got -2");
  c.attrs.local_window_size = 1;
  pa_plan_destroy(case_plan_ok(&c));
}

static void V40_is_causal_values(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.attrs.is_causal = 2;
  EXPECT_INVALID(&c, "is_causal", "0 or 1", "got 2");
  c.attrs.is_causal = 0;
  pa_plan_destroy(case_plan_ok(&c));
}

static void V40_non_causal_with_window(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.attrs.is_causal = 0;
  c.attrs.local_window_size = 128;
  EXPECT_INVALID(&c, "is_causal", "local_window_size is set (128)", "got 0");
}

static void V41_softcap(void **state) {
  (void)state;
  const float bad[] = {-1.0f, NAN, INFINITY};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    pa_case c = valid_default();
    c.attrs.softcap = bad[i];
    EXPECT_INVALID(&c, "softcap", "finite and >= 0");
  }
}

static void V41_scale(void **state) {
  (void)state;
  const float bad[] = {-0.125f, NAN, -INFINITY, INFINITY};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    pa_case c = valid_default();
    c.attrs.scale = bad[i];
    EXPECT_INVALID(&c, "scale", "finite and >= 0");
  }
}

static void V42_do_rotary_and_interleaved_values(void **state) {
  (void)state;
  pa_case c = valid_rotary();
  c.attrs.do_rotary = 2;
  EXPECT_INVALID(&c, "do_rotary", "0 or 1", "got 2");
  c = valid_rotary();
  c.attrs.rotary_interleaved = -1;
  EXPECT_INVALID(&c, "rotary_interleaved", "0 or 1", "got -1");
  c = valid_rotary();
  c.attrs.rotary_interleaved = 1;
  pa_plan_destroy(case_plan_ok(&c));
}

/* ---- V48 descriptors ------------------------------------------------------------------------- */

static void V48_negative_dim(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_KEY].dims[1] = -1;
  EXPECT_INVALID(&c, "key", "dim1 must be >= 0", "got -1");
}

static void V48_rank_outside_0_to_4(void **state) {
  (void)state;
  pa_case c = valid_with_optional_inputs();
  c.in[PA_IN_SLOT_MAPPING].rank = 5;
  EXPECT_INVALID(&c, "slot_mapping", "rank must be in [0, 4]", "got 5");
  c = valid_default();
  c.out[PA_OUT_OUTPUT].rank = -1;
  EXPECT_INVALID(&c, "output", "got -1");
}

static void V48_unknown_dtype(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_HEAD_SINK].dtype = (pa_dtype)99;
  EXPECT_INVALID(&c, "head_sink", "dtype", "got 99");
  c = valid_default();
  c.out[PA_OUT_QK].dtype = (pa_dtype)-4;
  EXPECT_INVALID(&c, "output_qk", "got -4");
}

static void V48_absent_descriptor_not_inspected(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.in[PA_IN_HEAD_SINK] = (pa_tensor_desc){PA_DTYPE_UNDEFINED, -7, {-1, -1, -1, -1}};
  pa_plan_destroy(case_plan_ok(&c));
}

/* ---- V50 sizes ------------------------------------------------------------------------------- */

static void V50_tensor_byte_size_fits_int64(void **state) {
  (void)state;
  pa_case c = valid_default(); /* key_cache (32, 16, 2, 64) float16 */
  c.in[PA_IN_KEY_CACHE].dims[0] = c.in[PA_IN_VALUE_CACHE].dims[0] = (int64_t)1 << 52;
  EXPECT_INVALID(&c, "key_cache", "byte size", "fit in int64 (at most 9223372036854775807 bytes)",
                 "got shape (4503599627370496, 16, 2, 64) of float16 (2 bytes each)");
  /* the element size counts: 2^62 elements fit as int8, not as float16 */
  c = valid_default();
  c.out[PA_OUT_OUTPUT].dims[0] = (int64_t)1 << 62;
  c.out[PA_OUT_OUTPUT].dims[1] = 1;
  EXPECT_INVALID(&c, "output", "fit in int64", "(4611686018427387904, 1) of float16");
  /* the largest one that fits passes V50 and meets the shape rules instead */
  c.out[PA_OUT_OUTPUT].dims[0] = INT64_MAX / 2;
  EXPECT_INVALID(&c, "output", "dim0 must be token_count (5), got 4611686018427387903");
}

static void V50_empty_tensor_extents_fit_int64(void **state) {
  (void)state;
  case_config cfg = case_config_default();
  cfg.bias = 1;
  pa_case c = valid(cfg);
  c.in[PA_IN_ATTENTION_BIAS].dims[2] = 0; /* empty, but its strides come from the other dims */
  c.in[PA_IN_ATTENTION_BIAS].dims[3] = (int64_t)1 << 61;
  EXPECT_INVALID(&c, "attention_bias", "zero dims taken as 1", "(3, 8, 0, 2305843009213693952)");
  c.in[PA_IN_ATTENTION_BIAS].dims[3] = (int64_t)1 << 40;
  pa_plan_destroy(case_plan_ok(&c));
}

static void V50_rows_per_token_fit_int32(void **state) {
  (void)state;
  case_config cfg = case_config_default();
  cfg.num_heads = 1 << 30;
  cfg.kv_num_heads = 1 << 30;
  cfg.head_size = 8;
  pa_case c;
  case_build(&c, &cfg);
  EXPECT_INVALID(&c, "num_heads", "num_heads + 2 * kv_num_heads", "at most 2147483647",
                 "got 3221225472");
  c.attrs.kv_num_heads = 1 << 29; /* 2^30 + 2^30 = 2^31: one too many */
  EXPECT_INVALID(&c, "num_heads", "got 2147483648");
}

/* ---- the resolved problem -------------------------------------------------------------------- */

static void resolved_defaults(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.attrs.qk_norm_epsilon = 0.0f;
  pa__problem p;
  assert_int_equal(case_validate(&c, &p), PA_SUCCESS);
  assert_int_equal(p.input_mode, PA__MODE_SEPARATE);
  assert_int_equal(p.num_heads, 8);
  assert_int_equal(p.kv_num_heads, 2);
  assert_int_equal(p.group_size, 4);
  assert_int_equal(p.head_size, 64);
  assert_int_equal(p.v_head_size, 64);
  assert_true(p.scale == 0.125f);
  assert_true(p.qk_norm_epsilon == 1e-6f);
  assert_true(p.softcap == 0.0f);
  assert_int_equal(p.window, -1);
  assert_int_equal(p.is_causal, 1);
  assert_int_equal(p.do_rotary, 0);
  assert_int_equal(p.rotary_dim, 0);
  assert_int_equal(p.has_qk_norm, 0);
  assert_int_equal(p.k_quant, PA_QUANT_NONE);
  assert_int_equal(p.v_quant, PA_QUANT_NONE);
  assert_int_equal(p.qk_output, 0);
  assert_int_equal(p.dtype, PA_DTYPE_FLOAT16);
  assert_int_equal(p.k_cache_dtype, PA_DTYPE_FLOAT16);
  assert_int_equal(p.v_cache_dtype, PA_DTYPE_FLOAT16);
  assert_int_equal(p.qk_dtype, PA_DTYPE_UNDEFINED);
  assert_int_equal(p.token_count, 5);
  assert_int_equal(p.batch_size, 3);
  assert_int_equal(p.num_blocks, 32);
  assert_int_equal(p.block_size, 16);
  assert_int_equal(p.max_blocks_per_seq, 4);
  assert_int_equal(p.qk_capacity, 0);
  assert_int_equal(p.has_bias + p.has_slot_mapping + p.has_head_sink + p.has_query_positions, 0);
  assert_int_equal(p.max_query_len, 5);
  assert_int_equal(p.max_kv_len, 64);
}

static void resolved_attributes_given(void **state) {
  (void)state;
  case_config cfg = case_config_default();
  cfg.rotary_dim = 32;
  cfg.rotary_offset = 16;
  cfg.rotary_positions = 4096;
  pa_case c = valid(cfg);
  c.attrs.scale = 0.5f;
  c.attrs.softcap = 30.0f;
  c.attrs.local_window_size = 7;
  c.attrs.rotary_interleaved = 1;
  c.attrs.qk_norm_epsilon = 1e-5f;
  pa__problem p;
  assert_int_equal(case_validate(&c, &p), PA_SUCCESS);
  assert_true(p.scale == 0.5f);
  assert_true(p.softcap == 30.0f);
  assert_int_equal(p.window, 7);
  assert_int_equal(p.do_rotary, 1);
  assert_int_equal(p.rotary_interleaved, 1);
  assert_int_equal(p.rotary_dim, 32);
  assert_int_equal(p.rotary_offset, 16);
  assert_int_equal(p.rotary_max_positions, 4096);
  assert_true(p.qk_norm_epsilon == 1e-5f);
}

static void resolved_optional_inputs(void **state) {
  (void)state;
  case_config cfg = case_config_default();
  cfg.slot_mapping = cfg.head_sink = cfg.qk_norm = cfg.query_positions = cfg.bias = 1;
  cfg.qk_output = 2;
  cfg.qk_dtype = PA_DTYPE_BFLOAT16;
  cfg.dtype = PA_DTYPE_BFLOAT16;
  cfg.cache_dtype = PA_DTYPE_INT8;
  cfg.quant = PA_QUANT_PER_CHANNEL;
  pa_case c = valid(cfg);
  pa__problem p;
  assert_int_equal(case_validate(&c, &p), PA_SUCCESS);
  assert_int_equal(p.has_slot_mapping, 1);
  assert_int_equal(p.has_head_sink, 1);
  assert_int_equal(p.has_qk_norm, 1);
  assert_int_equal(p.has_query_positions, 1);
  assert_int_equal(p.has_bias, 1);
  assert_int_equal(p.bias_batch, 3);
  assert_int_equal(p.bias_heads, 8);
  assert_int_equal(p.bias_q_capacity, 5);
  assert_int_equal(p.bias_kv_capacity, 64);
  assert_int_equal(p.qk_output, 2);
  assert_int_equal(p.qk_dtype, PA_DTYPE_BFLOAT16);
  assert_int_equal(p.qk_capacity, 64);
  assert_int_equal(p.k_quant, PA_QUANT_PER_CHANNEL);
  assert_int_equal(p.v_quant, PA_QUANT_PER_CHANNEL);
  assert_int_equal(p.k_cache_dtype, PA_DTYPE_INT8);
  assert_int_equal(p.v_cache_dtype, PA_DTYPE_INT8);
}

static void resolved_packed(void **state) {
  (void)state;
  case_config cfg = case_config_default();
  cfg.mode = CASE_PACKED;
  pa_case c = valid(cfg);
  pa__problem p;
  assert_int_equal(case_validate(&c, &p), PA_SUCCESS);
  assert_int_equal(p.input_mode, PA__MODE_PACKED);
  assert_int_equal(p.head_size, 64);
  assert_int_equal(pa__query_row_elems(&p), (8 + 2 * 2) * 64);
}

static void resolved_latent(void **state) {
  (void)state;
  pa_case c = valid(case_config_latent());
  pa__problem p;
  assert_int_equal(case_validate(&c, &p), PA_SUCCESS);
  assert_int_equal(p.input_mode, PA__MODE_LATENT);
  assert_int_equal(p.head_size, 576);
  assert_int_equal(p.v_head_size, 512);
  assert_true(p.scale == 0.1147f);
  assert_int_equal(p.rotary_dim, 64);
  assert_int_equal(p.rotary_offset, 512);
  assert_int_equal(p.k_cache_dtype, PA_DTYPE_BFLOAT16);
  assert_int_equal(p.v_cache_dtype, PA_DTYPE_UNDEFINED);
  assert_int_equal(pa__out_row_elems(&p), 16 * 512);
}

static void resolved_bounds(void **state) {
  (void)state;
  const struct {
    int32_t given[2];
    int64_t max_query_len, max_kv_len;
  } cases[] = {
      {{0, 0}, 5, 64},  /* unknown: the static limits */
      {{2, 40}, 2, 40}, /* tight */
      {{9, 65}, 5, 64}, /* loose: clamped */
      {{1, 0}, 1, 64},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    pa_case c = valid_metadata(cases[i].given[0], cases[i].given[1]);
    pa__problem p;
    assert_int_equal(case_validate(&c, &p), PA_SUCCESS);
    assert_int_equal(p.max_query_len, cases[i].max_query_len);
    assert_int_equal(p.max_kv_len, cases[i].max_kv_len);
  }
  pa_case c = valid_metadata(2, 40);
  c.pass_metadata = 0; /* descriptor present, values not given: unknown */
  pa__problem p;
  assert_int_equal(case_validate(&c, &p), PA_SUCCESS);
  assert_int_equal(p.max_query_len, 5);
  assert_int_equal(p.max_kv_len, 64);
}

static void token_count_zero_is_valid(void **state) {
  (void)state;
  case_config cfg = case_config_default();
  cfg.token_count = 0;
  cfg.slot_mapping = cfg.query_positions = 1;
  cfg.qk_output = 1;
  pa_case c = valid(cfg);
  pa__problem p;
  assert_int_equal(case_validate(&c, &p), PA_SUCCESS);
  assert_int_equal(p.token_count, 0);
  assert_int_equal(p.max_query_len, 0);
}

static void every_mode_and_cache_type_accepted(void **state) {
  (void)state;
  const case_mode modes[] = {CASE_SEPARATE, CASE_PACKED, CASE_LATENT};
  const pa_dtype types[] = {PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16};
  const pa_dtype caches[] = {PA_DTYPE_UNDEFINED, PA_DTYPE_INT8, PA_DTYPE_FLOAT8_E4M3FN};
  const pa_quant_type quants[] = {PA_QUANT_PER_TENSOR, PA_QUANT_PER_CHANNEL};
  for (size_t m = 0; m < 3; m++)
    for (size_t t = 0; t < 2; t++)
      for (size_t k = 0; k < 3; k++)
        for (size_t q = 0; q < 2; q++) {
          if (caches[k] == PA_DTYPE_FLOAT8_E4M3FN && !PA_FP8_KV_CACHE) continue;
          case_config cfg = modes[m] == CASE_LATENT ? case_config_latent() : case_config_default();
          cfg.mode = modes[m];
          cfg.dtype = types[t];
          cfg.cache_dtype = caches[k];
          cfg.quant = quants[q];
          valid(cfg);
        }
}

static void failed_validation_leaves_no_partial_problem(void **state) {
  (void)state;
  pa_case c = valid_default();
  c.out[PA_OUT_OUTPUT].dims[1] = 1;
  pa__problem p;
  memset(&p, 0x5a, sizeof p);
  assert_int_equal(case_validate(&c, &p), PA_ERROR_INVALID_ARGUMENT);
  assert_int_equal(p.num_heads, 0);
  assert_int_equal(p.token_count, 0);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(V01_num_heads_positive),
      cmocka_unit_test(V01_kv_num_heads_positive),
      cmocka_unit_test(V01_kv_num_heads_divides_num_heads),
      cmocka_unit_test(V02_query_required),
      cmocka_unit_test(V02_query_rank_two),
      cmocka_unit_test(V02_query_dtype_float16_or_bfloat16),
      cmocka_unit_test(V02_bfloat16_accepted),
      cmocka_unit_test(V03_query_width_multiple_of_num_heads),
      cmocka_unit_test(V03_head_size_multiple_of_8),
      cmocka_unit_test(V03_head_size_at_most_256_in_separate),
      cmocka_unit_test(V03_head_size_at_most_576_in_latent),
      cmocka_unit_test(V03_head_sizes_accepted),
      cmocka_unit_test(V04_key_without_value),
      cmocka_unit_test(V04_value_without_key),
      cmocka_unit_test(V04_key_rank_two),
      cmocka_unit_test(V04_key_token_count),
      cmocka_unit_test(V04_value_width),
      cmocka_unit_test(V04_value_dtype_is_query_type),
      cmocka_unit_test(V05_packed_width_multiple_of_all_heads),
      cmocka_unit_test(V06_separate_requires_value_cache),
      cmocka_unit_test(V06_packed_requires_value_cache),
      cmocka_unit_test(V06_latent_rejects_value_cache),
      cmocka_unit_test(V06_latent_key_absent_is_not_packed),
      cmocka_unit_test(V07_key_cache_required),
      cmocka_unit_test(V07_key_cache_rank_four),
      cmocka_unit_test(V07_key_cache_heads),
      cmocka_unit_test(V07_key_cache_head_size),
      cmocka_unit_test(V07_key_cache_dtype),
      cmocka_unit_test(V08_value_cache_shape_of_key_cache),
      cmocka_unit_test(V08_value_cache_dtype_of_key_cache),
      cmocka_unit_test(V09_cumulative_sequence_length_rank_one),
      cmocka_unit_test(V09_cumulative_sequence_length_int32),
      cmocka_unit_test(V09_cumulative_sequence_length_at_least_two),
      cmocka_unit_test(V09_cumulative_sequence_length_required),
      cmocka_unit_test(V10_past_seqlens_batch_size),
      cmocka_unit_test(V10_past_seqlens_int32_rank_one),
      cmocka_unit_test(V11_block_table_rank_two),
      cmocka_unit_test(V11_block_table_batch_size),
      cmocka_unit_test(V11_block_table_at_least_one_block),
      cmocka_unit_test(V11_block_table_int32),
      cmocka_unit_test(V12_block_size_power_of_two),
      cmocka_unit_test(V12_block_size_at_least_16),
      cmocka_unit_test(V12_block_sizes_16_to_1024_accepted),
      cmocka_unit_test(V13_cos_cache_without_sin_cache),
      cmocka_unit_test(V13_do_rotary_requires_caches),
      cmocka_unit_test(V13_caches_require_do_rotary),
      cmocka_unit_test(V13_cos_cache_rank_and_dtype),
      cmocka_unit_test(V13_sin_cache_shape_of_cos_cache),
      cmocka_unit_test(V14_rotary_dim_positive),
      cmocka_unit_test(V14_rotary_span_within_head),
      cmocka_unit_test(V15_rotary_offset_non_negative),
      cmocka_unit_test(V15_rotary_offset_multiple_of_8),
      cmocka_unit_test(V16_slot_mapping_token_count),
      cmocka_unit_test(V16_slot_mapping_int32_rank_one),
      cmocka_unit_test(V17_head_sink_num_heads),
      cmocka_unit_test(V17_head_sink_rank_and_dtype),
      cmocka_unit_test(V18_q_norm_weight_without_k_norm_weight),
      cmocka_unit_test(V18_norm_weight_shape_and_dtype),
      cmocka_unit_test(V19_qk_norm_epsilon_positive),
      cmocka_unit_test(V20_scale_float32),
      cmocka_unit_test(V20_per_tensor_scale_shape),
      cmocka_unit_test(V20_per_channel_scale_shape),
      cmocka_unit_test(V20_mixed_granularity_accepted),
      cmocka_unit_test(V21_quant_type_requires_scale),
      cmocka_unit_test(V21_scale_requires_quant_type),
      cmocka_unit_test(V22_quantized_cache_requires_quant_type),
      cmocka_unit_test(V22_unquantized_cache_rejects_quant_type),
      cmocka_unit_test(V22_float_cache_of_another_type),
      cmocka_unit_test(V23_cache_dtype_names_the_cache_type),
      cmocka_unit_test(V23_cache_dtype_naming_own_type_accepted),
      cmocka_unit_test(V23_int4_and_float4e2m1_reserved),
      cmocka_unit_test(V24_fp8_cache_follows_the_build),
      cmocka_unit_test(V25_attention_metadata_shape),
      cmocka_unit_test(V25_attention_metadata_non_negative),
      cmocka_unit_test(V25_attention_metadata_values_without_descriptor),
      cmocka_unit_test(V25_large_bounds_clamped_not_rejected),
      cmocka_unit_test(V26_query_positions_token_count),
      cmocka_unit_test(V26_query_positions_int32_rank_one),
      cmocka_unit_test(V27_attention_bias_rank_four),
      cmocka_unit_test(V27_attention_bias_batch_dim),
      cmocka_unit_test(V27_attention_bias_heads_dim),
      cmocka_unit_test(V27_attention_bias_dtype),
      cmocka_unit_test(V27_attention_bias_broadcast_accepted),
      cmocka_unit_test(V28_qk_output_values),
      cmocka_unit_test(V28_output_qk_present_iff_qk_output),
      cmocka_unit_test(V28_output_qk_dtype),
      cmocka_unit_test(V28_output_qk_shape),
      cmocka_unit_test(V29_output_qk_byte_threshold),
      cmocka_unit_test(V29_default_threshold),
      cmocka_unit_test(V30_output_required),
      cmocka_unit_test(V30_output_dtype_and_shape),
      cmocka_unit_test(V30_output_width_uses_effective_v_head_size),
      cmocka_unit_test(V31_cache_outputs_both_or_neither),
      cmocka_unit_test(V31_latent_value_cache_out_absent),
      cmocka_unit_test(V31_cache_output_describes_its_input),
      cmocka_unit_test(V33_kv_cache_layout_value),
      cmocka_unit_test(V33_quant_type_values),
      cmocka_unit_test(V33_cache_dtype_values),
      cmocka_unit_test(V34_v_head_size_range),
      cmocka_unit_test(V34_v_head_size_differs_only_in_latent),
      cmocka_unit_test(V35_v_head_size_requires_explicit_scale),
      cmocka_unit_test(V35_latent_without_v_head_size_needs_no_scale),
      cmocka_unit_test(V36_latent_kv_num_heads_one),
      cmocka_unit_test(V36_latent_presence),
      cmocka_unit_test(V37_latent_rejects_head_sink),
      cmocka_unit_test(V37_latent_rejects_qk_norm),
      cmocka_unit_test(V38_latent_rejects_v_scale),
      cmocka_unit_test(V38_latent_rejects_v_quant_type),
      cmocka_unit_test(V38_latent_per_channel_scale_shape),
      cmocka_unit_test(V39_local_window_size),
      cmocka_unit_test(V40_is_causal_values),
      cmocka_unit_test(V40_non_causal_with_window),
      cmocka_unit_test(V41_softcap),
      cmocka_unit_test(V41_scale),
      cmocka_unit_test(V42_do_rotary_and_interleaved_values),
      cmocka_unit_test(V48_negative_dim),
      cmocka_unit_test(V48_rank_outside_0_to_4),
      cmocka_unit_test(V48_unknown_dtype),
      cmocka_unit_test(V48_absent_descriptor_not_inspected),
      cmocka_unit_test(V50_tensor_byte_size_fits_int64),
      cmocka_unit_test(V50_empty_tensor_extents_fit_int64),
      cmocka_unit_test(V50_rows_per_token_fit_int32),
      cmocka_unit_test(resolved_defaults),
      cmocka_unit_test(resolved_attributes_given),
      cmocka_unit_test(resolved_optional_inputs),
      cmocka_unit_test(resolved_packed),
      cmocka_unit_test(resolved_latent),
      cmocka_unit_test(resolved_bounds),
      cmocka_unit_test(token_count_zero_is_valid),
      cmocka_unit_test(every_mode_and_cache_type_accepted),
      cmocka_unit_test(failed_validation_leaves_no_partial_problem),
  };
  return CASE_RUN_TESTS("validation", tests, argc, argv);
}
