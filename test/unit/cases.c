/* Builders of valid requests and the assertions every unit test shares (see cases.h). */
#include "cases.h"

#include <stdio.h>
#include <string.h>

case_config case_config_default(void) {
  case_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.mode = CASE_SEPARATE;
  cfg.dtype = PA_DTYPE_FLOAT16;
  cfg.num_heads = 8;
  cfg.kv_num_heads = 2;
  cfg.head_size = 64;
  cfg.token_count = 5;
  cfg.batch_size = 3;
  cfg.num_blocks = 32;
  cfg.block_size = 16;
  cfg.blocks_per_seq = 4;
  cfg.rotary_positions = 128;
  cfg.qk_dtype = PA_DTYPE_FLOAT32;
  return cfg;
}

case_config case_config_latent(void) {
  case_config cfg = case_config_default();
  cfg.mode = CASE_LATENT;
  cfg.dtype = PA_DTYPE_BFLOAT16;
  cfg.num_heads = 16;
  cfg.kv_num_heads = 1;
  cfg.head_size = 576;
  cfg.v_head_size = 512;
  cfg.scale = 0.1147f; /* DeepSeek's mscale^2 / sqrt(192): never the 1/sqrt(576) default */
  cfg.rotary_dim = 64;
  cfg.rotary_offset = 512;
  return cfg;
}

case_config case_config_decode(void) {
  case_config cfg = case_config_default();
  cfg.num_heads = 32;
  cfg.kv_num_heads = 8;
  cfg.head_size = 128;
  cfg.batch_size = 64;
  cfg.token_count = 64;
  cfg.block_size = 16;
  cfg.blocks_per_seq = 4096 / 16;
  cfg.num_blocks = (int64_t)cfg.batch_size * cfg.blocks_per_seq;
  return cfg;
}

static pa_tensor_desc desc(pa_dtype dtype, int32_t rank, int64_t d0, int64_t d1, int64_t d2,
                           int64_t d3) {
  pa_tensor_desc d = {dtype, rank, {d0, d1, d2, d3}};
  return d;
}

void case_build(pa_case *c, const case_config *cfg) {
  memset(c, 0, sizeof *c);
  pa_attributes_init(&c->attrs);
  pa_attributes *a = &c->attrs;
  const pa_dtype t = cfg->dtype;
  const pa_dtype cache_t = cfg->cache_dtype != PA_DTYPE_UNDEFINED ? cfg->cache_dtype : t;
  const int latent = cfg->mode == CASE_LATENT;
  const int64_t n = cfg->token_count, h = cfg->num_heads, hk = cfg->kv_num_heads,
                d = cfg->head_size;
  const int64_t dv = cfg->v_head_size ? cfg->v_head_size : d;
  const int64_t kv_capacity = (int64_t)cfg->blocks_per_seq * cfg->block_size;

  a->num_heads = cfg->num_heads;
  a->kv_num_heads = cfg->kv_num_heads;
  a->scale = cfg->scale;
  a->v_head_size = cfg->v_head_size;
  a->rotary_offset = cfg->rotary_offset;
  a->kv_cache_layout = latent ? PA_KV_CACHE_LAYOUT_LATENT : PA_KV_CACHE_LAYOUT_SEPARATE;
  const int quantized = cache_t == PA_DTYPE_INT8 || cache_t == PA_DTYPE_FLOAT8_E4M3FN;
  const pa_quant_type quant =
      quantized ? (cfg->quant ? cfg->quant : PA_QUANT_PER_TENSOR) : PA_QUANT_NONE;
  a->k_quant_type = quant;
  a->v_quant_type = latent ? PA_QUANT_NONE : quant;

  c->in[PA_IN_QUERY] = desc(t, 2, n, (cfg->mode == CASE_PACKED ? h + 2 * hk : h) * d, 0, 0);
  if (cfg->mode != CASE_PACKED) c->in[PA_IN_KEY] = desc(t, 2, n, hk * d, 0, 0);
  if (cfg->mode == CASE_SEPARATE) c->in[PA_IN_VALUE] = desc(t, 2, n, hk * d, 0, 0);
  c->in[PA_IN_KEY_CACHE] = desc(cache_t, 4, cfg->num_blocks, cfg->block_size, hk, d);
  if (!latent) c->in[PA_IN_VALUE_CACHE] = c->in[PA_IN_KEY_CACHE];
  c->in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH] = desc(PA_DTYPE_INT32, 1, cfg->batch_size + 1, 0, 0, 0);
  c->in[PA_IN_PAST_SEQLENS] = desc(PA_DTYPE_INT32, 1, cfg->batch_size, 0, 0, 0);
  c->in[PA_IN_BLOCK_TABLE] = desc(PA_DTYPE_INT32, 2, cfg->batch_size, cfg->blocks_per_seq, 0, 0);
  if (cfg->rotary_dim) {
    a->do_rotary = 1;
    c->in[PA_IN_COS_CACHE] = desc(t, 2, cfg->rotary_positions, cfg->rotary_dim / 2, 0, 0);
    c->in[PA_IN_SIN_CACHE] = c->in[PA_IN_COS_CACHE];
  }
  if (cfg->slot_mapping) c->in[PA_IN_SLOT_MAPPING] = desc(PA_DTYPE_INT32, 1, n, 0, 0, 0);
  if (cfg->head_sink) c->in[PA_IN_HEAD_SINK] = desc(t, 1, h, 0, 0, 0);
  if (cfg->qk_norm) {
    c->in[PA_IN_Q_NORM_WEIGHT] = desc(t, 1, d, 0, 0, 0);
    c->in[PA_IN_K_NORM_WEIGHT] = c->in[PA_IN_Q_NORM_WEIGHT];
  }
  if (quant == PA_QUANT_PER_TENSOR) c->in[PA_IN_K_SCALE] = desc(PA_DTYPE_FLOAT32, 1, 1, 0, 0, 0);
  if (quant == PA_QUANT_PER_CHANNEL) c->in[PA_IN_K_SCALE] = desc(PA_DTYPE_FLOAT32, 3, hk, 1, d, 0);
  if (!latent) c->in[PA_IN_V_SCALE] = c->in[PA_IN_K_SCALE];
  if (cfg->metadata) {
    c->in[PA_IN_ATTENTION_METADATA] = desc(PA_DTYPE_INT32, 1, 2, 0, 0, 0);
    c->metadata[0] = cfg->metadata_values[0];
    c->metadata[1] = cfg->metadata_values[1];
    c->pass_metadata = 1;
  }
  if (cfg->query_positions) c->in[PA_IN_QUERY_POSITIONS] = desc(PA_DTYPE_INT32, 1, n, 0, 0, 0);
  if (cfg->bias) c->in[PA_IN_ATTENTION_BIAS] = desc(t, 4, cfg->batch_size, h, n, kv_capacity);

  c->out[PA_OUT_OUTPUT] = desc(t, 2, n, h * dv, 0, 0);
  if (cfg->cache_outputs) {
    c->out[PA_OUT_KEY_CACHE] = c->in[PA_IN_KEY_CACHE];
    if (!latent) c->out[PA_OUT_VALUE_CACHE] = c->in[PA_IN_VALUE_CACHE];
  }
  if (cfg->qk_output) {
    a->qk_output = cfg->qk_output;
    c->out[PA_OUT_QK] = desc(cfg->qk_dtype, 3, h, n, kv_capacity, 0);
  }
  c->device = CASE_HOST;
  c->backend = PA_BACKEND_AUTO;
}

pa_case case_default(void) {
  pa_case c;
  case_config cfg = case_config_default();
  case_build(&c, &cfg);
  return c;
}

pa_status case_validate(const pa_case *c, pa__problem *p) {
  return pa__validate(p, &c->attrs, c->in, c->out, c->pass_metadata ? c->metadata : NULL,
                      c->max_output_qk_bytes ? c->max_output_qk_bytes
                                             : PA_DEFAULT_MAX_OUTPUT_QK_BYTES);
}

void case_assert_status(pa_status status, pa_status want, const char *const *needles) {
  char message[1024];
  pa_last_error_message(message, sizeof message);
  int ok = status == want;
  for (const char *const *needle = needles; ok && *needle; needle++)
    ok = strstr(message, *needle) != NULL;
  if (!ok) {
    fprintf(stderr, "expected %s with a message naming", pa_status_string(want));
    for (const char *const *needle = needles; *needle; needle++)
      fprintf(stderr, " \"%s\"", *needle);
    fprintf(stderr, ";\n     got %s: \"%s\"\n", pa_status_string(status), message);
  }
  assert_true(ok);
}

int case_run_tests(const char *group, const struct CMUnitTest *tests, size_t count, int argc,
                   char **argv) {
  if (argc > 1) {
    size_t i = 0;
    while (i < count && strcmp(tests[i].name, argv[1]) != 0)
      i++;
    if (i == count) {
      fprintf(stderr, "%s: no test named %s\n", group, argv[1]);
      return 1;
    }
    cmocka_set_test_filter(argv[1]);
  }
  return _cmocka_run_group_tests(group, tests, count, NULL, NULL);
}
