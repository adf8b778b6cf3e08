/*
 * libFuzzer target: pa_plan_create on host plans and described-device plans (the backends' host
 * check and plan code run, no GPU is touched), plus the three parse functions.
 *
 * Input format (test/fuzz/make_seeds.py writes the seeds in it):
 *   byte 0  the base request: a valid one to mutate (see base_request)
 *   byte 1  the device: 0 host, 1 an A100, 2 an H200, 3 caps read from the next 16 bytes
 *   byte 2  the forced backend (0 = AUTO)
 *   then    edits: a field byte (field % FIELD_COUNT: attributes, every dtype / rank / dim of the
 *           23 descriptors, the metadata values and presence, max_output_qk_bytes) and a value
 *           byte: below the count of interesting values, that value; otherwise the next 8 bytes,
 *           little-endian.
 * The whole input, cut at 64 bytes, is also given to the parse functions as a string.
 *
 * Invariants checked (abort() makes libFuzzer report them): a failed plan leaves *plan NULL and a
 * message naming what failed; a successful one has a known backend and an aligned workspace size.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pagedattn/pagedattn.h"

static const int64_t interesting[] = {
    0, 1, 2, 3, 4, 7, 8, 15, 16, 17, 31, 32, 63, 64, 65, 100, 128, 256, 512, 576, 1000, 4096,
    65535, 65536, 65552, (int64_t)1 << 20, 16776960, 8388608, (int64_t)1 << 24, (int64_t)1 << 30,
    INT32_MAX, (int64_t)INT32_MAX + 1, (int64_t)1 << 32, (int64_t)1 << 40, (int64_t)1 << 60,
    (int64_t)1 << 62, INT64_MAX / 2, INT64_MAX, -1, -2, -7, INT32_MIN, INT64_MIN};
enum { INTERESTING_COUNT = sizeof interesting / sizeof interesting[0] };

enum {
  ATTRIBUTE_FIELDS = 17,
  DESC_FIELDS = (PA_NUM_INPUTS + PA_NUM_OUTPUTS) * 6, /* dtype, rank, dims[0..3] */
  OTHER_FIELDS = 4,                                   /* metadata[0], [1], its presence, qk bytes */
  FIELD_COUNT = ATTRIBUTE_FIELDS + DESC_FIELDS + OTHER_FIELDS
};

typedef struct request {
  pa_attributes attrs;
  pa_tensor_desc in[PA_NUM_INPUTS], out[PA_NUM_OUTPUTS];
  int32_t metadata[2];
  int pass_metadata;
  uint64_t max_output_qk_bytes;
} request;

static pa_tensor_desc desc(pa_dtype dtype, int32_t rank, int64_t d0, int64_t d1, int64_t d2,
                           int64_t d3) {
  pa_tensor_desc d = {dtype, rank, {d0, d1, d2, d3}};
  return d;
}

/* A valid request per kind: SEPARATE fp16 decode, PACKED with rotary and QK-Norm, LATENT bf16,
 * an int8 per-channel cache with sinks, bias and output_qk. */
static void base_request(request *r, int kind) {
  memset(r, 0, sizeof *r);
  pa_attributes_init(&r->attrs);
  pa_attributes *a = &r->attrs;
  const int64_t n = 4, batch = 2, h = 8, hk = 2, blocks = 8, bs = 16, per_seq = 4;
  int64_t d = 64;
  pa_dtype t = PA_DTYPE_FLOAT16, cache_t = t;
  a->num_heads = (int32_t)h;
  a->kv_num_heads = (int32_t)hk;
  kind %= 4;
  if (kind == 2) {
    t = cache_t = PA_DTYPE_BFLOAT16;
    d = 576;
    a->kv_num_heads = 1;
    a->kv_cache_layout = PA_KV_CACHE_LAYOUT_LATENT;
    a->v_head_size = 512;
    a->scale = 0.1f;
  }
  if (kind == 3) {
    cache_t = PA_DTYPE_INT8;
    a->k_quant_type = a->v_quant_type = PA_QUANT_PER_CHANNEL;
  }
  const int64_t kv_heads = a->kv_num_heads;
  const int64_t dv = a->v_head_size ? a->v_head_size : d;
  r->in[PA_IN_QUERY] = desc(t, 2, n, (kind == 1 ? h + 2 * kv_heads : h) * d, 0, 0);
  if (kind != 1) r->in[PA_IN_KEY] = desc(t, 2, n, kv_heads * d, 0, 0);
  if (kind != 1 && kind != 2) r->in[PA_IN_VALUE] = r->in[PA_IN_KEY];
  r->in[PA_IN_KEY_CACHE] = desc(cache_t, 4, blocks, bs, kv_heads, d);
  if (kind != 2) r->in[PA_IN_VALUE_CACHE] = r->in[PA_IN_KEY_CACHE];
  r->in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH] = desc(PA_DTYPE_INT32, 1, batch + 1, 0, 0, 0);
  r->in[PA_IN_PAST_SEQLENS] = desc(PA_DTYPE_INT32, 1, batch, 0, 0, 0);
  r->in[PA_IN_BLOCK_TABLE] = desc(PA_DTYPE_INT32, 2, batch, per_seq, 0, 0);
  if (kind == 1 || kind == 2) {
    a->do_rotary = 1;
    if (kind == 2) a->rotary_offset = 512;
    r->in[PA_IN_COS_CACHE] = desc(t, 2, 128, 32, 0, 0);
    r->in[PA_IN_SIN_CACHE] = r->in[PA_IN_COS_CACHE];
  }
  if (kind == 1) {
    r->in[PA_IN_Q_NORM_WEIGHT] = desc(t, 1, d, 0, 0, 0);
    r->in[PA_IN_K_NORM_WEIGHT] = r->in[PA_IN_Q_NORM_WEIGHT];
    r->in[PA_IN_SLOT_MAPPING] = desc(PA_DTYPE_INT32, 1, n, 0, 0, 0);
  }
  if (kind == 3) {
    r->in[PA_IN_K_SCALE] = desc(PA_DTYPE_FLOAT32, 3, kv_heads, 1, d, 0);
    r->in[PA_IN_V_SCALE] = r->in[PA_IN_K_SCALE];
    r->in[PA_IN_HEAD_SINK] = desc(t, 1, h, 0, 0, 0);
    r->in[PA_IN_ATTENTION_BIAS] = desc(t, 4, batch, h, n, per_seq * bs);
    r->in[PA_IN_QUERY_POSITIONS] = desc(PA_DTYPE_INT32, 1, n, 0, 0, 0);
    a->qk_output = 1;
    r->out[PA_OUT_QK] = desc(PA_DTYPE_FLOAT32, 3, h, n, per_seq * bs, 0);
  }
  r->out[PA_OUT_OUTPUT] = desc(t, 2, n, h * dv, 0, 0);
  r->out[PA_OUT_KEY_CACHE] = r->in[PA_IN_KEY_CACHE];
  if (kind != 2) r->out[PA_OUT_VALUE_CACHE] = r->in[PA_IN_VALUE_CACHE];
}

typedef struct reader {
  const uint8_t *data;
  size_t size, at;
} reader;

static int read_byte(reader *rd, uint8_t *out) {
  if (rd->at >= rd->size) return 0;
  *out = rd->data[rd->at++];
  return 1;
}

static int64_t read_value(reader *rd, uint8_t kind) {
  if (kind < INTERESTING_COUNT) return interesting[kind];
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) {
    uint8_t b = 0;
    read_byte(rd, &b);
    v |= (uint64_t)b << (8 * i);
  }
  return (int64_t)v;
}

static void set_attribute(pa_attributes *a, int field, int64_t v) {
  const int32_t i = (int32_t)v;
  switch (field) {
  case 0: a->num_heads = i; break;
  case 1: a->kv_num_heads = i; break;
  case 2: a->scale = (float)v / 16.0f; break;
  case 3: a->softcap = (float)v; break;
  case 4: a->local_window_size = i; break;
  case 5: a->do_rotary = i; break;
  case 6: a->rotary_interleaved = i; break;
  case 7: a->qk_norm_epsilon = (float)v * 1e-6f; break;
  case 8: a->k_quant_type = (pa_quant_type)i; break;
  case 9: a->v_quant_type = (pa_quant_type)i; break;
  case 10: a->k_cache_dtype = (pa_cache_dtype)i; break;
  case 11: a->v_cache_dtype = (pa_cache_dtype)i; break;
  case 12: a->v_head_size = i; break;
  case 13: a->rotary_offset = i; break;
  case 14: a->kv_cache_layout = (pa_kv_cache_layout)i; break;
  case 15: a->qk_output = i; break;
  default: a->is_causal = i; break;
  }
}

static void apply_edit(request *r, int field, int64_t v) {
  if (field < ATTRIBUTE_FIELDS) {
    set_attribute(&r->attrs, field, v);
    return;
  }
  field -= ATTRIBUTE_FIELDS;
  if (field < DESC_FIELDS) {
    int tensor = field / 6, part = field % 6;
    pa_tensor_desc *d = tensor < PA_NUM_INPUTS ? &r->in[tensor] : &r->out[tensor - PA_NUM_INPUTS];
    if (part == 0) d->dtype = (pa_dtype)(int32_t)v;
    else if (part == 1) d->rank = (int32_t)v;
    else d->dims[part - 2] = v;
    return;
  }
  field -= DESC_FIELDS;
  if (field < 2) r->metadata[field] = (int32_t)v;
  else if (field == 2) r->pass_metadata = (int)(v & 1);
  else r->max_output_qk_bytes = (uint64_t)v;
}

static void check(int ok) {
  if (!ok) abort();
}

static void fuzz_parse_functions(const uint8_t *data, size_t size) {
  char text[65];
  size_t n = size < 64 ? size : 64;
  memcpy(text, data, n);
  text[n] = '\0';
  pa_cache_dtype cache_dtype;
  pa_quant_type quant;
  pa_kv_cache_layout layout;
  pa_status st = pa_cache_dtype_parse(text, &cache_dtype);
  check(st == PA_SUCCESS || st == PA_ERROR_INVALID_ARGUMENT);
  st = pa_quant_type_parse(text, &quant);
  check(st == PA_SUCCESS || st == PA_ERROR_INVALID_ARGUMENT);
  st = pa_kv_cache_layout_parse(text, &layout);
  check(st == PA_SUCCESS || st == PA_ERROR_INVALID_ARGUMENT);
  /* a NULL name is the default; a NULL out is refused, never dereferenced */
  check(pa_cache_dtype_parse(NULL, &cache_dtype) == PA_SUCCESS &&
        cache_dtype == PA_CACHE_DTYPE_DEFAULT);
  check(pa_quant_type_parse(text, NULL) == PA_ERROR_INVALID_ARGUMENT);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_parse_functions(data, size);
  reader rd = {data, size, 0};
  uint8_t kind = 0, device = 0, backend = 0;
  read_byte(&rd, &kind);
  read_byte(&rd, &device);
  read_byte(&rd, &backend);
  request r;
  base_request(&r, kind);

  pa_plan_options options;
  pa_plan_options_init(&options);
  pa_device_caps caps = {sizeof caps, 8, 0, 108, 166912};
  switch (device % 4) {
  case 0: options.device = PA_DEVICE_HOST; break;
  case 2: caps = (pa_device_caps){sizeof caps, 9, 0, 132, 232448}; /* fall through */
  case 1: options.device = 0; options.device_caps = &caps; break;
  default: {
    uint8_t b[16] = {0};
    for (int i = 0; i < 16; i++) read_byte(&rd, &b[i]);
    caps.compute_capability_major = b[0] % 12;
    caps.compute_capability_minor = b[1] % 10;
    memcpy(&caps.multiprocessor_count, b + 2, 4);
    int32_t smem;
    memcpy(&smem, b + 6, 4);
    caps.max_shared_memory_per_block_optin = smem;
    options.device = 0;
    options.device_caps = &caps;
  }
  }
  options.backend = (pa_backend)(backend % 7); /* 6: an unknown backend value */

  uint8_t field, value_kind;
  while (read_byte(&rd, &field) && read_byte(&rd, &value_kind))
    apply_edit(&r, field % FIELD_COUNT, read_value(&rd, value_kind));
  if (r.pass_metadata) options.attention_metadata = r.metadata;
  options.max_output_qk_bytes = r.max_output_qk_bytes;

  pa_plan *plan = (pa_plan *)(uintptr_t)1; /* must be overwritten either way */
  pa_status st = pa_plan_create(&plan, &r.attrs, r.in, r.out, &options);
  if (st != PA_SUCCESS) {
    check(plan == NULL);
    check(pa_last_error_message(NULL, 0) > 0);
    return 0;
  }
  check(plan != NULL);
  pa_backend chosen = pa_plan_backend(plan);
  check(chosen >= PA_BACKEND_REFERENCE && chosen <= PA_BACKEND_LATENT);
  check(options.device != PA_DEVICE_HOST || chosen == PA_BACKEND_REFERENCE);
  check(pa_plan_workspace_size(plan) % PA_WORKSPACE_ALIGNMENT == 0);
  pa_plan_destroy(plan);
  return 0;
}
