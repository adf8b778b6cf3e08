/*
 * pa__validate: every request rule (doc/semantics.md and doc/api.md, "pa_plan_create"; their ids
 * V01..V42, V48, V50 name the tests of test/unit/test_validation.c), in this order: descriptors,
 * attributes, then one function per input group. Each failure names the tensor or attribute, the
 * expected value and the actual one. On success *p holds the resolved request.
 *
 * Plans are created per step, so this stays a straight line of integer comparisons: no allocation,
 * no formatting unless a rule fails.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

#ifndef PA_FP8_KV_CACHE
#error "PA_FP8_KV_CACHE must be defined to 0 or 1 by the build"
#endif

const char *const pa__input_names[PA_NUM_INPUTS] = {
    "query", "key", "value", "key_cache", "value_cache", "cumulative_sequence_length",
    "past_seqlens", "block_table", "cos_cache", "sin_cache", "slot_mapping", "head_sink",
    "q_norm_weight", "k_norm_weight", "k_scale", "v_scale", "attention_metadata",
    "query_positions", "attention_bias"};
static const char *const output_names[PA_NUM_OUTPUTS] = {"output", "key_cache_out",
                                                         "value_cache_out", "output_qk"};

static const char *dtype_name(pa_dtype t) {
  switch (t) {
  case PA_DTYPE_UNDEFINED: return "absent";
  case PA_DTYPE_FLOAT32: return "float32";
  case PA_DTYPE_FLOAT16: return "float16";
  case PA_DTYPE_BFLOAT16: return "bfloat16";
  case PA_DTYPE_INT8: return "int8";
  case PA_DTYPE_FLOAT8_E4M3FN: return "float8e4m3fn";
  case PA_DTYPE_INT32: return "int32";
  case PA_DTYPE_UINT8: return "uint8";
  }
  return "unknown";
}

static const char *quant_name(pa_quant_type q) {
  switch (q) {
  case PA_QUANT_NONE: return "NONE";
  case PA_QUANT_PER_TENSOR: return "PER_TENSOR";
  case PA_QUANT_PER_CHANNEL: return "PER_CHANNEL";
  }
  return "unknown";
}

static const char *layout_name(pa_kv_cache_layout l) {
  return l == PA_KV_CACHE_LAYOUT_LATENT ? "LATENT" : "SEPARATE";
}

/* The tensor type a cache dtype attribute names (UNDEFINED for DEFAULT and the reserved ones). */
static pa_dtype cache_dtype_tensor_type(pa_cache_dtype c) {
  switch (c) {
  case PA_CACHE_DTYPE_FLOAT16: return PA_DTYPE_FLOAT16;
  case PA_CACHE_DTYPE_BFLOAT16: return PA_DTYPE_BFLOAT16;
  case PA_CACHE_DTYPE_INT8: return PA_DTYPE_INT8;
  case PA_CACHE_DTYPE_FLOAT8E4M3FN: return PA_DTYPE_FLOAT8_E4M3FN;
  default: return PA_DTYPE_UNDEFINED;
  }
}

static int present(const pa_tensor_desc *d) { return d->dtype != PA_DTYPE_UNDEFINED; }
static int is_float_activation(pa_dtype t) {
  return t == PA_DTYPE_FLOAT16 || t == PA_DTYPE_BFLOAT16;
}
static int is_quantized(pa_dtype t) { return t == PA_DTYPE_INT8 || t == PA_DTYPE_FLOAT8_E4M3FN; }
static int is_power_of_two(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

/* "(2, 1, 64)": a descriptor's shape for messages ("(2,)" for rank 1, "()" for rank 0). */
typedef struct shape_text {
  char text[100];
} shape_text;

static shape_text shape_of(const pa_tensor_desc *d) {
  shape_text s;
  size_t used = (size_t)snprintf(s.text, sizeof s.text, "(");
  for (int32_t axis = 0; axis < d->rank && axis < 4 && used < sizeof s.text; axis++)
    used += (size_t)snprintf(s.text + used, sizeof s.text - used, axis ? ", %lld" : "%lld",
                             (long long)d->dims[axis]);
  if (used < sizeof s.text)
    snprintf(s.text + used, sizeof s.text - used, d->rank == 1 ? ",)" : ")");
  return s;
}

static int same_shape(const pa_tensor_desc *a, const pa_tensor_desc *b) {
  if (a->rank != b->rank) return 0;
  for (int32_t axis = 0; axis < a->rank; axis++)
    if (a->dims[axis] != b->dims[axis]) return 0;
  return 1;
}

/* ---- shape helpers: each names the tensor, the expectation and what was given ---------------- */

static pa_status expect_rank(const char *name, const pa_tensor_desc *d, int32_t rank) {
  if (d->rank != rank)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT, "%s: rank must be %d, got %d", name, rank, d->rank);
  return PA_SUCCESS;
}

static pa_status expect_dtype(const char *name, const pa_tensor_desc *d, pa_dtype want,
                              const char *why) {
  if (d->dtype != want)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT, "%s: dtype must be %s%s, got %s", name,
                    dtype_name(want), why, dtype_name(d->dtype));
  return PA_SUCCESS;
}

static pa_status expect_dim(const char *name, const pa_tensor_desc *d, int axis, int64_t want,
                            const char *what) {
  if (d->dims[axis] != want)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT, "%s: dim%d must be %s (%lld), got %lld", name, axis,
                    what, (long long)want, (long long)d->dims[axis]);
  return PA_SUCCESS;
}

/* A present tensor of rank 1 and type T (head_sink, the QK-Norm weights) with `length` entries. */
static pa_status expect_vector(const char *name, const pa_tensor_desc *d, pa_dtype type,
                               const char *type_why, int64_t length, const char *length_what) {
  pa_status st = expect_rank(name, d, 1);
  if (st == PA_SUCCESS) st = expect_dtype(name, d, type, type_why);
  if (st == PA_SUCCESS) st = expect_dim(name, d, 0, length, length_what);
  return st;
}

/* ---- V48: every present descriptor is well formed -------------------------------------------- */

static pa_status check_descriptor(const char *name, const pa_tensor_desc *d) {
  if ((int)d->dtype < (int)PA_DTYPE_UNDEFINED || (int)d->dtype > (int)PA_DTYPE_UINT8)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT, "%s: dtype must be a pa_dtype value, got %d", name,
                    (int)d->dtype);
  if (!present(d)) return PA_SUCCESS;
  if (d->rank < 0 || d->rank > 4)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT, "%s: rank must be in [0, 4], got %d", name, d->rank);
  for (int32_t axis = 0; axis < d->rank; axis++)
    if (d->dims[axis] < 0)
      return pa__fail(PA_ERROR_INVALID_ARGUMENT, "%s: dim%d must be >= 0, got %lld", name, axis,
                      (long long)d->dims[axis]);
  return PA_SUCCESS;
}

/* ---- V50: every present tensor's byte size fits in int64 ------------------------------------ */

/* A descriptor's size in bytes, or -1 when it does not fit in int64. With zero_dims_as_one, the
 * size it has with each zero dim taken as 1: the extents that strides and offsets are computed
 * from, even for an empty tensor. */
static int64_t byte_size(const pa_tensor_desc *d, int zero_dims_as_one) {
  int64_t bytes = (int64_t)pa_dtype_size(d->dtype);
  for (int32_t axis = 0; axis < d->rank; axis++) {
    const int64_t dim = d->dims[axis] == 0 && zero_dims_as_one ? 1 : d->dims[axis];
    if (!pa__mul_i64(bytes, dim, &bytes)) return -1;
  }
  return bytes;
}

/* Both sizes must fit in int64: every product of a tensor's dims the library forms
 * (num_blocks * block_size, token_count * row elements, ...) is then in range. Runs after V48, so
 * dims are >= 0 and the rank is 0..4. */
static pa_status check_byte_size(const char *name, const pa_tensor_desc *d) {
  if (!present(d) || byte_size(d, 1) >= 0) return PA_SUCCESS; /* the larger of the two */
  return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                  "%s: byte size (zero dims taken as 1) must fit in int64 (at most %lld bytes), "
                  "got shape %s of %s (%zu bytes each)",
                  name, (long long)INT64_MAX, shape_of(d).text, dtype_name(d->dtype),
                  pa_dtype_size(d->dtype));
}

static pa_status check_descriptors(const pa_tensor_desc in[PA_NUM_INPUTS],
                                   const pa_tensor_desc out[PA_NUM_OUTPUTS]) {
  for (int i = 0; i < PA_NUM_INPUTS; i++) {
    pa_status st = check_descriptor(pa__input_names[i], &in[i]);
    if (st == PA_SUCCESS) st = check_byte_size(pa__input_names[i], &in[i]);
    if (st != PA_SUCCESS) return st;
  }
  for (int i = 0; i < PA_NUM_OUTPUTS; i++) {
    pa_status st = check_descriptor(output_names[i], &out[i]);
    if (st == PA_SUCCESS) st = check_byte_size(output_names[i], &out[i]);
    if (st != PA_SUCCESS) return st;
  }
  return PA_SUCCESS;
}

/* ---- attributes that stand on their own (V01, V19, V33, V39..V42) ---------------------------- */

static pa_status check_attributes(pa__problem *p, const pa_attributes *a) {
  if (a->num_heads <= 0)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT, "num_heads: must be > 0, got %d", a->num_heads);
  if (a->kv_num_heads <= 0)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT, "kv_num_heads: must be > 0, got %d",
                    a->kv_num_heads);
  if (a->num_heads % a->kv_num_heads != 0)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT, "kv_num_heads: must divide num_heads (%d), got %d",
                    a->num_heads, a->kv_num_heads);
  /* V50: the write path's rows per token (Q, K and V heads) is an int32 on the device */
  if ((int64_t)a->num_heads + 2 * (int64_t)a->kv_num_heads > INT32_MAX)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "num_heads: num_heads + 2 * kv_num_heads (rows per token) must be at most %d, "
                    "got %lld",
                    INT32_MAX, (long long)a->num_heads + 2 * (long long)a->kv_num_heads);
  if ((int)a->kv_cache_layout != PA_KV_CACHE_LAYOUT_SEPARATE &&
      (int)a->kv_cache_layout != PA_KV_CACHE_LAYOUT_LATENT)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "kv_cache_layout: must be SEPARATE or LATENT, got value %d",
                    (int)a->kv_cache_layout);
  if ((int)a->k_quant_type < (int)PA_QUANT_NONE || (int)a->k_quant_type > (int)PA_QUANT_PER_CHANNEL)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "k_quant_type: must be NONE, PER_TENSOR or PER_CHANNEL, got value %d",
                    (int)a->k_quant_type);
  if ((int)a->v_quant_type < (int)PA_QUANT_NONE || (int)a->v_quant_type > (int)PA_QUANT_PER_CHANNEL)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "v_quant_type: must be NONE, PER_TENSOR or PER_CHANNEL, got value %d",
                    (int)a->v_quant_type);
  if ((int)a->k_cache_dtype < (int)PA_CACHE_DTYPE_DEFAULT ||
      (int)a->k_cache_dtype > (int)PA_CACHE_DTYPE_FLOAT4E2M1)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "k_cache_dtype: must be a pa_cache_dtype value, got %d", (int)a->k_cache_dtype);
  if ((int)a->v_cache_dtype < (int)PA_CACHE_DTYPE_DEFAULT ||
      (int)a->v_cache_dtype > (int)PA_CACHE_DTYPE_FLOAT4E2M1)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "v_cache_dtype: must be a pa_cache_dtype value, got %d", (int)a->v_cache_dtype);
  if (a->local_window_size != -1 && a->local_window_size < 1)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "local_window_size: must be -1 (off) or >= 1, got %d", a->local_window_size);
  if (a->is_causal != 0 && a->is_causal != 1)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT, "is_causal: must be 0 or 1, got %d", a->is_causal);
  if (a->is_causal == 0 && a->local_window_size != -1)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "is_causal: must be 1 when local_window_size is set (%d), got 0",
                    a->local_window_size);
  if (!(a->softcap >= 0.0f && a->softcap <= FLT_MAX))
    return pa__fail(PA_ERROR_INVALID_ARGUMENT, "softcap: must be finite and >= 0, got %g",
                    (double)a->softcap);
  if (!(a->scale >= 0.0f && a->scale <= FLT_MAX))
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "scale: must be finite and >= 0 (0 = 1/sqrt(head_size)), got %g",
                    (double)a->scale);
  if (!(a->qk_norm_epsilon >= 0.0f && a->qk_norm_epsilon <= FLT_MAX))
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "qk_norm_epsilon: must be finite and > 0 (0 = 1e-6), got %g",
                    (double)a->qk_norm_epsilon);
  if (a->do_rotary != 0 && a->do_rotary != 1)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT, "do_rotary: must be 0 or 1, got %d", a->do_rotary);
  if (a->rotary_interleaved != 0 && a->rotary_interleaved != 1)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT, "rotary_interleaved: must be 0 or 1, got %d",
                    a->rotary_interleaved);
  if (a->rotary_offset < 0 || a->rotary_offset % 8 != 0)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "rotary_offset: must be a non-negative multiple of 8, got %d",
                    a->rotary_offset);
  if (a->qk_output < 0 || a->qk_output > 2)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT, "qk_output: must be 0, 1 or 2, got %d",
                    a->qk_output);

  p->num_heads = a->num_heads;
  p->kv_num_heads = a->kv_num_heads;
  p->group_size = a->num_heads / a->kv_num_heads;
  p->softcap = a->softcap;
  p->window = a->local_window_size;
  p->is_causal = a->is_causal;
  p->do_rotary = a->do_rotary;
  p->rotary_interleaved = a->rotary_interleaved;
  p->rotary_offset = a->rotary_offset;
  p->qk_norm_epsilon = a->qk_norm_epsilon != 0.0f ? a->qk_norm_epsilon : 1e-6f;
  p->k_quant = a->k_quant_type;
  p->v_quant = a->v_quant_type;
  p->qk_output = a->qk_output;
  return PA_SUCCESS;
}

/* ---- query / key / value and the input mode (V02..V06, V36) ---------------------------------- */

static pa_status check_query_key_value(pa__problem *p, const pa_attributes *a,
                                       const pa_tensor_desc in[PA_NUM_INPUTS]) {
  const pa_tensor_desc *query = &in[PA_IN_QUERY], *key = &in[PA_IN_KEY], *value = &in[PA_IN_VALUE];
  const int latent = a->kv_cache_layout == PA_KV_CACHE_LAYOUT_LATENT;
  if (!present(query)) return pa__fail(PA_ERROR_INVALID_ARGUMENT, "query: required, got absent");
  pa_status st = expect_rank("query", query, 2);
  if (st != PA_SUCCESS) return st;
  if (!is_float_activation(query->dtype))
    return pa__fail(PA_ERROR_INVALID_ARGUMENT, "query: dtype must be float16 or bfloat16, got %s",
                    dtype_name(query->dtype));
  if (query->dims[0] > INT32_MAX)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "query: dim0 (token_count) must be at most %d (cumulative_sequence_length is "
                    "int32), got %lld",
                    INT32_MAX, (long long)query->dims[0]);
  p->dtype = query->dtype;
  p->token_count = query->dims[0];

  if (latent) {
    if (!present(key))
      return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                      "key: required (the latent row) when kv_cache_layout is LATENT, got absent");
    if (present(value))
      return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                      "value: must be absent when kv_cache_layout is LATENT (V is a view of the "
                      "latent row), got %s",
                      dtype_name(value->dtype));
    if (a->kv_num_heads != 1)
      return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                      "kv_num_heads: must be 1 when kv_cache_layout is LATENT, got %d",
                      a->kv_num_heads);
    p->input_mode = PA__MODE_LATENT;
  } else if (present(key) != present(value)) {
    return pa__fail(
        PA_ERROR_INVALID_ARGUMENT,
        "%s: key and value must be both present or both absent, got key %s and value %s",
        present(key) ? "value" : "key", present(key) ? "present" : "absent",
        present(value) ? "present" : "absent");
  } else {
    p->input_mode = present(key) ? PA__MODE_SEPARATE : PA__MODE_PACKED;
  }

  /* head_size comes from the query row: H heads, or H + 2*Hk in packed mode */
  const int64_t heads_in_row = p->input_mode == PA__MODE_PACKED
                                   ? (int64_t)a->num_heads + 2 * (int64_t)a->kv_num_heads
                                   : a->num_heads;
  if (query->dims[1] % heads_in_row != 0)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    p->input_mode == PA__MODE_PACKED
                        ? "query: packed QKV dim1 must be a multiple of num_heads + 2 * "
                          "kv_num_heads (%lld), got %lld"
                        : "query: dim1 must be a multiple of num_heads (%lld), got %lld",
                    (long long)heads_in_row, (long long)query->dims[1]);
  const int64_t head_size = query->dims[1] / heads_in_row;
  const int64_t max_head_size = latent ? 576 : 256;
  if (head_size <= 0 || head_size % 8 != 0 || head_size > max_head_size)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "head_size: must be a positive multiple of 8 up to %lld in kv_cache_layout %s, "
                    "got %lld (query dim1 %lld / %lld heads)",
                    (long long)max_head_size, layout_name(a->kv_cache_layout), (long long)head_size,
                    (long long)query->dims[1], (long long)heads_in_row);
  p->head_size = (int32_t)head_size;

  if (p->input_mode == PA__MODE_PACKED) return PA_SUCCESS;
  const int64_t kv_row = (int64_t)a->kv_num_heads * head_size;
  const pa_tensor_desc *const kv[2] = {key, value};
  const char *const kv_names[2] = {"key", "value"};
  for (int i = 0; i < (latent ? 1 : 2); i++) {
    if ((st = expect_rank(kv_names[i], kv[i], 2)) != PA_SUCCESS ||
        (st = expect_dtype(kv_names[i], kv[i], p->dtype, " (query's type)")) != PA_SUCCESS ||
        (st = expect_dim(kv_names[i], kv[i], 0, p->token_count, "token_count")) != PA_SUCCESS ||
        (st = expect_dim(kv_names[i], kv[i], 1, kv_row, "kv_num_heads * head_size")) != PA_SUCCESS)
      return st;
  }
  return PA_SUCCESS;
}

/* ---- caches (V06 value_cache presence, V07, V08, V12, V23, V24) ------------------------------ */

/* V23 for one cache: its dtype attribute is "" or names the cache tensor's own type. */
static pa_status check_cache_dtype_attribute(const char *attribute, pa_cache_dtype named,
                                             const char *cache_name, pa_dtype cache_type) {
  if (named == PA_CACHE_DTYPE_INT4 || named == PA_CACHE_DTYPE_FLOAT4E2M1)
    return pa__fail(
        PA_ERROR_INVALID_ARGUMENT,
        "%s: \"%s\" is reserved for a packed sub-byte cache that no backend serves yet; "
        "expected \"\" or %s",
        attribute, named == PA_CACHE_DTYPE_INT4 ? "int4" : "float4e2m1", dtype_name(cache_type));
  if (named != PA_CACHE_DTYPE_DEFAULT && cache_dtype_tensor_type(named) != cache_type)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT, "%s: must be \"\" or %s's own type %s, got %s",
                    attribute, cache_name, dtype_name(cache_type),
                    dtype_name(cache_dtype_tensor_type(named)));
  return PA_SUCCESS;
}

static pa_status check_caches(pa__problem *p, const pa_attributes *a,
                              const pa_tensor_desc in[PA_NUM_INPUTS]) {
  const pa_tensor_desc *key_cache = &in[PA_IN_KEY_CACHE], *value_cache = &in[PA_IN_VALUE_CACHE];
  if (!present(key_cache))
    return pa__fail(PA_ERROR_INVALID_ARGUMENT, "key_cache: required, got absent");
  pa_status st = expect_rank("key_cache", key_cache, 4);
  if (st != PA_SUCCESS) return st;
  const pa_dtype cache_type = key_cache->dtype;
  if (!is_float_activation(cache_type) && !is_quantized(cache_type))
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "key_cache: dtype must be float16, bfloat16, int8 or float8e4m3fn, got %s",
                    dtype_name(cache_type));
  if (is_float_activation(cache_type) && cache_type != p->dtype)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "key_cache: an unquantized cache must have query's type %s, got %s",
                    dtype_name(p->dtype), dtype_name(cache_type));
  if ((st = expect_dim("key_cache", key_cache, 2, p->kv_num_heads, "kv_num_heads")) != PA_SUCCESS ||
      (st = expect_dim("key_cache", key_cache, 3, p->head_size, "head_size")) != PA_SUCCESS)
    return st;
  const int64_t block_size = key_cache->dims[1];
  if (block_size < 16 || !is_power_of_two(block_size) || block_size > (INT64_C(1) << 30))
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "block_size: key_cache dim1 must be a power of two >= 16, got %lld",
                    (long long)block_size);
  if (cache_type == PA_DTYPE_FLOAT8_E4M3FN && !PA_FP8_KV_CACHE)
    return pa__fail(PA_ERROR_NOT_SUPPORTED,
                    "key_cache: float8e4m3fn caches are not built into this library "
                    "(meson option fp8_kv_cache=false)");

  if (p->input_mode == PA__MODE_LATENT) {
    if (present(value_cache))
      return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                      "value_cache: must be absent when kv_cache_layout is LATENT, got %s",
                      dtype_name(value_cache->dtype));
  } else {
    if (!present(value_cache))
      return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                      "value_cache: required when kv_cache_layout is SEPARATE, got absent");
    if (value_cache->dtype != cache_type || !same_shape(value_cache, key_cache))
      return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                      "value_cache: must have key_cache's dtype and shape, %s %s, got %s %s",
                      dtype_name(cache_type), shape_of(key_cache).text,
                      dtype_name(value_cache->dtype), shape_of(value_cache).text);
  }

  st = check_cache_dtype_attribute("k_cache_dtype", a->k_cache_dtype, "key_cache", cache_type);
  if (st != PA_SUCCESS) return st;
  if (p->input_mode == PA__MODE_LATENT) {
    if (a->v_cache_dtype != PA_CACHE_DTYPE_DEFAULT)
      return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                      "v_cache_dtype: must be \"\" when kv_cache_layout is LATENT (there is no "
                      "value_cache), got value %d",
                      (int)a->v_cache_dtype);
  } else {
    st = check_cache_dtype_attribute("v_cache_dtype", a->v_cache_dtype, "value_cache", cache_type);
    if (st != PA_SUCCESS) return st;
  }

  p->k_cache_dtype = cache_type;
  p->v_cache_dtype = p->input_mode == PA__MODE_LATENT ? PA_DTYPE_UNDEFINED : cache_type;
  p->num_blocks = key_cache->dims[0];
  p->block_size = (int32_t)block_size;
  return PA_SUCCESS;
}

/* ---- sequence metadata (V09..V11, V16, V25, V26) --------------------------------------------- */

static pa_status expect_int32_vector(const char *name, const pa_tensor_desc *d) {
  pa_status st = expect_rank(name, d, 1);
  if (st == PA_SUCCESS) st = expect_dtype(name, d, PA_DTYPE_INT32, "");
  return st;
}

static pa_status check_sequence_metadata(pa__problem *p, const pa_tensor_desc in[PA_NUM_INPUTS],
                                         const int32_t *metadata) {
  const pa_tensor_desc *cu = &in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH], *past = &in[PA_IN_PAST_SEQLENS],
                       *table = &in[PA_IN_BLOCK_TABLE], *slots = &in[PA_IN_SLOT_MAPPING],
                       *positions = &in[PA_IN_QUERY_POSITIONS],
                       *bounds = &in[PA_IN_ATTENTION_METADATA];
  const pa_tensor_desc *const required[3] = {cu, past, table};
  const char *const required_names[3] = {"cumulative_sequence_length", "past_seqlens",
                                         "block_table"};
  for (int i = 0; i < 3; i++)
    if (!present(required[i]))
      return pa__fail(PA_ERROR_INVALID_ARGUMENT, "%s: required, got absent", required_names[i]);

  pa_status st = expect_int32_vector("cumulative_sequence_length", cu);
  if (st != PA_SUCCESS) return st;
  if (cu->dims[0] < 2 || cu->dims[0] - 1 > INT32_MAX)
    return pa__fail(
        PA_ERROR_INVALID_ARGUMENT,
        "cumulative_sequence_length: dim0 must be batch_size + 1 in [2, %lld], got %lld",
        (long long)INT32_MAX + 1, (long long)cu->dims[0]);
  p->batch_size = (int32_t)(cu->dims[0] - 1);

  if ((st = expect_int32_vector("past_seqlens", past)) != PA_SUCCESS ||
      (st = expect_dim("past_seqlens", past, 0, p->batch_size, "batch_size")) != PA_SUCCESS)
    return st;

  if ((st = expect_rank("block_table", table, 2)) != PA_SUCCESS ||
      (st = expect_dtype("block_table", table, PA_DTYPE_INT32, "")) != PA_SUCCESS ||
      (st = expect_dim("block_table", table, 0, p->batch_size, "batch_size")) != PA_SUCCESS)
    return st;
  if (table->dims[1] < 1 || table->dims[1] > INT32_MAX)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "block_table: dim1 (blocks per sequence) must be in [1, %d], got %lld",
                    INT32_MAX, (long long)table->dims[1]);
  p->max_blocks_per_seq = (int32_t)table->dims[1];

  if (present(slots)) {
    if ((st = expect_int32_vector("slot_mapping", slots)) != PA_SUCCESS ||
        (st = expect_dim("slot_mapping", slots, 0, p->token_count, "token_count")) != PA_SUCCESS)
      return st;
    p->has_slot_mapping = 1;
  }
  if (present(positions)) {
    if ((st = expect_int32_vector("query_positions", positions)) != PA_SUCCESS ||
        (st = expect_dim("query_positions", positions, 0, p->token_count, "token_count")) !=
            PA_SUCCESS)
      return st;
    p->has_query_positions = 1;
  }

  /* replay-wide bounds: 0 = unknown, larger than the static limit is clamped (doc/semantics.md,
   * "Bounds") */
  const int64_t kv_capacity = (int64_t)p->max_blocks_per_seq * p->block_size;
  p->max_query_len = p->token_count;
  p->max_kv_len = kv_capacity;
  if (!present(bounds)) {
    if (metadata)
      return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                      "attention_metadata: values were given in pa_plan_options but the input's "
                      "descriptor is absent (dtype PA_DTYPE_UNDEFINED)");
    return PA_SUCCESS;
  }
  if ((st = expect_int32_vector("attention_metadata", bounds)) != PA_SUCCESS ||
      (st = expect_dim("attention_metadata", bounds, 0, 2, "[max_query_len, max_kv_len]")) !=
          PA_SUCCESS)
    return st;
  if (!metadata) return PA_SUCCESS;
  if (metadata[0] < 0 || metadata[1] < 0)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "attention_metadata: bounds must be >= 0 (0 = unknown), got [%d, %d]",
                    metadata[0], metadata[1]);
  p->query_len_bound = metadata[0];
  p->kv_len_bound = metadata[1];
  if (metadata[0] > 0 && metadata[0] < p->max_query_len) p->max_query_len = metadata[0];
  if (metadata[1] > 0 && metadata[1] < p->max_kv_len) p->max_kv_len = metadata[1];
  return PA_SUCCESS;
}

/* ---- rotary (V13..V15) ----------------------------------------------------------------------- */

static pa_status check_rotary(pa__problem *p, const pa_tensor_desc in[PA_NUM_INPUTS]) {
  const pa_tensor_desc *cos_cache = &in[PA_IN_COS_CACHE], *sin_cache = &in[PA_IN_SIN_CACHE];
  if (present(cos_cache) != present(sin_cache))
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "%s: cos_cache and sin_cache must be both present or both absent, got "
                    "cos_cache %s and sin_cache %s",
                    present(cos_cache) ? "sin_cache" : "cos_cache",
                    present(cos_cache) ? "present" : "absent",
                    present(sin_cache) ? "present" : "absent");
  if (!p->do_rotary) {
    if (present(cos_cache))
      return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                      "cos_cache: given, but do_rotary is 0 (set do_rotary to 1 or omit "
                      "cos_cache and sin_cache)");
    return PA_SUCCESS;
  }
  if (!present(cos_cache))
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "do_rotary: 1 requires cos_cache and sin_cache, got both absent");
  pa_status st = expect_rank("cos_cache", cos_cache, 2);
  if (st == PA_SUCCESS) st = expect_dtype("cos_cache", cos_cache, p->dtype, " (query's type)");
  if (st == PA_SUCCESS) st = expect_rank("sin_cache", sin_cache, 2);
  if (st == PA_SUCCESS) st = expect_dtype("sin_cache", sin_cache, p->dtype, " (query's type)");
  if (st != PA_SUCCESS) return st;
  if (!same_shape(sin_cache, cos_cache))
    return pa__fail(PA_ERROR_INVALID_ARGUMENT, "sin_cache: shape must equal cos_cache's %s, got %s",
                    shape_of(cos_cache).text, shape_of(sin_cache).text);
  /* cannot wrap: V50 bounds cos_cache's byte size (2 bytes an element) by INT64_MAX */
  const int64_t rotary_dim = 2 * cos_cache->dims[1];
  if (rotary_dim <= 0 || rotary_dim > p->head_size - p->rotary_offset)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "cos_cache: rotary_dim = 2 * dim1 must be > 0 and rotary_offset (%d) + "
                    "rotary_dim <= head_size (%d), got rotary_dim %lld",
                    p->rotary_offset, p->head_size, (long long)rotary_dim);
  p->rotary_dim = (int32_t)rotary_dim;
  p->rotary_max_positions = cos_cache->dims[0];
  return PA_SUCCESS;
}

/* ---- optional inputs: head_sink, QK-Norm, attention_bias (V17, V18, V27, V37) ---------------- */

static pa_status check_optional_inputs(pa__problem *p, const pa_tensor_desc in[PA_NUM_INPUTS]) {
  const pa_tensor_desc *sink = &in[PA_IN_HEAD_SINK], *q_norm = &in[PA_IN_Q_NORM_WEIGHT],
                       *k_norm = &in[PA_IN_K_NORM_WEIGHT], *bias = &in[PA_IN_ATTENTION_BIAS];
  const int latent = p->input_mode == PA__MODE_LATENT;
  pa_status st;
  if (present(sink)) {
    if (latent)
      return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                      "head_sink: not allowed when kv_cache_layout is LATENT, got %s",
                      dtype_name(sink->dtype));
    st = expect_vector("head_sink", sink, p->dtype, " (query's type)", p->num_heads, "num_heads");
    if (st != PA_SUCCESS) return st;
    p->has_head_sink = 1;
  }

  if (present(q_norm) != present(k_norm))
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "%s: q_norm_weight and k_norm_weight must be both present or both absent, got "
                    "q_norm_weight %s and k_norm_weight %s",
                    present(q_norm) ? "k_norm_weight" : "q_norm_weight",
                    present(q_norm) ? "present" : "absent", present(k_norm) ? "present" : "absent");
  if (present(q_norm)) {
    if (latent)
      return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                      "q_norm_weight: QK-Norm is not allowed when kv_cache_layout is LATENT");
    if ((st = expect_vector("q_norm_weight", q_norm, p->dtype, " (query's type)", p->head_size,
                            "head_size")) != PA_SUCCESS ||
        (st = expect_vector("k_norm_weight", k_norm, p->dtype, " (query's type)", p->head_size,
                            "head_size")) != PA_SUCCESS)
      return st;
    p->has_qk_norm = 1;
  }

  if (present(bias)) {
    if ((st = expect_rank("attention_bias", bias, 4)) != PA_SUCCESS ||
        (st = expect_dtype("attention_bias", bias, p->dtype, " (query's type)")) != PA_SUCCESS)
      return st;
    if (bias->dims[0] != 1 && bias->dims[0] != p->batch_size)
      return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                      "attention_bias: dim0 must be 1 or batch_size (%d), got %lld", p->batch_size,
                      (long long)bias->dims[0]);
    if (bias->dims[1] != 1 && bias->dims[1] != p->num_heads)
      return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                      "attention_bias: dim1 must be 1 or num_heads (%d), got %lld", p->num_heads,
                      (long long)bias->dims[1]);
    p->has_bias = 1;
    p->bias_batch = (int32_t)bias->dims[0];
    p->bias_heads = (int32_t)bias->dims[1];
    p->bias_q_capacity = bias->dims[2];
    p->bias_kv_capacity = bias->dims[3];
  }
  return PA_SUCCESS;
}

/* ---- quantization (V20..V22, V38's v_scale / v_quant_type) ----------------------------------- */

static pa_status check_scale(const pa__problem *p, const char *scale_name,
                             const char *quant_attribute, pa_quant_type quant,
                             const pa_tensor_desc *scale, const char *cache_name,
                             pa_dtype cache_type) {
  if (is_quantized(cache_type) && quant == PA_QUANT_NONE)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "%s: %s is %s, which needs PER_TENSOR or PER_CHANNEL, got NONE",
                    quant_attribute, cache_name, dtype_name(cache_type));
  if (!is_quantized(cache_type) && quant != PA_QUANT_NONE)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "%s: must be NONE when %s has query's type %s, got %s", quant_attribute,
                    cache_name, dtype_name(cache_type), quant_name(quant));
  if (quant == PA_QUANT_NONE) {
    if (present(scale))
      return pa__fail(PA_ERROR_INVALID_ARGUMENT, "%s: must be absent when %s is NONE, got %s",
                      scale_name, quant_attribute, dtype_name(scale->dtype));
    return PA_SUCCESS;
  }
  if (!present(scale))
    return pa__fail(PA_ERROR_INVALID_ARGUMENT, "%s: required when %s is %s, got absent", scale_name,
                    quant_attribute, quant_name(quant));
  pa_status st = expect_dtype(scale_name, scale, PA_DTYPE_FLOAT32, "");
  if (st != PA_SUCCESS) return st;
  if (quant == PA_QUANT_PER_TENSOR) {
    if (scale->rank != 1 || scale->dims[0] != 1)
      return pa__fail(PA_ERROR_INVALID_ARGUMENT, "%s: PER_TENSOR shape must be (1,), got %s",
                      scale_name, shape_of(scale).text);
    return PA_SUCCESS;
  }
  if (scale->rank != 3 || scale->dims[0] != p->kv_num_heads || scale->dims[1] != 1 ||
      scale->dims[2] != p->head_size)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "%s: PER_CHANNEL shape must be (kv_num_heads, 1, head_size) = (%d, 1, %d), got "
                    "%s",
                    scale_name, p->kv_num_heads, p->head_size, shape_of(scale).text);
  return PA_SUCCESS;
}

static pa_status check_quantization(const pa__problem *p, const pa_tensor_desc in[PA_NUM_INPUTS]) {
  pa_status st = check_scale(p, "k_scale", "k_quant_type", p->k_quant, &in[PA_IN_K_SCALE],
                             "key_cache", p->k_cache_dtype);
  if (st != PA_SUCCESS) return st;
  if (p->input_mode == PA__MODE_LATENT) {
    if (p->v_quant != PA_QUANT_NONE)
      return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                      "v_quant_type: must be NONE when kv_cache_layout is LATENT (k_scale "
                      "describes the one cache), got %s",
                      quant_name(p->v_quant));
    if (present(&in[PA_IN_V_SCALE]))
      return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                      "v_scale: must be absent when kv_cache_layout is LATENT (k_scale describes "
                      "the one cache), got %s",
                      dtype_name(in[PA_IN_V_SCALE].dtype));
    return PA_SUCCESS;
  }
  return check_scale(p, "v_scale", "v_quant_type", p->v_quant, &in[PA_IN_V_SCALE], "value_cache",
                     p->v_cache_dtype);
}

/* ---- MLA: v_head_size and the scale it forces (V34, V35) ------------------------------------- */

static pa_status check_mla(pa__problem *p, const pa_attributes *a) {
  const int latent = p->input_mode == PA__MODE_LATENT;
  if (a->v_head_size < 0 || a->v_head_size > p->head_size)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "v_head_size: must be in [0, head_size (%d)] (0 = head_size), got %d",
                    p->head_size, a->v_head_size);
  if (!latent && a->v_head_size != 0 && a->v_head_size != p->head_size)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "v_head_size: may differ from head_size (%d) only when kv_cache_layout is "
                    "LATENT, got %d",
                    p->head_size, a->v_head_size);
  p->v_head_size = a->v_head_size != 0 ? a->v_head_size : p->head_size;
  if (p->v_head_size != p->head_size && a->scale == 0.0f)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "scale: must be given explicitly when v_head_size (%d) != head_size (%d) "
                    "(1/sqrt(head_size) is not the model's scale), got 0",
                    p->v_head_size, p->head_size);
  p->scale = a->scale != 0.0f ? a->scale : 1.0f / sqrtf((float)p->head_size);
  return PA_SUCCESS;
}

/* ---- output_qk (V28, V29) -------------------------------------------------------------------- */

static pa_status check_output_qk(pa__problem *p, const pa_tensor_desc out[PA_NUM_OUTPUTS],
                                 uint64_t max_qk_bytes) {
  const pa_tensor_desc *qk = &out[PA_OUT_QK];
  if (p->qk_output == 0) {
    if (present(qk))
      return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                      "output_qk: must be absent when qk_output is 0, got %s",
                      dtype_name(qk->dtype));
    return PA_SUCCESS;
  }
  if (!present(qk))
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "output_qk: required when qk_output is %d, got absent", p->qk_output);
  if (qk->dtype != PA_DTYPE_FLOAT32 && !is_float_activation(qk->dtype))
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "output_qk: dtype must be float32, float16 or bfloat16, got %s",
                    dtype_name(qk->dtype));
  pa_status st = expect_rank("output_qk", qk, 3);
  if (st == PA_SUCCESS) st = expect_dim("output_qk", qk, 0, p->num_heads, "num_heads");
  if (st == PA_SUCCESS) st = expect_dim("output_qk", qk, 1, p->token_count, "token_count");
  if (st != PA_SUCCESS) return st;
  const uint64_t bytes = (uint64_t)byte_size(qk, 0); /* fits: V50 */
  if (bytes > max_qk_bytes)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "output_qk: %llu bytes exceed max_output_qk_bytes (%llu)",
                    (unsigned long long)bytes, (unsigned long long)max_qk_bytes);
  p->qk_dtype = qk->dtype;
  p->qk_capacity = qk->dims[2];
  return PA_SUCCESS;
}

/* ---- outputs 0..2 (V30, V31) ----------------------------------------------------------------- */

static pa_status expect_same_as_cache(const char *out_name, const pa_tensor_desc *out,
                                      const char *cache_name, const pa_tensor_desc *cache) {
  if (out->dtype != cache->dtype || !same_shape(out, cache))
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "%s: must describe %s itself (it aliases it), %s %s, got %s %s", out_name,
                    cache_name, dtype_name(cache->dtype), shape_of(cache).text,
                    dtype_name(out->dtype), shape_of(out).text);
  return PA_SUCCESS;
}

static pa_status check_outputs(const pa__problem *p, const pa_tensor_desc in[PA_NUM_INPUTS],
                               const pa_tensor_desc out[PA_NUM_OUTPUTS]) {
  const pa_tensor_desc *output = &out[PA_OUT_OUTPUT], *key_out = &out[PA_OUT_KEY_CACHE],
                       *value_out = &out[PA_OUT_VALUE_CACHE];
  if (!present(output)) return pa__fail(PA_ERROR_INVALID_ARGUMENT, "output: required, got absent");
  pa_status st = expect_rank("output", output, 2);
  if (st == PA_SUCCESS) st = expect_dtype("output", output, p->dtype, " (query's type)");
  if (st == PA_SUCCESS) st = expect_dim("output", output, 0, p->token_count, "token_count");
  if (st == PA_SUCCESS)
    st = expect_dim("output", output, 1, pa__out_row_elems(p), "num_heads * v_head_size");
  if (st != PA_SUCCESS) return st;

  if (p->input_mode == PA__MODE_LATENT) {
    if (present(value_out))
      return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                      "value_cache_out: must be absent when kv_cache_layout is LATENT, got %s",
                      dtype_name(value_out->dtype));
  } else if (present(key_out) != present(value_out)) {
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "%s: key_cache_out and value_cache_out must be both present or both absent, "
                    "got key_cache_out %s and value_cache_out %s",
                    present(key_out) ? "value_cache_out" : "key_cache_out",
                    present(key_out) ? "present" : "absent",
                    present(value_out) ? "present" : "absent");
  }
  if (present(key_out) && (st = expect_same_as_cache("key_cache_out", key_out, "key_cache",
                                                     &in[PA_IN_KEY_CACHE])) != PA_SUCCESS)
    return st;
  if (present(value_out) && (st = expect_same_as_cache("value_cache_out", value_out, "value_cache",
                                                       &in[PA_IN_VALUE_CACHE])) != PA_SUCCESS)
    return st;
  return PA_SUCCESS;
}

pa_status pa__validate(pa__problem *p, const pa_attributes *attrs,
                       const pa_tensor_desc inputs[PA_NUM_INPUTS],
                       const pa_tensor_desc outputs[PA_NUM_OUTPUTS], const int32_t *metadata,
                       uint64_t max_qk_bytes) {
  memset(p, 0, sizeof *p);
  pa_status st;
  if ((st = check_descriptors(inputs, outputs)) != PA_SUCCESS ||
      (st = check_attributes(p, attrs)) != PA_SUCCESS ||
      (st = check_query_key_value(p, attrs, inputs)) != PA_SUCCESS ||
      (st = check_caches(p, attrs, inputs)) != PA_SUCCESS ||
      (st = check_sequence_metadata(p, inputs, metadata)) != PA_SUCCESS ||
      (st = check_rotary(p, inputs)) != PA_SUCCESS ||
      (st = check_optional_inputs(p, inputs)) != PA_SUCCESS ||
      (st = check_quantization(p, inputs)) != PA_SUCCESS ||
      (st = check_mla(p, attrs)) != PA_SUCCESS ||
      (st = check_output_qk(p, outputs, max_qk_bytes)) != PA_SUCCESS ||
      (st = check_outputs(p, inputs, outputs)) != PA_SUCCESS) {
    memset(p, 0, sizeof *p);
    return st;
  }
  return PA_SUCCESS;
}
