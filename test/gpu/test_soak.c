/*
 * Soak: thousands of continuous-batching steps on one paged cache (AUTO backend, a new plan per
 * step, as a serving engine runs it). Sequences arrive at random with a prompt and a generation
 * length, their prompts go in chunks, then they decode one token a step, sometimes sit a step out,
 * and leave; their blocks return to a free pool and are handed out again, stale contents included.
 * Steps sometimes carry padding tokens of no sequence and a tight attention_metadata; every other
 * stretch of 50 steps the plans run the contract checker, which must report nothing.
 *
 * What is checked:
 *   every step   the canaries: GUARD bytes before and after each cache, before the output and
 *                after the step's output rows (the output buffer is poisoned before each step);
 *   every CHECK_EVERY steps (and the last)
 *                the output against the reference executor run on the same inputs and on a host
 *                shadow of the caches (fp16: |gpu - ref| <= 5e-3 (1 + |ref|)), and both whole caches
 *                against the shadow, which the test keeps by writing each token's K and V row to its
 *                slot itself: a differing byte in a slot written since the last check is a cache
 *                mismatch, anywhere else a byte changed outside written slots.
 * PA_SOAK_STEPS sets the steps (default 20000: 3000 took about 2 s on an H200, so about 15 s;
 * 100 with PA_GPU_TEST_QUICK=1, for compute-sanitizer). Prints one summary line; fails on any
 * mismatch.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "harness.h"
#include "host_numeric.h"
#include "test_rng.h"

enum {
  H = 8, HK = 2, D = 64, BS = 16, NUM_BLOCKS = 384, MAX_BLOCKS_PER_SEQ = 24,
  MAX_SEQS = 12, MAX_TOKENS = 160, MAX_CHUNK = 64, MAX_PADDING = 3,
  POOL_TOKENS = 2048, GUARD = 4096, CHECK_EVERY = 25, CHECKER_STRETCH = 50
};
enum { Q_ROW = H * D, KV_ROW = HK * D, SLOTS = NUM_BLOCKS * BS };
static const size_t kCacheBytes = (size_t)SLOTS * KV_ROW * 2;
static const size_t kOutputBytes = (size_t)MAX_TOKENS * Q_ROW * 2;
static const uint8_t kCanary = 0xa5;

static void cuda_check(cudaError_t err, const char *what) {
  if (err == cudaSuccess) return;
  fprintf(stderr, "FATAL: %s: %s\n", what, cudaGetErrorString(err));
  exit(1);
}

static int32_t below(rng *r, int32_t n) { return (int32_t)(rng_next(r) % (uint64_t)n); }

/* ---- the engine's bookkeeping ---------------------------------------------------------------- */

typedef struct sequence {
  int32_t prompt, total;  /* prompt tokens; prompt + generated tokens */
  int32_t cached;         /* tokens in the cache */
  int32_t blocks[MAX_BLOCKS_PER_SEQ], num_blocks;
} sequence;

typedef struct engine {
  rng r;
  sequence seqs[MAX_SEQS];
  int num_seqs;
  int32_t free_blocks[NUM_BLOCKS], num_free;
  int block_used_before[NUM_BLOCKS];
  long arrivals, departures, reused_blocks, prefill_chunks, decode_tokens, idle_sequences;
} engine;

static int32_t take_block(engine *e) {
  const int32_t i = below(&e->r, e->num_free);
  const int32_t block = e->free_blocks[i];
  e->free_blocks[i] = e->free_blocks[--e->num_free];
  if (e->block_used_before[block]) e->reused_blocks++;
  e->block_used_before[block] = 1;
  return block;
}

static void arrive(engine *e) {
  if (e->num_seqs == MAX_SEQS || below(&e->r, 10) >= 3) return;
  sequence *s = &e->seqs[e->num_seqs++];
  memset(s, 0, sizeof *s);
  s->prompt = 1 + below(&e->r, 160);
  s->total = s->prompt + 1 + below(&e->r, 80);
  if (s->total > MAX_BLOCKS_PER_SEQ * BS) s->total = MAX_BLOCKS_PER_SEQ * BS;
  e->arrivals++;
}

/* One step's batch, in the operator's inputs. */
typedef struct step {
  int32_t batch, tokens, padding;
  int32_t seq_of[MAX_SEQS]; /* engine index of batch entry b */
  int32_t cu[MAX_SEQS + 1], past[MAX_SEQS], table[MAX_SEQS * MAX_BLOCKS_PER_SEQ];
  int32_t max_q_len, max_kv_len;
  int32_t pool_row; /* first row of q / k / v in the pools */
} step;

/* Picks each sequence's new tokens (a prompt chunk, one decode token, or none this step), gives
 * them blocks, and lays out the batch in a random order. */
static int plan_step(engine *e, step *st) {
  memset(st, 0, sizeof *st);
  int order[MAX_SEQS];
  for (int i = 0; i < e->num_seqs; i++) order[i] = i;
  for (int i = e->num_seqs - 1; i > 0; i--) {
    const int j = below(&e->r, i + 1), t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  int32_t tokens = 0;
  for (int k = 0; k < e->num_seqs; k++) {
    sequence *s = &e->seqs[order[k]];
    int32_t q_len = s->cached < s->prompt ? 1 + below(&e->r, MAX_CHUNK) : 1;
    if (q_len > s->total - s->cached) q_len = s->total - s->cached;
    if (q_len > MAX_TOKENS - MAX_PADDING - tokens || below(&e->r, 10) == 0) q_len = 0;
    const int32_t needed = (s->cached + q_len + BS - 1) / BS;
    if (needed - s->num_blocks > e->num_free) q_len = 0; /* the pool is dry: wait */
    while (s->num_blocks < (s->cached + q_len + BS - 1) / BS)
      s->blocks[s->num_blocks++] = take_block(e);
    if (q_len == 0) e->idle_sequences++;
    else if (s->cached < s->prompt) e->prefill_chunks++;
    else e->decode_tokens++;
    const int32_t b = st->batch++;
    st->seq_of[b] = order[k];
    st->cu[b] = tokens;
    st->past[b] = s->cached;
    for (int32_t i = 0; i < MAX_BLOCKS_PER_SEQ; i++)
      st->table[b * MAX_BLOCKS_PER_SEQ + i] = i < s->num_blocks ? s->blocks[i] : -1;
    tokens += q_len;
    if (q_len > st->max_q_len) st->max_q_len = q_len;
    if (s->cached + q_len > st->max_kv_len) st->max_kv_len = s->cached + q_len;
  }
  st->cu[st->batch] = tokens;
  st->padding = tokens > 0 && below(&e->r, 4) == 0 ? 1 + below(&e->r, MAX_PADDING) : 0;
  st->tokens = tokens + st->padding;
  st->pool_row = below(&e->r, POOL_TOKENS - MAX_TOKENS + 1);
  return tokens > 0;
}

/* After the step: lengths grow; finished sequences leave and free their blocks. */
static void finish_step(engine *e, const step *st) {
  for (int32_t b = 0; b < st->batch; b++) e->seqs[st->seq_of[b]].cached += st->cu[b + 1] - st->cu[b];
  for (int i = 0; i < e->num_seqs;) {
    sequence *s = &e->seqs[i];
    if (s->cached < s->total) {
      i++;
      continue;
    }
    for (int32_t k = 0; k < s->num_blocks; k++) e->free_blocks[e->num_free++] = s->blocks[k];
    e->seqs[i] = e->seqs[--e->num_seqs];
    e->departures++;
  }
}

/* ---- buffers ----------------------------------------------------------------------------------- */

typedef struct soak {
  uint16_t *q_pool, *k_pool, *v_pool;        /* host */
  void *d_q_pool, *d_k_pool, *d_v_pool;
  uint8_t *d_key_base, *d_value_base;        /* GUARD + cache + GUARD */
  uint8_t *d_output_base;                    /* GUARD + MAX_TOKENS rows + GUARD */
  int32_t *d_cu, *d_past, *d_table;
  void *d_workspace;
  size_t workspace_bytes;
  uint8_t *shadow[2], *reference[2], *downloaded[2]; /* host caches: K, V */
  uint8_t *written;                                   /* per slot, since the last check */
  uint16_t *output, *reference_output;
  uint8_t *guard_bytes;
} soak;

static void *device_alloc(size_t bytes) {
  void *p = NULL;
  cuda_check(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}

static void fill_random(rng *r, uint16_t *dst, size_t count) {
  for (size_t i = 0; i < count; i++)
    dst[i] = pa__float_to_half((float)(rng_next(r) >> 40) / (float)(1 << 24) * 2.0f - 1.0f);
}

static void soak_init(soak *s, rng *r) {
  memset(s, 0, sizeof *s);
  const size_t q_bytes = (size_t)POOL_TOKENS * Q_ROW * 2, kv_bytes = (size_t)POOL_TOKENS * KV_ROW * 2;
  s->q_pool = malloc(q_bytes);
  s->k_pool = malloc(kv_bytes);
  s->v_pool = malloc(kv_bytes);
  fill_random(r, s->q_pool, q_bytes / 2);
  fill_random(r, s->k_pool, kv_bytes / 2);
  fill_random(r, s->v_pool, kv_bytes / 2);
  s->d_q_pool = device_alloc(q_bytes);
  s->d_k_pool = device_alloc(kv_bytes);
  s->d_v_pool = device_alloc(kv_bytes);
  cuda_check(cudaMemcpy(s->d_q_pool, s->q_pool, q_bytes, cudaMemcpyHostToDevice), "pool");
  cuda_check(cudaMemcpy(s->d_k_pool, s->k_pool, kv_bytes, cudaMemcpyHostToDevice), "pool");
  cuda_check(cudaMemcpy(s->d_v_pool, s->v_pool, kv_bytes, cudaMemcpyHostToDevice), "pool");
  uint8_t **bases[2] = {&s->d_key_base, &s->d_value_base};
  for (int kv = 0; kv < 2; kv++) {
    s->shadow[kv] = malloc(kCacheBytes);
    s->reference[kv] = malloc(kCacheBytes);
    s->downloaded[kv] = malloc(kCacheBytes);
    fill_random(r, (uint16_t *)s->shadow[kv], kCacheBytes / 2);
    *bases[kv] = device_alloc(kCacheBytes + 2 * GUARD);
    cuda_check(cudaMemset(*bases[kv], kCanary, kCacheBytes + 2 * GUARD), "canary");
    cuda_check(cudaMemcpy(*bases[kv] + GUARD, s->shadow[kv], kCacheBytes, cudaMemcpyHostToDevice),
               "cache");
  }
  s->d_output_base = device_alloc(kOutputBytes + 2 * GUARD);
  s->d_cu = device_alloc(sizeof(int32_t) * (MAX_SEQS + 1));
  s->d_past = device_alloc(sizeof(int32_t) * MAX_SEQS);
  s->d_table = device_alloc(sizeof(int32_t) * MAX_SEQS * MAX_BLOCKS_PER_SEQ);
  s->written = calloc(SLOTS, 1);
  s->output = malloc(kOutputBytes);
  s->reference_output = malloc(kOutputBytes);
  s->guard_bytes = malloc(kOutputBytes + 2 * GUARD);
}

/* Bytes of [base, base + bytes) on the device that are not the canary. */
static long changed_canaries(soak *s, const uint8_t *device, size_t bytes) {
  if (!bytes) return 0;
  cuda_check(cudaMemcpy(s->guard_bytes, device, bytes, cudaMemcpyDeviceToHost), "canaries");
  long changed = 0;
  for (size_t i = 0; i < bytes; i++) changed += s->guard_bytes[i] != kCanary;
  return changed;
}

/* The step's tokens' K and V rows into the shadow caches, at the slots the test derives itself. */
static void shadow_write(soak *s, const step *st) {
  for (int32_t b = 0; b < st->batch; b++)
    for (int32_t t = st->cu[b]; t < st->cu[b + 1]; t++) {
      const int32_t pos = st->past[b] + (t - st->cu[b]);
      const int32_t slot = st->table[b * MAX_BLOCKS_PER_SEQ + pos / BS] * BS + pos % BS;
      const uint16_t *rows[2] = {s->k_pool + (size_t)(st->pool_row + t) * KV_ROW,
                                 s->v_pool + (size_t)(st->pool_row + t) * KV_ROW};
      for (int kv = 0; kv < 2; kv++)
        memcpy(s->shadow[kv] + (size_t)slot * KV_ROW * 2, rows[kv], KV_ROW * 2);
      s->written[slot] = 1;
    }
}

typedef struct tally {
  long steps, executed, tokens, checked_steps, output_mismatches, cache_mismatches,
      bytes_outside_slots, canary_bytes, checker_reports, failed_calls, backends[6];
  double max_output_error;
} tally;

static void describe(pa_tensor_desc *d, pa_dtype t, int rank, int64_t d0, int64_t d1, int64_t d2,
                     int64_t d3) {
  pa_tensor_desc x = {t, rank, {d0, d1, d2, d3}};
  *d = x;
}

static pa_plan *plan_for(const step *st, int metadata, int contract_check, int32_t bounds[2]) {
  pa_attributes a;
  pa_attributes_init(&a);
  a.num_heads = H;
  a.kv_num_heads = HK;
  pa_tensor_desc in[PA_NUM_INPUTS] = {{0}}, out[PA_NUM_OUTPUTS] = {{0}};
  const pa_dtype t = PA_DTYPE_FLOAT16;
  describe(&in[PA_IN_QUERY], t, 2, st->tokens, Q_ROW, 0, 0);
  describe(&in[PA_IN_KEY], t, 2, st->tokens, KV_ROW, 0, 0);
  in[PA_IN_VALUE] = in[PA_IN_KEY];
  describe(&in[PA_IN_KEY_CACHE], t, 4, NUM_BLOCKS, BS, HK, D);
  in[PA_IN_VALUE_CACHE] = in[PA_IN_KEY_CACHE];
  describe(&in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH], PA_DTYPE_INT32, 1, st->batch + 1, 0, 0, 0);
  describe(&in[PA_IN_PAST_SEQLENS], PA_DTYPE_INT32, 1, st->batch, 0, 0, 0);
  describe(&in[PA_IN_BLOCK_TABLE], PA_DTYPE_INT32, 2, st->batch, MAX_BLOCKS_PER_SEQ, 0, 0);
  if (metadata) describe(&in[PA_IN_ATTENTION_METADATA], PA_DTYPE_INT32, 1, 2, 0, 0, 0);
  describe(&out[PA_OUT_OUTPUT], t, 2, st->tokens, Q_ROW, 0, 0);
  bounds[0] = st->max_q_len;
  bounds[1] = st->max_kv_len;
  pa_plan_options o;
  pa_plan_options_init(&o);
  o.attention_metadata = metadata ? bounds : NULL;
  o.contract_check = contract_check;
  pa_plan *plan = NULL;
  if (pa_plan_create(&plan, &a, in, out, &o) != PA_SUCCESS) {
    char message[1024];
    pa_last_error_message(message, sizeof message);
    fprintf(stderr, "soak: pa_plan_create failed: %s\n", message);
    return NULL;
  }
  return plan;
}

static void io_for(const soak *s, const step *st, const void *in[PA_NUM_INPUTS],
                   void *out[PA_NUM_OUTPUTS], int host) {
  memset(in, 0, sizeof(void *) * PA_NUM_INPUTS);
  memset(out, 0, sizeof(void *) * PA_NUM_OUTPUTS);
  const size_t row = (size_t)st->pool_row;
  if (host) {
    in[PA_IN_QUERY] = s->q_pool + row * Q_ROW;
    in[PA_IN_KEY] = s->k_pool + row * KV_ROW;
    in[PA_IN_VALUE] = s->v_pool + row * KV_ROW;
    in[PA_IN_KEY_CACHE] = s->reference[0];
    in[PA_IN_VALUE_CACHE] = s->reference[1];
    in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH] = st->cu;
    in[PA_IN_PAST_SEQLENS] = st->past;
    in[PA_IN_BLOCK_TABLE] = st->table;
    out[PA_OUT_OUTPUT] = s->reference_output;
    return;
  }
  in[PA_IN_QUERY] = (const uint16_t *)s->d_q_pool + row * Q_ROW;
  in[PA_IN_KEY] = (const uint16_t *)s->d_k_pool + row * KV_ROW;
  in[PA_IN_VALUE] = (const uint16_t *)s->d_v_pool + row * KV_ROW;
  in[PA_IN_KEY_CACHE] = s->d_key_base + GUARD;
  in[PA_IN_VALUE_CACHE] = s->d_value_base + GUARD;
  in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH] = s->d_cu;
  in[PA_IN_PAST_SEQLENS] = s->d_past;
  in[PA_IN_BLOCK_TABLE] = s->d_table;
  out[PA_OUT_OUTPUT] = s->d_output_base + GUARD;
}

/* The reference on the host shadow (before this step's writes) and the same inputs; compares the
 * output. */
static void check_output(soak *s, const pa_plan *plan, const step *st, tally *tl) {
  memcpy(s->reference[0], s->shadow[0], kCacheBytes);
  memcpy(s->reference[1], s->shadow[1], kCacheBytes);
  const void *in[PA_NUM_INPUTS];
  void *out[PA_NUM_OUTPUTS];
  io_for(s, st, in, out, 1);
  if (pa_execute_reference(plan, in, out) != PA_SUCCESS) {
    tl->failed_calls++;
    return;
  }
  const size_t elems = (size_t)st->tokens * Q_ROW;
  cuda_check(cudaMemcpy(s->output, s->d_output_base + GUARD, elems * 2, cudaMemcpyDeviceToHost),
             "output");
  long mismatches = 0;
  for (size_t i = 0; i < elems; i++) {
    const float gpu = pa__half_to_float(s->output[i]);
    const float ref = pa__half_to_float(s->reference_output[i]);
    const double err = fabs((double)gpu - ref);
    if (err > tl->max_output_error) tl->max_output_error = err;
    if (!(err <= 5e-3 * (1.0 + fabs(ref)))) {
      if (mismatches++ == 0)
        fprintf(stderr, "soak step %ld: output[%zu] (token %zu): gpu %g, reference %g\n",
                tl->steps, i, i / Q_ROW, gpu, ref);
    }
  }
  tl->output_mismatches += mismatches;
}

/* Both device caches against the shadow (which holds this step's writes already). */
static void check_caches(soak *s, tally *tl) {
  const uint8_t *bases[2] = {s->d_key_base, s->d_value_base};
  for (int kv = 0; kv < 2; kv++) {
    cuda_check(cudaMemcpy(s->downloaded[kv], bases[kv] + GUARD, kCacheBytes,
                          cudaMemcpyDeviceToHost), "cache");
    for (size_t i = 0; i < kCacheBytes; i++) {
      if (s->downloaded[kv][i] == s->shadow[kv][i]) continue;
      const size_t slot = i / (KV_ROW * 2);
      if (s->written[slot]) {
        if (tl->cache_mismatches++ == 0)
          fprintf(stderr, "soak step %ld: %s cache slot %zu differs from its written row\n",
                  tl->steps, kv ? "value" : "key", slot);
      } else if (tl->bytes_outside_slots++ == 0) {
        fprintf(stderr, "soak step %ld: %s cache byte %zu (slot %zu, not written) changed\n",
                tl->steps, kv ? "value" : "key", i, slot);
      }
    }
  }
  memset(s->written, 0, SLOTS);
}

/* 1 when a step ran, 0 when no sequence had a token (nothing to run), -1 when planning failed. */
static int run_step(soak *s, engine *e, tally *tl, int check) {
  step st;
  if (!plan_step(e, &st)) return 0;
  const int contract_check = (tl->steps / CHECKER_STRETCH) % 2 == 1;
  int32_t bounds[2];
  pa_plan *plan = plan_for(&st, (int)below(&e->r, 2), contract_check, bounds);
  if (!plan) {
    tl->failed_calls++;
    return -1;
  }
  tl->backends[pa_plan_backend(plan)]++;
  const size_t workspace = pa_plan_workspace_size(plan);
  if (workspace > s->workspace_bytes) { /* a fresh one: its checker status zeroed (doc/api.md) */
    cudaFree(s->d_workspace);
    s->workspace_bytes = workspace > PA_CHECK_STATUS_BYTES ? workspace : PA_CHECK_STATUS_BYTES;
    s->d_workspace = device_alloc(s->workspace_bytes);
    cuda_check(cudaMemset(s->d_workspace, 0, PA_CHECK_STATUS_BYTES), "workspace");
  }
  cuda_check(cudaMemcpy(s->d_cu, st.cu, sizeof(int32_t) * (st.batch + 1), cudaMemcpyHostToDevice),
             "cu");
  cuda_check(cudaMemcpy(s->d_past, st.past, sizeof(int32_t) * st.batch, cudaMemcpyHostToDevice),
             "past");
  cuda_check(cudaMemcpy(s->d_table, st.table, sizeof(int32_t) * st.batch * MAX_BLOCKS_PER_SEQ,
                        cudaMemcpyHostToDevice), "table");
  cuda_check(cudaMemset(s->d_output_base, kCanary, kOutputBytes + 2 * GUARD), "poison");
  const void *in[PA_NUM_INPUTS];
  void *out[PA_NUM_OUTPUTS];
  io_for(s, &st, in, out, 0);
  const pa_status status = pa_execute(plan, in, out, s->d_workspace, s->workspace_bytes, NULL);
  if (status != PA_SUCCESS) {
    char message[1024];
    pa_last_error_message(message, sizeof message);
    fprintf(stderr, "soak step %ld: pa_execute: %s\n", tl->steps, message);
    tl->failed_calls++;
  }
  cuda_check(cudaDeviceSynchronize(), "step");
  tl->executed++;
  tl->tokens += st.tokens;

  /* canaries: around both caches, before the output and after this step's rows */
  const size_t output_end = GUARD + (size_t)st.tokens * Q_ROW * 2;
  tl->canary_bytes += changed_canaries(s, s->d_key_base, GUARD) +
                      changed_canaries(s, s->d_key_base + GUARD + kCacheBytes, GUARD) +
                      changed_canaries(s, s->d_value_base, GUARD) +
                      changed_canaries(s, s->d_value_base + GUARD + kCacheBytes, GUARD) +
                      changed_canaries(s, s->d_output_base, GUARD) +
                      changed_canaries(s, s->d_output_base + output_end,
                                       kOutputBytes + 2 * GUARD - output_end);
  if (check) {
    tl->checked_steps++;
    check_output(s, plan, &st, tl);
  }
  shadow_write(s, &st);
  if (check) {
    for (int kv = 0; kv < 2 && tl->output_mismatches == 0; kv++)
      if (memcmp(s->reference[kv], s->shadow[kv], kCacheBytes) != 0) {
        fprintf(stderr, "soak step %ld: the reference's %s cache differs from the test's own "
                "writes\n", tl->steps, kv ? "value" : "key");
        tl->cache_mismatches++;
      }
    check_caches(s, tl);
  }
  if (check && contract_check) {
    char message[1024];
    if (pa_plan_check_status(plan, s->d_workspace, NULL, message, sizeof message) !=
        PA_SUCCESS) {
      fprintf(stderr, "soak step %ld: the contract checker reported: %s\n", tl->steps, message);
      tl->checker_reports++;
    }
  }
  pa_plan_destroy(plan);
  finish_step(e, &st);
  return 1;
}

int main(void) {
  if (!gpu_available()) {
    fprintf(stderr, "no CUDA device: skipped\n");
    return GPU_SKIP;
  }
  const unsigned seed = gpu_test_seed();
  const char *env = getenv("PA_SOAK_STEPS");
  const long steps = env && *env ? strtol(env, NULL, 10) : gpu_test_quick() ? 100 : 20000;
  engine e;
  memset(&e, 0, sizeof e);
  e.r.state = seed;
  for (int32_t i = 0; i < NUM_BLOCKS; i++) e.free_blocks[i] = i;
  e.num_free = NUM_BLOCKS;
  soak s;
  soak_init(&s, &e.r);
  tally tl;
  memset(&tl, 0, sizeof tl);
  while (tl.steps < steps) {
    arrive(&e);
    const int ran = run_step(&s, &e, &tl, tl.steps % CHECK_EVERY == 0 || tl.steps == steps - 1);
    if (ran < 0) break;
    tl.steps += ran;
  }
  printf("soak: %ld steps (%ld tokens; DECODE %ld, PREFILL %ld, UNFUSED %ld plans), %ld arrivals, "
         "%ld departures, %ld prefill chunks, %ld decode tokens, %ld idle sequence-steps, %ld "
         "blocks reused; %ld steps checked against the reference: %ld output mismatches (max "
         "error %.3g), %ld cache mismatches, %ld bytes changed outside written slots, %ld canary "
         "bytes changed, %ld contract checker reports, %ld failed calls\n",
         tl.steps, tl.tokens, tl.backends[PA_BACKEND_DECODE], tl.backends[PA_BACKEND_PREFILL],
         tl.backends[PA_BACKEND_UNFUSED], e.arrivals, e.departures, e.prefill_chunks,
         e.decode_tokens, e.idle_sequences, e.reused_blocks, tl.checked_steps,
         tl.output_mismatches, tl.max_output_error, tl.cache_mismatches, tl.bytes_outside_slots,
         tl.canary_bytes, tl.checker_reports, tl.failed_calls);
  const int failed = tl.output_mismatches || tl.cache_mismatches || tl.bytes_outside_slots ||
                     tl.canary_bytes || tl.checker_reports || tl.failed_calls ||
                     tl.checked_steps == 0;
  return failed ? GPU_FAIL : GPU_PASS;
}
