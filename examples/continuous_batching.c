/*
 * A small continuous-batching loop over a paged KV cache, the way a serving engine drives
 * libpagedattn for one attention layer.
 *
 * A pool of KV blocks is shared by all requests through a free list. Requests arrive over time;
 * a step either prefills newly admitted requests (all their prompt tokens at once) or decodes one
 * token for every running request. Each request owns a row of the block table, grows it one block
 * at a time as its context grows, and returns its blocks to the free list when it finishes, so later
 * requests reuse them. slot_mapping tells the operator where each new token's K and V go.
 *
 * A new plan is made every step (shapes change with the batch): that is host-only and cheap.
 * Runs on the GPU when a device is present and a built backend serves the request; otherwise on the
 * reference executor (PA_DEVICE_HOST plans + pa_execute_reference).
 *
 * It ends with what it ran on (backend, device) and a checksum of every step's outputs; options
 * that cannot apply (--check or a CUDA graph without a GPU) say so. --help describes the options.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <pagedattn/pagedattn.h>

enum {
  NUM_HEADS = 8,
  KV_NUM_HEADS = 2,
  HEAD_SIZE = 64,
  BLOCK_SIZE = 16,
  NUM_BLOCKS = 12,          /* the shared pool: small, so that admission waits and blocks are reused */
  MAX_BLOCKS_PER_SEQ = 6,   /* block_table.shape[1]: up to 96 tokens per request */
  MAX_BATCH = 4,            /* running requests at most */
  NUM_REQUESTS = 10,
  MAX_PROMPT = 40,
  MAX_GENERATED = 24,
  MAX_STEP_TOKENS = MAX_BATCH * MAX_PROMPT,
  Q_ROW = NUM_HEADS * HEAD_SIZE,
  KV_ROW = KV_NUM_HEADS * HEAD_SIZE,
  CACHE_ELEMS = NUM_BLOCKS * BLOCK_SIZE * KV_ROW,
};

/* ---- bfloat16 on the host ---------------------------------------------------------------------- */

static uint16_t bf16_from_float(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even; the values here are finite */
  return (uint16_t)(u >> 16);
}

static float float_from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static uint64_t rng_state;

static float random_uniform(void) { /* xorshift64*, in [-1, 1) */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (float)((rng_state * 0x2545F4914F6CDD1DULL) >> 40) / (float)(1 << 23) - 1.0f;
}

static void fill_random(uint16_t *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = bf16_from_float(random_uniform());
}

/* ---- the block pool and the requests ----------------------------------------------------------- */

typedef struct block_pool {
  int32_t free_list[NUM_BLOCKS]; /* a stack: the most recently freed block is reused first */
  int num_free;
  int promised;                  /* blocks admitted requests may still take */
  int reused;                    /* takes of a block that an earlier request had used */
  int used_before[NUM_BLOCKS];
} block_pool;

typedef enum request_state { WAITING, RUNNING, FINISHED } request_state;

typedef struct request {
  int id, arrival_step, prompt_len, max_new_tokens;
  int cached;    /* tokens whose K/V are in the cache: past_seqlens */
  int generated;
  int num_blocks;
  int32_t blocks[MAX_BLOCKS_PER_SEQ];
  request_state state;
} request;

static int blocks_for(int tokens) { return (tokens + BLOCK_SIZE - 1) / BLOCK_SIZE; }

static int32_t pool_take(block_pool *pool) {
  int32_t block = pool->free_list[--pool->num_free];
  pool->reused += pool->used_before[block];
  pool->used_before[block] = 1;
  pool->promised--;
  return block;
}

/* Admission reserves the request's whole lifetime, so a running request never waits for a block. */
static int pool_admit(block_pool *pool, const request *r) {
  int need = blocks_for(r->prompt_len + r->max_new_tokens);
  if (pool->num_free - pool->promised < need) return 0;
  pool->promised += need;
  return 1;
}

static void pool_release(block_pool *pool, request *r) {
  pool->promised -= blocks_for(r->prompt_len + r->max_new_tokens) - r->num_blocks;
  for (int i = r->num_blocks - 1; i >= 0; i--) pool->free_list[pool->num_free++] = r->blocks[i];
  r->num_blocks = 0;
}

/* ---- one step's inputs, in host memory ----------------------------------------------------------- */

typedef struct step_inputs {
  int batch_size, token_count;
  /* 16-byte aligned: pa_execute takes vectorized tensors (PA_ERROR_MISALIGNED otherwise) */
  _Alignas(16) uint16_t query[MAX_STEP_TOKENS * Q_ROW], key[MAX_STEP_TOKENS * KV_ROW],
      value[MAX_STEP_TOKENS * KV_ROW], output[MAX_STEP_TOKENS * Q_ROW];
  int32_t cu_seqlens[MAX_BATCH + 1], past_seqlens[MAX_BATCH];
  int32_t block_table[MAX_BATCH * MAX_BLOCKS_PER_SEQ], slot_mapping[MAX_STEP_TOKENS];
} step_inputs;

/* Lays out the batch: grows each request's block table to cover its new tokens, derives their slots,
 * and draws their Q, K and V (which a model's projections would produce). */
static void build_step(step_inputs *s, request *const batch[], int batch_size, int new_tokens_each,
                       block_pool *pool) {
  s->batch_size = batch_size;
  s->cu_seqlens[0] = 0;
  int t = 0;
  for (int b = 0; b < batch_size; b++) {
    request *r = batch[b];
    int q_len = new_tokens_each ? new_tokens_each : r->prompt_len;
    while (r->num_blocks < blocks_for(r->cached + q_len)) r->blocks[r->num_blocks++] = pool_take(pool);
    for (int i = 0; i < MAX_BLOCKS_PER_SEQ; i++)
      s->block_table[b * MAX_BLOCKS_PER_SEQ + i] = i < r->num_blocks ? r->blocks[i] : -1;
    for (int j = 0; j < q_len; j++, t++) {
      int pos = r->cached + j;
      s->slot_mapping[t] = r->blocks[pos / BLOCK_SIZE] * BLOCK_SIZE + pos % BLOCK_SIZE;
    }
    s->past_seqlens[b] = r->cached;
    s->cu_seqlens[b + 1] = t;
  }
  s->token_count = t;
  fill_random(s->query, (size_t)t * Q_ROW);
  fill_random(s->key, (size_t)t * KV_ROW);
  fill_random(s->value, (size_t)t * KV_ROW);
}

static void describe(const step_inputs *s, pa_tensor_desc in[PA_NUM_INPUTS],
                     pa_tensor_desc out[PA_NUM_OUTPUTS]) {
  memset(in, 0, PA_NUM_INPUTS * sizeof in[0]);
  memset(out, 0, PA_NUM_OUTPUTS * sizeof out[0]);
  int64_t n = s->token_count, b = s->batch_size;
  in[PA_IN_QUERY] = (pa_tensor_desc){PA_DTYPE_BFLOAT16, 2, {n, Q_ROW}};
  in[PA_IN_KEY] = (pa_tensor_desc){PA_DTYPE_BFLOAT16, 2, {n, KV_ROW}};
  in[PA_IN_VALUE] = in[PA_IN_KEY];
  in[PA_IN_KEY_CACHE] =
      (pa_tensor_desc){PA_DTYPE_BFLOAT16, 4, {NUM_BLOCKS, BLOCK_SIZE, KV_NUM_HEADS, HEAD_SIZE}};
  in[PA_IN_VALUE_CACHE] = in[PA_IN_KEY_CACHE];
  in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH] = (pa_tensor_desc){PA_DTYPE_INT32, 1, {b + 1}};
  in[PA_IN_PAST_SEQLENS] = (pa_tensor_desc){PA_DTYPE_INT32, 1, {b}};
  in[PA_IN_BLOCK_TABLE] = (pa_tensor_desc){PA_DTYPE_INT32, 2, {b, MAX_BLOCKS_PER_SEQ}};
  in[PA_IN_SLOT_MAPPING] = (pa_tensor_desc){PA_DTYPE_INT32, 1, {n}};
  out[PA_OUT_OUTPUT] = (pa_tensor_desc){PA_DTYPE_BFLOAT16, 2, {n, Q_ROW}};
}

/* s may be the device image of the inputs: only the addresses of its fields are taken. */
static void pointers(const step_inputs *s, void *key_cache, void *value_cache,
                     const void *in[PA_NUM_INPUTS], void *out[PA_NUM_OUTPUTS]) {
  memset(in, 0, PA_NUM_INPUTS * sizeof in[0]);
  memset(out, 0, PA_NUM_OUTPUTS * sizeof out[0]);
  in[PA_IN_QUERY] = s->query;
  in[PA_IN_KEY] = s->key;
  in[PA_IN_VALUE] = s->value;
  in[PA_IN_KEY_CACHE] = key_cache;
  in[PA_IN_VALUE_CACHE] = value_cache;
  in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH] = s->cu_seqlens;
  in[PA_IN_PAST_SEQLENS] = s->past_seqlens;
  in[PA_IN_BLOCK_TABLE] = s->block_table;
  in[PA_IN_SLOT_MAPPING] = s->slot_mapping;
  out[PA_OUT_OUTPUT] = (void *)s->output;
}

static int report(pa_status st, const char *what) {
  if (st == PA_SUCCESS) return 0;
  char message[512];
  pa_last_error_message(message, sizeof message);
  fprintf(stderr, "%s: %s: %s\n", what, pa_status_string(st), message);
  return 1;
}

/* ---- the GPU side: device copies of the caches and of one step's inputs ----------------------- */

typedef struct gpu {
  cudaStream_t stream;
  void *key_cache, *value_cache;
  step_inputs *inputs; /* device image of step_inputs, refilled every step at the same address */
  void *workspace;     /* for eager steps; grown as plans need */
  size_t workspace_bytes;
  /* --graph: the decode graph and its own workspace (a graph keeps the address it captured) */
  void *graph_workspace;
  cudaGraphExec_t decode_graph;
} gpu;

static int cuda_ok(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 1;
  fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return 0;
}

static int gpu_open(gpu *g, const uint16_t *key_cache, const uint16_t *value_cache) {
  memset(g, 0, sizeof *g);
  size_t cache_bytes = CACHE_ELEMS * sizeof(uint16_t);
  return cuda_ok(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking), "stream") &&
         cuda_ok(cudaMalloc(&g->key_cache, cache_bytes), "key_cache") &&
         cuda_ok(cudaMalloc(&g->value_cache, cache_bytes), "value_cache") &&
         cuda_ok(cudaMalloc((void **)&g->inputs, sizeof *g->inputs), "inputs") &&
         cuda_ok(cudaMemcpy(g->key_cache, key_cache, cache_bytes, cudaMemcpyHostToDevice), "copy") &&
         cuda_ok(cudaMemcpy(g->value_cache, value_cache, cache_bytes, cudaMemcpyHostToDevice),
                 "copy");
}

static void gpu_close(gpu *g) {
  if (g->decode_graph) cudaGraphExecDestroy(g->decode_graph);
  cudaFree(g->graph_workspace);
  cudaFree(g->key_cache);
  cudaFree(g->value_cache);
  cudaFree(g->inputs);
  cudaFree(g->workspace);
  if (g->stream) cudaStreamDestroy(g->stream);
}

/* Captures pa_execute of the decode plan into a graph, once: every per-step quantity is read on the
 * device from the buffers that each step refills, so one graph serves every later decode step. */
static int capture_decode_graph(gpu *g, const pa_plan *plan) {
  size_t bytes = pa_plan_workspace_size(plan);
  if (bytes && !cuda_ok(cudaMalloc(&g->graph_workspace, bytes), "graph workspace")) return 1;
  const void *in[PA_NUM_INPUTS];
  void *out[PA_NUM_OUTPUTS];
  pointers(g->inputs, g->key_cache, g->value_cache, in, out);
  cudaGraph_t graph = NULL;
  if (!cuda_ok(cudaStreamBeginCapture(g->stream, cudaStreamCaptureModeThreadLocal), "capture"))
    return 1;
  pa_status st = pa_execute(plan, in, out, g->graph_workspace, bytes, (pa_stream)g->stream);
  int captured = cuda_ok(cudaStreamEndCapture(g->stream, &graph), "end capture");
  int failed = report(st, "pa_execute (captured)") || !captured ||
               !cuda_ok(cudaGraphInstantiate(&g->decode_graph, graph, 0), "instantiate");
  if (graph) cudaGraphDestroy(graph);
  return failed;
}

/* One step on the device: inputs up, the operator on the stream (eagerly, or by replaying the decode
 * graph, captured from this plan the first time), output down. */
static int gpu_step(gpu *g, const pa_plan *plan, int replay, const step_inputs *s, uint16_t *output) {
  size_t need = pa_plan_workspace_size(plan);
  if (!replay && need > g->workspace_bytes) { /* grown outside pa_execute, which never allocates */
    cudaFree(g->workspace);
    g->workspace_bytes = 0;
    if (!cuda_ok(cudaMalloc(&g->workspace, need), "workspace")) return 1;
    g->workspace_bytes = need;
  }
  if (replay && !g->decode_graph && capture_decode_graph(g, plan)) return 1;
  if (!cuda_ok(cudaMemcpyAsync(g->inputs, s, sizeof *s, cudaMemcpyHostToDevice, g->stream), "upload"))
    return 1;
  if (replay) {
    if (!cuda_ok(cudaGraphLaunch(g->decode_graph, g->stream), "graph launch")) return 1;
  } else {
    const void *in[PA_NUM_INPUTS];
    void *out[PA_NUM_OUTPUTS];
    pointers(g->inputs, g->key_cache, g->value_cache, in, out);
    if (report(pa_execute(plan, in, out, g->workspace, g->workspace_bytes, (pa_stream)g->stream),
               "pa_execute"))
      return 1;
  }
  size_t out_bytes = (size_t)s->token_count * Q_ROW * sizeof(uint16_t);
  if (!cuda_ok(cudaMemcpyAsync(output, g->inputs->output, out_bytes, cudaMemcpyDeviceToHost,
                               g->stream), "download") ||
      !cuda_ok(cudaStreamSynchronize(g->stream), "synchronize"))
    return 1;
  return 0;
}

/* A graph replays fixed shapes, so --graph pads every decode batch to MAX_BATCH and plans it once:
 * the padding sequences have no new token, and the padding tokens lie past cu_seqlens[B], so they
 * write nothing and their output rows are zeros. (On the reference it does the same, without a
 * graph.) */
static void pad_decode_batch(step_inputs *s) {
  for (int b = s->batch_size; b < MAX_BATCH; b++) {
    s->cu_seqlens[b + 1] = s->token_count;
    s->past_seqlens[b] = 0;
    for (int i = 0; i < MAX_BLOCKS_PER_SEQ; i++) s->block_table[b * MAX_BLOCKS_PER_SEQ + i] = -1;
  }
  for (int t = s->token_count; t < MAX_BATCH; t++) s->slot_mapping[t] = -1;
  s->batch_size = s->token_count = MAX_BATCH;
}

/* --check: the GPU's output and caches against the reference run on host copies (the bf16
 * tolerance of doc/development.md on outputs; the bf16 caches are plain copies of K and V, so they must match exactly). */
static int compare(const gpu *g, const step_inputs *s, const uint16_t *gpu_output,
                   const uint16_t *key_cache, const uint16_t *value_cache, int step) {
  float worst = 0.0f;
  size_t bad = 0;
  for (size_t i = 0; i < (size_t)s->token_count * Q_ROW; i++) {
    float ref = float_from_bf16(s->output[i]), got = float_from_bf16(gpu_output[i]);
    float err = fabsf(got - ref) / fmaxf(1.0f, fabsf(ref));
    bad += !(err <= 2e-2f); /* NaN counts */
    if (err > worst) worst = err;
  }
  static uint16_t device_cache[CACHE_ELEMS];
  int caches_equal = 1;
  for (int c = 0; c < 2; c++) {
    const void *src = c ? g->value_cache : g->key_cache;
    if (!cuda_ok(cudaMemcpy(device_cache, src, sizeof device_cache, cudaMemcpyDeviceToHost), "cache"))
      return 1;
    caches_equal &= !memcmp(device_cache, c ? value_cache : key_cache, sizeof device_cache);
  }
  if (!bad && caches_equal) return 0;
  fprintf(stderr,
          "step %d: GPU differs from the reference: %zu outputs beyond 2e-2 (worst %.3g), caches %s\n",
          step, bad, worst, caches_equal ? "equal" : "differ");
  return 1;
}

/* ---- the serving loop ---------------------------------------------------------------------------- */

typedef struct options {
  int host_only, check, graph, require_gpu;
} options;

static const char usage[] =
    "usage: %s [--host] [--check] [--graph] [--require-gpu] [--help]\n"
    "A continuous-batching loop over a paged KV cache (one attention layer, bf16): requests arrive,\n"
    "are prefilled, decode a token per step and free their blocks. Runs on the GPU when one is\n"
    "present, else on the reference executor; ends with the backend, the device and a checksum of\n"
    "every step's outputs. PA_SEED=<n> changes the random requests and data.\n"
    "  --host         use the reference executor even when a GPU is present\n"
    "  --check        on the GPU, also run every step on the reference executor (host copies of the\n"
    "                 same buffers) and compare outputs and caches; exit 1 on a mismatch. Without a\n"
    "                 GPU there is nothing to compare: it says so and runs the reference alone\n"
    "  --graph        pad decode batches to one fixed shape and plan it once; on the GPU, capture\n"
    "                 the first decode step in a CUDA graph and replay it for every later one\n"
    "                 (without a GPU: the padded batches run on the reference, with no graph)\n"
    "  --require-gpu  exit 77 (a skipped test) when there is no GPU, 1 when planning for it fails\n"
    "  --help         print this text\n";

/* 0: run; 1: exit 0 (--help); 2: a usage error */
static int parse_options(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--host")) o->host_only = 1;
    else if (!strcmp(argv[i], "--check")) o->check = 1;
    else if (!strcmp(argv[i], "--graph")) o->graph = 1;
    else if (!strcmp(argv[i], "--require-gpu")) o->require_gpu = 1;
    else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf(usage, argv[0]);
      return 1;
    } else {
      fprintf(stderr, "%s: unknown option %s\n", argv[0], argv[i]);
      fprintf(stderr, usage, argv[0]);
      return 2;
    }
  }
  return 0;
}

/* FNV-1a over bytes: the outputs' checksum, identical across runs with the same seed and backend. */
static uint64_t fnv1a(uint64_t hash, const void *data, size_t bytes) {
  const unsigned char *p = data;
  for (size_t i = 0; i < bytes; i++) hash = (hash ^ p[i]) * 0x100000001b3ULL;
  return hash;
}

static pa_status make_plan(pa_plan **plan, const step_inputs *s, int device) {
  pa_attributes attrs;
  pa_attributes_init(&attrs);
  attrs.num_heads = NUM_HEADS;
  attrs.kv_num_heads = KV_NUM_HEADS;
  pa_plan_options opts;
  pa_plan_options_init(&opts);
  opts.device = device;
  pa_tensor_desc in[PA_NUM_INPUTS], out[PA_NUM_OUTPUTS];
  describe(s, in, out);
  return pa_plan_create(plan, &attrs, in, out, &opts);
}

/* 1: a device answers and a built backend plans a decode-shaped step for it; 0: no device;
 * -1: a device, but planning for it failed (reported). */
static int gpu_usable(const options *o, step_inputs *probe) {
  pa_device_caps caps;
  caps.struct_size = sizeof caps;
  if (o->host_only || pa_device_caps_query(PA_DEVICE_CURRENT, &caps) != PA_SUCCESS) return 0;
  probe->batch_size = probe->token_count = 1;
  pa_plan *plan = NULL;
  pa_status st = make_plan(&plan, probe, PA_DEVICE_CURRENT);
  pa_plan_destroy(plan);
  return st == PA_SUCCESS ? 1 : -report(st, "planning for the GPU");
}

int main(int argc, char **argv) {
  options opt;
  int parsed = parse_options(argc, argv, &opt);
  if (parsed) return parsed == 1 ? 0 : 2;
  const char *seed_env = getenv("PA_SEED");
  uint64_t seed = seed_env ? strtoull(seed_env, NULL, 0) : 20261202u;
  rng_state = seed ? seed : 1;

  static step_inputs step_in;
  static uint16_t key_cache[CACHE_ELEMS], value_cache[CACHE_ELEMS], gpu_output[MAX_STEP_TOKENS * Q_ROW];
  fill_random(key_cache, CACHE_ELEMS); /* stale contents of a reused pool: never read unmasked */
  fill_random(value_cache, CACHE_ELEMS);

  int gpu_state = gpu_usable(&opt, &step_in), on_gpu = gpu_state == 1;
  if (opt.require_gpu && gpu_state != 1) {
    if (gpu_state < 0) return 1;
    printf("no GPU: skipped\n");
    return 77;
  }
  if (gpu_state < 0) printf("so the reference executor runs it\n");
  gpu g = {0};
  if (on_gpu && !gpu_open(&g, key_cache, value_cache)) return 1;
  char device[320] = "the host (reference executor)";
  if (on_gpu) {
    int ordinal = 0;
    struct cudaDeviceProp prop;
    if (cudaGetDevice(&ordinal) == cudaSuccess &&
        cudaGetDeviceProperties(&prop, ordinal) == cudaSuccess)
      snprintf(device, sizeof device, "GPU %d (%s, sm_%d%d)", ordinal, prop.name, prop.major,
               prop.minor);
  }
  const char *why_host = opt.host_only ? "--host was given" : "no usable GPU";
  if (opt.check && !on_gpu)
    printf("--check does not apply: %s, so the reference executor runs every step and there is "
           "nothing to compare it with\n", why_host);
  if (opt.graph && !on_gpu)
    printf("--graph: %s, so decode batches are padded to one plan but run on the reference "
           "executor, without a CUDA graph\n", why_host);
  printf("continuous batching: %d requests, %d-block pool of %d tokens, %d query / %d KV heads, "
         "head size %d, bf16, on %s (seed %llu)\n",
         NUM_REQUESTS, NUM_BLOCKS, BLOCK_SIZE, NUM_HEADS, KV_NUM_HEADS, HEAD_SIZE, device,
         (unsigned long long)seed);

  block_pool pool;
  memset(&pool, 0, sizeof pool);
  for (int i = 0; i < NUM_BLOCKS; i++) pool.free_list[i] = NUM_BLOCKS - 1 - i;
  pool.num_free = NUM_BLOCKS;

  request requests[NUM_REQUESTS];
  memset(requests, 0, sizeof requests);
  for (int i = 0; i < NUM_REQUESTS; i++) {
    requests[i].id = i;
    requests[i].arrival_step = (i / 3) * 10; /* in bursts of three */
    requests[i].prompt_len = 1 + (int)((random_uniform() + 1.0f) * 0.5f * MAX_PROMPT) % MAX_PROMPT;
    requests[i].max_new_tokens = 2 + (int)((random_uniform() + 1.0f) * 0.5f * (MAX_GENERATED - 2));
  }

  int finished = 0, failed = 0, step = 0, total_tokens = 0, peak_blocks = 0;
  uint64_t checksum = 0xcbf29ce484222325ULL;
  char backends[64] = ""; /* the backends that ran, in order of first use */
  request *running[MAX_BATCH];
  int num_running = 0;
  pa_plan *decode_plan = NULL; /* --graph */
  for (; finished < NUM_REQUESTS && !failed; step++) {
    /* Prefill whatever can be admitted; otherwise decode one token for every running request. */
    request *batch[MAX_BATCH];
    int batch_size = 0;
    for (int i = 0; i < NUM_REQUESTS && num_running + batch_size < MAX_BATCH; i++) {
      request *r = &requests[i];
      if (r->state != WAITING || r->arrival_step > step) continue;
      if (!pool_admit(&pool, r)) break; /* first come, first served: no overtaking */
      r->state = RUNNING;
      batch[batch_size++] = r;
    }
    int prefill = batch_size > 0;
    if (!prefill)
      for (int i = 0; i < num_running; i++) batch[batch_size++] = running[i];
    if (batch_size == 0) {
      printf("step %3d  idle\n", step);
      continue;
    }
    build_step(&step_in, batch, batch_size, prefill ? 0 : 1, &pool);
    int new_tokens = step_in.token_count;

    /* A plan per step, except with --graph: one plan of the padded decode shape for every decode. */
    int padded = opt.graph && !prefill, replay = padded && on_gpu;
    if (padded) pad_decode_batch(&step_in);
    pa_plan *plan = padded ? decode_plan : NULL;
    if (!plan) {
      pa_status st = make_plan(&plan, &step_in, on_gpu ? PA_DEVICE_CURRENT : PA_DEVICE_HOST);
      if (report(st, "pa_plan_create")) {
        failed = 1;
        break;
      }
      if (padded) decode_plan = plan;
    }
    const void *in[PA_NUM_INPUTS];
    void *out[PA_NUM_OUTPUTS];
    pointers(&step_in, key_cache, value_cache, in, out);
    if (on_gpu) {
      failed = gpu_step(&g, plan, replay, &step_in, gpu_output);
      if (!failed && opt.check)
        failed = report(pa_execute_reference(plan, in, out), "pa_execute_reference") ||
                 compare(&g, &step_in, gpu_output, key_cache, value_cache, step);
    } else {
      failed = report(pa_execute_reference(plan, in, out), "pa_execute_reference");
    }
    if (failed) {
      if (!padded) pa_plan_destroy(plan);
      break;
    }
    /* the real tokens' rows (not --graph's padding): the GPU's download, or the reference's */
    checksum = fnv1a(checksum, on_gpu ? gpu_output : step_in.output,
                     (size_t)new_tokens * Q_ROW * sizeof(uint16_t));
    const char *backend = pa_backend_name(pa_plan_backend(plan));
    if (!strstr(backends, backend) && strlen(backends) + strlen(backend) + 3 < sizeof backends)
      snprintf(backends + strlen(backends), sizeof backends - strlen(backends), "%s%s",
               *backends ? ", " : "", backend);
    int in_use = NUM_BLOCKS - pool.num_free, waiting = 0;
    if (in_use > peak_blocks) peak_blocks = in_use;
    for (int i = 0; i < NUM_REQUESTS; i++)
      waiting += requests[i].state == WAITING && requests[i].arrival_step <= step;
    printf("step %3d  %-7s  requests", step, prefill ? "prefill" : "decode");
    for (int b = 0; b < batch_size; b++) printf(" %d", batch[b]->id);
    printf("%*s  tokens %3d  blocks in use %2d/%d  waiting %d  backend %s%s\n",
           2 * (MAX_BATCH - batch_size), "", new_tokens, in_use, NUM_BLOCKS, waiting,
           backend, replay ? " (graph replay)" : "");
    if (!padded) pa_plan_destroy(plan);
    total_tokens += new_tokens;

    /* Each request in the batch produced one token (the model would sample it from the output). */
    int still_running = 0;
    for (int b = 0; b < batch_size; b++) {
      request *r = batch[b];
      r->cached += prefill ? r->prompt_len : 1;
      r->generated++;
      if (r->generated < r->max_new_tokens) continue;
      int blocks = r->num_blocks;
      pool_release(&pool, r);
      r->state = FINISHED;
      finished++;
      printf("          request %d finished: %d prompt + %d generated tokens, %d blocks freed\n",
             r->id, r->prompt_len, r->generated, blocks);
    }
    for (int i = 0; i < num_running; i++)
      if (running[i]->state == RUNNING) running[still_running++] = running[i];
    num_running = still_running;
    if (prefill)
      for (int b = 0; b < batch_size; b++)
        if (batch[b]->state == RUNNING) running[num_running++] = batch[b];
  }

  if (on_gpu) gpu_close(&g);
  pa_plan_destroy(decode_plan); /* after the graph that captured its launches */
  if (failed) {
    fprintf(stderr, "failed at step %d (seed %llu)\n", step, (unsigned long long)seed);
    return 1;
  }
  printf("done: %d requests in %d steps, %d tokens, peak %d/%d blocks, %d block reuses%s\n",
         NUM_REQUESTS, step, total_tokens, peak_blocks, NUM_BLOCKS, pool.reused,
         on_gpu && opt.check ? ", every step matched the reference" : "");
  printf("ran on %s; backend %s%s; output checksum %016llx (FNV-1a of every step's bf16 outputs)\n",
         device, backends, on_gpu && opt.graph ? " (decode steps replayed from a CUDA graph)" : "",
         (unsigned long long)checksum);
  return 0;
}
