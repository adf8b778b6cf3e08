/*
 * The device contract checker on a GPU (doc/api.md, "Checking device data"): each rule is fed one
 * violation through otherwise valid device data and pa_plan_check_status must name the tensor, the
 * index and the value; the clean data of every configuration reports nothing; the first violation
 * wins, within a call (the rules' order) and across calls, and reading clears it; plans sharing a
 * workspace share the status; a checked plan's results equal an unchecked plan's bit for bit; the
 * checker adds two nodes to a captured execute, and none when a tensor is misaligned (MISALIGNED
 * comes back before anything is enqueued). Without PA_GPU_TEST_QUICK=1 it also times a
 * decode step with and without the checker (the figure in doc/performance.md).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "harness.h"
#include "host_numeric.h"
#include "test_rng.h"

enum { H = 4, HK = 2, D = 64, BS = 16, B = 3, M = 4, NUM_BLOCKS = 16, N = 6 };
enum { ROTARY_ROWS = 24, BIAS_KV_CAPACITY = 24, QK_CAPACITY = 22 };

static int failures;

#define EXPECT(cond, ...)                                                                          \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                         \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static void cuda_check(cudaError_t err, const char *what) {
  if (err == cudaSuccess) return;
  fprintf(stderr, "FATAL: %s: %s\n", what, cudaGetErrorString(err));
  exit(1);
}

/* ---- the request: which optional inputs a configuration has ---------------------------------- */

typedef struct variant {
  const char *name;
  int slot_mapping, rotary, query_positions, metadata, bias, clean;
  int32_t metadata_values[2];
  int32_t bias_query_capacity;
} variant;

enum {
  BASE, SLOTS, ROTARY, POSITIONS, METADATA, METADATA_QUERY, BIAS, BIAS_QUERY, NUM_VARIANTS
};
static const variant variants[NUM_VARIANTS] = {
    [BASE] = {"base", .clean = 1},
    [SLOTS] = {"slot_mapping", .slot_mapping = 1, .clean = 1},
    [ROTARY] = {"rotary", .rotary = 1, .clean = 1},
    [POSITIONS] = {"query_positions", .rotary = 1, .query_positions = 1, .clean = 1},
    [METADATA] = {"metadata", .metadata = 1, .metadata_values = {3, 21}, .clean = 1},
    [METADATA_QUERY] = {"metadata_query", .metadata = 1, .metadata_values = {2, 21}},
    [BIAS] = {"bias_qk", .bias = 1, .bias_query_capacity = N, .clean = 1},
    [BIAS_QUERY] = {"bias_query", .bias = 1, .bias_query_capacity = 2},
};

static pa_tensor_desc desc(pa_dtype t, int rank, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  pa_tensor_desc d = {t, rank, {d0, d1, d2, d3}};
  return d;
}

static pa_plan *plan_variant(const variant *v, int contract_check) {
  pa_attributes a;
  pa_attributes_init(&a);
  a.num_heads = H;
  a.kv_num_heads = HK;
  a.do_rotary = v->rotary;
  a.qk_output = v->bias ? 1 : 0;
  pa_tensor_desc in[PA_NUM_INPUTS] = {{0}}, out[PA_NUM_OUTPUTS] = {{0}};
  const pa_dtype t = PA_DTYPE_FLOAT16;
  in[PA_IN_QUERY] = desc(t, 2, N, H * D, 0, 0);
  in[PA_IN_KEY] = in[PA_IN_VALUE] = desc(t, 2, N, HK * D, 0, 0);
  in[PA_IN_KEY_CACHE] = in[PA_IN_VALUE_CACHE] = desc(t, 4, NUM_BLOCKS, BS, HK, D);
  in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH] = desc(PA_DTYPE_INT32, 1, B + 1, 0, 0, 0);
  in[PA_IN_PAST_SEQLENS] = desc(PA_DTYPE_INT32, 1, B, 0, 0, 0);
  in[PA_IN_BLOCK_TABLE] = desc(PA_DTYPE_INT32, 2, B, M, 0, 0);
  if (v->rotary) in[PA_IN_COS_CACHE] = in[PA_IN_SIN_CACHE] = desc(t, 2, ROTARY_ROWS, D / 2, 0, 0);
  if (v->slot_mapping) in[PA_IN_SLOT_MAPPING] = desc(PA_DTYPE_INT32, 1, N, 0, 0, 0);
  if (v->metadata) in[PA_IN_ATTENTION_METADATA] = desc(PA_DTYPE_INT32, 1, 2, 0, 0, 0);
  if (v->query_positions) in[PA_IN_QUERY_POSITIONS] = desc(PA_DTYPE_INT32, 1, N, 0, 0, 0);
  if (v->bias)
    in[PA_IN_ATTENTION_BIAS] = desc(t, 4, B, H, v->bias_query_capacity, BIAS_KV_CAPACITY);
  out[PA_OUT_OUTPUT] = desc(t, 2, N, H * D, 0, 0);
  if (v->bias) out[PA_OUT_QK] = desc(PA_DTYPE_FLOAT32, 3, H, N, QK_CAPACITY, 0);
  pa_plan_options o;
  pa_plan_options_init(&o);
  o.attention_metadata = v->metadata ? v->metadata_values : NULL;
  o.contract_check = contract_check;
  pa_plan *plan = NULL;
  if (pa_plan_create(&plan, &a, in, out, &o) != PA_SUCCESS) {
    char message[1024];
    pa_last_error_message(message, sizeof message);
    fprintf(stderr, "FATAL: plan %s: %s\n", v->name, message);
    exit(1);
  }
  return plan;
}

/* ---- the device data ------------------------------------------------------------------------- */

/* Clean data: sequences of 2, 1 and 3 new tokens after 5, 20 and 0 cached ones; block_table[0][3]
 * holds garbage that no key reaches (not a violation); one slot is -1 (a prefix-cache token). */
typedef struct metadata {
  int32_t cu[B + 1], past[B], table[B * M], slots[N], positions[N];
} metadata;

static metadata clean_metadata(void) {
  metadata m = {
      .cu = {0, 2, 3, 6},
      .past = {5, 20, 0},
      .table = {0, -1, -1, 999, 1, 2, -1, -1, 3, -1, -1, -1},
      .slots = {5, 6, 36, -1, 49, 50},
      .positions = {5, 6, 20, 0, 1, 2},
  };
  return m;
}

typedef struct buffers {
  void *q, *k, *v, *key_cache, *value_cache, *cos, *sin, *bias, *output, *qk, *workspace;
  int32_t *cu, *past, *table, *slots, *positions;
  size_t workspace_bytes;
  void *host_cache; /* the caches' initial contents */
  size_t q_bytes, kv_bytes, cache_bytes, bias_bytes;
} buffers;

static void *device_alloc(size_t bytes) {
  void *p = NULL;
  cuda_check(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}

static void fill_half(rng *r, uint16_t *dst, size_t count) {
  for (size_t i = 0; i < count; i++)
    dst[i] = pa__float_to_half((float)(rng_next(r) >> 40) / (float)(1 << 24) * 2.0f - 1.0f);
}

static void upload_random_half(rng *r, void *device, size_t bytes) {
  uint16_t *host = malloc(bytes);
  fill_half(r, host, bytes / 2);
  cuda_check(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice), "upload");
  free(host);
}

static buffers buffers_init(unsigned seed, size_t workspace_bytes) {
  buffers b;
  memset(&b, 0, sizeof b);
  rng r = {seed};
  b.q_bytes = (size_t)N * H * D * 2;
  b.kv_bytes = (size_t)N * HK * D * 2;
  b.cache_bytes = (size_t)NUM_BLOCKS * BS * HK * D * 2;
  b.bias_bytes = (size_t)B * H * N * BIAS_KV_CAPACITY * 2;
  b.q = device_alloc(b.q_bytes);
  b.k = device_alloc(b.kv_bytes);
  b.v = device_alloc(b.kv_bytes);
  b.key_cache = device_alloc(b.cache_bytes);
  b.value_cache = device_alloc(b.cache_bytes);
  b.cos = device_alloc(ROTARY_ROWS * D);
  b.sin = device_alloc(ROTARY_ROWS * D);
  b.bias = device_alloc(b.bias_bytes);
  b.output = device_alloc(b.q_bytes);
  b.qk = device_alloc((size_t)H * N * QK_CAPACITY * 4);
  b.cu = device_alloc(sizeof(int32_t) * (B + 1));
  b.past = device_alloc(sizeof(int32_t) * B);
  b.table = device_alloc(sizeof(int32_t) * B * M);
  b.slots = device_alloc(sizeof(int32_t) * N);
  b.positions = device_alloc(sizeof(int32_t) * N);
  b.workspace_bytes = workspace_bytes;
  b.workspace = device_alloc(workspace_bytes);
  cuda_check(cudaMemset(b.workspace, 0, workspace_bytes), "memset");
  upload_random_half(&r, b.q, b.q_bytes);
  upload_random_half(&r, b.k, b.kv_bytes);
  upload_random_half(&r, b.v, b.kv_bytes);
  upload_random_half(&r, b.cos, ROTARY_ROWS * D);
  upload_random_half(&r, b.sin, ROTARY_ROWS * D);
  upload_random_half(&r, b.bias, b.bias_bytes);
  b.host_cache = malloc(b.cache_bytes);
  fill_half(&r, b.host_cache, b.cache_bytes / 2);
  return b;
}

/* Uploads the metadata and resets both caches to the same random contents. */
static void upload(buffers *b, const metadata *m) {
  cuda_check(cudaMemcpy(b->cu, m->cu, sizeof m->cu, cudaMemcpyHostToDevice), "upload cu");
  cuda_check(cudaMemcpy(b->past, m->past, sizeof m->past, cudaMemcpyHostToDevice), "upload");
  cuda_check(cudaMemcpy(b->table, m->table, sizeof m->table, cudaMemcpyHostToDevice), "upload");
  cuda_check(cudaMemcpy(b->slots, m->slots, sizeof m->slots, cudaMemcpyHostToDevice), "upload");
  cuda_check(cudaMemcpy(b->positions, m->positions, sizeof m->positions, cudaMemcpyHostToDevice),
             "upload");
  cuda_check(cudaMemcpy(b->key_cache, b->host_cache, b->cache_bytes, cudaMemcpyHostToDevice),
             "upload");
  cuda_check(cudaMemcpy(b->value_cache, b->host_cache, b->cache_bytes, cudaMemcpyHostToDevice),
             "upload");
}

static void io_of(const buffers *b, const void *in[PA_NUM_INPUTS], void *out[PA_NUM_OUTPUTS]) {
  memset(in, 0, sizeof(void *) * PA_NUM_INPUTS);
  memset(out, 0, sizeof(void *) * PA_NUM_OUTPUTS);
  in[PA_IN_QUERY] = b->q;
  in[PA_IN_KEY] = b->k;
  in[PA_IN_VALUE] = b->v;
  in[PA_IN_KEY_CACHE] = b->key_cache;
  in[PA_IN_VALUE_CACHE] = b->value_cache;
  in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH] = b->cu;
  in[PA_IN_PAST_SEQLENS] = b->past;
  in[PA_IN_BLOCK_TABLE] = b->table;
  in[PA_IN_COS_CACHE] = b->cos;
  in[PA_IN_SIN_CACHE] = b->sin;
  in[PA_IN_SLOT_MAPPING] = b->slots;
  in[PA_IN_QUERY_POSITIONS] = b->positions;
  in[PA_IN_ATTENTION_BIAS] = b->bias;
  out[PA_OUT_OUTPUT] = b->output;
  out[PA_OUT_QK] = b->qk;
}

static void execute(const pa_plan *plan, buffers *b, const metadata *m, const char *what) {
  upload(b, m);
  const void *in[PA_NUM_INPUTS];
  void *out[PA_NUM_OUTPUTS];
  io_of(b, in, out);
  const pa_status st = pa_execute(plan, in, out, b->workspace, b->workspace_bytes, NULL);
  char message[1024];
  pa_last_error_message(message, sizeof message);
  EXPECT(st == PA_SUCCESS, "%s: pa_execute: %s %s", what, pa_status_string(st), message);
  cuda_check(cudaDeviceSynchronize(), what);
}

/* pa_plan_check_status must return want and a message holding every needle (NULL-terminated). */
static void expect_status(const pa_plan *plan, buffers *b, pa_status want,
                          const char *const *needles, const char *what) {
  char message[1024] = "stale", last[1024];
  const pa_status st = pa_plan_check_status(plan, b->workspace, NULL, message, sizeof message);
  pa_last_error_message(last, sizeof last);
  int ok = st == want && strcmp(message, want == PA_SUCCESS ? "" : last) == 0;
  for (const char *const *needle = needles; ok && *needle; needle++)
    ok = strstr(message, *needle) != NULL;
  EXPECT(ok, "%s: expected %s naming the needles, got %s: \"%s\"", what, pa_status_string(want),
         pa_status_string(st), message);
  if (ok && getenv("PA_TEST_VERBOSE")) fprintf(stderr, "%s: %s\n", what, message);
}
#define EXPECT_VIOLATION(plan, b, what, ...)                                                       \
  expect_status((plan), (b), PA_ERROR_CONTRACT_VIOLATION, (const char *const[]){__VA_ARGS__, NULL}, \
                (what))
#define EXPECT_CLEAN(plan, b, what)                                                                \
  expect_status((plan), (b), PA_SUCCESS, (const char *const[]){NULL}, (what))

/* ---- one violation per rule ------------------------------------------------------------------ */

typedef enum field { F_CU, F_PAST, F_TABLE, F_SLOT, F_POSITION } field;
typedef struct change {
  field field;
  int index;
  int32_t value;
} change;

typedef struct violation_case {
  int variant;
  change changes[2];
  int num_changes;
  const char *needles[4]; /* NULL-terminated */
} violation_case;

static const violation_case cases[] = {
    {BASE, {{F_CU, 0, 1}}, 1, {"cumulative_sequence_length[0]: expected 0, got 1"}},
    {BASE, {{F_CU, 2, 1}}, 1,
     {"cumulative_sequence_length[2]: expected >= cumulative_sequence_length[1] = 2", "got 1"}},
    {BASE, {{F_CU, 3, 7}}, 1,
     {"cumulative_sequence_length[3]: expected a value in [0, token_count = 6], got 7"}},
    {BASE, {{F_PAST, 1, -4}}, 1, {"past_seqlens[1]: expected >= 0, got -4"}},
    /* (past_seqlens + new tokens beyond INT32_MAX is left out: the backends would walk 2^30 keys) */
    {BASE, {{F_TABLE, 1 * M + 1, 16}}, 1,
     {"block_table[1][1]: expected -1 or a block id in [0, num_blocks = 16)", "got 16"}},
    {BASE, {{F_TABLE, 1 * M + 0, -7}}, 1, {"block_table[1][0]", "got -7"}},
    /* sequence 2 writes positions 5..7 into block 0, where sequence 0 writes 5 and 6 */
    {BASE, {{F_TABLE, 2 * M + 0, 0}, {F_PAST, 2, 5}}, 2,
     {"block_table: token 0's slot 5", "is written by token 3 too"}},
    {SLOTS, {{F_SLOT, 4, 256}}, 1,
     {"slot_mapping[4]: expected -1 or a slot in [0, num_blocks * block_size = 256), got 256"}},
    {SLOTS, {{F_SLOT, 2, -3}}, 1, {"slot_mapping[2]", "got -3"}},
    {SLOTS, {{F_SLOT, 5, 6}}, 1,
     {"slot_mapping[1]: expected a slot no other token of the call writes, got 6",
      "slot_mapping[5] writes too"}},
    {ROTARY, {{F_PAST, 1, ROTARY_ROWS}}, 1,
     {"past_seqlens[1]: token 2's position", "below cos_cache / sin_cache's 24 rows", "got 24"}},
    {POSITIONS, {{F_POSITION, 4, -2}}, 1, {"query_positions[4]: expected >= 0, got -2"}},
    {POSITIONS, {{F_POSITION, 1, 30}}, 1,
     {"query_positions[1]: expected a position below cos_cache / sin_cache's 24 rows", "got 30"}},
    {METADATA, {{F_PAST, 1, 30}}, 1,
     {"attention_metadata[1] = 21", "got sequence 1 with 31"}},
    {METADATA_QUERY, {{0}}, 0, {"attention_metadata[0] = 2", "got sequence 2 with 3"}},
    {BIAS, {{F_PAST, 1, 24}}, 1,
     {"attention_bias: dim 3 (kv capacity) = 24", "got sequence 1 with 25"}},
    {BIAS, {{F_PAST, 1, 22}}, 1, {"output_qk: dim 2 (capacity) = 22", "got sequence 1 with 23"}},
    {BIAS_QUERY, {{0}}, 0, {"attention_bias: dim 2 (query capacity) = 2", "sequence 2 with 3"}},
    /* the first in the rules' order: cumulative_sequence_length before past_seqlens ... */
    {BASE, {{F_PAST, 0, -1}, {F_CU, 2, 1}}, 2, {"cumulative_sequence_length[2]"}},
    /* ... and the lowest index within a tensor */
    {BASE, {{F_TABLE, 2 * M + 0, 50}, {F_TABLE, 1 * M + 1, 40}}, 2, {"block_table[1][1]", "got 40"}},
};

static void apply(metadata *m, const change *c) {
  int32_t *target = c->field == F_CU ? m->cu
                    : c->field == F_PAST ? m->past
                    : c->field == F_TABLE ? m->table
                    : c->field == F_SLOT ? m->slots
                                         : m->positions;
  target[c->index] = c->value;
}

/* ---- bitwise equality with the checker off, and the captured nodes ---------------------------- */

static void expect_same_results(const pa_plan *off, const pa_plan *on, buffers *b) {
  const metadata m = clean_metadata();
  void *host[2][3];
  const pa_plan *plans[2] = {off, on};
  for (int run = 0; run < 2; run++) {
    cuda_check(cudaMemset(b->output, 0xff, b->q_bytes), "poison");
    execute(plans[run], b, &m, "bitwise");
    void *const device[3] = {b->output, b->key_cache, b->value_cache};
    const size_t bytes[3] = {b->q_bytes, b->cache_bytes, b->cache_bytes};
    for (int i = 0; i < 3; i++) {
      host[run][i] = malloc(bytes[i]);
      cuda_check(cudaMemcpy(host[run][i], device[i], bytes[i], cudaMemcpyDeviceToHost), "copy");
    }
    EXPECT(run == 0 || (memcmp(host[0][0], host[1][0], bytes[0]) == 0 &&
                        memcmp(host[0][1], host[1][1], bytes[1]) == 0 &&
                        memcmp(host[0][2], host[1][2], bytes[2]) == 0),
           "the checked plan's output or caches differ from the unchecked plan's");
  }
  for (int run = 0; run < 2; run++)
    for (int i = 0; i < 3; i++) free(host[run][i]);
  EXPECT_CLEAN(on, b, "bitwise run");

  const void *in[PA_NUM_INPUTS];
  void *out[PA_NUM_OUTPUTS];
  io_of(b, in, out);
  cudaStream_t stream;
  cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  pa_status st_off = PA_ERROR_INTERNAL, st_on = PA_ERROR_INTERNAL;
  const size_t nodes_off = gpu_captured_nodes(off, in, out, b->workspace, b->workspace_bytes,
                                              stream, &st_off);
  const size_t nodes_on = gpu_captured_nodes(on, in, out, b->workspace, b->workspace_bytes,
                                             stream, &st_on);
  EXPECT(st_off == PA_SUCCESS && st_on == PA_SUCCESS && nodes_on == nodes_off + 2,
         "captured nodes: expected the unchecked plan's %zu + 2 (memset, checker), got %zu",
         nodes_off, nodes_on);
  /* a misaligned tensor fails before the checker is enqueued: nothing is captured */
  in[PA_IN_KEY_CACHE] = (const char *)b->key_cache + 2;
  pa_status st_misaligned = PA_ERROR_INTERNAL;
  const size_t nodes_misaligned = gpu_captured_nodes(on, in, out, b->workspace, b->workspace_bytes,
                                                     stream, &st_misaligned);
  char why[256];
  pa_last_error_message(why, sizeof why);
  EXPECT(st_misaligned == PA_ERROR_MISALIGNED && strstr(why, "key_cache") && nodes_misaligned == 0,
         "checked plan, key_cache misaligned: expected MISALIGNED naming it and no node, got %s "
         "\"%s\" and %zu nodes",
         pa_status_string(st_misaligned), why, nodes_misaligned);
  in[PA_IN_KEY_CACHE] = b->key_cache;
  /* reading the status is refused while the stream is being captured */
  cudaGraph_t graph = NULL;
  cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
  char message[256];
  const pa_status st = pa_plan_check_status(on, b->workspace, stream, message, sizeof message);
  cuda_check(cudaStreamEndCapture(stream, &graph), "end capture");
  if (graph) cudaGraphDestroy(graph);
  pa_last_error_message(message, sizeof message);
  EXPECT(st == PA_ERROR_INVALID_ARGUMENT && strstr(message, "stream: is being captured"),
         "check status during capture: got %s \"%s\"", pa_status_string(st), message);
  cudaStreamDestroy(stream);
}

/* ---- the cost: a decode step with and without the checker ------------------------------------ */

static float median(float *x, int n) {
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && x[j - 1] > x[j]; j--) {
      const float t = x[j];
      x[j] = x[j - 1];
      x[j - 1] = t;
    }
  return x[n / 2];
}

/* One decode row (32/8 heads, d128, fp16, block 16, every sequence at `context`): each plan's
 * execute captured in a graph of `per_graph` executes, replays timed with events (median of 50,
 * off and on interleaved). */
static void time_decode(int batch, int context) {
  enum { HEADS = 32, KV_HEADS = 8, HEAD = 128, BLOCK = 16, REPS = 50 };
  const int per_graph = 10;
  const int64_t blocks_per_seq = context / BLOCK, num_blocks = batch * blocks_per_seq;
  pa_attributes a;
  pa_attributes_init(&a);
  a.num_heads = HEADS;
  a.kv_num_heads = KV_HEADS;
  pa_tensor_desc in[PA_NUM_INPUTS] = {{0}}, out[PA_NUM_OUTPUTS] = {{0}};
  const pa_dtype t = PA_DTYPE_FLOAT16;
  in[PA_IN_QUERY] = desc(t, 2, batch, HEADS * HEAD, 0, 0);
  in[PA_IN_KEY] = in[PA_IN_VALUE] = desc(t, 2, batch, KV_HEADS * HEAD, 0, 0);
  in[PA_IN_KEY_CACHE] = in[PA_IN_VALUE_CACHE] = desc(t, 4, num_blocks, BLOCK, KV_HEADS, HEAD);
  in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH] = desc(PA_DTYPE_INT32, 1, batch + 1, 0, 0, 0);
  in[PA_IN_PAST_SEQLENS] = desc(PA_DTYPE_INT32, 1, batch, 0, 0, 0);
  in[PA_IN_BLOCK_TABLE] = desc(PA_DTYPE_INT32, 2, batch, blocks_per_seq, 0, 0);
  out[PA_OUT_OUTPUT] = desc(t, 2, batch, HEADS * HEAD, 0, 0);
  pa_plan *plans[2] = {NULL, NULL};
  for (int on = 0; on < 2; on++) {
    pa_plan_options o;
    pa_plan_options_init(&o);
    o.contract_check = on;
    if (pa_plan_create(&plans[on], &a, in, out, &o) != PA_SUCCESS) {
      fprintf(stderr, "FATAL: timing plan\n");
      exit(1);
    }
  }
  const size_t cache_bytes = (size_t)num_blocks * BLOCK * KV_HEADS * HEAD * 2;
  const size_t q_bytes = (size_t)batch * HEADS * HEAD * 2, kv_bytes = q_bytes / 4;
  size_t workspace_bytes = pa_plan_workspace_size(plans[1]);
  void *q = device_alloc(q_bytes), *k = device_alloc(kv_bytes), *v = device_alloc(kv_bytes);
  void *kc = device_alloc(cache_bytes), *vc = device_alloc(cache_bytes);
  void *output = device_alloc(q_bytes), *workspace = device_alloc(workspace_bytes + 1);
  int32_t *cu = device_alloc(sizeof(int32_t) * (batch + 1)), *past = device_alloc(4 * batch);
  int32_t *table = device_alloc(sizeof(int32_t) * batch * blocks_per_seq);
  /* fp16 0x3c3c (about 1.06) everywhere: the timing does not depend on the values */
  cuda_check(cudaMemset(q, 0x3c, q_bytes), "fill");
  cuda_check(cudaMemset(k, 0x3c, kv_bytes), "fill");
  cuda_check(cudaMemset(v, 0x3c, kv_bytes), "fill");
  cuda_check(cudaMemset(kc, 0x3c, cache_bytes), "fill");
  cuda_check(cudaMemset(vc, 0x3c, cache_bytes), "fill");
  cuda_check(cudaMemset(workspace, 0, workspace_bytes), "fill");
  int32_t *host = malloc(sizeof(int32_t) * batch * blocks_per_seq);
  for (int64_t i = 0; i < batch * blocks_per_seq; i++) host[i] = (int32_t)i;
  cuda_check(cudaMemcpy(table, host, sizeof(int32_t) * batch * blocks_per_seq,
                        cudaMemcpyHostToDevice), "table");
  for (int i = 0; i <= batch; i++) host[i] = i;
  cuda_check(cudaMemcpy(cu, host, sizeof(int32_t) * (batch + 1), cudaMemcpyHostToDevice), "cu");
  for (int i = 0; i < batch; i++) host[i] = context - 1;
  cuda_check(cudaMemcpy(past, host, sizeof(int32_t) * batch, cudaMemcpyHostToDevice), "past");
  free(host);

  const void *inputs[PA_NUM_INPUTS] = {0};
  void *outputs[PA_NUM_OUTPUTS] = {0};
  inputs[PA_IN_QUERY] = q;
  inputs[PA_IN_KEY] = k;
  inputs[PA_IN_VALUE] = v;
  inputs[PA_IN_KEY_CACHE] = kc;
  inputs[PA_IN_VALUE_CACHE] = vc;
  inputs[PA_IN_CUMULATIVE_SEQUENCE_LENGTH] = cu;
  inputs[PA_IN_PAST_SEQLENS] = past;
  inputs[PA_IN_BLOCK_TABLE] = table;
  outputs[PA_OUT_OUTPUT] = output;
  cudaStream_t stream;
  cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  cudaGraphExec_t exec[2];
  for (int on = 0; on < 2; on++) {
    cudaGraph_t graph;
    cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
    for (int i = 0; i < per_graph; i++)
      if (pa_execute(plans[on], inputs, outputs, workspace, workspace_bytes, stream) !=
          PA_SUCCESS)
        failures++;
    cuda_check(cudaStreamEndCapture(stream, &graph), "end capture");
    cuda_check(cudaGraphInstantiate(&exec[on], graph, 0), "instantiate");
    cudaGraphDestroy(graph);
  }
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  float times[2][REPS];
  for (int rep = -3; rep < REPS; rep++)
    for (int on = 0; on < 2; on++) {
      cudaEventRecord(start, stream);
      cudaGraphLaunch(exec[on], stream);
      cudaEventRecord(stop, stream);
      cuda_check(cudaEventSynchronize(stop), "timing");
      float ms = 0;
      cudaEventElapsedTime(&ms, start, stop);
      if (rep >= 0) times[on][rep] = ms * 1000.0f / per_graph;
    }
  const float off_us = median(times[0], REPS), on_us = median(times[1], REPS);
  printf("check cost: decode %d x %d (32/8 heads, d128, fp16, block 16, %s, CUDA graph): "
         "%.2f us off, %.2f us on, +%.2f us (+%.1f %%)\n",
         batch, context, pa_backend_name(pa_plan_backend(plans[0])), off_us, on_us,
         on_us - off_us, 100.0 * (on_us - off_us) / off_us);
  EXPECT_CLEAN(plans[1], &(buffers){.workspace = workspace}, "timing runs");
  for (int on = 0; on < 2; on++) {
    cudaGraphExecDestroy(exec[on]);
    pa_plan_destroy(plans[on]);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  void *const all[] = {q, k, v, kc, vc, output, workspace, cu, past, table};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) cudaFree(all[i]);
}

int main(void) {
  if (!gpu_available()) {
    fprintf(stderr, "no CUDA device: skipped\n");
    return GPU_SKIP;
  }
  const unsigned seed = gpu_test_seed();
  pa_plan *checked[NUM_VARIANTS];
  size_t workspace_bytes = 0;
  for (int i = 0; i < NUM_VARIANTS; i++) {
    checked[i] = plan_variant(&variants[i], 1);
    const size_t bytes = pa_plan_workspace_size(checked[i]);
    if (bytes > workspace_bytes) workspace_bytes = bytes;
  }
  buffers b = buffers_init(seed, workspace_bytes);

  /* clean data: nothing to report, for every configuration */
  for (int i = 0; i < NUM_VARIANTS; i++) {
    if (!variants[i].clean) continue;
    const metadata m = clean_metadata();
    execute(checked[i], &b, &m, variants[i].name);
    EXPECT_CLEAN(checked[i], &b, variants[i].name);
  }
  /* one violation per rule */
  const int num_cases = (int)(sizeof cases / sizeof cases[0]);
  for (int i = 0; i < num_cases; i++) {
    const violation_case *c = &cases[i];
    metadata m = clean_metadata();
    for (int j = 0; j < c->num_changes; j++) apply(&m, &c->changes[j]);
    char what[64];
    snprintf(what, sizeof what, "case %d (%s)", i, variants[c->variant].name);
    execute(checked[c->variant], &b, &m, what);
    expect_status(checked[c->variant], &b, PA_ERROR_CONTRACT_VIOLATION, c->needles, what);
    EXPECT_CLEAN(checked[c->variant], &b, "after reading");
  }
  /* across calls: the earliest violating call's, counted; any checked plan reads it */
  metadata first = clean_metadata(), second = clean_metadata(), clean = clean_metadata();
  first.table[1 * M + 1] = 16;
  second.cu[0] = 1;
  execute(checked[BASE], &b, &first, "sticky 1");
  execute(checked[BASE], &b, &clean, "sticky 2");
  execute(checked[SLOTS], &b, &second, "sticky 3");
  EXPECT_VIOLATION(checked[ROTARY], &b, "sticky", "block_table[1][1]",
                   "2 of 3 checked pa_execute calls");
  EXPECT_CLEAN(checked[BASE], &b, "sticky, cleared");

  pa_plan *unchecked = plan_variant(&variants[BASE], 0);
  expect_same_results(unchecked, checked[BASE], &b);
  pa_plan_destroy(unchecked);
  for (int i = 0; i < NUM_VARIANTS; i++) pa_plan_destroy(checked[i]);

  if (!gpu_test_quick()) {
    time_decode(64, 4096);
    time_decode(1, 1024);
  }
  printf("check: %d violation cases, %d failures\n", num_cases, failures);
  return failures ? GPU_FAIL : GPU_PASS;
}
