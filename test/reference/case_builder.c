/* Seeded random host cases for the reference executor and the GPU tests (see case_builder.h). */
#include "case_builder.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "host_numeric.h"
#include "test_rng.h"

/* ---- random streams: splitmix64, one stream per (seed, tensor, index) ------------------------- */

static rng rng_stream(uint64_t seed, int tensor, int64_t index) {
  rng r = {seed * 0x2545f4914f6cdd1dull + (uint64_t)tensor * 0x9e3779b97f4a7c15ull};
  r.state ^= (uint64_t)index * 0xd1342543de82ef95ull;
  rng_next(&r);
  return r;
}

/* Uniform in [lo, hi), never exactly 0 when lo < 0 < hi (a zero is nudged). */
static float rng_uniform(rng *r, float lo, float hi) {
  float u = (float)(rng_next(r) >> 40) * (1.0f / 16777216.0f);
  float x = lo + (hi - lo) * u;
  return x == 0.0f ? 0.5f * hi : x;
}

/* Stream ids beyond the input indices. */
enum { STREAM_PAST_K = 100, STREAM_PAST_V, STREAM_CANARY_K, STREAM_CANARY_V, STREAM_BLOCKS };

/* ---- helpers ---------------------------------------------------------------------------------- */

static int is_quantized(pa_dtype t) { return t == PA_DTYPE_INT8 || t == PA_DTYPE_FLOAT8_E4M3FN; }

static pa_tensor_desc describe(pa_dtype dtype, int32_t rank, int64_t d0, int64_t d1, int64_t d2,
                               int64_t d3) {
  pa_tensor_desc d = {dtype, rank, {d0, d1, d2, d3}};
  for (int32_t i = rank; i < 4; i++) d.dims[i] = 0;
  return d;
}

static size_t desc_bytes(const pa_tensor_desc *d) {
  size_t n = pa_dtype_size(d->dtype);
  for (int32_t i = 0; i < d->rank; i++) n *= (size_t)d->dims[i];
  return n;
}

/* Allocates input i per its descriptor (at least one byte, so that an empty tensor is non-NULL). */
static int allocate_input(pa_case *c, int i, pa_tensor_desc d) {
  c->inputs_desc[i] = d;
  c->inputs_bytes[i] = desc_bytes(&d);
  c->inputs[i] = calloc(1, c->inputs_bytes[i] ? c->inputs_bytes[i] : 1);
  return c->inputs[i] != NULL;
}

static void fill_uniform(void *dst, pa_dtype dtype, int64_t count, rng r, float lo, float hi) {
  for (int64_t i = 0; i < count; i++) pa__store_from_float(dtype, dst, i, rng_uniform(&r, lo, hi));
}

static int64_t elements(const pa_tensor_desc *d) {
  int64_t n = 1;
  for (int32_t i = 0; i < d->rank; i++) n *= d->dims[i];
  return n;
}

/* A random cache element: T in [-1, 1], or a random valid quantized byte. */
static void store_canary(void *cache, pa_dtype dtype, int64_t i, rng *r) {
  if (dtype == PA_DTYPE_INT8) {
    ((int8_t *)cache)[i] = (int8_t)((int)(rng_next(r) % 255u) - 127);
  } else if (dtype == PA_DTYPE_FLOAT8_E4M3FN) {
    uint8_t byte;
    do byte = (uint8_t)rng_next(r); while ((byte & 0x7fu) == 0x7fu);
    ((uint8_t *)cache)[i] = byte;
  } else {
    pa__store_from_float(dtype, cache, i, rng_uniform(r, -1.0f, 1.0f));
  }
}

static float case_scale(const pa_case *c, int input, int64_t kv_head, int64_t channel) {
  const pa_tensor_desc *d = &c->inputs_desc[input];
  const float *s = c->inputs[input];
  return d->rank == 1 ? s[0] : s[kv_head * c->config.head_size + channel];
}

/* The past of every sequence: generated per (sequence, position), stored where the table maps it. */
static void fill_past(pa_case *c, int cache_input, int stream, pa_quant_type quant) {
  const pa_case_config *cfg = &c->config;
  pa_dtype dtype = c->inputs_desc[cache_input].dtype;
  void *cache = c->inputs[cache_input];
  int scale_input = cache_input == PA_IN_KEY_CACHE ? PA_IN_K_SCALE : PA_IN_V_SCALE;
  int32_t kv_heads = cfg->attrs.kv_num_heads, d = cfg->head_size;
  const int32_t *table = c->inputs[PA_IN_BLOCK_TABLE];
  for (int32_t b = 0; b < cfg->batch_size; b++) {
    rng r = rng_stream(cfg->seed, stream, b);
    for (int64_t pos = 0; pos < cfg->past_lens[b]; pos++) {
      int64_t block = pos / cfg->block_size;
      int64_t id = block < c->blocks_per_seq ? table[(int64_t)b * c->blocks_per_seq + block] : -1;
      int mapped = id >= 0 && id < c->num_blocks;
      int64_t slot = id * cfg->block_size + pos % cfg->block_size;
      for (int32_t h = 0; h < kv_heads; h++)
        for (int32_t ch = 0; ch < d; ch++) {
          float x = pa__round_to(cfg->dtype, rng_uniform(&r, -1.0f, 1.0f));
          if (!mapped) continue;
          int64_t at = (slot * kv_heads + h) * d + ch;
          if (is_quantized(dtype) && quant != PA_QUANT_NONE)
            ((uint8_t *)cache)[at] =
                pa__quantize(dtype, x, 1.0f / case_scale(c, scale_input, h, ch));
          else
            pa__store_from_float(dtype, cache, at, x);
        }
    }
  }
}

static void fill_cache(pa_case *c, int cache_input, int canary_stream, int past_stream,
                       pa_quant_type quant) {
  rng r = rng_stream(c->config.seed, canary_stream, 0);
  int64_t n = elements(&c->inputs_desc[cache_input]);
  for (int64_t i = 0; i < n; i++)
    store_canary(c->inputs[cache_input], c->inputs_desc[cache_input].dtype, i, &r);
  fill_past(c, cache_input, past_stream, quant);
}

static int64_t position_of(const pa_case *c, int64_t t, int32_t b) {
  const int32_t *cu = c->inputs[PA_IN_CUMULATIVE_SEQUENCE_LENGTH];
  if (c->config.query_positions) return c->config.query_positions[t];
  return (int64_t)c->config.past_lens[b] + (t - cu[b]);
}

int64_t pa_case_derived_slot(const pa_case *c, int64_t t) {
  const int32_t *cu = c->inputs[PA_IN_CUMULATIVE_SEQUENCE_LENGTH];
  const int32_t *table = c->inputs[PA_IN_BLOCK_TABLE];
  int32_t b = 0;
  while (b < c->config.batch_size && !(t >= cu[b] && t < cu[b + 1])) b++;
  if (b == c->config.batch_size) return -1;
  int64_t pos = position_of(c, t, b);
  int64_t bs = c->config.block_size;
  if (pos < 0 || pos / bs >= c->blocks_per_seq) return -1;
  int64_t id = table[(int64_t)b * c->blocks_per_seq + pos / bs];
  if (id < 0 || id >= c->num_blocks) return -1;
  return id * bs + pos % bs;
}

static int make_block_table(pa_case *c) {
  const pa_case_config *cfg = &c->config;
  int32_t *table = c->inputs[PA_IN_BLOCK_TABLE];
  int64_t entries = (int64_t)cfg->batch_size * c->blocks_per_seq;
  if (cfg->block_table) {
    memcpy(table, cfg->block_table, (size_t)entries * sizeof *table);
    return 1;
  }
  if (entries > c->num_blocks) return 0; /* every sequence owns its own blocks */
  int64_t *order = malloc((size_t)c->num_blocks * sizeof *order);
  if (!order) return 0;
  for (int64_t i = 0; i < c->num_blocks; i++) order[i] = i;
  if (cfg->block_order == PA_CASE_BLOCKS_SHUFFLED) {
    rng r = rng_stream(cfg->seed, STREAM_BLOCKS, 0);
    for (int64_t i = c->num_blocks - 1; i > 0; i--) {
      int64_t k = (int64_t)(rng_next(&r) % (uint64_t)(i + 1));
      int64_t swap = order[i];
      order[i] = order[k];
      order[k] = swap;
    }
  }
  for (int64_t i = 0; i < entries; i++) table[i] = (int32_t)order[i];
  free(order);
  return 1;
}

static void make_rotary_tables(pa_case *c) {
  const pa_tensor_desc *d = &c->inputs_desc[PA_IN_COS_CACHE];
  int64_t half = d->dims[1];
  for (int64_t pos = 0; pos < d->dims[0]; pos++)
    for (int64_t i = 0; i < half; i++) {
      double angle = (double)pos * pow(10000.0, -(double)i / (double)half);
      pa__store_from_float(c->config.dtype, c->inputs[PA_IN_COS_CACHE], pos * half + i,
                           (float)cos(angle));
      pa__store_from_float(c->config.dtype, c->inputs[PA_IN_SIN_CACHE], pos * half + i,
                           (float)sin(angle));
    }
}

static void make_scale(pa_case *c, int input, pa_quant_type quant, pa_dtype cache_dtype) {
  int32_t kv_heads = c->config.attrs.kv_num_heads, d = c->config.head_size;
  pa_tensor_desc desc = quant == PA_QUANT_PER_TENSOR ? describe(PA_DTYPE_FLOAT32, 1, 1, 0, 0, 0)
                                                     : describe(PA_DTYPE_FLOAT32, 3, kv_heads, 1, d, 0);
  if (!allocate_input(c, input, desc)) return;
  /* int8 steps of 0.01..0.02 keep |x| <= 1.27 in range; fp8's 448 covers |x| up to 2.2 */
  float lo = cache_dtype == PA_DTYPE_INT8 ? 0.01f : 0.005f;
  fill_uniform(c->inputs[input], PA_DTYPE_FLOAT32, elements(&desc),
               rng_stream(c->config.seed, input, 0), lo, 2.0f * lo);
}

void pa_case_config_init(pa_case_config *config) {
  static const int32_t default_q_len = 3, default_past = 20;
  memset(config, 0, sizeof *config);
  config->seed = 1;
  pa_attributes_init(&config->attrs);
  config->attrs.num_heads = 4;
  config->attrs.kv_num_heads = 2;
  config->dtype = PA_DTYPE_FLOAT16;
  config->head_size = 16;
  config->batch_size = 1;
  config->q_lens = &default_q_len;
  config->past_lens = &default_past;
  config->block_size = 16;
}

static pa_status build(pa_case *c) {
  pa_case_config *cfg = &c->config;
  const pa_attributes *a = &cfg->attrs;
  int latent = a->kv_cache_layout == PA_KV_CACHE_LAYOUT_LATENT;
  int32_t h = a->num_heads, hk = a->kv_num_heads, d = cfg->head_size, b_count = cfg->batch_size;
  if (!cfg->q_lens || !cfg->past_lens || b_count < 1 || h < 1 || hk < 1 || d < 1)
    return PA_ERROR_INVALID_ARGUMENT;
  if (cfg->cache_dtype == PA_DTYPE_UNDEFINED) cfg->cache_dtype = cfg->dtype;
  c->v_head_size = latent && a->v_head_size ? a->v_head_size : d;

  int64_t max_q = 0, max_kv = 0;
  c->token_count = 0;
  for (int32_t b = 0; b < b_count; b++) {
    int64_t kv = (int64_t)cfg->past_lens[b] + cfg->q_lens[b];
    if (cfg->q_lens[b] > max_q) max_q = cfg->q_lens[b];
    if (kv > max_kv) max_kv = kv;
    c->token_count += cfg->q_lens[b];
  }
  int64_t n = c->token_count, bs = cfg->block_size;
  c->blocks_per_seq = cfg->blocks_per_seq ? cfg->blocks_per_seq
                                          : (int32_t)(max_kv > 0 ? (max_kv + bs - 1) / bs : 1);
  c->num_blocks = cfg->num_blocks ? cfg->num_blocks : (int64_t)b_count * c->blocks_per_seq + 3;
  cfg->blocks_per_seq = c->blocks_per_seq;
  cfg->num_blocks = c->num_blocks;
  int64_t reach = (int64_t)c->blocks_per_seq * bs;
  pa_dtype t = cfg->dtype;

  int ok = 1;
  int64_t query_width = cfg->packed_qkv ? (int64_t)(h + 2 * hk) * d : (int64_t)h * d;
  ok &= allocate_input(c, PA_IN_QUERY, describe(t, 2, n, query_width, 0, 0));
  if (!cfg->packed_qkv) ok &= allocate_input(c, PA_IN_KEY, describe(t, 2, n, (int64_t)hk * d, 0, 0));
  if (!cfg->packed_qkv && !latent)
    ok &= allocate_input(c, PA_IN_VALUE, describe(t, 2, n, (int64_t)hk * d, 0, 0));
  pa_tensor_desc cache = describe(cfg->cache_dtype, 4, c->num_blocks, bs, hk, d);
  c->owns_caches = cfg->key_cache == NULL;
  if (c->owns_caches) {
    ok &= allocate_input(c, PA_IN_KEY_CACHE, cache);
    if (!latent) ok &= allocate_input(c, PA_IN_VALUE_CACHE, cache);
  } else {
    c->inputs_desc[PA_IN_KEY_CACHE] = cache;
    c->inputs_bytes[PA_IN_KEY_CACHE] = desc_bytes(&cache);
    c->inputs[PA_IN_KEY_CACHE] = cfg->key_cache;
    if (!latent) {
      c->inputs_desc[PA_IN_VALUE_CACHE] = cache;
      c->inputs_bytes[PA_IN_VALUE_CACHE] = desc_bytes(&cache);
      c->inputs[PA_IN_VALUE_CACHE] = cfg->value_cache;
    }
  }
  ok &= allocate_input(c, PA_IN_CUMULATIVE_SEQUENCE_LENGTH,
                       describe(PA_DTYPE_INT32, 1, b_count + 1, 0, 0, 0));
  ok &= allocate_input(c, PA_IN_PAST_SEQLENS, describe(PA_DTYPE_INT32, 1, b_count, 0, 0, 0));
  ok &= allocate_input(c, PA_IN_BLOCK_TABLE,
                       describe(PA_DTYPE_INT32, 2, b_count, c->blocks_per_seq, 0, 0));
  if (a->do_rotary) {
    int32_t rotary_dim = cfg->rotary_dim ? cfg->rotary_dim : d - a->rotary_offset;
    int64_t rows = cfg->rotary_positions ? cfg->rotary_positions : reach;
    cfg->rotary_dim = rotary_dim;
    cfg->rotary_positions = rows;
    ok &= allocate_input(c, PA_IN_COS_CACHE, describe(t, 2, rows, rotary_dim / 2, 0, 0));
    ok &= allocate_input(c, PA_IN_SIN_CACHE, describe(t, 2, rows, rotary_dim / 2, 0, 0));
  }
  if (cfg->slots != PA_CASE_SLOTS_NONE)
    ok &= allocate_input(c, PA_IN_SLOT_MAPPING, describe(PA_DTYPE_INT32, 1, n, 0, 0, 0));
  if (cfg->head_sink) ok &= allocate_input(c, PA_IN_HEAD_SINK, describe(t, 1, h, 0, 0, 0));
  if (cfg->qk_norm) {
    ok &= allocate_input(c, PA_IN_Q_NORM_WEIGHT, describe(t, 1, d, 0, 0, 0));
    ok &= allocate_input(c, PA_IN_K_NORM_WEIGHT, describe(t, 1, d, 0, 0, 0));
  }
  if (a->k_quant_type != PA_QUANT_NONE) make_scale(c, PA_IN_K_SCALE, a->k_quant_type, cfg->cache_dtype);
  if (a->v_quant_type != PA_QUANT_NONE) make_scale(c, PA_IN_V_SCALE, a->v_quant_type, cfg->cache_dtype);
  ok &= a->k_quant_type == PA_QUANT_NONE || c->inputs[PA_IN_K_SCALE] != NULL;
  ok &= a->v_quant_type == PA_QUANT_NONE || c->inputs[PA_IN_V_SCALE] != NULL;
  if (cfg->query_positions)
    ok &= allocate_input(c, PA_IN_QUERY_POSITIONS, describe(PA_DTYPE_INT32, 1, n, 0, 0, 0));
  if (cfg->bias_batch) {
    if (!cfg->bias_q_capacity) cfg->bias_q_capacity = max_q;
    if (!cfg->bias_kv_capacity) cfg->bias_kv_capacity = max_kv;
    ok &= allocate_input(c, PA_IN_ATTENTION_BIAS,
                         describe(t, 4, cfg->bias_batch, cfg->bias_heads ? cfg->bias_heads : 1,
                                  cfg->bias_q_capacity, cfg->bias_kv_capacity));
  }
  c->outputs_desc[PA_OUT_OUTPUT] = describe(t, 2, n, (int64_t)h * c->v_head_size, 0, 0);
  if (a->qk_output) {
    if (cfg->qk_dtype == PA_DTYPE_UNDEFINED) cfg->qk_dtype = PA_DTYPE_FLOAT32;
    if (!cfg->qk_capacity) cfg->qk_capacity = reach;
    c->outputs_desc[PA_OUT_QK] = describe(cfg->qk_dtype, 3, h, n, cfg->qk_capacity, 0);
  }
  for (int i = 0; i < PA_NUM_OUTPUTS; i++) {
    if (c->outputs_desc[i].dtype == PA_DTYPE_UNDEFINED) continue;
    c->outputs_bytes[i] = desc_bytes(&c->outputs_desc[i]);
    c->outputs[i] = malloc(c->outputs_bytes[i] ? c->outputs_bytes[i] : 1);
    ok &= c->outputs[i] != NULL;
  }
  if (!ok) return PA_ERROR_OUT_OF_MEMORY;

  /* contents */
  int32_t *cu = c->inputs[PA_IN_CUMULATIVE_SEQUENCE_LENGTH];
  cu[0] = 0;
  for (int32_t b = 0; b < b_count; b++) cu[b + 1] = cu[b] + cfg->q_lens[b];
  memcpy(c->inputs[PA_IN_PAST_SEQLENS], cfg->past_lens, (size_t)b_count * sizeof(int32_t));
  if (!make_block_table(c)) return PA_ERROR_INVALID_ARGUMENT;
  for (int i = 0; i < PA_NUM_INPUTS; i++) {
    if (!c->inputs[i] || c->inputs_desc[i].dtype != t) continue;
    if (i == PA_IN_KEY_CACHE || i == PA_IN_VALUE_CACHE || i == PA_IN_COS_CACHE ||
        i == PA_IN_SIN_CACHE)
      continue;
    int weight = i == PA_IN_Q_NORM_WEIGHT || i == PA_IN_K_NORM_WEIGHT;
    fill_uniform(c->inputs[i], t, elements(&c->inputs_desc[i]), rng_stream(cfg->seed, i, 0),
                 weight ? 0.5f : -1.0f, weight ? 1.5f : 1.0f);
  }
  if (a->do_rotary) make_rotary_tables(c);
  if (cfg->query_positions)
    memcpy(c->inputs[PA_IN_QUERY_POSITIONS], cfg->query_positions, (size_t)n * sizeof(int32_t));
  if (c->owns_caches) {
    fill_cache(c, PA_IN_KEY_CACHE, STREAM_CANARY_K, STREAM_PAST_K, a->k_quant_type);
    if (!latent) fill_cache(c, PA_IN_VALUE_CACHE, STREAM_CANARY_V, STREAM_PAST_V, a->v_quant_type);
  }
  int32_t *slots = c->inputs[PA_IN_SLOT_MAPPING];
  for (int64_t i = 0; slots && i < n; i++)
    slots[i] = cfg->slots == PA_CASE_SLOTS_EXPLICIT ? cfg->slot_mapping[i]
                                                    : (int32_t)pa_case_derived_slot(c, i);
  pa_case_poison_outputs(c);
  return PA_SUCCESS;
}

pa_status pa_case_build(pa_case *c, const pa_case_config *config) {
  memset(c, 0, sizeof *c);
  c->config = *config;
  if (config->slots == PA_CASE_SLOTS_EXPLICIT && !config->slot_mapping) return PA_ERROR_INVALID_ARGUMENT;
  pa_status st = build(c);
  if (st != PA_SUCCESS) pa_case_free(c);
  return st;
}

void pa_case_free(pa_case *c) {
  for (int i = 0; i < PA_NUM_INPUTS; i++) {
    int cache = i == PA_IN_KEY_CACHE || i == PA_IN_VALUE_CACHE;
    if (!cache || c->owns_caches) free(c->inputs[i]);
    c->inputs[i] = NULL;
  }
  for (int i = 0; i < PA_NUM_OUTPUTS; i++) {
    free(c->outputs[i]);
    c->outputs[i] = NULL;
  }
}

pa_status pa_case_plan(const pa_case *c, pa_plan **plan) {
  pa_plan_options options;
  pa_plan_options_init(&options);
  options.device = PA_DEVICE_HOST;
  return pa_plan_create(plan, &c->config.attrs, c->inputs_desc, c->outputs_desc, &options);
}

void pa_case_poison_outputs(pa_case *c) {
  for (int i = 0; i < PA_NUM_OUTPUTS; i++)
    if (c->outputs[i]) memset(c->outputs[i], 0xff, c->outputs_bytes[i]); /* NaN in every float type */
}

pa_status pa_case_run_reference(pa_case *c) {
  pa_plan *plan = NULL;
  pa_status st = pa_case_plan(c, &plan);
  if (st != PA_SUCCESS) return st;
  pa_case_poison_outputs(c);
  st = pa_execute_reference(plan, (const void *const *)c->inputs, c->outputs);
  pa_plan_destroy(plan);
  return st;
}

float pa_case_output(const pa_case *c, int64_t token, int32_t head, int32_t channel) {
  int64_t at = (token * c->config.attrs.num_heads + head) * c->v_head_size + channel;
  return pa__load_as_float(c->config.dtype, c->outputs[PA_OUT_OUTPUT], at);
}

float pa_case_output_qk(const pa_case *c, int32_t head, int64_t token, int64_t key) {
  int64_t at = (head * c->token_count + token) * c->config.qk_capacity + key;
  return pa__load_as_float(c->config.qk_dtype, c->outputs[PA_OUT_QK], at);
}

float pa_case_input(const pa_case *c, int input, int64_t i) {
  return pa__load_as_float(c->inputs_desc[input].dtype, c->inputs[input], i);
}
