/* The DECODE backend forced over the testing.md matrix, against the reference executor (harness),
 * CUDA-graph replay while the KV lengths grow, and attention_metadata invariance: absent, tight and
 * loose bounds give bitwise equal outputs (the split partition never depends on the bound).
 * PA_GPU_TEST_QUICK=1 runs a reduced matrix (for compute-sanitizer). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "harness.h"

/* Quant types exactly with a quantized cache. */
static int valid_combination(const gpu_case *c) {
  int quantized = c->cache_dtype == PA_DTYPE_INT8 || c->cache_dtype == PA_DTYPE_FLOAT8_E4M3FN;
  if (!quantized && (c->k_quant != PA_QUANT_NONE || c->v_quant != PA_QUANT_NONE)) return 0;
  if (c->non_causal && c->window) return 0;
  return 1;
}

static unsigned seed;

static gpu_matrix_result run(const gpu_case *base, const gpu_axis *axes, int num_axes) {
  return gpu_run_matrix(base, axes, num_axes, valid_combination, PA_BACKEND_DECODE, seed++);
}
static gpu_matrix_result run_graph(const gpu_case *base, const gpu_axis *axes, int num_axes,
                                   int steps) {
  return gpu_run_matrix_mode(base, axes, num_axes, valid_combination, PA_BACKEND_DECODE, seed++,
                             GPU_MODE_GRAPH, steps);
}
#define NUM(axes) ((int)(sizeof(axes) / sizeof((axes)[0])))

/* ---- attention_metadata invariance (needs the outputs themselves, so outside the harness) -----
 */

static uint32_t rng_state;
static float random_unit(void) { /* uniform in [-1, 1), never all zeros */
  rng_state = rng_state * 1664525u + 1013904223u;
  return (float)(rng_state >> 8) / (float)(1u << 23) - 1.0f;
}
static uint16_t to_bf16(float x) {
  uint32_t bits;
  memcpy(&bits, &x, 4);
  return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

/* One decode step (bf16, 16/2 heads, d128, block 16) planned with metadata absent, tight and loose;
 * returns GPU_PASS when the three outputs are bitwise equal. */
static int metadata_invariance(const char *name, int batch, const int32_t *past,
                               int32_t blocks_per_seq) {
  const int H = 16, Hk = 2, D = 128, bs = 16;
  const int64_t N = batch, num_blocks = (int64_t)batch * blocks_per_seq + 1;
  int32_t max_kv = 0;
  for (int b = 0; b < batch; b++)
    if (past[b] + 1 > max_kv) max_kv = past[b] + 1;
  pa_tensor_desc in[PA_NUM_INPUTS], out[PA_NUM_OUTPUTS];
  memset(in, 0, sizeof in);
  memset(out, 0, sizeof out);
  pa_tensor_desc q = {PA_DTYPE_BFLOAT16, 2, {N, H * D}}, kv = {PA_DTYPE_BFLOAT16, 2, {N, Hk * D}};
  pa_tensor_desc cache = {PA_DTYPE_BFLOAT16, 4, {num_blocks, bs, Hk, D}};
  in[PA_IN_QUERY] = q;
  in[PA_IN_KEY] = in[PA_IN_VALUE] = kv;
  in[PA_IN_KEY_CACHE] = in[PA_IN_VALUE_CACHE] = cache;
  in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH] = (pa_tensor_desc){PA_DTYPE_INT32, 1, {batch + 1}};
  in[PA_IN_PAST_SEQLENS] = (pa_tensor_desc){PA_DTYPE_INT32, 1, {batch}};
  in[PA_IN_BLOCK_TABLE] = (pa_tensor_desc){PA_DTYPE_INT32, 2, {batch, blocks_per_seq}};
  out[PA_OUT_OUTPUT] = q;
  pa_attributes attrs;
  pa_attributes_init(&attrs);
  attrs.num_heads = H;
  attrs.kv_num_heads = Hk;

  size_t bytes[PA_NUM_INPUTS] = {0};
  void *host[PA_NUM_INPUTS] = {0}, *dev[PA_NUM_INPUTS] = {0};
  for (int i = 0; i < PA_NUM_INPUTS; i++) {
    if (!in[i].dtype) continue;
    bytes[i] = pa_dtype_size(in[i].dtype);
    for (int r = 0; r < in[i].rank; r++) bytes[i] *= (size_t)in[i].dims[r];
    host[i] = malloc(bytes[i]);
    if (in[i].dtype == PA_DTYPE_BFLOAT16)
      for (size_t e = 0; e < bytes[i] / 2; e++) ((uint16_t *)host[i])[e] = to_bf16(random_unit());
  }
  int32_t *cu = host[PA_IN_CUMULATIVE_SEQUENCE_LENGTH], *table = host[PA_IN_BLOCK_TABLE];
  for (int b = 0; b <= batch; b++) cu[b] = b;
  memcpy(host[PA_IN_PAST_SEQLENS], past, (size_t)batch * sizeof(int32_t));
  for (int64_t e = 0; e < (int64_t)batch * blocks_per_seq; e++) /* a scrambled bijection */
    table[e] = (int32_t)((e * 7 + 3) % ((int64_t)batch * blocks_per_seq));
  for (int i = 0; i < PA_NUM_INPUTS; i++)
    if (host[i]) {
      cudaMalloc(&dev[i], bytes[i]);
      cudaMemcpy(dev[i], host[i], bytes[i], cudaMemcpyHostToDevice);
    }
  size_t out_bytes = (size_t)N * H * D * 2;
  void *d_out = NULL;
  cudaMalloc(&d_out, out_bytes);
  unsigned char *results[3];

  int status = GPU_PASS;
  const int32_t tight[2] = {1, max_kv}, loose[2] = {7, max_kv * 3 + 50};
  const int32_t *metadata[3] = {NULL, tight, loose};
  for (int m = 0; m < 3; m++) {
    results[m] = calloc(out_bytes, 1);
    in[PA_IN_ATTENTION_METADATA] =
        metadata[m] ? (pa_tensor_desc){PA_DTYPE_INT32, 1, {2}} : (pa_tensor_desc){0};
    pa_plan_options options;
    pa_plan_options_init(&options);
    options.backend = PA_BACKEND_DECODE;
    options.attention_metadata = metadata[m];
    pa_plan *plan = NULL;
    pa_status st = pa_plan_create(&plan, &attrs, in, out, &options);
    if (st != PA_SUCCESS) {
      char msg[512];
      pa_last_error_message(msg, sizeof msg);
      fprintf(stderr, "FAIL %s (metadata %d): plan: %s %s\n", name, m, pa_status_string(st), msg);
      status = GPU_FAIL;
      continue;
    }
    void *workspace = NULL;
    size_t ws = pa_plan_workspace_size(plan);
    if (ws) cudaMalloc(&workspace, ws);
    cudaMemset(d_out, 0x7f, out_bytes);
    void *outputs[PA_NUM_OUTPUTS] = {d_out, NULL, NULL, NULL};
    st = pa_execute(plan, (const void *const *)dev, outputs, workspace, ws, NULL);
    cudaError_t err = cudaDeviceSynchronize();
    if (st != PA_SUCCESS || err != cudaSuccess) {
      fprintf(stderr, "FAIL %s (metadata %d): execute: %s / %s\n", name, m, pa_status_string(st),
              cudaGetErrorString(err));
      status = GPU_FAIL;
    }
    cudaMemcpy(results[m], d_out, out_bytes, cudaMemcpyDeviceToHost);
    cudaFree(workspace);
    pa_plan_destroy(plan);
    if (m > 0 && memcmp(results[0], results[m], out_bytes) != 0) {
      size_t first = 0;
      while (results[0][first] == results[m][first]) first++;
      fprintf(stderr, "FAIL %s: output with metadata %s differs from absent at byte %zu\n", name,
              m == 1 ? "tight" : "loose", first);
      status = GPU_FAIL;
    }
  }
  for (int m = 0; m < 3; m++) free(results[m]);
  for (int i = 0; i < PA_NUM_INPUTS; i++) {
    free(host[i]);
    cudaFree(dev[i]);
  }
  cudaFree(d_out);
  return status;
}

int main(void) {
  if (!gpu_available()) {
    fprintf(stderr, "no CUDA device: skipped\n");
    return GPU_SKIP;
  }
  seed = gpu_test_seed();
  rng_state = seed;
  const int quick = gpu_test_quick();
  gpu_matrix_result all = {0, 0, 0, 0};

  /* head sizes and types over several tiles and splits */
  gpu_case heads = gpu_case_default("decode_heads");
  heads.num_heads = 8;
  heads.kv_num_heads = 2;
  heads.batch_size = 3;
  heads.max_past_len = quick ? 200 : 700;
  {
    const gpu_axis axes[] = {GPU_AXIS(head_size, 64, 80, 96, 128, 256),
                             GPU_AXIS(dtype, PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16),
                             GPU_AXIS(block_size, 16, 64)};
    gpu_matrix_add(&all, run(&heads, axes, NUM(axes)));
  }

  /* GQA groups 1, 4, 8, 16, and 32 / 24 (two 16-head chunks, the second partial) */
  gpu_case groups = gpu_case_default("decode_groups");
  groups.kv_num_heads = 2;
  groups.batch_size = 4;
  groups.max_past_len = 300;
  {
    const gpu_axis axes[] = {GPU_AXIS(num_heads, 2, 8, 16, 32, 48, 64),
                             GPU_AXIS(dtype, PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16)};
    gpu_matrix_add(&all, run(&groups, axes, NUM(axes)));
  }

  /* block sizes; shuffled and partly unmapped (-1 or >= num_blocks) block tables */
  gpu_case blocks = gpu_case_default("decode_blocks");
  blocks.num_heads = 8;
  blocks.kv_num_heads = 2;
  blocks.batch_size = 3;
  blocks.max_past_len = quick ? 600 : 1500;
  if (quick) {
    const gpu_axis axes[] = {GPU_AXIS(block_size, 16, 128, 512), GPU_AXIS(shuffled_blocks, 0, 1),
                             GPU_AXIS(unmapped_blocks, 0, 1)};
    gpu_matrix_add(&all, run(&blocks, axes, NUM(axes)));
  } else {
    const gpu_axis axes[] = {GPU_AXIS(block_size, 16, 32, 64, 128, 256, 512),
                             GPU_AXIS(shuffled_blocks, 0, 1), GPU_AXIS(unmapped_blocks, 0, 1)};
    gpu_matrix_add(&all, run(&blocks, axes, NUM(axes)));
  }

  /* batch sizes, zero-token sequences, token rows that belong to no sequence */
  gpu_case batches = gpu_case_default("decode_batches");
  batches.num_heads = 8;
  batches.kv_num_heads = 2;
  batches.head_size = 64;
  batches.max_past_len = 120;
  batches.zero_q_lens = 1;
  {
    const gpu_axis axes[] = {GPU_AXIS(batch_size, 1, 3, 257, 300), GPU_AXIS(extra_tokens, 0, 3)};
    gpu_matrix_add(&all, run(&batches, axes, NUM(axes)));
  }

  /* ragged prefill-shaped steps forced onto DECODE (any ragged batch must be right), with
   * query_positions and is_causal = 0 */
  gpu_case ragged = gpu_case_default("decode_ragged");
  ragged.num_heads = 8;
  ragged.kv_num_heads = 2;
  ragged.batch_size = 5;
  ragged.max_q_len = 9;
  ragged.max_past_len = 150;
  ragged.zero_q_lens = 1;
  {
    const gpu_axis axes[] = {GPU_AXIS(query_positions, 0, 1), GPU_AXIS(non_causal, 0, 1),
                             GPU_AXIS(packed, 0, 1)};
    gpu_matrix_add(&all, run(&ragged, axes, NUM(axes)));
  }

  /* window (1, small, one tile boundary, >= context), softcap, sinks */
  gpu_case window = gpu_case_default("decode_window");
  window.num_heads = 16;
  window.kv_num_heads = 2;
  window.batch_size = 4;
  window.max_q_len = 2;
  window.max_past_len = 500;
  {
    const gpu_axis axes[] = {GPU_AXIS(window, 0, 1, 5, 64, 100000), GPU_AXIS(head_sink, 0, 1),
                             GPU_AXIS(unmapped_blocks, 0, 1)};
    gpu_matrix_add(&all, run(&window, axes, NUM(axes)));
    window.name = "decode_window_softcap";
    window.softcap = 30.0f;
    gpu_matrix_add(&all, run(&window, axes, NUM(axes)));
  }

  /* every cache type and quantization mode, fp16 and bf16 */
  gpu_case quant = gpu_case_default("decode_quant");
  quant.num_heads = 16;
  quant.kv_num_heads = 4;
  quant.batch_size = 3;
  quant.max_past_len = 400;
  {
    const gpu_axis axes[] = {GPU_AXIS(cache_dtype, PA_DTYPE_INT8, PA_DTYPE_FLOAT8_E4M3FN),
                             GPU_AXIS(k_quant, PA_QUANT_PER_TENSOR, PA_QUANT_PER_CHANNEL),
                             GPU_AXIS(v_quant, PA_QUANT_PER_TENSOR, PA_QUANT_PER_CHANNEL),
                             GPU_AXIS(dtype, PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16),
                             GPU_AXIS(head_size, 64, 256)};
    gpu_matrix_add(&all, run(&quant, axes, NUM(axes)));
  }

  /* long contexts: many splits and the merge (one sequence; one long among short ones) */
  gpu_case longctx = gpu_case_default("decode_long");
  longctx.num_heads = 8;
  longctx.kv_num_heads = 1;
  longctx.batch_size = 1;
  longctx.max_past_len = quick ? 5000 : 20000;
  {
    const gpu_axis axes[] = {GPU_AXIS(dtype, PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16),
                             GPU_AXIS(block_size, 16, 256)};
    gpu_matrix_add(&all, run(&longctx, axes, NUM(axes)));
  }
  {
    static const int32_t skew_past[4] = {9000, 30, 0, 700};
    static const int32_t skew_q[4] = {1, 1, 1, 1};
    gpu_case skew = gpu_case_default("decode_skewed");
    skew.num_heads = 8;
    skew.kv_num_heads = 2;
    skew.batch_size = 4;
    skew.past_lens = skew_past;
    skew.q_lens = skew_q;
    const gpu_axis axes[] = {
        GPU_AXIS(window, 0, 1000),
        GPU_AXIS(metadata, GPU_METADATA_NONE, GPU_METADATA_TIGHT, GPU_METADATA_LOOSE)};
    gpu_matrix_add(&all, run(&skew, axes, NUM(axes)));
  }

  /* prologue features in front of DECODE: staged Q (rotary, QK-Norm, packed) and explicit slots */
  gpu_case front = gpu_case_default("decode_prologue_inputs");
  front.num_heads = 8;
  front.kv_num_heads = 2;
  front.batch_size = 3;
  front.max_past_len = 100;
  {
    const gpu_axis axes[] = {GPU_AXIS(rotary, 0, 1), GPU_AXIS(qk_norm, 0, 1),
                             GPU_AXIS(slots, GPU_SLOTS_NONE, GPU_SLOTS_WITH_INVALID)};
    gpu_matrix_add(&all, run(&front, axes, NUM(axes)));
  }

  /* CUDA graph: captured once, replayed while the KV lengths grow */
  gpu_case graph = gpu_case_default("decode_graph");
  graph.num_heads = 16;
  graph.kv_num_heads = 2;
  graph.batch_size = 5;
  graph.max_past_len = 90;
  {
    const gpu_axis axes[] = {GPU_AXIS(metadata, GPU_METADATA_NONE, GPU_METADATA_LOOSE),
                             GPU_AXIS(cache_dtype, 0, PA_DTYPE_INT8), GPU_AXIS(window, 0, 40)};
    gpu_matrix_add(&all, run_graph(&graph, axes, NUM(axes), quick ? 16 : 64));
  }

  /* metadata absent == tight == loose, bitwise: many splits, and one split (direct) vs a merge */
  {
    static const int32_t long_past[4] = {0, 37, 1000, 2500};
    static const int32_t short_past[4] = {0, 5, 20, 30};
    gpu_matrix_count(&all, metadata_invariance("decode_metadata_bitwise_long", 4, long_past, 160));
    gpu_matrix_count(&all, metadata_invariance("decode_metadata_bitwise_short", 4, short_past, 64));
  }

  fprintf(stderr, "decode: %d passed, %d failed, %d unsupported, %d skipped\n", all.passed,
          all.failed, all.unsupported, all.skipped);
  if (all.unsupported) {
    fprintf(stderr, "FAIL: DECODE must serve every case of this matrix\n");
    return 1;
  }
  return gpu_matrix_exit_code(&all);
}
