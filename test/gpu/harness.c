/* The GPU test harness (see harness.h): seeded inputs, pa_execute against pa_execute_reference on
 * host copies of the same inputs, and the comparisons of doc/development.md ("Oracles and tolerances"). */
#define _POSIX_C_SOURCE 200809L /* pthread barriers (gpu_case_run_concurrent) */
#include "harness.h"
#include "input_copy.h"

#include <pthread.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "host_numeric.h"
#include "internal.h"
#include "test_rng.h"

/* ---- random numbers -------------------------------------------------------------------------- */

/* Uniform in [lo, hi). */
static float rng_uniform(rng *r, float lo, float hi) {
  return lo + (hi - lo) * (float)((rng_next(r) >> 40) * (1.0 / 16777216.0));
}
/* Uniform integer in [0, n). */
static int32_t rng_below(rng *r, int32_t n) {
  return n > 0 ? (int32_t)(rng_next(r) % (uint64_t)n) : 0;
}

/* Element access by dtype, through the library's host conversions (lib/host_numeric.h; the
 * 16-bit types and fp32; 8-bit caches are compared as codes). */
static float load_elem(pa_dtype t, const void *base, size_t i) {
  switch (t) {
    case PA_DTYPE_FLOAT16:
      return pa__half_to_float(((const uint16_t *)base)[i]);
    case PA_DTYPE_BFLOAT16:
      return pa__bfloat16_to_float(((const uint16_t *)base)[i]);
    case PA_DTYPE_FLOAT32:
      return ((const float *)base)[i];
    case PA_DTYPE_INT8:
      return (float)((const int8_t *)base)[i];
    case PA_DTYPE_FLOAT8_E4M3FN:
      return pa__e4m3_to_float(((const uint8_t *)base)[i]);
    default:
      return NAN;
  }
}
static void store_elem(pa_dtype t, void *base, size_t i, float v) {
  if (t == PA_DTYPE_FLOAT16)
    ((uint16_t *)base)[i] = pa__float_to_half(v);
  else if (t == PA_DTYPE_BFLOAT16)
    ((uint16_t *)base)[i] = pa__float_to_bfloat16(v);
  else
    ((float *)base)[i] = v;
}

static int is_quantized_type(pa_dtype t) {
  return t == PA_DTYPE_INT8 || t == PA_DTYPE_FLOAT8_E4M3FN;
}

/* Distance in representable steps between two codes of a cache element type: sign-magnitude codes
 * mapped onto a line (so +0 and -0 coincide); int8 directly. */
static int64_t code_distance(pa_dtype t, const void *a, const void *b, size_t i) {
  int64_t x, y;
  if (t == PA_DTYPE_INT8) {
    x = ((const int8_t *)a)[i];
    y = ((const int8_t *)b)[i];
  } else if (t == PA_DTYPE_FLOAT8_E4M3FN) {
    uint8_t u = ((const uint8_t *)a)[i], v = ((const uint8_t *)b)[i];
    x = (u & 0x80) ? -(int64_t)(u & 0x7f) : (int64_t)u;
    y = (v & 0x80) ? -(int64_t)(v & 0x7f) : (int64_t)v;
  } else {
    uint16_t u = ((const uint16_t *)a)[i], v = ((const uint16_t *)b)[i];
    x = (u & 0x8000) ? -(int64_t)(u & 0x7fff) : (int64_t)u;
    y = (v & 0x8000) ? -(int64_t)(v & 0x7fff) : (int64_t)v;
  }
  return x > y ? x - y : y - x;
}

/* Whether a GPU value of a T cache or the staged Q matches the oracle's: within one step, or within
 * an absolute 2e-6 (about 8 fp32 ulps of the O(1) operands) near zero, where a rotation's
 * cancellation turns the fp32 ulp differences of two correct implementations into several T ulps of
 * a tiny result. Quantized caches: one step only (their steps dwarf that floor). */
static int within_one_step(pa_dtype t, const void *gpu, const void *oracle, size_t i) {
  if (code_distance(t, gpu, oracle, i) <= 1) return 1;
  return !is_quantized_type(t) && fabsf(load_elem(t, gpu, i) - load_elem(t, oracle, i)) <= 2e-6f;
}

/* ---- environment ----------------------------------------------------------------------------- */

int gpu_available(void) {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

size_t gpu_captured_nodes(const pa_plan *plan, const void *const *inputs, void *const *outputs,
                          void *workspace, size_t bytes, pa_stream stream, pa_status *st) {
  cudaGraph_t graph = NULL;
  size_t nodes = (size_t)-1;
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return nodes;
  *st = pa_execute(plan, inputs, outputs, workspace, bytes, stream);
  if (cudaStreamEndCapture(stream, &graph) == cudaSuccess &&
      cudaGraphGetNodes(graph, NULL, &nodes) != cudaSuccess)
    nodes = (size_t)-1;
  if (graph) cudaGraphDestroy(graph);
  return nodes;
}

unsigned gpu_test_seed(void) {
  const char *env = getenv("PA_TEST_SEED");
  unsigned seed = env && *env ? (unsigned)strtoul(env, NULL, 0) : (unsigned)time(NULL);
  fprintf(stderr, "gpu tests: seed %u (set PA_TEST_SEED=%u to repeat)\n", seed, seed);
  return seed;
}

int gpu_test_quick(void) {
  const char *env = getenv("PA_GPU_TEST_QUICK");
  return env && strcmp(env, "1") == 0;
}

/* PA_GPU_TEST_SHARD=i/n: this process runs every n-th case of its matrices, starting at the i-th
 * (counted over all of them in order), so that n processes together run each case once. */
static int in_shard(void) {
  static int parsed = 0, index = 0, count = 1;
  static long long next_case = 0;
  if (!parsed) {
    const char *env = getenv("PA_GPU_TEST_SHARD");
    if (env && *env) {
      if (sscanf(env, "%d/%d", &index, &count) == 2 && count >= 1 && index >= 0 && index < count) {
        fprintf(stderr, "gpu tests: shard %d of %d\n", index, count);
      } else {
        fprintf(stderr, "gpu tests: PA_GPU_TEST_SHARD expected i/n with 0 <= i < n, got \"%s\": "
                        "running every case\n", env);
        index = 0, count = 1;
      }
    }
    parsed = 1;
  }
  return next_case++ % count == index;
}

static int verbose(void) {
  const char *env = getenv("PA_TEST_VERBOSE");
  return env && strcmp(env, "1") == 0;
}

gpu_case gpu_case_default(const char *name) {
  gpu_case c;
  memset(&c, 0, sizeof c);
  c.name = name;
  c.num_heads = 32;
  c.kv_num_heads = 8;
  c.head_size = 128;
  c.dtype = PA_DTYPE_FLOAT16;
  c.block_size = 16;
  c.batch_size = 3;
  c.max_q_len = 1;
  c.max_past_len = 40;
  return c;
}

/* ---- the fixture: one case's inputs on host and device -------------------------------------- */

typedef struct fixture {
  gpu_case c; /* defaults resolved */
  const char *name;
  unsigned seed;
  rng r;
  int steps;
  int32_t B, M, num_blocks, rotary_rows, bias_q_cap, bias_kv_cap;
  int32_t spare_block;        /* a block id in no table entry */
  int64_t N, tokens_in_batch; /* token_count and cu[B] */
  int64_t qk_capacity;
  int32_t v_head_size, row_heads; /* row_heads: heads per query row (H + 2Hk when packed) */
  int32_t *q_lens, *past0;        /* past0: past lengths at step 0 */
  int32_t metadata[2];
  pa_attributes attrs;
  pa_tensor_desc in_desc[PA_NUM_INPUTS], out_desc[PA_NUM_OUTPUTS];
  size_t in_bytes[PA_NUM_INPUTS], out_bytes[PA_NUM_OUTPUTS];
  void *h_in[PA_NUM_INPUTS], *d_in[PA_NUM_INPUTS];
  void *d_staged[PA_NUM_INPUTS]; /* inputs_by_kernel: where upload puts the inputs, or NULL */
  void *h_out[PA_NUM_OUTPUTS], *d_out[PA_NUM_OUTPUTS]; /* output and output_qk; caches alias */
  void *d_out_allocation;                               /* output 0's, before its offset */
  void *gpu_out[PA_NUM_OUTPUTS];                       /* the GPU's results, downloaded */
  void *cache_start[2], *gpu_cache[2];                 /* key, value: at step start; GPU's after */
  unsigned char *written;                              /* per slot: written in this step */
  int64_t *token_slot; /* per token of the batch: the slot it writes this step, or -1 */
  int32_t ring_n;      /* ring-buffer run: physical blocks per sequence (0: full cache) */
  int32_t *ring;       /* ring-buffer run: (B, ring_n) block ids */
  pa_plan *plan;
  const pa_plan *exec_plan; /* executed instead of plan when set (a plan shared between runs) */
  void *workspace;
  size_t workspace_bytes;
  cudaStream_t stream;
  cudaGraph_t graph_def; /* graph mode: captured at the first step, replayed at every step */
  cudaGraphExec_t graph_exec;
  int result; /* of the fixture's initialization */
} fixture;

static const char *const input_names[PA_NUM_INPUTS] = {"query",
                                                       "key",
                                                       "value",
                                                       "key_cache",
                                                       "value_cache",
                                                       "cumulative_sequence_length",
                                                       "past_seqlens",
                                                       "block_table",
                                                       "cos_cache",
                                                       "sin_cache",
                                                       "slot_mapping",
                                                       "head_sink",
                                                       "q_norm_weight",
                                                       "k_norm_weight",
                                                       "k_scale",
                                                       "v_scale",
                                                       "attention_metadata",
                                                       "query_positions",
                                                       "attention_bias"};

static pa_tensor_desc desc(pa_dtype t, int rank, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  pa_tensor_desc d = {t, rank, {d0, d1, d2, d3}};
  return d;
}
static size_t desc_bytes(const pa_tensor_desc *d) {
  if (d->dtype == PA_DTYPE_UNDEFINED) return 0;
  size_t n = pa_dtype_size(d->dtype);
  for (int i = 0; i < d->rank; i++) n *= (size_t)d->dims[i];
  return n;
}
static int latent(const fixture *f) { return f->c.layout == PA_KV_CACHE_LAYOUT_LATENT; }

static int fail(const fixture *f, int step, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static int fail(const fixture *f, int step, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FAIL %s (seed %u, step %d): ", f->name, f->seed, step);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return GPU_FAIL;
}

static int cuda_ok(const fixture *f, cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 1;
  fail(f, -1, "%s: %s", what, cudaGetErrorString(e));
  return 0;
}

/* Resolves defaults and derived sizes; fills lengths, attributes and descriptors. */
static void fixture_shape(fixture *f, int steps) {
  gpu_case *c = &f->c;
  if (!c->dtype) c->dtype = PA_DTYPE_FLOAT16;
  if (!c->cache_dtype) c->cache_dtype = c->dtype;
  if (latent(f)) {
    c->kv_num_heads = 1;
    c->packed = 0;
  }
  if (is_quantized_type(c->cache_dtype)) {
    if (c->k_quant == PA_QUANT_NONE) c->k_quant = PA_QUANT_PER_TENSOR;
    if (c->v_quant == PA_QUANT_NONE && !latent(f)) c->v_quant = PA_QUANT_PER_TENSOR;
  }
  if (latent(f)) c->v_quant = PA_QUANT_NONE;
  if (!c->max_q_len) c->max_q_len = 1;
  if (!c->qk_dtype) c->qk_dtype = PA_DTYPE_FLOAT32;
  if (c->rotary && !c->rotary_dim) c->rotary_dim = c->head_size - c->rotary_offset;
  f->v_head_size = latent(f) && c->v_head_size ? c->v_head_size : c->head_size;
  f->row_heads = c->packed ? c->num_heads + 2 * c->kv_num_heads : c->num_heads;
  f->steps = steps;

  int32_t B = f->B = c->batch_size;
  f->q_lens = calloc((size_t)B, sizeof(int32_t));
  f->past0 = calloc((size_t)B, sizeof(int32_t));
  int32_t max_q = 0, max_kv = 0;
  f->tokens_in_batch = 0;
  for (int32_t b = 0; b < B; b++) {
    int32_t q = c->q_lens                                      ? c->q_lens[b]
                : (c->zero_q_lens && rng_below(&f->r, 4) == 0) ? 0
                                                               : 1 + rng_below(&f->r, c->max_q_len);
    int32_t past = c->past_lens ? c->past_lens[b] : rng_below(&f->r, c->max_past_len + 1);
    if (past < c->shared_prefix_blocks * c->block_size)
      past = c->shared_prefix_blocks * c->block_size;
    f->q_lens[b] = q;
    f->past0[b] = past;
    f->tokens_in_batch += q;
    if (q > max_q) max_q = q;
    int32_t final_kv = past + steps * q;
    if (final_kv > max_kv) max_kv = final_kv;
  }
  f->N = f->tokens_in_batch + c->extra_tokens;
  f->M = c->blocks_per_seq ? c->blocks_per_seq : (max_kv + c->block_size - 1) / c->block_size + 1;
  f->num_blocks = B * f->M + 3;
  if (c->num_blocks > f->num_blocks) f->num_blocks = c->num_blocks;
  f->rotary_rows = c->rotary_positions ? c->rotary_positions : max_kv + 1;
  f->bias_q_cap = max_q > 0 ? max_q : 1;
  f->bias_kv_cap = max_kv > 0 ? max_kv : 1;
  f->qk_capacity = max_kv + 3;
  f->metadata[0] = c->metadata == GPU_METADATA_LOOSE ? max_q + 5 : max_q;
  f->metadata[1] = c->metadata == GPU_METADATA_LOOSE ? max_kv * 2 + 17 : max_kv;
  if (c->metadata == GPU_METADATA_UNDERSIZED) { /* 0 would mean "unknown", not "too small" */
    f->metadata[0] = max_q > 1 ? max_q / 2 : 1;
    f->metadata[1] = max_kv > 1 ? max_kv / 2 : 1;
  }

  pa_attributes *a = &f->attrs;
  pa_attributes_init(a);
  a->num_heads = c->num_heads;
  a->kv_num_heads = c->kv_num_heads;
  a->scale = c->scale;
  if (a->scale == 0 && (f->v_head_size != c->head_size || c->query_exponent))
    a->scale = 1.0f / sqrtf((float)c->head_size);
  a->scale = ldexpf(a->scale, -c->query_exponent);
  a->softcap = c->softcap;
  a->local_window_size = c->window ? c->window : -1;
  a->do_rotary = c->rotary;
  a->rotary_interleaved = c->rotary_interleaved;
  a->qk_norm_epsilon = c->qk_norm_epsilon;
  a->k_quant_type = c->k_quant;
  a->v_quant_type = c->v_quant;
  a->v_head_size = latent(f) ? f->v_head_size : 0;
  a->rotary_offset = c->rotary_offset;
  a->kv_cache_layout = c->layout;
  a->qk_output = c->qk_output;
  a->is_causal = !c->non_causal;

  const int64_t N = f->N, H = c->num_heads, Hk = c->kv_num_heads, D = c->head_size;
  const pa_dtype T = c->dtype;
  pa_tensor_desc *in = f->in_desc;
  memset(in, 0, sizeof f->in_desc);
  in[PA_IN_QUERY] = desc(T, 2, N, f->row_heads * D, 0, 0);
  if (!c->packed) in[PA_IN_KEY] = desc(T, 2, N, Hk * D, 0, 0);
  if (!c->packed && !latent(f)) in[PA_IN_VALUE] = desc(T, 2, N, Hk * D, 0, 0);
  in[PA_IN_KEY_CACHE] = desc(c->cache_dtype, 4, f->num_blocks, c->block_size, Hk, D);
  if (!latent(f)) in[PA_IN_VALUE_CACHE] = in[PA_IN_KEY_CACHE];
  in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH] = desc(PA_DTYPE_INT32, 1, B + 1, 0, 0, 0);
  in[PA_IN_PAST_SEQLENS] = desc(PA_DTYPE_INT32, 1, B, 0, 0, 0);
  in[PA_IN_BLOCK_TABLE] = desc(PA_DTYPE_INT32, 2, B, f->M, 0, 0);
  if (c->rotary) {
    in[PA_IN_COS_CACHE] = desc(T, 2, f->rotary_rows, c->rotary_dim / 2, 0, 0);
    in[PA_IN_SIN_CACHE] = in[PA_IN_COS_CACHE];
  }
  if (c->slots != GPU_SLOTS_NONE) in[PA_IN_SLOT_MAPPING] = desc(PA_DTYPE_INT32, 1, N, 0, 0, 0);
  if (c->head_sink) in[PA_IN_HEAD_SINK] = desc(T, 1, H, 0, 0, 0);
  if (c->qk_norm) {
    in[PA_IN_Q_NORM_WEIGHT] = desc(T, 1, D, 0, 0, 0);
    in[PA_IN_K_NORM_WEIGHT] = in[PA_IN_Q_NORM_WEIGHT];
  }
  pa_quant_type quant[2] = {c->k_quant, c->v_quant};
  for (int kv = 0; kv < 2; kv++) {
    if (quant[kv] == PA_QUANT_PER_TENSOR)
      in[PA_IN_K_SCALE + kv] = desc(PA_DTYPE_FLOAT32, 1, 1, 0, 0, 0);
    else if (quant[kv] == PA_QUANT_PER_CHANNEL)
      in[PA_IN_K_SCALE + kv] = desc(PA_DTYPE_FLOAT32, 3, Hk, 1, D, 0);
  }
  if (c->metadata != GPU_METADATA_NONE)
    in[PA_IN_ATTENTION_METADATA] = desc(PA_DTYPE_INT32, 1, 2, 0, 0, 0);
  if (c->query_positions) in[PA_IN_QUERY_POSITIONS] = desc(PA_DTYPE_INT32, 1, N, 0, 0, 0);
  if (c->bias != GPU_BIAS_NONE)
    in[PA_IN_ATTENTION_BIAS] =
        desc(T, 4, c->bias == GPU_BIAS_FULL || c->bias == GPU_BIAS_PER_BATCH ? B : 1,
             c->bias == GPU_BIAS_FULL || c->bias == GPU_BIAS_PER_HEAD ? H : 1, f->bias_q_cap,
             f->bias_kv_cap);
  pa_tensor_desc *out = f->out_desc;
  memset(out, 0, sizeof f->out_desc);
  out[PA_OUT_OUTPUT] = desc(T, 2, N, H * f->v_head_size, 0, 0);
  out[PA_OUT_KEY_CACHE] = in[PA_IN_KEY_CACHE];
  out[PA_OUT_VALUE_CACHE] = in[PA_IN_VALUE_CACHE];
  if (c->qk_output) out[PA_OUT_QK] = desc(c->qk_dtype, 3, H, N, f->qk_capacity, 0);
  for (int i = 0; i < PA_NUM_INPUTS; i++) f->in_bytes[i] = desc_bytes(&in[i]);
  for (int i = 0; i < PA_NUM_OUTPUTS; i++) f->out_bytes[i] = desc_bytes(&out[i]);
  f->in_bytes[PA_IN_ATTENTION_METADATA] = 0; /* host data, passed through the plan options */
}

static void fill_random_T(fixture *f, pa_dtype t, void *base, size_t count, float lo, float hi) {
  for (size_t i = 0; i < count; i++) store_elem(t, base, i, rng_uniform(&f->r, lo, hi));
}

/* A cache filled with random valid values: the canaries. */
static void fill_cache(fixture *f, void *base, size_t bytes) {
  pa_dtype t = f->c.cache_dtype;
  if (is_quantized_type(t)) {
    uint8_t *p = base;
    for (size_t i = 0; i < bytes; i++) {
      uint8_t v = (uint8_t)rng_next(&f->r);
      if (t == PA_DTYPE_FLOAT8_E4M3FN && (v & 0x7f) == 0x7f) v ^= 1; /* not a NaN code */
      p[i] = v;
    }
  } else {
    fill_random_T(f, t, base, bytes / 2, -1.0f, 1.0f);
  }
}

/* The position of token t of sequence b (j-th new token) at a step. */
static int32_t token_position(const fixture *f, int32_t b, int32_t j, int step) {
  int32_t past = f->past0[b] + step * f->q_lens[b];
  return f->c.query_positions ? past + (f->q_lens[b] - 1 - j) : past + j;
}

/* A harness bug, not a library failure: stop loudly. */
static void harness_assert(const fixture *f, int ok, const char *what) {
  if (ok) return;
  fprintf(stderr, "HARNESS BUG %s (seed %u): %s\n", f->name, f->seed, what);
  abort();
}

/* Ring-buffer run: sequence b's table row at a step. The live range runs from the block of the
 * oldest key the step's earliest query admits (past - W + 1) to the block of its last key; those
 * entries map onto the ring, every other entry is -1 (below: evicted; beyond: not allocated). */
static void fill_ring_row(fixture *f, int32_t b, int step) {
  const int32_t bs = f->c.block_size, W = f->c.window;
  const int32_t past = f->past0[b] + step * f->q_lens[b], kv_len = past + f->q_lens[b];
  const int32_t first = (past - W + 1 > 0 ? past - W + 1 : 0) / bs;
  const int32_t last = kv_len > 0 ? (kv_len - 1) / bs : -1;
  harness_assert(f, last - first + 1 <= f->ring_n && last < f->M,
                 "ring: the live range needs more blocks than the ring holds");
  int32_t *row = (int32_t *)f->h_in[PA_IN_BLOCK_TABLE] + (int64_t)b * f->M;
  for (int32_t i = 0; i < f->M; i++)
    row[i] = i >= first && i <= last ? f->ring[(int64_t)b * f->ring_n + i % f->ring_n] : -1;
}

/* Per-step inputs: fresh Q/K/V rows, past lengths, positions and slots. */
static void fill_step_inputs(fixture *f, int step) {
  const gpu_case *c = &f->c;
  harness_assert(f, !c->packed || !c->query_exponent, "query_exponent with packed Q/K/V");
  for (int i = PA_IN_QUERY; i <= PA_IN_VALUE; i++) {
    const float m = i == PA_IN_QUERY ? ldexpf(1.0f, c->query_exponent) : 1.0f;
    if (f->in_bytes[i]) fill_random_T(f, c->dtype, f->h_in[i], f->in_bytes[i] / 2, -m, m);
  }
  int32_t *past = f->h_in[PA_IN_PAST_SEQLENS];
  for (int32_t b = 0; b < f->B; b++) past[b] = f->past0[b] + step * f->q_lens[b];

  if (c->key_growth) {
    harness_assert(f, !c->packed && f->in_bytes[PA_IN_KEY], "key_growth needs a separate K input");
    const size_t row = (size_t)c->kv_num_heads * c->head_size; /* K elements per token */
    int64_t t = 0;
    for (int32_t b = 0; b < f->B; b++)
      for (int32_t j = 0; j < f->q_lens[b]; j++, t++) {
        const float growth = 1.0f + (float)token_position(f, b, j, step) / (float)c->key_growth;
        for (size_t e = 0; e < row; e++) {
          const size_t i = (size_t)t * row + e;
          store_elem(c->dtype, f->h_in[PA_IN_KEY], i,
                     growth * load_elem(c->dtype, f->h_in[PA_IN_KEY], i));
        }
      }
  }

  int32_t *positions = f->h_in[PA_IN_QUERY_POSITIONS];
  int32_t *slots = f->h_in[PA_IN_SLOT_MAPPING];
  const int32_t *table = f->h_in[PA_IN_BLOCK_TABLE];
  const int64_t cache_slots = (int64_t)f->num_blocks * c->block_size;
  int64_t t = 0;
  for (int32_t b = 0; b < f->B; b++) {
    if (f->ring_n) fill_ring_row(f, b, step);
    for (int32_t j = 0; j < f->q_lens[b]; j++, t++) {
      int32_t p = token_position(f, b, j, step);
      if (positions) positions[t] = p;
      if (!slots) continue;
      int32_t id = p / c->block_size < f->M ? table[(int64_t)b * f->M + p / c->block_size] : -1;
      int64_t slot =
          id >= 0 && id < f->num_blocks ? (int64_t)id * c->block_size + p % c->block_size : -1;
      if (f->ring_n) {
        const int32_t ring_id = f->ring[(int64_t)b * f->ring_n + p / c->block_size % f->ring_n];
        harness_assert(f, slot == (int64_t)ring_id * c->block_size + p % c->block_size,
                       "ring: a new token's slot is not ring[i % N] * block_size + p % block_size");
      }
      if (c->slots == GPU_SLOTS_INTO_PAST && j == 0 && f->B > 1) {
        harness_assert(f, !c->shared_prefix_blocks && !f->ring_n,
                       "GPU_SLOTS_INTO_PAST: not with shared prefix blocks or a ring");
        const int32_t next = (b + 1) % f->B, next_id = table[(int64_t)next * f->M];
        if (past[next] > 0 && next_id >= 0 && next_id < f->num_blocks)
          slot = (int64_t)next_id * c->block_size;
      }
      if (c->slots == GPU_SLOTS_WITH_INVALID && rng_below(&f->r, 5) == 0) {
        int kind = rng_below(&f->r, 5);
        slot = kind == 0   ? -1
               : kind == 1 ? cache_slots + rng_below(&f->r, 1000)
               : kind == 2 ? -2 - rng_below(&f->r, 1000)
               : kind == 3 ? INT32_MIN + rng_below(&f->r, 1000)
                           : INT32_MAX - rng_below(&f->r, 1000);
      }
      slots[t] = (int32_t)slot;
    }
  }
  for (; t < f->N; t++) { /* tokens of no sequence: valid-looking slots that must stay unwritten */
    if (positions) positions[t] = rng_below(&f->r, 8);
    if (slots)
      slots[t] =
          (int32_t)((int64_t)f->spare_block * c->block_size + rng_below(&f->r, c->block_size));
  }
}

/* The slots this step writes, per doc/semantics.md step 6, computed here from the host inputs. */
static void expected_slots(fixture *f) {
  const gpu_case *c = &f->c;
  const int64_t cache_slots = (int64_t)f->num_blocks * c->block_size;
  memset(f->written, 0, (size_t)cache_slots);
  const int32_t *past = f->h_in[PA_IN_PAST_SEQLENS], *table = f->h_in[PA_IN_BLOCK_TABLE];
  const int32_t *positions = f->h_in[PA_IN_QUERY_POSITIONS], *slots = f->h_in[PA_IN_SLOT_MAPPING];
  int64_t t = 0;
  for (int32_t b = 0; b < f->B; b++) {
    for (int32_t j = 0; j < f->q_lens[b]; j++, t++) {
      int64_t slot = -1;
      if (slots) {
        slot = slots[t];
      } else {
        int32_t p = positions ? positions[t] : past[b] + j;
        if (p >= 0 && p / c->block_size < f->M) {
          int32_t id = table[(int64_t)b * f->M + p / c->block_size];
          if (id >= 0 && id < f->num_blocks) slot = (int64_t)id * c->block_size + p % c->block_size;
        }
      }
      if (slot < 0 || slot >= cache_slots) slot = -1;
      /* two tokens on one slot would be a contract violation (a race on the GPU) */
      harness_assert(f, slot < 0 || !f->written[slot], "two tokens of a step write one slot");
      if (slot >= 0) f->written[slot] = 1;
      f->token_slot[t] = slot;
    }
  }
}

static void fill_constant_inputs(fixture *f) {
  const gpu_case *c = &f->c;
  const pa_dtype T = c->dtype;
  int32_t *cu = f->h_in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH];
  cu[0] = 0;
  for (int32_t b = 0; b < f->B; b++) cu[b + 1] = cu[b] + f->q_lens[b];
  if (c->decreasing_cu) {
    for (int32_t lo = 1, hi = f->B - 1; lo < hi; lo++, hi--) {
      const int32_t tmp = cu[lo];
      cu[lo] = cu[hi];
      cu[hi] = tmp;
    }
    int decreases = 0;
    for (int32_t b = 0; b < f->B; b++) decreases |= cu[b + 1] < cu[b];
    harness_assert(f, decreases, "decreasing_cu left cumulative_sequence_length non-decreasing");
  }

  /* block ids: a permutation of [0, num_blocks) (identity unless shuffled); some unmapped */
  int32_t *ids = malloc((size_t)f->num_blocks * sizeof(int32_t));
  for (int32_t i = 0; i < f->num_blocks; i++) ids[i] = i;
  if (c->shuffled_blocks)
    for (int32_t i = f->num_blocks - 1; i > 0; i--) {
      int32_t k = rng_below(&f->r, i + 1), tmp = ids[i];
      ids[i] = ids[k];
      ids[k] = tmp;
    }
  int32_t *table = f->h_in[PA_IN_BLOCK_TABLE];
  for (int64_t i = 0; i < (int64_t)f->B * f->M; i++) {
    table[i] = ids[i];
    if (c->unmapped_blocks && rng_below(&f->r, 8) == 0) {
      int32_t kind = rng_below(&f->r, 5);
      table[i] = kind == 0   ? -1
                 : kind == 1 ? f->num_blocks + rng_below(&f->r, 100)
                 : kind == 2 ? -2 - rng_below(&f->r, 1000)
                 : kind == 3 ? INT32_MIN + rng_below(&f->r, 1000)
                             : INT32_MAX - rng_below(&f->r, 1000);
    }
  }
  for (int32_t b = 1; b < f->B; b++) /* the common prefix: sequence 0's blocks */
    for (int32_t i = 0; i < c->shared_prefix_blocks && i < f->M; i++)
      table[(int64_t)b * f->M + i] = table[i];
  f->spare_block = ids[(int64_t)f->B * f->M];
  free(ids);

  if (c->rotary) { /* real RoPE tables: cos/sin of p * 10000^(-2i/R) */
    const int32_t half = c->rotary_dim / 2;
    for (int32_t p = 0; p < f->rotary_rows; p++)
      for (int32_t i = 0; i < half; i++) {
        double angle = p * pow(10000.0, -2.0 * i / c->rotary_dim);
        store_elem(T, f->h_in[PA_IN_COS_CACHE], (size_t)p * half + i, (float)cos(angle));
        store_elem(T, f->h_in[PA_IN_SIN_CACHE], (size_t)p * half + i, (float)sin(angle));
      }
  }
  if (c->head_sink)
    fill_random_T(f, T, f->h_in[PA_IN_HEAD_SINK], (size_t)c->num_heads, -1.0f, 1.0f);
  if (c->qk_norm) {
    fill_random_T(f, T, f->h_in[PA_IN_Q_NORM_WEIGHT], (size_t)c->head_size, 0.5f, 1.5f);
    fill_random_T(f, T, f->h_in[PA_IN_K_NORM_WEIGHT], (size_t)c->head_size, 0.5f, 1.5f);
  }
  /* scales put typical values (|x| <= ~2) inside the cache type's range, a few saturating */
  float range = c->cache_dtype == PA_DTYPE_INT8 ? 127.0f : 448.0f;
  for (int kv = 0; kv < 2; kv++) {
    float *scale = f->h_in[PA_IN_K_SCALE + kv];
    for (size_t i = 0; scale && i < f->in_bytes[PA_IN_K_SCALE + kv] / 4; i++)
      scale[i] = rng_uniform(&f->r, 1.0f, 2.5f) / range;
  }
  if (c->bias != GPU_BIAS_NONE)
    fill_random_T(f, T, f->h_in[PA_IN_ATTENTION_BIAS], f->in_bytes[PA_IN_ATTENTION_BIAS] / 2, -1.0f,
                  1.0f);
  fill_cache(f, f->h_in[PA_IN_KEY_CACHE], f->in_bytes[PA_IN_KEY_CACHE]);
  if (f->in_bytes[PA_IN_VALUE_CACHE])
    fill_cache(f, f->h_in[PA_IN_VALUE_CACHE], f->in_bytes[PA_IN_VALUE_CACHE]);
}

static void fixture_free(fixture *f) {
  for (int i = 0; i < PA_NUM_INPUTS; i++) {
    free(f->h_in[i]);
    cudaFree(f->d_in[i]);
    cudaFree(f->d_staged[i]);
  }
  for (int i = 0; i < PA_NUM_OUTPUTS; i++) {
    free(f->h_out[i]);
    free(f->gpu_out[i]);
    if (i == PA_OUT_QK) cudaFree(f->d_out[i]);
  }
  cudaFree(f->d_out_allocation);
  for (int kv = 0; kv < 2; kv++) {
    free(f->cache_start[kv]);
    free(f->gpu_cache[kv]);
  }
  free(f->written);
  free(f->token_slot);
  free(f->ring);
  if (f->graph_exec) cudaGraphExecDestroy(f->graph_exec);
  if (f->graph_def) cudaGraphDestroy(f->graph_def);
  free(f->q_lens);
  free(f->past0);
  cudaFree(f->workspace);
  if (f->stream) cudaStreamDestroy(f->stream);
  pa_plan_destroy(f->plan);
}

/* Shapes, filled host inputs and the plan (for `device`: the host self-check plans on
 * PA_DEVICE_HOST). GPU_PASS, GPU_UNSUPPORTED or GPU_FAIL. */
static int fixture_init_host(fixture *f, const gpu_case *c, const char *name, pa_backend backend,
                             unsigned seed, int steps, int32_t device) {
  memset(f, 0, sizeof *f);
  f->c = *c;
  f->name = name;
  f->seed = seed;
  f->r.state = seed * 0x2545f4914f6cdd1dull + 1;
  fixture_shape(f, steps);
  /* every present tensor gets a buffer, an empty one (token_count 0) too: pointers are required */
  for (int i = 0; i < PA_NUM_INPUTS; i++) {
    if (f->in_desc[i].dtype == PA_DTYPE_UNDEFINED || i == PA_IN_ATTENTION_METADATA) continue;
    f->h_in[i] = malloc(f->in_bytes[i] ? f->in_bytes[i] : 16);
    if (!f->h_in[i]) return fail(f, -1, "%s: host allocation failed", input_names[i]);
  }
  for (int i = 0; i < PA_NUM_OUTPUTS; i++) {
    if (f->out_desc[i].dtype == PA_DTYPE_UNDEFINED) continue;
    if (i == PA_OUT_KEY_CACHE || i == PA_OUT_VALUE_CACHE) continue; /* updated in place */
    size_t bytes = f->out_bytes[i] ? f->out_bytes[i] : 16;
    f->h_out[i] = malloc(bytes);
    f->gpu_out[i] = malloc(bytes);
    if (!f->h_out[i] || !f->gpu_out[i]) return fail(f, -1, "outputs: host allocation failed");
  }
  for (int kv = 0; kv < 2; kv++) {
    size_t bytes = f->in_bytes[PA_IN_KEY_CACHE + kv];
    if (!bytes) continue;
    f->cache_start[kv] = malloc(bytes);
    f->gpu_cache[kv] = malloc(bytes);
  }
  f->written = malloc((size_t)f->num_blocks * f->c.block_size);
  f->token_slot = malloc((size_t)(f->tokens_in_batch + 1) * sizeof(int64_t));
  fill_constant_inputs(f);

  pa_plan_options options;
  pa_plan_options_init(&options);
  options.backend = backend;
  options.device = device;
  options.attention_metadata = f->c.metadata != GPU_METADATA_NONE ? f->metadata : NULL;
  pa_status st = pa_plan_create(&f->plan, &f->attrs, f->in_desc, f->out_desc, &options);
  if (st == PA_ERROR_NOT_SUPPORTED) {
    if (verbose()) {
      char msg[512];
      pa_last_error_message(msg, sizeof msg);
      fprintf(stderr, "unsupported %s: %s\n", name, msg);
    }
    return GPU_UNSUPPORTED;
  }
  if (st != PA_SUCCESS) {
    char msg[512];
    pa_last_error_message(msg, sizeof msg);
    return fail(f, -1, "pa_plan_create: %s: %s", pa_status_string(st), msg);
  }
  return GPU_PASS;
}

/* Whether upload stages input i for the input copy kernel (inputs_by_kernel): every input but
 * the caches, which the library updates in place from step to step. */
static int staged_by_kernel(const fixture *f, int i) {
  return f->c.inputs_by_kernel && i != PA_IN_KEY_CACHE && i != PA_IN_VALUE_CACHE;
}

/* Bytes of 0xff after every device input: a kernel that reads past an input's end (and, say,
 * multiplies what it read by zero) reads NaN (floats) or -1 (integers) there, not whatever a
 * fresh allocation happens to hold, so the read shows in the results on every run. */
enum { INPUT_GUARD_BYTES = 1024 };

/* Device buffers (the caches alias their inputs), workspace and stream. */
static int fixture_init_device(fixture *f) {
  if (!cuda_ok(f, cudaStreamCreateWithFlags(&f->stream, cudaStreamNonBlocking), "stream"))
    return GPU_FAIL;
  for (int i = 0; i < PA_NUM_INPUTS; i++) {
    if (!f->h_in[i]) continue;
    size_t bytes = f->in_bytes[i] ? f->in_bytes[i] : 16;
    if (!cuda_ok(f, cudaMalloc(&f->d_in[i], bytes + INPUT_GUARD_BYTES), input_names[i]) ||
        !cuda_ok(f,
                 cudaMemsetAsync((char *)f->d_in[i] + bytes, 0xff, INPUT_GUARD_BYTES, f->stream),
                 input_names[i]))
      return GPU_FAIL;
    if (staged_by_kernel(f, i) && !cuda_ok(f, cudaMalloc(&f->d_staged[i], bytes), input_names[i]))
      return GPU_FAIL;
  }
  for (int i = 0; i < PA_NUM_OUTPUTS; i++) {
    if (f->out_desc[i].dtype == PA_DTYPE_UNDEFINED) continue;
    if (i == PA_OUT_KEY_CACHE || i == PA_OUT_VALUE_CACHE) {
      f->d_out[i] = f->d_in[i == PA_OUT_KEY_CACHE ? PA_IN_KEY_CACHE : PA_IN_VALUE_CACHE];
      continue;
    }
    size_t bytes = f->out_bytes[i] ? f->out_bytes[i] : 16;
    if (i == PA_OUT_OUTPUT) {
      const size_t offset = (size_t)f->c.output_offset_bytes;
      if (!cuda_ok(f, cudaMalloc(&f->d_out_allocation, bytes + offset), "outputs"))
        return GPU_FAIL;
      f->d_out[i] = (char *)f->d_out_allocation + offset;
      continue;
    }
    if (!cuda_ok(f, cudaMalloc(&f->d_out[i], bytes), "outputs")) return GPU_FAIL;
  }
  f->workspace_bytes = pa_plan_workspace_size(f->plan);
  if (f->workspace_bytes && !cuda_ok(f, cudaMalloc(&f->workspace, f->workspace_bytes), "workspace"))
    return GPU_FAIL;
  return GPU_PASS;
}

static int fixture_init(fixture *f, const gpu_case *c, const char *name, pa_backend backend,
                        unsigned seed, int steps) {
  int result = fixture_init_host(f, c, name, backend, seed, steps, PA_DEVICE_CURRENT);
  return result == GPU_PASS ? fixture_init_device(f) : result;
}

/* Uploads the step's inputs on the stream (caches only at step 0: afterwards they live on the
 * device) and poisons the outputs so that an unwritten element cannot pass. The workspace gets a
 * byte that changes with the seed and the step (0x00 and 0xff included), so that a kernel reading
 * scratch it did not write in this call (a count left from the last step, or the zeros of a fresh
 * cudaMalloc) gives a different result from one step to the next. */
static int upload(fixture *f, int step) {
  if (f->workspace_bytes) {
    const int poison = step % 2 ? 0xff : (int)((f->seed + (unsigned)step * 0x9du) & 0xfe);
    if (!cuda_ok(f, cudaMemsetAsync(f->workspace, poison, f->workspace_bytes, f->stream),
                 "poison workspace"))
      return 0;
  }
  for (int i = 0; i < PA_NUM_INPUTS; i++) {
    if (!f->in_bytes[i]) continue;
    if ((i == PA_IN_KEY_CACHE || i == PA_IN_VALUE_CACHE) && step > 0) continue;
    void *dst = f->d_staged[i] ? f->d_staged[i] : f->d_in[i];
    if (!cuda_ok(f,
                 cudaMemcpyAsync(dst, f->h_in[i], f->in_bytes[i], cudaMemcpyHostToDevice,
                                 f->stream),
                 input_names[i]))
      return 0;
  }
  for (int i = 0; i < PA_NUM_OUTPUTS; i++)
    if ((i == PA_OUT_OUTPUT || i == PA_OUT_QK) && f->out_bytes[i] &&
        !cuda_ok(f, cudaMemsetAsync(f->d_out[i], 0xff, f->out_bytes[i], f->stream),
                 "poison outputs"))
      return 0;
  /* the bytes before an offset output too: download checks that nothing wrote them */
  if (f->c.output_offset_bytes &&
      !cuda_ok(f,
               cudaMemsetAsync(f->d_out_allocation, 0xff, (size_t)f->c.output_offset_bytes,
                               f->stream),
               "poison the bytes before the output"))
    return 0;
  return 1;
}

static int download(fixture *f) {
  for (int i = 0; i < PA_NUM_OUTPUTS; i++) {
    if (!f->out_bytes[i]) continue;
    void *dst =
        i == PA_OUT_OUTPUT || i == PA_OUT_QK ? f->gpu_out[i] : f->gpu_cache[i - PA_OUT_KEY_CACHE];
    if (!cuda_ok(
            f,
            cudaMemcpyAsync(dst, f->d_out[i], f->out_bytes[i], cudaMemcpyDeviceToHost, f->stream),
            "download"))
      return 0;
  }
  if (!cuda_ok(f, cudaStreamSynchronize(f->stream), "stream synchronize")) return 0;
  if (f->c.output_offset_bytes) {
    unsigned char before[16];
    const int n = f->c.output_offset_bytes;
    if (!cuda_ok(f, cudaMemcpy(before, f->d_out_allocation, (size_t)n, cudaMemcpyDeviceToHost),
                 "download the bytes before the output"))
      return 0;
    for (int i = 0; i < n; i++)
      if (before[i] != 0xff) {
        fail(f, -1, "output: byte %d before its start was written (0x%02x)", i - n, before[i]);
        return 0;
      }
  }
  return 1;
}

/* The reference step into the host outputs and caches; write_only: its write path alone. */
static int run_reference_part(fixture *f, int step, int write_only) {
  void *out[PA_NUM_OUTPUTS] = {f->h_out[PA_OUT_OUTPUT], f->h_in[PA_IN_KEY_CACHE],
                               f->h_in[PA_IN_VALUE_CACHE], f->h_out[PA_OUT_QK]};
  pa_status st = write_only ? pa__execute_reference_write(f->plan, (const void *const *)f->h_in, out)
                            : pa_execute_reference(f->plan, (const void *const *)f->h_in, out);
  if (st == PA_SUCCESS) return 1;
  char msg[512];
  pa_last_error_message(msg, sizeof msg);
  fail(f, step, "%s: %s: %s", write_only ? "pa__execute_reference_write" : "pa_execute_reference",
       pa_status_string(st), msg);
  return 0;
}
static int run_reference(fixture *f, int step) { return run_reference_part(f, step, 0); }

/* ---- comparisons ----------------------------------------------------------------------------- */

static float output_tolerance(const fixture *f, pa_dtype stored) {
  float tol = f->c.dtype == PA_DTYPE_BFLOAT16 || stored == PA_DTYPE_BFLOAT16 ? 2e-2f : 5e-3f;
  return is_quantized_type(f->c.cache_dtype) ? 2e-2f : tol;
}

/* The output: rows of the batch within tolerance, rows of no sequence zeros. */
static int compare_output(fixture *f, int step) {
  const pa_dtype T = f->c.dtype;
  const int64_t row = (int64_t)f->c.num_heads * f->v_head_size;
  const float tol = output_tolerance(f, T);
  int bad = 0;
  for (int64_t t = 0; t < f->N; t++)
    for (int64_t i = 0; i < row; i++) {
      float g = load_elem(T, f->gpu_out[PA_OUT_OUTPUT], (size_t)(t * row + i));
      float r = load_elem(T, f->h_out[PA_OUT_OUTPUT], (size_t)(t * row + i));
      int ok = t < f->tokens_in_batch ? fabsf(g - r) <= tol * (1.0f + fabsf(r)) : g == 0.0f;
      if (!ok && bad++ < 8)
        fail(f, step, "output[token %lld, head %lld, channel %lld]: gpu %g, reference %g%s",
             (long long)t, (long long)(i / f->v_head_size), (long long)(i % f->v_head_size), g, r,
             t < f->tokens_in_batch ? "" : " (token of no sequence: expected 0)");
    }
  return bad == 0;
}

static int compare_qk(fixture *f, int step) {
  if (!f->c.qk_output) return 1;
  const pa_dtype Q = f->c.qk_dtype;
  const float tol = output_tolerance(f, Q);
  const size_t count = f->out_bytes[PA_OUT_QK] / pa_dtype_size(Q);
  int bad = 0;
  for (size_t i = 0; i < count; i++) {
    float g = load_elem(Q, f->gpu_out[PA_OUT_QK], i), r = load_elem(Q, f->h_out[PA_OUT_QK], i);
    int ok = isinf(r) || isinf(g) ? g == r : fabsf(g - r) <= tol * (1.0f + fabsf(r));
    if (!ok && bad++ < 8) {
      size_t k = i % (size_t)f->qk_capacity, t = i / (size_t)f->qk_capacity % (size_t)f->N;
      fail(f, step, "output_qk[head %zu, token %zu, key %zu]: gpu %g, reference %g",
           i / (size_t)f->qk_capacity / (size_t)f->N, t, k, g, r);
    }
  }
  return bad == 0;
}

/* One cache: written slots within one step (T: 1 ULP) of the reference; every other byte equal to
 * its value at the start of the step, on both sides. */
static int compare_cache(fixture *f, int step, int kv) {
  const int in = PA_IN_KEY_CACHE + kv;
  if (!f->in_bytes[in]) return 1;
  const char *name = kv ? "value_cache" : "key_cache";
  const pa_dtype C = f->c.cache_dtype;
  const size_t elem = pa_dtype_size(C);
  const size_t row = (size_t)f->c.kv_num_heads * f->c.head_size; /* elements per slot */
  const int64_t cache_slots = (int64_t)f->num_blocks * f->c.block_size;
  const unsigned char *start = f->cache_start[kv], *gpu = f->gpu_cache[kv], *ref = f->h_in[in];
  int bad = 0;
  for (int64_t s = 0; s < cache_slots; s++) {
    if (!f->written[s]) {
      size_t off = (size_t)s * row * elem, len = row * elem;
      if (memcmp(gpu + off, start + off, len) == 0 && memcmp(ref + off, start + off, len) == 0)
        continue;
      if (bad++ < 8)
        fail(f, step, "%s: slot %lld is not written by any token but changed (%s)", name,
             (long long)s, memcmp(gpu + off, start + off, len) ? "gpu" : "reference");
      continue;
    }
    for (size_t i = 0; i < row; i++) {
      size_t e = (size_t)s * row + i;
      if (within_one_step(C, gpu, ref, e)) continue;
      if (bad++ < 8)
        fail(f, step,
             "%s[slot %lld, head %zu, channel %zu]: gpu %g, reference %g (more than one step)",
             name, (long long)s, i / (size_t)f->c.head_size, i % (size_t)f->c.head_size,
             load_elem(C, gpu, e), load_elem(C, ref, e));
    }
  }
  return bad == 0;
}

/* ---- runs ------------------------------------------------------------------------------------ */

static void begin_step(fixture *f, int step) {
  fill_step_inputs(f, step);
  expected_slots(f);
  for (int kv = 0; kv < 2; kv++)
    if (f->cache_start[kv])
      memcpy(f->cache_start[kv], f->h_in[PA_IN_KEY_CACHE + kv], f->in_bytes[PA_IN_KEY_CACHE + kv]);
}

/* After a step the host caches continue from the GPU's, so both sides start the next step from the
 * same bytes. */
static void end_step(fixture *f) {
  for (int kv = 0; kv < 2; kv++)
    if (f->gpu_cache[kv])
      memcpy(f->h_in[PA_IN_KEY_CACHE + kv], f->gpu_cache[kv], f->in_bytes[PA_IN_KEY_CACHE + kv]);
}

static int launch(fixture *f, int step) {
  if (f->c.inputs_by_kernel) {  /* the staged inputs into place by a kernel, right before */
    gpu_input_copy copies[GPU_MAX_INPUT_COPIES];
    int count = 0;
    for (int i = 0; i < PA_NUM_INPUTS; i++)
      if (f->d_staged[i] && f->in_bytes[i]) {
        copies[count].dst = f->d_in[i];
        copies[count].src = f->d_staged[i];
        copies[count].bytes = f->in_bytes[i];
        count++;
      }
    if (!cuda_ok(f, gpu_copy_inputs_by_kernel(copies, count, f->stream), "input copy kernel"))
      return 0;
  }
  void *outputs[PA_NUM_OUTPUTS] = {f->d_out[PA_OUT_OUTPUT], f->d_out[PA_OUT_KEY_CACHE],
                                   f->d_out[PA_OUT_VALUE_CACHE], f->d_out[PA_OUT_QK]};
  pa_status st = pa_execute(f->exec_plan ? f->exec_plan : f->plan, (const void *const *)f->d_in,
                            outputs, f->workspace, f->workspace_bytes, f->stream);
  if (st == PA_SUCCESS) return 1;
  char msg[512];
  pa_last_error_message(msg, sizeof msg);
  fail(f, step, "pa_execute: %s: %s", pa_status_string(st), msg);
  return 0;
}

/* A contract violation in the device data: under-sized bounds or a decreasing cu. */
static int results_unspecified(const gpu_case *c) {
  return c->metadata == GPU_METADATA_UNDERSIZED || c->decreasing_cu;
}

/* The step's comparisons with the reference; a contract violation compares nothing (its result is
 * unspecified): the step only had to succeed, which download's synchronization has shown. */
static int compare_step(fixture *f, int step) {
  if (results_unspecified(&f->c)) return 1;
  if (!run_reference(f, step)) return 0;
  int ok = compare_output(f, step);
  ok &= compare_qk(f, step);
  ok &= compare_cache(f, step, 0);
  ok &= compare_cache(f, step, 1);
  return ok;
}

/* Eager: one pa_execute. Graph: the first call captures one pa_execute (the capture is ended even
 * when it fails), every call replays it. */
static int execute(fixture *f, int step, int graph) {
  if (!graph) return launch(f, step);
  if (!f->graph_exec) {
    if (!cuda_ok(f, cudaStreamBeginCapture(f->stream, cudaStreamCaptureModeGlobal),
                 "begin capture"))
      return 0;
    int captured = launch(f, step);
    captured &= cuda_ok(f, cudaStreamEndCapture(f->stream, &f->graph_def), "end capture");
    if (!captured ||
        !cuda_ok(f, cudaGraphInstantiate(&f->graph_exec, f->graph_def, 0), "graph instantiate"))
      return 0;
  }
  return cuda_ok(f, cudaGraphLaunch(f->graph_exec, f->stream), "graph launch");
}

/* One step of one run: inputs, pa_execute, the comparison with the reference. */
static int run_step(fixture *f, int step, int graph) {
  begin_step(f, step);
  int ok = upload(f, step) && execute(f, step, graph) && download(f) && compare_step(f, step);
  end_step(f);
  return ok;
}

/* Runs of one case that must agree bitwise (same inputs, different layout or bounds): b against a
 * at a step, after both compared with the reference. Outputs and output_qk of the GPU and of the
 * reference, and each token's written cache rows (the slots may differ). */
static int bitwise(const void *x, const void *y, size_t bytes) {
  return bytes == 0 || memcmp(x, y, bytes) == 0;
}
static int compare_runs(const fixture *a, const fixture *b, int step) {
  if (results_unspecified(&b->c)) return 1;
  int ok = 1;
  const int outputs[2] = {PA_OUT_OUTPUT, PA_OUT_QK};
  for (int k = 0; k < 2; k++) {
    const int i = outputs[k];
    const char *name = k ? "output_qk" : "output";
    if (!bitwise(a->gpu_out[i], b->gpu_out[i], a->out_bytes[i]))
      ok = !fail(b, step, "%s differs bitwise from %s's (gpu)", name, a->name);
    if (!bitwise(a->h_out[i], b->h_out[i], a->out_bytes[i]))
      ok = !fail(b, step, "%s differs bitwise from %s's (reference)", name, a->name);
  }
  const size_t row_bytes =
      (size_t)a->c.kv_num_heads * a->c.head_size * pa_dtype_size(a->c.cache_dtype);
  int bad_rows = 0;
  for (int kv = 0; kv < 2; kv++) {
    if (!a->gpu_cache[kv]) continue;
    for (int64_t t = 0; t < a->tokens_in_batch; t++) {
      int64_t sa = a->token_slot[t], sb = b->token_slot[t];
      if ((sa < 0) == (sb < 0) &&
          (sa < 0 || bitwise((const char *)a->gpu_cache[kv] + (size_t)sa * row_bytes,
                             (const char *)b->gpu_cache[kv] + (size_t)sb * row_bytes, row_bytes)))
        continue;
      if (bad_rows++ < 8)
        fail(b, step, "%s row of token %lld differs bitwise from %s's (gpu)",
             kv ? "value_cache" : "key_cache", (long long)t, a->name);
      ok = 0;
    }
  }
  return ok;
}

/* Steps `count` runs of one case in lockstep; from the second on, each must agree bitwise with the
 * first at every step. */
static int run_lockstep(fixture *runs, int count, int steps, int graph) {
  int result = GPU_PASS;
  for (int i = 0; i < count && result == GPU_PASS; i++)
    if (runs[i].result != GPU_PASS) result = runs[i].result;
  for (int step = 0; result == GPU_PASS && step < steps; step++) {
    for (int i = 0; i < count; i++)
      if (!run_step(&runs[i], step, graph)) result = GPU_FAIL;
    for (int i = 1; i < count && result == GPU_PASS; i++)
      if (!compare_runs(&runs[0], &runs[i], step)) result = GPU_FAIL;
  }
  return result;
}

static int run_case(const gpu_case *c, pa_backend backend, unsigned seed, int steps, int graph) {
  if (!gpu_available()) return GPU_SKIP;
  fixture f;
  f.result = fixture_init(&f, c, c->name ? c->name : "(unnamed)", backend, seed, steps);
  int result = run_lockstep(&f, 1, steps, graph);
  fixture_free(&f);
  return result;
}

int gpu_case_run(const gpu_case *c, pa_backend backend, unsigned seed) {
  return run_case(c, backend, seed, 1, 0);
}

int gpu_case_run_graph(const gpu_case *c, pa_backend backend, unsigned seed, int steps) {
  return run_case(c, backend, seed, steps > 0 ? steps : 1, 1);
}

int gpu_case_run_metadata_invariance(const gpu_case *c, pa_backend backend, unsigned seed) {
  if (!gpu_available()) return GPU_SKIP;
  static const gpu_metadata bounds[3] = {GPU_METADATA_NONE, GPU_METADATA_TIGHT, GPU_METADATA_LOOSE};
  static const char *const suffixes[3] = {" [metadata absent]", " [metadata tight]",
                                          " [metadata loose]"};
  fixture runs[3];
  char names[3][600];
  for (int i = 0; i < 3; i++) { /* the same case and seed: the same inputs */
    gpu_case variant = *c;
    variant.metadata = bounds[i];
    snprintf(names[i], sizeof names[i], "%s%s", c->name ? c->name : "(unnamed)", suffixes[i]);
    if (verbose()) fprintf(stderr, "plan %s\n", names[i]); /* before the plan's PA_DEBUG line */
    runs[i].result = fixture_init(&runs[i], &variant, names[i], backend, seed, 1);
  }
  int result = run_lockstep(runs, 3, 1, 0);
  for (int i = 0; i < 3; i++) fixture_free(&runs[i]);
  return result;
}

int gpu_case_run_plans_alive(const gpu_case *first, const gpu_case *later, pa_backend backend,
                             unsigned seed) {
  if (!gpu_available()) return GPU_SKIP;
  fixture runs[2];
  const gpu_case *cases[2] = {first, later};
  for (int i = 0; i < 2; i++) /* the later plan is created while the first one lives */
    runs[i].result = fixture_init(&runs[i], cases[i], cases[i]->name ? cases[i]->name : "(unnamed)",
                                  backend, seed + (unsigned)i, 1);
  int result = GPU_PASS;
  for (int i = 0; i < 2 && result == GPU_PASS; i++)
    if (runs[i].result != GPU_PASS) result = runs[i].result;
  /* the first plan runs after the later one's set-up */
  for (int i = 0; i < 2 && result == GPU_PASS; i++)
    if (!run_step(&runs[i], 0, 0)) result = GPU_FAIL;
  for (int i = 0; i < 2; i++) fixture_free(&runs[i]);
  return result;
}

/* ---- threads and streams --------------------------------------------------------------------- */

typedef struct concurrent_run {
  fixture *f;
  int index;
  pthread_barrier_t *barrier;
  int ok;
} concurrent_run;

/* One thread: a failure of its own (a workspace misaligned by index + 1 bytes), a barrier so that
 * every thread has failed before any reads its message, the check that the message is its own, then
 * its step: upload, pa_execute of the shared plan on its stream, download. */
static void *concurrent_thread(void *arg) {
  concurrent_run *run = arg;
  fixture *f = run->f;
  void *outputs[PA_NUM_OUTPUTS] = {f->d_out[PA_OUT_OUTPUT], f->d_out[PA_OUT_KEY_CACHE],
                                   f->d_out[PA_OUT_VALUE_CACHE], f->d_out[PA_OUT_QK]};
  static _Alignas(PA_WORKSPACE_ALIGNMENT) char no_workspace[64]; /* an address, never written */
  char *misaligned = (f->workspace ? (char *)f->workspace : no_workspace) + run->index + 1;
  pa_status st = pa_execute(f->exec_plan, (const void *const *)f->d_in, outputs, misaligned,
                            f->workspace_bytes, f->stream);
  pthread_barrier_wait(run->barrier);
  char want[64], got[512];
  snprintf(want, sizeof want, "got address %p", (void *)misaligned);
  pa_last_error_message(got, sizeof got);
  run->ok = st == PA_ERROR_MISALIGNED && strstr(got, want) != NULL;
  if (!run->ok)
    fail(f, 0, "thread %d: pa_last_error_message is \"%s\", expected its own \"%s\"", run->index,
         got, want);
  run->ok &= upload(f, 0) && launch(f, 0) && download(f);
  if (pa_last_error_message(NULL, 0) != 0) /* a success clears the thread's message */
    run->ok = !fail(f, 0, "thread %d: a message remains after pa_execute succeeded", run->index);
  return NULL;
}

/* runs[0 .. count - 1] of one case and seed, so the same inputs, every one executing runs[0]'s
 * plan, their names the case's with `first` (runs[0]) or `others`; then runs[0]'s step on this
 * thread. The first failure's result, or GPU_PASS. */
enum { RUN_NAME_BYTES = 600 };
static int runs_of_one_plan(const gpu_case *c, pa_backend backend, unsigned seed, int count,
                            fixture *runs, char (*names)[RUN_NAME_BYTES], const char *first,
                            const char *others) {
  int result = GPU_PASS;
  for (int i = 0; i < count; i++) {
    snprintf(names[i], RUN_NAME_BYTES, "%s [%s]", c->name ? c->name : "(unnamed)",
             i ? others : first);
    runs[i].result = fixture_init(&runs[i], c, names[i], backend, seed, 1);
    if (runs[i].result != GPU_PASS && result == GPU_PASS) result = runs[i].result;
  }
  if (result == GPU_PASS) {
    for (int i = 0; i < count; i++) runs[i].exec_plan = runs[0].plan;
    if (!run_step(&runs[0], 0, 0)) result = GPU_FAIL;
  }
  return result;
}

int gpu_case_run_concurrent(const gpu_case *c, pa_backend backend, unsigned seed, int threads) {
  if (!gpu_available()) return GPU_SKIP;
  enum { MAX_THREADS = 16 };
  if (threads < 1 || threads > MAX_THREADS) return GPU_FAIL;
  /* runs[0]: the serial run; runs[1..threads]: one per thread */
  fixture runs[MAX_THREADS + 1];
  char names[MAX_THREADS + 1][RUN_NAME_BYTES];
  int result =
      runs_of_one_plan(c, backend, seed, threads + 1, runs, names, "serial", "thread");
  if (result == GPU_PASS) {
    pthread_barrier_t barrier;
    pthread_t ids[MAX_THREADS];
    concurrent_run work[MAX_THREADS];
    pthread_barrier_init(&barrier, NULL, (unsigned)threads);
    for (int i = 0; i < threads; i++) {
      begin_step(&runs[i + 1], 0);
      work[i] = (concurrent_run){&runs[i + 1], i, &barrier, 0};
    }
    int started = 0;
    for (; started < threads; started++)
      if (pthread_create(&ids[started], NULL, concurrent_thread, &work[started]) != 0) break;
    for (int i = 0; i < started; i++) pthread_join(ids[i], NULL);
    pthread_barrier_destroy(&barrier);
    if (started < threads) result = fail(&runs[0], 0, "pthread_create failed");
    for (int i = 0; i < threads && result == GPU_PASS; i++) {
      fixture *f = &runs[i + 1];
      int ok = work[i].ok && compare_step(f, 0) && compare_runs(&runs[0], f, 0);
      for (int kv = 0; ok && kv < 2; kv++) /* the whole caches, not only the written rows */
        if (f->gpu_cache[kv] && !bitwise(runs[0].gpu_cache[kv], f->gpu_cache[kv],
                                          f->in_bytes[PA_IN_KEY_CACHE + kv]))
          ok = !fail(f, 0, "%s differs bitwise from the serial run's",
                     kv ? "value_cache" : "key_cache");
      end_step(f);
      if (!ok) result = GPU_FAIL;
    }
  }
  for (int i = 0; i <= threads; i++) fixture_free(&runs[i]);
  return result;
}

/* A step on a thread whose first CUDA call is its pa_execute: the fixture's inputs were uploaded
 * by the caller's thread. */
typedef struct fresh_run {
  fixture *f;
  int ok;
} fresh_run;

static void *fresh_thread(void *arg) {
  fresh_run *run = arg;
  run->ok = launch(run->f, 0) && download(run->f);
  return NULL;
}

int gpu_case_run_fresh_thread(const gpu_case *c, pa_backend backend, unsigned seed) {
  if (!gpu_available()) return GPU_SKIP;
  /* runs[0]: a run on this thread; runs[1]: the same inputs, executed by a fresh thread */
  fixture runs[2];
  char names[2][RUN_NAME_BYTES];
  int result = runs_of_one_plan(c, backend, seed, 2, runs, names, "this thread", "fresh thread");
  if (result == GPU_PASS) {
    fixture *f = &runs[1];
    fresh_run work = {f, 0};
    pthread_t id;
    begin_step(f, 0);
    int started = 0;
    if (upload(f, 0) && cuda_ok(f, cudaStreamSynchronize(f->stream), "upload")) {
      started = pthread_create(&id, NULL, fresh_thread, &work) == 0;
      if (started)
        pthread_join(id, NULL);
      else
        fail(f, 0, "pthread_create failed");
    }
    if (!(started && work.ok && compare_step(f, 0) && compare_runs(&runs[0], f, 0)))
      result = GPU_FAIL;
    end_step(f);
  }
  for (int i = 0; i < 2; i++) fixture_free(&runs[i]);
  return result;
}

/* ---- ring-buffer sliding window -------------------------------------------------------------- */

/* Blocks per sequence in the ring: the live range of a step spans at most W + q_len - 1 positions,
 * so this many blocks (the design's ceil(W / bs) + 1 when q_len is 1). */
static int32_t ring_blocks(const gpu_case *c) {
  const int32_t q = c->max_q_len > 0 ? c->max_q_len : 1;
  return (c->window + q - 1 + c->block_size - 1) / c->block_size + 1;
}

/* The ring run's case: explicit slots (the ring lives in slot_mapping), every block mapped, room
 * for B rings beside the full layout's blocks. The full run uses the same case: identical inputs.
 */
static gpu_case ring_case(const gpu_case *c) {
  gpu_case r = *c;
  r.slots = GPU_SLOTS_DERIVED;
  r.unmapped_blocks = 0;
  const int32_t ring_total = r.batch_size * ring_blocks(c) + 1;
  if (r.num_blocks < ring_total) r.num_blocks = ring_total;
  return r;
}

/* Gives the ring fixture its rings (consecutive ids after the spare block, so never the spare) and
 * the full run's live blocks at step 0: ring[i % N] holds block i of the full table. */
static void ring_setup(fixture *ring, const fixture *full) {
  const int32_t N = ring->ring_n = ring_blocks(&ring->c), B = ring->B;
  harness_assert(ring, (int64_t)B * N < ring->num_blocks, "ring: not enough blocks");
  ring->ring = malloc((size_t)B * N * sizeof(int32_t));
  for (int64_t k = 0; k < (int64_t)B * N; k++)
    ring->ring[k] = (int32_t)((ring->spare_block + 1 + k) % ring->num_blocks);
  const int32_t *table = full->h_in[PA_IN_BLOCK_TABLE];
  const size_t block_bytes = (size_t)ring->c.block_size * ring->c.kv_num_heads * ring->c.head_size *
                             pa_dtype_size(ring->c.cache_dtype);
  for (int32_t b = 0; b < B; b++) {
    fill_ring_row(ring, b, 0);
    const int32_t *row = (const int32_t *)ring->h_in[PA_IN_BLOCK_TABLE] + (int64_t)b * ring->M;
    for (int32_t i = 0; i < ring->M; i++) {
      if (row[i] < 0) continue;
      const int32_t source = table[(int64_t)b * full->M + i];
      harness_assert(ring, source >= 0 && source < full->num_blocks, "ring: unmapped full block");
      for (int kv = 0; kv < 2; kv++)
        if (ring->in_bytes[PA_IN_KEY_CACHE + kv])
          memcpy((char *)ring->h_in[PA_IN_KEY_CACHE + kv] + (size_t)row[i] * block_bytes,
                 (const char *)full->h_in[PA_IN_KEY_CACHE + kv] + (size_t)source * block_bytes,
                 block_bytes);
    }
  }
}

/* The full and ring fixtures of a ring-buffer run, host side (the host self-check uses it too). */
static int ring_init_host(fixture runs[2], char names[2][600], const gpu_case *c,
                          pa_backend backend, unsigned seed, int steps, int32_t device) {
  const gpu_case r = ring_case(c);
  snprintf(names[0], sizeof names[0], "%s [full cache]", c->name ? c->name : "(unnamed)");
  snprintf(names[1], sizeof names[1], "%s [ring buffer]", c->name ? c->name : "(unnamed)");
  runs[0].result = fixture_init_host(&runs[0], &r, names[0], backend, seed, steps, device);
  runs[1].result = fixture_init_host(&runs[1], &r, names[1], backend, seed, steps, device);
  if (c->window <= 0) return fail(&runs[1], -1, "ring buffer: needs a window");
  if (runs[0].result != GPU_PASS) return runs[0].result;
  if (runs[1].result != GPU_PASS) return runs[1].result;
  ring_setup(&runs[1], &runs[0]);
  return GPU_PASS;
}

/* Ring and full runs agree bitwise: with the same kv_len and window, both layouts give every
 * backend the same admitted keys with the same values in the same order (DECODE clamps each token's
 * key range to the window and splits it by length, never by block id; UNFUSED gathers by position),
 * and a masked key, -1 in the ring and stale in the full cache, gets P = 0 exactly, so it adds
 * nothing to either sum. */
int gpu_case_run_ring(const gpu_case *c, pa_backend backend, unsigned seed, int steps, int graph) {
  if (!gpu_available()) return GPU_SKIP;
  if (steps < 1) steps = 1;
  fixture runs[2];
  char names[2][600];
  int result = ring_init_host(runs, names, c, backend, seed, steps, PA_DEVICE_CURRENT);
  for (int i = 0; i < 2 && result == GPU_PASS; i++) result = fixture_init_device(&runs[i]);
  if (result == GPU_PASS) result = run_lockstep(runs, 2, steps, graph);
  for (int i = 0; i < 2; i++) fixture_free(&runs[i]);
  return result;
}

/* ---- write-path-only mode -------------------------------------------------------------------- */

/* The write path's Q (doc/semantics.md, "The write path", steps 1-4) on the host: the oracle for
 * the staged copy. */
static void host_write_q(const fixture *f, void *q_out) {
  const gpu_case *c = &f->c;
  const pa_dtype T = c->dtype;
  const int32_t H = c->num_heads, D = c->head_size;
  const int32_t *past = f->h_in[PA_IN_PAST_SEQLENS], *positions = f->h_in[PA_IN_QUERY_POSITIONS];
  float *x = malloc((size_t)D * sizeof(float));
  int64_t t = 0;
  for (int32_t b = 0; b < f->B; b++)
    for (int32_t j = 0; j < f->q_lens[b]; j++, t++) {
      int32_t p = positions ? positions[t] : past[b] + j;
      for (int32_t h = 0; h < H; h++) {
        for (int32_t i = 0; i < D; i++)
          x[i] = load_elem(T, f->h_in[PA_IN_QUERY],
                           (size_t)(t * f->row_heads * D + (int64_t)h * D + i));
        if (c->qk_norm) {
          double sum = 0;
          for (int32_t i = 0; i < D; i++) sum += (double)x[i] * x[i];
          float inv =
              1.0f / sqrtf((float)(sum / D) + (c->qk_norm_epsilon ? c->qk_norm_epsilon : 1e-6f));
          for (int32_t i = 0; i < D; i++)
            x[i] = x[i] * inv * load_elem(T, f->h_in[PA_IN_Q_NORM_WEIGHT], (size_t)i);
        }
        if (c->rotary && p >= 0 && p < f->rotary_rows) {
          const int32_t half = c->rotary_dim / 2, off = c->rotary_offset;
          for (int32_t i = 0; i < half; i++) {
            float cs = load_elem(T, f->h_in[PA_IN_COS_CACHE], (size_t)p * half + i);
            float sn = load_elem(T, f->h_in[PA_IN_SIN_CACHE], (size_t)p * half + i);
            int32_t i1 = c->rotary_interleaved ? off + 2 * i : off + i;
            int32_t i2 = c->rotary_interleaved ? off + 2 * i + 1 : off + i + half;
            float x1 = x[i1], x2 = x[i2];
            x[i1] = x1 * cs - x2 * sn;
            x[i2] = x2 * cs + x1 * sn;
          }
        }
        for (int32_t i = 0; i < D; i++)
          store_elem(T, q_out, (size_t)(t * H * D + (int64_t)h * D + i), x[i]);
      }
    }
  free(x);
}

static int compare_staged_q(fixture *f, const void *gpu_q) {
  const int64_t row = (int64_t)f->c.num_heads * f->c.head_size;
  void *expected = malloc((size_t)(f->tokens_in_batch * row) * 2 + 2);
  host_write_q(f, expected);
  int bad = 0;
  for (int64_t e = 0; e < f->tokens_in_batch * row; e++) {
    if (within_one_step(f->c.dtype, gpu_q, expected, (size_t)e)) continue;
    if (bad++ < 8)
      fail(f, 0, "staged q[token %lld, head %lld, channel %lld]: gpu %g, host %g",
           (long long)(e / row), (long long)(e % row / f->c.head_size),
           (long long)(e % f->c.head_size), load_elem(f->c.dtype, gpu_q, (size_t)e),
           load_elem(f->c.dtype, expected, (size_t)e));
  }
  free(expected);
  return bad == 0;
}

int gpu_case_run_write(const gpu_case *c, unsigned seed) {
  if (!gpu_available()) return GPU_SKIP;
  fixture f;
  const char *name = c->name ? c->name : "(unnamed)";
  int result = fixture_init(&f, c, name, PA_BACKEND_REFERENCE, seed, 1);
  void *staged = NULL, *gpu_q = NULL;
  if (result == GPU_PASS) {
    begin_step(&f, 0);
    const pa__problem *p = &f.plan->problem;
    pa__workspace_layout ws = {0};
    const int q_region = pa__write_workspace(p, &ws);
    const size_t q_bytes = q_region >= 0 ? ws.regions[q_region].bytes : 0;
    void *outputs[PA_NUM_OUTPUTS] = {f.d_out[PA_OUT_OUTPUT], f.d_out[PA_OUT_KEY_CACHE],
                                     f.d_out[PA_OUT_VALUE_CACHE], f.d_out[PA_OUT_QK]};
    pa__io io = pa__io_from(p, (const void *const *)f.d_in, outputs);
    if (q_bytes) {
      if (!cuda_ok(&f, cudaMalloc(&staged, q_bytes), "staged q") ||
          !cuda_ok(&f, cudaMemsetAsync(staged, 0xff, q_bytes, f.stream), "poison staged q"))
        result = GPU_FAIL;
      io.q_staged = staged;
      io.q_attn = staged;
      io.q_attn_row_stride = pa__q_row_elems(p);
    }
    if (result == GPU_PASS && upload(&f, 0)) {
      pa_status st = pa__write_run(f.plan, &io, (pa__stream)f.stream);
      if (st != PA_SUCCESS) {
        char msg[512];
        pa_last_error_message(msg, sizeof msg);
        result = fail(&f, 0, "pa__write_run: %s: %s", pa_status_string(st), msg);
      }
    } else {
      result = GPU_FAIL;
    }
    if (result == GPU_PASS && staged) {
      gpu_q = malloc(q_bytes);
      if (!cuda_ok(&f, cudaMemcpyAsync(gpu_q, staged, q_bytes, cudaMemcpyDeviceToHost, f.stream),
                   "download q"))
        result = GPU_FAIL;
    }
    if (result == GPU_PASS && !download(&f)) result = GPU_FAIL;
    if (result == GPU_PASS) {
      int ok = run_reference_part(&f, 0, 1);
      ok = ok && compare_cache(&f, 0, 0);
      ok = ok && compare_cache(&f, 0, 1);
      ok = ok && (!gpu_q || compare_staged_q(&f, gpu_q));
      if (!ok) result = GPU_FAIL;
    }
  }
  free(gpu_q);
  cudaFree(staged);
  fixture_free(&f);
  return result;
}

/* ---- matrices -------------------------------------------------------------------------------- */

void gpu_matrix_count(gpu_matrix_result *r, int result) {
  if (result == GPU_PASS)
    r->passed++;
  else if (result == GPU_UNSUPPORTED)
    r->unsupported++;
  else if (result == GPU_SKIP)
    r->skipped++;
  else
    r->failed++;
}

void gpu_matrix_add(gpu_matrix_result *a, gpu_matrix_result b) {
  a->passed += b.passed;
  a->failed += b.failed;
  a->unsupported += b.unsupported;
  a->skipped += b.skipped;
}

int gpu_matrix_exit_code(const gpu_matrix_result *r) {
  if (r->failed) return 1;
  if (r->passed == 0 && r->unsupported == 0) return GPU_SKIP;
  return 0;
}

gpu_matrix_result gpu_run_matrix_mode(const gpu_case *base, const gpu_axis *axes, int num_axes,
                                      gpu_case_filter filter, pa_backend backend, unsigned seed,
                                      gpu_mode mode, int graph_steps) {
  gpu_matrix_result r = {0, 0, 0, 0};
  int64_t combinations = 1;
  for (int a = 0; a < num_axes; a++) combinations *= axes[a].count;
  for (int64_t index = 0; index < combinations; index++) {
    gpu_case c = *base;
    char name[512];
    int used = snprintf(name, sizeof name, "%s", base->name ? base->name : "case");
    int64_t rest = index;
    for (int a = num_axes - 1; a >= 0; a--) { /* first axis outermost */
      int32_t value = axes[a].values[rest % axes[a].count];
      rest /= axes[a].count;
      memcpy((char *)&c + axes[a].offset, &value, sizeof value);
    }
    for (int a = 0; a < num_axes && used < (int)sizeof name; a++) {
      int32_t value;
      memcpy(&value, (const char *)&c + axes[a].offset, sizeof value);
      used += snprintf(name + used, sizeof name - (size_t)used, " %s=%d", axes[a].field, value);
    }
    c.name = name;
    if (filter && !filter(&c)) continue;
    if (!in_shard()) continue;
    unsigned case_seed = seed + (unsigned)index;
    int result;
    switch (mode) {
      case GPU_MODE_GRAPH:
        result = gpu_case_run_graph(&c, backend, case_seed, graph_steps);
        break;
      case GPU_MODE_WRITE:
        result = gpu_case_run_write(&c, case_seed);
        break;
      case GPU_MODE_RING:
      case GPU_MODE_RING_GRAPH:
        result =
            gpu_case_run_ring(&c, backend, case_seed, graph_steps, mode == GPU_MODE_RING_GRAPH);
        break;
      case GPU_MODE_METADATA:
        result = gpu_case_run_metadata_invariance(&c, backend, case_seed);
        break;
      default:
        result = gpu_case_run(&c, backend, case_seed);
    }
    if (verbose() || result == GPU_FAIL)
      fprintf(stderr, "%s %s (seed %u)\n",
              result == GPU_PASS   ? "ok  "
              : result == GPU_FAIL ? "FAIL"
                                   : "skip",
              name, case_seed);
    gpu_matrix_count(&r, result);
    if (result == GPU_SKIP) break; /* no device: the rest would say the same */
  }
  fprintf(stderr, "%s: %d passed, %d failed, %d unsupported, %d skipped\n",
          base->name ? base->name : "matrix", r.passed, r.failed, r.unsupported, r.skipped);
  return r;
}

gpu_matrix_result gpu_run_matrix(const gpu_case *base, const gpu_axis *axes, int num_axes,
                                 gpu_case_filter filter, pa_backend backend, unsigned seed) {
  return gpu_run_matrix_mode(base, axes, num_axes, filter, backend, seed, GPU_MODE_EAGER, 0);
}
