/*
 * libFuzzer target: pa_execute_reference on small successful host plans with random device data.
 *
 * Input format (test/fuzz/make_seeds.py writes the seeds in it):
 *   bytes 0..14  the request: one byte per choice of choose_request (mode, types, heads, sizes,
 *                features), each taken modulo its number of options, then up to 6 more for the
 *                metadata values, the bias capacities and output_qk's type and capacity
 *   then         the device data, one selector byte per int32 value, in this order:
 *                cumulative_sequence_length, past_seqlens, block_table, slot_mapping,
 *                query_positions. A selector below the count of interesting values picks one
 *                (-1, INT32_MIN, INT32_MAX, num_blocks * block_size, ...); 255 takes the next 4
 *                bytes, little-endian; any other value keeps the plausible default (increasing
 *                lengths, the identity block table). Where the input ends, defaults fill the rest.
 * Float data (query, key, value, caches, cos/sin, weights, scales, bias) is random, finite and
 * seeded from the input; every buffer is allocated at its exact size, so ASan reports any read or
 * write beyond a tensor.
 *
 * Invariants checked (abort() makes libFuzzer report them): pa_execute_reference succeeds; every
 * output element is written (outputs start as NaN, and finite inputs give finite outputs); output_qk
 * holds finite scores or -inf (mode 1), probabilities in [0, 1] (mode 2); a second run on the same
 * inputs gives the same bytes.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pagedattn/pagedattn.h"

static void check(int ok) {
  if (!ok) abort();
}

typedef struct reader {
  const uint8_t *data;
  size_t size, at;
} reader;

static uint8_t next_byte(reader *rd) { return rd->at < rd->size ? rd->data[rd->at++] : 0; }
static int choose(reader *rd, int options) { return next_byte(rd) % options; }

static pa_tensor_desc desc(pa_dtype dtype, int32_t rank, int64_t d0, int64_t d1, int64_t d2,
                           int64_t d3) {
  pa_tensor_desc d = {dtype, rank, {d0, d1, d2, d3}};
  return d;
}

typedef struct request {
  pa_attributes attrs;
  pa_tensor_desc in[PA_NUM_INPUTS], out[PA_NUM_OUTPUTS];
  int32_t metadata[2];
  int has_metadata;
  int32_t batch, tokens, block_size, per_seq;
  int64_t num_blocks;
} request;

/* One byte per choice (see the input format above): a valid request of a few tokens. */
static void choose_request(request *r, reader *rd) {
  memset(r, 0, sizeof *r);
  pa_attributes *a = &r->attrs;
  pa_attributes_init(a);
  const int mode = choose(rd, 3); /* SEPARATE, PACKED, LATENT */
  const int latent = mode == 2;
  const pa_dtype t = choose(rd, 2) ? PA_DTYPE_BFLOAT16 : PA_DTYPE_FLOAT16;
  const int cache_kind = choose(rd, PA_FP8_KV_CACHE ? 3 : 2); /* T, int8, fp8 */
  const pa_dtype cache_t =
      cache_kind == 0 ? t : cache_kind == 1 ? PA_DTYPE_INT8 : PA_DTYPE_FLOAT8_E4M3FN;
  const int per_channel = choose(rd, 2), kv_choice = choose(rd, 2);
  const pa_quant_type quant = cache_kind == 0 ? PA_QUANT_NONE
                              : per_channel   ? PA_QUANT_PER_CHANNEL
                                              : PA_QUANT_PER_TENSOR;
  const int64_t kv_heads = latent ? 1 : 1 + kv_choice;
  const int64_t heads = kv_heads * (1 << choose(rd, 3));
  const int64_t d = 8 << choose(rd, 3); /* 8, 16, 32 */
  /* block_size 2^30: a block table whose reach dwarfs every key (no blocks, all unmapped) */
  const int block_choice = choose(rd, 3);
  r->block_size = block_choice == 2 ? 1 << 30 : 16 << block_choice;
  r->batch = 1 + choose(rd, 4);
  r->tokens = choose(rd, 9);
  r->per_seq = 1 + choose(rd, 4);
  r->num_blocks = block_choice == 2 ? 0 : choose(rd, 10);
  if (block_choice == 2) next_byte(rd);
  const int features = next_byte(rd), more = next_byte(rd);
  const int64_t n = r->tokens, batch = r->batch;
  const int64_t kv_capacity = (int64_t)r->per_seq * r->block_size;

  a->num_heads = (int32_t)heads;
  a->kv_num_heads = (int32_t)kv_heads;
  a->k_quant_type = quant;
  a->v_quant_type = latent ? PA_QUANT_NONE : quant;
  a->kv_cache_layout = latent ? PA_KV_CACHE_LAYOUT_LATENT : PA_KV_CACHE_LAYOUT_SEPARATE;
  a->softcap = features & 1 ? 5.0f : 0.0f;
  if (features & 2) a->local_window_size = 1 + (more & 7);
  else if (features & 4) a->is_causal = 0;
  int64_t dv = d;
  if (latent && (more & 8)) {
    dv = d / 2;
    a->v_head_size = (int32_t)dv;
  }
  if (a->v_head_size || (features & 8)) a->scale = 0.125f;

  r->in[PA_IN_QUERY] = desc(t, 2, n, (mode == 1 ? heads + 2 * kv_heads : heads) * d, 0, 0);
  if (mode != 1) r->in[PA_IN_KEY] = desc(t, 2, n, kv_heads * d, 0, 0);
  if (mode == 0) r->in[PA_IN_VALUE] = r->in[PA_IN_KEY];
  r->in[PA_IN_KEY_CACHE] = desc(cache_t, 4, r->num_blocks, r->block_size, kv_heads, d);
  if (!latent) r->in[PA_IN_VALUE_CACHE] = r->in[PA_IN_KEY_CACHE];
  r->in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH] = desc(PA_DTYPE_INT32, 1, batch + 1, 0, 0, 0);
  r->in[PA_IN_PAST_SEQLENS] = desc(PA_DTYPE_INT32, 1, batch, 0, 0, 0);
  r->in[PA_IN_BLOCK_TABLE] = desc(PA_DTYPE_INT32, 2, batch, r->per_seq, 0, 0);
  if (features & 16) {
    a->do_rotary = 1;
    a->rotary_interleaved = (more >> 4) & 1;
    a->rotary_offset = d > 8 && (more & 32) ? 8 : 0;
    const int64_t rotary_dim = (d - a->rotary_offset) & ~(int64_t)1;
    r->in[PA_IN_COS_CACHE] = desc(t, 2, 1 + (more & 63), rotary_dim / 2, 0, 0);
    r->in[PA_IN_SIN_CACHE] = r->in[PA_IN_COS_CACHE];
  }
  if (features & 32) r->in[PA_IN_SLOT_MAPPING] = desc(PA_DTYPE_INT32, 1, n, 0, 0, 0);
  if ((features & 64) && !latent) r->in[PA_IN_HEAD_SINK] = desc(t, 1, heads, 0, 0, 0);
  if ((features & 128) && !latent) {
    r->in[PA_IN_Q_NORM_WEIGHT] = desc(t, 1, d, 0, 0, 0);
    r->in[PA_IN_K_NORM_WEIGHT] = r->in[PA_IN_Q_NORM_WEIGHT];
  }
  if (quant == PA_QUANT_PER_TENSOR) r->in[PA_IN_K_SCALE] = desc(PA_DTYPE_FLOAT32, 1, 1, 0, 0, 0);
  if (quant == PA_QUANT_PER_CHANNEL)
    r->in[PA_IN_K_SCALE] = desc(PA_DTYPE_FLOAT32, 3, kv_heads, 1, d, 0);
  if (!latent) r->in[PA_IN_V_SCALE] = r->in[PA_IN_K_SCALE];
  const int extras = next_byte(rd);
  if (extras & 1) {
    r->has_metadata = 1;
    r->in[PA_IN_ATTENTION_METADATA] = desc(PA_DTYPE_INT32, 1, 2, 0, 0, 0);
    r->metadata[0] = next_byte(rd) % 12;
    r->metadata[1] = next_byte(rd) % 200;
  }
  if (extras & 2) r->in[PA_IN_QUERY_POSITIONS] = desc(PA_DTYPE_INT32, 1, n, 0, 0, 0);
  if (extras & 4) {
    const int64_t q_capacity = next_byte(rd) % 10;
    const int64_t bias_kv_capacity = next_byte(rd) % (kv_capacity + 8);
    r->in[PA_IN_ATTENTION_BIAS] = desc(t, 4, extras & 8 ? batch : 1, extras & 16 ? heads : 1,
                                       q_capacity, bias_kv_capacity);
  }
  r->out[PA_OUT_OUTPUT] = desc(t, 2, n, heads * dv, 0, 0);
  if (extras & 32) {
    a->qk_output = 1 + ((extras >> 6) & 1);
    const pa_dtype qk_types[3] = {PA_DTYPE_FLOAT32, PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16};
    const pa_dtype qk_type = qk_types[next_byte(rd) % 3];
    r->out[PA_OUT_QK] = desc(qk_type, 3, heads, n, next_byte(rd) % (kv_capacity + 8), 0);
  }
}

static size_t elements(const pa_tensor_desc *d) {
  size_t count = 1;
  for (int32_t axis = 0; axis < d->rank; axis++) count *= (size_t)d->dims[axis];
  return count;
}

/* xorshift64*: the float data's generator, seeded from the input */
static uint64_t rng_state;
static uint32_t random_u32(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (uint32_t)((rng_state * 0x2545F4914F6CDD1DULL) >> 32);
}
/* uniform in [lo, hi) */
static float random_float(float lo, float hi) {
  return lo + (hi - lo) * (float)(random_u32() >> 8) / 16777216.0f;
}

static uint16_t to_half(float x) { /* finite, |x| < 4: no overflow or subnormal care needed */
  uint32_t bits;
  memcpy(&bits, &x, 4);
  uint16_t sign = (uint16_t)((bits >> 16) & 0x8000);
  float magnitude = fabsf(x);
  if (magnitude < 6.1e-5f) return sign;
  int exponent;
  float mantissa = frexpf(magnitude, &exponent); /* [0.5, 1) */
  return (uint16_t)(sign | (uint16_t)((exponent + 14) << 10) |
                    (uint16_t)((int)((mantissa * 2.0f - 1.0f) * 1024.0f) & 0x3ff));
}

/* Fills a tensor with finite values in [lo, hi) (8-bit caches: any code but fp8 NaN). */
static void fill(void *buffer, const pa_tensor_desc *d, float lo, float hi) {
  size_t count = elements(d);
  for (size_t i = 0; i < count; i++) {
    switch (d->dtype) {
    case PA_DTYPE_FLOAT32: ((float *)buffer)[i] = random_float(lo, hi); break;
    case PA_DTYPE_FLOAT16: ((uint16_t *)buffer)[i] = to_half(random_float(lo, hi)); break;
    case PA_DTYPE_BFLOAT16: {
      float x = random_float(lo, hi);
      uint32_t bits;
      memcpy(&bits, &x, 4);
      ((uint16_t *)buffer)[i] = (uint16_t)(bits >> 16);
      break;
    }
    case PA_DTYPE_FLOAT8_E4M3FN: {
      uint8_t code = (uint8_t)random_u32();
      ((uint8_t *)buffer)[i] = (code & 0x7f) == 0x7f ? 0 : code;
      break;
    }
    default: ((uint8_t *)buffer)[i] = (uint8_t)random_u32(); break;
    }
  }
}

static float load(const void *buffer, pa_dtype dtype, size_t i) {
  uint32_t bits;
  float x;
  switch (dtype) {
  case PA_DTYPE_FLOAT32: return ((const float *)buffer)[i];
  case PA_DTYPE_BFLOAT16: bits = (uint32_t)((const uint16_t *)buffer)[i] << 16; break;
  default: { /* float16 */
    uint16_t h = ((const uint16_t *)buffer)[i];
    uint32_t exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    if (exponent == 0x1f) return mantissa ? NAN : (h & 0x8000 ? -INFINITY : INFINITY);
    x = ldexpf((float)(exponent ? mantissa | 0x400 : mantissa), (int)(exponent ? exponent : 1) - 25);
    return h & 0x8000 ? -x : x;
  }
  }
  memcpy(&x, &bits, 4);
  return x;
}

static const int32_t interesting_int32[] = {-1, 0, 1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 32, 33,
                                            63, 64, 100, 1 << 24, INT32_MIN, INT32_MIN + 1,
                                            INT32_MAX, INT32_MAX - 1, -2, -16, -1000000};
enum { INTERESTING_INT32 = sizeof interesting_int32 / sizeof interesting_int32[0] };

/* One device int32: interesting, raw, or the default. */
static int32_t device_value(reader *rd, int32_t fallback, int32_t capacity) {
  if (rd->at >= rd->size) return fallback;
  uint8_t selector = next_byte(rd);
  if (selector < INTERESTING_INT32) return interesting_int32[selector];
  if (selector == INTERESTING_INT32) return capacity;     /* num_blocks * block_size */
  if (selector == INTERESTING_INT32 + 1) return capacity - 1;
  if (selector == 255) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)next_byte(rd) << (8 * i);
    return (int32_t)v;
  }
  return fallback;
}

static void fill_device_data(const request *r, void *const buffers[PA_NUM_INPUTS], reader *rd) {
  const int32_t capacity = (int32_t)(r->num_blocks * r->block_size);
  int32_t *cu = buffers[PA_IN_CUMULATIVE_SEQUENCE_LENGTH], *past = buffers[PA_IN_PAST_SEQLENS],
          *table = buffers[PA_IN_BLOCK_TABLE];
  for (int32_t b = 0; b <= r->batch; b++)
    cu[b] = device_value(rd, (int32_t)((int64_t)r->tokens * b / r->batch), capacity);
  for (int32_t b = 0; b < r->batch; b++) past[b] = device_value(rd, 3 * b, capacity);
  for (int32_t i = 0; i < r->batch * r->per_seq; i++)
    table[i] = device_value(rd, r->num_blocks ? (int32_t)(i % r->num_blocks) : -1, capacity);
  int32_t *slots = buffers[PA_IN_SLOT_MAPPING], *positions = buffers[PA_IN_QUERY_POSITIONS];
  for (int32_t t = 0; slots && t < r->tokens; t++) slots[t] = device_value(rd, t, capacity);
  for (int32_t t = 0; positions && t < r->tokens; t++) positions[t] = device_value(rd, t, capacity);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  reader rd = {data, size, 0};
  request r;
  choose_request(&r, &rd);
  rng_state = 0x9E3779B97F4A7C15ULL;
  for (size_t i = 0; i < size; i++) rng_state = (rng_state ^ data[i]) * 0x100000001B3ULL;
  if (!rng_state) rng_state = 1;

  pa_plan_options options;
  pa_plan_options_init(&options);
  options.device = PA_DEVICE_HOST;
  if (r.has_metadata) options.attention_metadata = r.metadata;
  pa_plan *plan = NULL;
  if (pa_plan_create(&plan, &r.attrs, r.in, r.out, &options) != PA_SUCCESS) return 0;

  /* exact-size buffers (at least 1 byte, so that present inputs are non-NULL) */
  void *in[PA_NUM_INPUTS] = {0}, *out[PA_NUM_OUTPUTS] = {0}, *cache_copy[2] = {0};
  size_t bytes_in[PA_NUM_INPUTS] = {0}, bytes_out[PA_NUM_OUTPUTS] = {0};
  for (int i = 0; i < PA_NUM_INPUTS; i++) {
    if (r.in[i].dtype == PA_DTYPE_UNDEFINED || i == PA_IN_ATTENTION_METADATA) continue;
    bytes_in[i] = elements(&r.in[i]) * pa_dtype_size(r.in[i].dtype);
    in[i] = malloc(bytes_in[i] ? bytes_in[i] : 1);
    check(in[i] != NULL);
    float lo = -2.0f, hi = 2.0f;
    if (i == PA_IN_K_SCALE || i == PA_IN_V_SCALE) lo = 0.01f, hi = 1.0f;
    if (i == PA_IN_Q_NORM_WEIGHT || i == PA_IN_K_NORM_WEIGHT) lo = 0.5f, hi = 1.5f;
    fill(in[i], &r.in[i], lo, hi);
  }
  for (int i = 0; i < PA_NUM_OUTPUTS; i++) {
    if (r.out[i].dtype == PA_DTYPE_UNDEFINED || i == PA_OUT_KEY_CACHE || i == PA_OUT_VALUE_CACHE)
      continue;
    bytes_out[i] = elements(&r.out[i]) * pa_dtype_size(r.out[i].dtype);
    out[i] = malloc(bytes_out[i] ? bytes_out[i] : 1);
    check(out[i] != NULL);
  }
  fill_device_data(&r, in, &rd);
  for (int c = 0; c < 2; c++) {
    int i = c ? PA_IN_VALUE_CACHE : PA_IN_KEY_CACHE;
    if (!in[i]) continue;
    cache_copy[c] = malloc(bytes_in[i] ? bytes_in[i] : 1);
    check(cache_copy[c] != NULL);
    memcpy(cache_copy[c], in[i], bytes_in[i]);
  }

  void *first[PA_NUM_OUTPUTS] = {0};
  for (int run = 0; run < 2; run++) {
    for (int i = 0; i < PA_NUM_OUTPUTS; i++)
      if (out[i]) memset(out[i], 0xff, bytes_out[i]); /* NaN in every float type */
    check(pa_execute_reference(plan, (const void *const *)in, out) == PA_SUCCESS);
    for (int i = 0; i < PA_NUM_OUTPUTS; i++) {
      if (!out[i]) continue;
      if (run == 0) {
        first[i] = malloc(bytes_out[i] ? bytes_out[i] : 1);
        check(first[i] != NULL);
        memcpy(first[i], out[i], bytes_out[i]);
      } else {
        check(memcmp(first[i], out[i], bytes_out[i]) == 0);
      }
    }
    for (int c = 0; c < 2; c++) /* the same caches for the second run */
      if (cache_copy[c])
        memcpy(in[c ? PA_IN_VALUE_CACHE : PA_IN_KEY_CACHE], cache_copy[c],
               bytes_in[c ? PA_IN_VALUE_CACHE : PA_IN_KEY_CACHE]);
  }
  for (size_t i = 0; i < elements(&r.out[PA_OUT_OUTPUT]); i++)
    check(isfinite(load(out[PA_OUT_OUTPUT], r.out[PA_OUT_OUTPUT].dtype, i)));
  if (out[PA_OUT_QK])
    for (size_t i = 0; i < elements(&r.out[PA_OUT_QK]); i++) {
      float x = load(out[PA_OUT_QK], r.out[PA_OUT_QK].dtype, i);
      check(r.attrs.qk_output == 1 ? (isfinite(x) || x == -INFINITY) : (x >= 0.0f && x <= 1.0f));
    }

  for (int i = 0; i < PA_NUM_INPUTS; i++) free(in[i]);
  for (int i = 0; i < PA_NUM_OUTPUTS; i++) {
    free(out[i]);
    free(first[i]);
  }
  free(cache_copy[0]);
  free(cache_copy[1]);
  pa_plan_destroy(plan);
  return 0;
}
