/* The LATENT backend (issue 17) forced over the matrix of absorbed MLA decode steps, against the
 * reference executor (harness): 16 / 32 / 64 / 128 heads at DeepSeek's 576 / 512 latent row
 * (RoPE on the last 64 channels through the shared prologue), fp16 and bf16, int8 and fp8 latent
 * caches with per-tensor and per-channel scales, block sizes 16..256, 1-4 query tokens per
 * sequence, ragged batches with zero-token sequences and token rows of no sequence, shuffled,
 * shared and unmapped block tables, softcap, windows, query_positions, is_causal = 0, smaller latent
 * rows (48 / 32, 128 / 64), long contexts with few sequences (split-KV and the merge), and
 * multi-token steps LATENT serves when forced. Then CUDA-graph replay while the lengths grow,
 * attention_metadata invariance (absent == tight == loose, bitwise), under-sized bounds (for
 * compute-sanitizer), the matrices' core through AUTO, and the absorbed == non-absorbed invariant of
 * the reference suite (mla_case.h) with the absorbed form on LATENT: a prefill step then a decode
 * step through the GPU's latent cache, where AUTO must pick UNFUSED for the first and LATENT for
 * the second. The plans' kernel family (pa__latent_kernel_family) proves which kernel the matrices
 * ran: on compute capability 9.0 the sm_90a wgmma kernels for fp16 / bf16 caches at 576 / 512
 * channels (the narrow one, keys as M, at up to 16 rows per sequence: 16 heads of one token; the
 * 64-row ones above: half stages up to 32 rows, whole tiles beyond), mma.sync for everything else
 * (and everywhere with
 * PA_LATENT_KERNEL=mma.sync; PA_LATENT_KERNEL=wgmma64 keeps the narrow rows on the 64-row kernel).
 *
 * PA_GPU_TEST_QUICK=1 runs a reduced matrix (for compute-sanitizer); PA_GPU_TEST_SHARD=i/n splits
 * the matrices between processes (harness). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "harness.h"
#include "internal.h" /* pa__latent_kernel_family */
#include "host_numeric.h"
#include "mla_case.h"

/* Quant types exactly with a quantized cache (NONE there means PER_TENSOR); a window only with
 * causal attention. */
static int valid_combination(const gpu_case *c) {
  int quantized = c->cache_dtype == PA_DTYPE_INT8 || c->cache_dtype == PA_DTYPE_FLOAT8_E4M3FN;
  if (!quantized && c->k_quant != PA_QUANT_NONE) return 0;
  if (c->non_causal && c->window) return 0;
  return 1;
}

static unsigned seed;
static pa_backend backend = PA_BACKEND_LATENT;

static gpu_matrix_result run_mode(const gpu_case *base, const gpu_axis *axes, int num_axes,
                                  gpu_mode mode, int steps) {
  return gpu_run_matrix_mode(base, axes, num_axes, valid_combination, backend, seed++, mode, steps);
}
static gpu_matrix_result run(const gpu_case *base, const gpu_axis *axes, int num_axes) {
  return run_mode(base, axes, num_axes, GPU_MODE_EAGER, 0);
}
#define NUM(axes) ((int)(sizeof(axes) / sizeof((axes)[0])))
#define RUN_QUICK_OR_FULL(all, base, quick_axes, full_axes)             \
  do {                                                                  \
    if (quick)                                                          \
      gpu_matrix_add(&(all), run(&(base), quick_axes, NUM(quick_axes))); \
    else                                                                \
      gpu_matrix_add(&(all), run(&(base), full_axes, NUM(full_axes)));   \
  } while (0)

/* DeepSeek-V3's latent row: 576 channels (RoPE on the last 64), V the first 512, 1-4 query tokens
 * per sequence. Scale 0.25 (well above DeepSeek's 0.1352) peaks the softmax, so that a key range
 * read twice, skipped or misplaced moves the output past the tolerance. */
static gpu_case deepseek(const char *name) {
  gpu_case c = gpu_case_default(name);
  c.layout = PA_KV_CACHE_LAYOUT_LATENT;
  c.num_heads = 16;
  c.kv_num_heads = 1;
  c.head_size = 576;
  c.v_head_size = 512;
  c.scale = 0.25f;
  c.rotary = 1;
  c.rotary_offset = 512;
  c.rotary_dim = 64;
  c.batch_size = 3;
  c.max_q_len = 4;
  c.max_past_len = 200;
  return c;
}

static void matrix(gpu_matrix_result *all, int quick) {
  /* heads x types x caches x scales, with one query token per sequence (16 heads take the narrow wgmma
   * kernel on Hopper; 16 and 32 heads the 32-row tile's 32-key steps and deeper ring on
   * mma.sync) and up to four (the 64-row tile). 8-bit caches take the default scale 1/sqrt(576), as in
   * test_prefill.c: until session 33 their Q reached the tensor cores rounded to T with a
   * per-channel k_scale folded in, an error the peaked softmax of scale 0.25 magnified (the 4th
   * run of this test saw 0.022 against the 0.020 tolerance at 64 heads, int8 per-channel, bf16,
   * one element of the whole output); they run in fp16 since (prefill_unit_prologue), and scale
   * 0.25 with them has not run yet */
  gpu_case heads = deepseek("latent_heads");
  {
    const gpu_axis q[] = {GPU_AXIS(num_heads, 16, 128), GPU_AXIS(dtype, PA_DTYPE_BFLOAT16),
                          GPU_AXIS(max_q_len, 1, 4)};
    const gpu_axis f[] = {GPU_AXIS(num_heads, 16, 32, 64, 128),
                          GPU_AXIS(dtype, PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16),
                          GPU_AXIS(max_q_len, 1, 4)};
    RUN_QUICK_OR_FULL(*all, heads, q, f);
  }
  heads.name = "latent_heads_8bit";
  heads.scale = 0.0f;
  {
    const gpu_axis q[] = {GPU_AXIS(num_heads, 16, 128),
                          GPU_AXIS(cache_dtype, PA_DTYPE_INT8, PA_DTYPE_FLOAT8_E4M3FN),
                          GPU_AXIS(k_quant, PA_QUANT_NONE, PA_QUANT_PER_CHANNEL),
                          GPU_AXIS(dtype, PA_DTYPE_BFLOAT16), GPU_AXIS(max_q_len, 1, 4)};
    const gpu_axis f[] = {GPU_AXIS(num_heads, 16, 32, 64, 128),
                          GPU_AXIS(cache_dtype, PA_DTYPE_INT8, PA_DTYPE_FLOAT8_E4M3FN),
                          GPU_AXIS(k_quant, PA_QUANT_PER_TENSOR, PA_QUANT_PER_CHANNEL),
                          GPU_AXIS(dtype, PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16),
                          GPU_AXIS(max_q_len, 1, 4)};
    RUN_QUICK_OR_FULL(*all, heads, q, f);
  }

  /* Q far from 1, the scale shrunk to match: with an 8-bit cache the mma.sync kernel takes Q in
   * fp16 times a power of two per row block (prefill_unit_prologue); |Q| up to 2^24 is beyond
   * fp16's range, 2^-24 below its subnormals (test_prefill.c's prefill_query_magnitude for
   * LATENT; added in session 33, not yet run on a GPU) */
  gpu_case magnitude = heads;
  magnitude.name = "latent_query_magnitude";
  magnitude.dtype = PA_DTYPE_BFLOAT16;
  {
    const gpu_axis q[] = {GPU_AXIS(query_exponent, 24, -24), GPU_AXIS(num_heads, 16, 128),
                          GPU_AXIS(cache_dtype, PA_DTYPE_INT8),
                          GPU_AXIS(k_quant, PA_QUANT_PER_CHANNEL)};
    const gpu_axis f[] = {GPU_AXIS(query_exponent, 24, -24), GPU_AXIS(num_heads, 16, 128),
                          GPU_AXIS(cache_dtype, 0, PA_DTYPE_INT8, PA_DTYPE_FLOAT8_E4M3FN),
                          GPU_AXIS(k_quant, PA_QUANT_NONE, PA_QUANT_PER_CHANNEL)};
    RUN_QUICK_OR_FULL(*all, magnitude, q, f);
  }

  /* without RoPE the write kernel does not stage Q, and the Hopper kernels read their first
   * unit's Q before their chained wait (every other case here has RoPE: the kernels wait first) */
  gpu_case no_rope = deepseek("latent_no_rope");
  no_rope.rotary = 0;
  no_rope.rotary_offset = 0;
  no_rope.rotary_dim = 0;
  {
    const gpu_axis q[] = {GPU_AXIS(num_heads, 16, 128), GPU_AXIS(max_q_len, 1)};
    const gpu_axis f[] = {GPU_AXIS(num_heads, 16, 32, 128),
                          GPU_AXIS(dtype, PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16),
                          GPU_AXIS(max_q_len, 1, 4)};
    RUN_QUICK_OR_FULL(*all, no_rope, q, f);
  }

  /* a step writes before it attends (doc/semantics.md): each sequence's first token writing key 0
   * of the next sequence, which that sequence reads in its first tile (GPU_SLOTS_INTO_PAST), beside
   * slots derived from the table or given, with the step's inputs written by a kernel just before
   * the call, with and without RoPE (the Hopper kernels read their first unit's Q before their
   * chained wait without it); on the narrow (16 heads), half-stage (32) and whole-tile (128)
   * kernels */
  gpu_case written = deepseek("latent_written_past");
  written.batch_size = 5;
  written.max_past_len = 150;
  {
    const gpu_axis q[] = {GPU_AXIS(slots, GPU_SLOTS_INTO_PAST), GPU_AXIS(num_heads, 16, 128),
                          GPU_AXIS(rotary, 0, 1), GPU_AXIS(max_q_len, 1)};
    const gpu_axis f[] = {GPU_AXIS(slots, GPU_SLOTS_NONE, GPU_SLOTS_DERIVED, GPU_SLOTS_INTO_PAST),
                          GPU_AXIS(num_heads, 16, 32, 128), GPU_AXIS(rotary, 0, 1),
                          GPU_AXIS(inputs_by_kernel, 0, 1), GPU_AXIS(block_size, 16, 64),
                          GPU_AXIS(max_q_len, 1, 2)};
    RUN_QUICK_OR_FULL(*all, written, q, f);
  }

  /* an output that starts 2 or 4 bytes into its allocation (doc/api.md asks the output for its
   * element's alignment only): the row stores of the narrow (16 heads), half-stage (32) and
   * whole-tile (128) kernels, and of the mma.sync kernel for 8-bit caches */
  gpu_case offset = deepseek("latent_output_offset");
  offset.batch_size = 3;
  offset.max_past_len = 150;
  offset.scale = 0; /* 1/sqrt(576): the scale the 8-bit matrix runs at (above) */
  offset.extra_tokens = 3; /* rows of no sequence: zeroed by the schedule or the kernels */
  {
    const gpu_axis q[] = {GPU_AXIS(output_offset_bytes, 2), GPU_AXIS(num_heads, 16, 128),
                          GPU_AXIS(max_q_len, 1)};
    const gpu_axis f[] = {GPU_AXIS(output_offset_bytes, 2, 4), GPU_AXIS(num_heads, 16, 32, 128),
                          GPU_AXIS(cache_dtype, 0, PA_DTYPE_INT8), GPU_AXIS(max_q_len, 1, 2)};
    RUN_QUICK_OR_FULL(*all, offset, q, f);
  }

  /* block sizes 16..256 (a 64-key tile spans four 16-key pages); shuffled, partly unmapped (-1,
   * large negatives, >= num_blocks, INT32_MAX) and shared-prefix block tables; 16 heads of one
   * token (the narrow wgmma kernel's panels on Hopper, the 32-row tile's 32-key steps on
   * mma.sync) and of up to four (the 64-row tile) */
  gpu_case blocks = deepseek("latent_blocks");
  blocks.batch_size = 4;
  blocks.max_past_len = quick ? 300 : 700;
  {
    const gpu_axis q[] = {GPU_AXIS(block_size, 16, 256), GPU_AXIS(shuffled_blocks, 1),
                          GPU_AXIS(unmapped_blocks, 0, 1), GPU_AXIS(max_q_len, 1, 4)};
    const gpu_axis f[] = {GPU_AXIS(block_size, 16, 32, 64, 128, 256),
                          GPU_AXIS(shuffled_blocks, 0, 1), GPU_AXIS(unmapped_blocks, 0, 1),
                          GPU_AXIS(max_q_len, 1, 4)};
    RUN_QUICK_OR_FULL(*all, blocks, q, f);
  }
  gpu_case shared = deepseek("latent_shared_prefix");
  shared.batch_size = 5;
  shared.shared_prefix_blocks = 3;
  {
    const gpu_axis q[] = {GPU_AXIS(block_size, 16)};
    const gpu_axis f[] = {GPU_AXIS(block_size, 16, 64), GPU_AXIS(shuffled_blocks, 0, 1)};
    RUN_QUICK_OR_FULL(*all, shared, q, f);
  }

  /* 1-4 query tokens per sequence, ragged with zero-token sequences and token rows of no sequence;
   * 128 heads fill two row blocks per token, 16 heads pack up to four tokens into one, or two
   * into the 32-row tile (max_q_len 1; max_q_len 2 when the step's tokens per sequence, rounded
   * up, come to 2) */
  gpu_case tokens = deepseek("latent_tokens");
  tokens.batch_size = 7;
  tokens.zero_q_lens = 1;
  {
    const gpu_axis q[] = {GPU_AXIS(max_q_len, 1, 4), GPU_AXIS(num_heads, 16, 128),
                          GPU_AXIS(extra_tokens, 3)};
    const gpu_axis f[] = {GPU_AXIS(max_q_len, 1, 2, 3, 4), GPU_AXIS(num_heads, 16, 24, 128),
                          GPU_AXIS(extra_tokens, 0, 3)};
    RUN_QUICK_OR_FULL(*all, tokens, q, f);
  }
  {
    /* every sequence empty */
    static const int32_t zero_lens[4] = {0, 0, 0, 0};
    gpu_case empty = deepseek("latent_all_sequences_empty");
    empty.batch_size = 4;
    empty.q_lens = zero_lens;
    empty.extra_tokens = 2;
    gpu_matrix_count(all, gpu_case_run(&empty, backend, seed++));
  }

  /* softcap, windows (1, small, a 64-key tile, beyond the context), query_positions, non-causal;
   * one query token per sequence (16 rows: the narrow wgmma kernel on Hopper) and up to four */
  gpu_case features = deepseek("latent_features");
  features.max_past_len = 300;
  {
    const gpu_axis q[] = {GPU_AXIS(softcap, 0, 30), GPU_AXIS(window, 0, 1, 64),
                          GPU_AXIS(query_positions, 0, 1), GPU_AXIS(max_q_len, 1, 4)};
    const gpu_axis f[] = {GPU_AXIS(softcap, 0, 30), GPU_AXIS(window, 0, 1, 5, 64, 1000),
                          GPU_AXIS(query_positions, 0, 1), GPU_AXIS(non_causal, 0, 1),
                          GPU_AXIS(dtype, PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16),
                          GPU_AXIS(max_q_len, 1, 4)};
    RUN_QUICK_OR_FULL(*all, features, q, f);
  }

  /* smaller latent rows: the tile's channels past head_size are zero, outputs past v_head_size
   * dropped */
  gpu_case small = deepseek("latent_small_rows");
  small.head_size = 128;
  small.v_head_size = 64;
  small.rotary_offset = 64;
  small.scale = 0.3f;
  {
    const gpu_axis q[] = {GPU_AXIS(cache_dtype, 0, PA_DTYPE_INT8), GPU_AXIS(k_quant, 0, PA_QUANT_PER_CHANNEL)};
    const gpu_axis f[] = {GPU_AXIS(cache_dtype, 0, PA_DTYPE_INT8, PA_DTYPE_FLOAT8_E4M3FN),
                          GPU_AXIS(k_quant, 0, PA_QUANT_PER_CHANNEL), GPU_AXIS(block_size, 16, 64)};
    RUN_QUICK_OR_FULL(*all, small, q, f);
  }

  /* split-KV: few sequences over long contexts (one sequence of 16 heads cannot fill the GPU), and
   * an 8-bit cache there; scale 0.1352 (DeepSeek's) over thousands of keys for the 8-bit caches
   * (their operands reach the tensor cores rounded to T, an error a large scale magnifies) */
  gpu_case split = deepseek("latent_split_kv");
  split.batch_size = 2;
  split.max_past_len = quick ? 2000 : 6000;
  {
    const gpu_axis q[] = {GPU_AXIS(max_q_len, 1, 4), GPU_AXIS(block_size, 16)};
    const gpu_axis f[] = {GPU_AXIS(max_q_len, 1, 2, 4), GPU_AXIS(block_size, 16, 64),
                          GPU_AXIS(num_heads, 16, 128)};
    RUN_QUICK_OR_FULL(*all, split, q, f);
  }
  split.name = "latent_split_kv_8bit";
  split.scale = 0.1352f;
  {
    const gpu_axis q[] = {GPU_AXIS(cache_dtype, PA_DTYPE_FLOAT8_E4M3FN),
                          GPU_AXIS(k_quant, PA_QUANT_PER_CHANNEL)};
    const gpu_axis f[] = {GPU_AXIS(cache_dtype, PA_DTYPE_INT8, PA_DTYPE_FLOAT8_E4M3FN),
                          GPU_AXIS(k_quant, PA_QUANT_PER_TENSOR, PA_QUANT_PER_CHANNEL)};
    RUN_QUICK_OR_FULL(*all, split, q, f);
  }

  /* split-KV under a window: the splits that lie wholly before the rows' window have no tile
   * (their tile_end falls below their tile_begin), on each Hopper kernel (16, 32 and 128 rows) */
  gpu_case split_window = deepseek("latent_split_kv_window");
  split_window.batch_size = 2;
  split_window.max_past_len = quick ? 2000 : 6000;
  {
    const gpu_axis q[] = {GPU_AXIS(num_heads, 16, 128), GPU_AXIS(window, 64)};
    const gpu_axis f[] = {GPU_AXIS(num_heads, 16, 32, 128), GPU_AXIS(window, 1, 64, 1000),
                          GPU_AXIS(max_q_len, 1, 2)};
    RUN_QUICK_OR_FULL(*all, split_window, q, f);
  }

  /* larger batches: more row blocks than the GPU has multiprocessors */
  gpu_case batches = deepseek("latent_batches");
  batches.max_past_len = 100;
  batches.zero_q_lens = 1;
  {
    const gpu_axis q[] = {GPU_AXIS(batch_size, 150), GPU_AXIS(num_heads, 128)};
    const gpu_axis f[] = {GPU_AXIS(batch_size, 150, 300), GPU_AXIS(num_heads, 16, 128)};
    RUN_QUICK_OR_FULL(*all, batches, q, f);
  }

  /* a sharp softmax (scale 1.5: the scores spread over tens of log2 units), so that a row's
   * reference moves past the slack well inside its keys (attention_rules.cuh,
   * kSoftmaxReferenceSlack), not only at its first tile: on Hopper the narrow kernel (16 rows),
   * the half-stage one (32 rows, its warpgroups agreeing on each reference within a tile) and
   * the whole-tile one (128 heads, the reference passed between its warpgroups tile by tile) */
  gpu_case sharp = deepseek("latent_sharp_softmax");
  sharp.scale = 1.5f;
  sharp.max_past_len = quick ? 600 : 2000;
  {
    const gpu_axis q[] = {GPU_AXIS(num_heads, 16, 32, 128), GPU_AXIS(max_q_len, 1)};
    const gpu_axis f[] = {GPU_AXIS(num_heads, 16, 32, 128), GPU_AXIS(max_q_len, 1, 2),
                          GPU_AXIS(dtype, PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16)};
    RUN_QUICK_OR_FULL(*all, sharp, q, f);
  }

  /* multi-token steps (forced LATENT serves them; AUTO gives them to UNFUSED) */
  gpu_case long_steps = deepseek("latent_long_steps");
  long_steps.max_q_len = 20;
  {
    const gpu_axis q[] = {GPU_AXIS(num_heads, 16)};
    const gpu_axis f[] = {GPU_AXIS(num_heads, 16, 128), GPU_AXIS(window, 0, 7)};
    RUN_QUICK_OR_FULL(*all, long_steps, q, f);
  }
}

/* Replay rules: graph replay while the lengths grow == eager (each replay against the reference),
 * attention_metadata absent == tight == loose (bitwise), under-sized bounds stay in bounds. */
static void replay_and_bounds(gpu_matrix_result *all, int quick) {
  gpu_case graph = deepseek("latent_graph");
  graph.scale = 0.1352f; /* DeepSeek's: fp8 runs here too (see latent_heads_8bit) */
  graph.max_past_len = 1500;
  graph.unmapped_blocks = 1;
  graph.extra_tokens = 1;
  {
    const gpu_axis axes[] = {GPU_AXIS(max_q_len, 1, 3),
                             GPU_AXIS(metadata, GPU_METADATA_NONE, GPU_METADATA_LOOSE),
                             GPU_AXIS(cache_dtype, 0, PA_DTYPE_FLOAT8_E4M3FN)};
    gpu_matrix_add(all, run_mode(&graph, axes, NUM(axes), GPU_MODE_GRAPH, quick ? 2 : 6));
  }
  gpu_case metadata = deepseek("latent_metadata");
  metadata.batch_size = 2;
  metadata.max_past_len = 3000;
  {
    const gpu_axis axes[] = {GPU_AXIS(max_q_len, 1, 4)};
    gpu_matrix_add(all, run_mode(&metadata, axes, NUM(axes), GPU_MODE_METADATA, 0));
  }
  /* one-token sequences in a wide table: on Hopper (132 multiprocessors) 6 split slots without a
   * bound (the merge kernel) and 2-3 with the tight one, which the narrow kernel merges itself
   * (2..kLatentNarrowMergeSplits slots): the same bits */
  gpu_case few_splits = deepseek("latent_metadata_few_splits");
  few_splits.batch_size = 20;
  few_splits.max_q_len = 1;
  few_splits.max_past_len = 1500;
  few_splits.blocks_per_seq = 250;
  gpu_matrix_count(all, gpu_case_run_metadata_invariance(&few_splits, backend, seed++));
  gpu_case undersized = deepseek("latent_undersized_bounds");
  undersized.metadata = GPU_METADATA_UNDERSIZED;
  undersized.unmapped_blocks = 1;
  undersized.max_past_len = 1200;
  {
    const gpu_axis axes[] = {GPU_AXIS(max_q_len, 1, 4)};
    gpu_matrix_add(all, run(&undersized, axes, NUM(axes)));
  }
  /* a decreasing cumulative_sequence_length (a contract violation): unspecified results, nothing
   * compared; pa_execute must succeed and the run stay clean. Short sequences (the 64-row and
   * whole-tile kernels' one split) and one long one among one-token sequences (the narrow
   * kernel's many splits and their merge) */
  gpu_case decreasing = deepseek("latent_decreasing_cu");
  decreasing.decreasing_cu = 1;
  decreasing.unmapped_blocks = 1;
  decreasing.batch_size = 5;
  decreasing.max_past_len = 1200;
  {
    const gpu_axis axes[] = {GPU_AXIS(max_q_len, 1, 4), GPU_AXIS(num_heads, 16, 128),
                             GPU_AXIS(metadata, GPU_METADATA_NONE, GPU_METADATA_TIGHT)};
    gpu_matrix_add(all, run(&decreasing, axes, NUM(axes)));
  }
  static const int32_t long_q[] = {1, 1, 1, 1}, long_past[] = {20000, 100, 9000, 700};
  gpu_case decreasing_long = deepseek("latent_decreasing_cu_long");
  decreasing_long.decreasing_cu = 1;
  decreasing_long.batch_size = 4;
  decreasing_long.q_lens = long_q;
  decreasing_long.past_lens = long_past;
  {
    const gpu_axis axes[] = {GPU_AXIS(metadata, GPU_METADATA_NONE, GPU_METADATA_TIGHT)};
    gpu_matrix_add(all, run(&decreasing_long, axes, NUM(axes)));
  }
}

/* ---- absorbed MLA == non-absorbed, the absorbed form on LATENT -------------------------------- */

static int check_cuda(cudaError_t err, const char *what) {
  if (err != cudaSuccess) fprintf(stderr, "FAIL mla: %s: %s\n", what, cudaGetErrorString(err));
  return err == cudaSuccess;
}

/* Plans the absorbed case on the device with `b`; runs it when `run` (inputs copied, the latent
 * cache written back to the host cache), copying the output into out (floats). Returns 1 on
 * success; *chosen gets the plan's backend. */
static int run_absorbed_on_gpu(pa_case *c, pa_backend b, int execute, float *out,
                               pa_backend *chosen) {
  pa_plan_options options;
  pa_plan_options_init(&options);
  options.backend = b;
  pa_plan *plan = NULL;
  if (pa_plan_create(&plan, &c->config.attrs, c->inputs_desc, c->outputs_desc, &options) !=
      PA_SUCCESS) {
    char msg[512];
    pa_last_error_message(msg, sizeof msg);
    fprintf(stderr, "FAIL mla: plan on %s: %s\n", pa_backend_name(b), msg);
    return 0;
  }
  *chosen = pa_plan_backend(plan);
  int ok = 1;
  if (execute) {
    void *d_in[PA_NUM_INPUTS] = {0};
    void *d_out = NULL, *workspace = NULL;
    const size_t ws = pa_plan_workspace_size(plan);
    for (int i = 0; i < PA_NUM_INPUTS && ok; i++)
      if (c->inputs[i])
        ok = check_cuda(cudaMalloc(&d_in[i], c->inputs_bytes[i]), "cudaMalloc") &&
             check_cuda(cudaMemcpy(d_in[i], c->inputs[i], c->inputs_bytes[i],
                                   cudaMemcpyHostToDevice), "copy in");
    ok = ok && check_cuda(cudaMalloc(&d_out, c->outputs_bytes[PA_OUT_OUTPUT]), "cudaMalloc") &&
         check_cuda(cudaMemset(d_out, 0xff, c->outputs_bytes[PA_OUT_OUTPUT]), "poison") &&
         check_cuda(cudaMalloc(&workspace, ws ? ws : 1), "cudaMalloc workspace");
    if (ok) {
      void *outputs[PA_NUM_OUTPUTS] = {d_out, NULL, NULL, NULL};
      if (c->outputs_desc[PA_OUT_KEY_CACHE].dtype != PA_DTYPE_UNDEFINED)
        outputs[PA_OUT_KEY_CACHE] = d_in[PA_IN_KEY_CACHE];
      const pa_status st =
          pa_execute(plan, (const void *const *)d_in, outputs, workspace, ws, NULL);
      ok = st == PA_SUCCESS && check_cuda(cudaDeviceSynchronize(), "execute");
      if (st != PA_SUCCESS) fprintf(stderr, "FAIL mla: pa_execute: %s\n", pa_status_string(st));
    }
    const int64_t elems = c->token_count * MLA_H * MLA_L;
    uint16_t *raw = malloc((size_t)elems * 2);
    ok = ok && raw &&
         check_cuda(cudaMemcpy(raw, d_out, (size_t)elems * 2, cudaMemcpyDeviceToHost), "copy out") &&
         check_cuda(cudaMemcpy(c->inputs[PA_IN_KEY_CACHE], d_in[PA_IN_KEY_CACHE],
                               c->inputs_bytes[PA_IN_KEY_CACHE], cudaMemcpyDeviceToHost),
                    "copy the cache back");
    if (ok)
      for (int64_t i = 0; i < elems; i++) out[i] = pa__half_to_float(raw[i]);
    free(raw);
    for (int i = 0; i < PA_NUM_INPUTS; i++) cudaFree(d_in[i]);
    cudaFree(d_out);
    cudaFree(workspace);
  }
  pa_plan_destroy(plan);
  return ok;
}

static int absorbed_mla_on_latent(void) {
  uint64_t s = seed;
  mla_weights w;
  mla_weights_init(&w, &s);
  mla_caches caches;
  if (!mla_caches_alloc(&caches)) return 0;
  int32_t past[MLA_B] = {0, 0};
  int ok = 1;
  double worst = 0.0;
  for (int step = 0; step < 2 && ok; step++) {
    pa_case_config a_cfg, p_cfg;
    mla_step_configs(&a_cfg, &p_cfg, seed, step, past, &caches);
    pa_case absorbed, plain;
    if (pa_case_build(&absorbed, &a_cfg) != PA_SUCCESS) return 0;
    if (pa_case_build(&plain, &p_cfg) != PA_SUCCESS) return 0;
    mla_fill_step(&absorbed, &plain, &w, &s);
    ok &= pa_case_run_reference(&plain) == PA_SUCCESS;
    float *out = malloc((size_t)absorbed.token_count * MLA_H * MLA_L * sizeof(float));
    pa_backend chosen = PA_BACKEND_AUTO;
    const pa_backend auto_wants = step == 0 ? PA_BACKEND_UNFUSED : PA_BACKEND_LATENT;
    ok &= out && run_absorbed_on_gpu(&absorbed, PA_BACKEND_AUTO, 0, out, &chosen);
    if (chosen != auto_wants) {
      fprintf(stderr, "FAIL mla step %d (%lld tokens, %d sequences): AUTO chose %s, expected %s\n",
              step, (long long)absorbed.token_count, MLA_B, pa_backend_name(chosen),
              pa_backend_name(auto_wants));
      ok = 0;
    }
    ok = ok && run_absorbed_on_gpu(&absorbed, PA_BACKEND_LATENT, 1, out, &chosen);
    for (int64_t t = 0; ok && t < plain.token_count; t++)
      for (int h = 0; h < MLA_H; h++)
        for (int v = 0; v < MLA_V; v++) {
          const double projected = mla_projected(&w, out, t, h, v);
          const double got = pa_case_output(&plain, t, h, v);
          const double error = fabs(got - projected) / (1.0 + fabs(projected));
          if (error > worst) worst = error;
          if (!(error <= 5e-3)) { /* fp16 tolerance: both forms round their own operands */
            fprintf(stderr, "FAIL mla step %d token %lld head %d v %d: projected LATENT %.6f, "
                            "non-absorbed reference %.6f (seed %u)\n",
                    step, (long long)t, h, v, projected, got, seed);
            ok = 0;
            h = MLA_H;
            break;
          }
        }
    free(out);
    pa_case_free(&absorbed);
    pa_case_free(&plain);
    for (int b = 0; b < MLA_B; b++) past[b] += mla_step_q_lens[step][b];
  }
  fprintf(stderr, "absorbed (LATENT) vs non-absorbed (reference) MLA: worst relative error %.2e\n",
          worst);
  mla_caches_free(&caches);
  return ok;
}

/* Plans a step of two sequences (1 and 2 query tokens) on LATENT (num_heads, dtype, cache dtype,
 * latent row head_size / v_head_size) and compares the plan's kernel family with `want`. */
static int expect_family(int32_t num_heads, int32_t tokens, pa_dtype dtype, pa_dtype cache_dtype,
                         int32_t head_size, int32_t v_head_size, const char *want) {
  /* two sequences of 1 and `tokens` query tokens: rows_of counts num_heads x the mean, rounded up */
  const int32_t q_lens[2] = {1, tokens};
  static const int32_t past_lens[2] = {70, 200};
  pa_case_config cfg;
  pa_case_config_init(&cfg);
  cfg.seed = seed;
  cfg.dtype = dtype;
  cfg.cache_dtype = cache_dtype;
  cfg.head_size = head_size;
  cfg.batch_size = 2;
  cfg.q_lens = q_lens;
  cfg.past_lens = past_lens;
  cfg.attrs.num_heads = num_heads;
  cfg.attrs.kv_num_heads = 1;
  cfg.attrs.kv_cache_layout = PA_KV_CACHE_LAYOUT_LATENT;
  cfg.attrs.v_head_size = v_head_size;
  cfg.attrs.scale = 0.125f; /* required when v_head_size != head_size */
  if (cache_dtype == PA_DTYPE_INT8) cfg.attrs.k_quant_type = PA_QUANT_PER_TENSOR;
  pa_case c;
  if (pa_case_build(&c, &cfg) != PA_SUCCESS) {
    fprintf(stderr, "FAIL kernel_family: case %d / %d not built\n", head_size, v_head_size);
    return 0;
  }
  pa_plan_options options;
  pa_plan_options_init(&options);
  options.backend = PA_BACKEND_LATENT;
  pa_plan *plan = NULL;
  const pa_status st =
      pa_plan_create(&plan, &c.config.attrs, c.inputs_desc, c.outputs_desc, &options);
  const char *got = st == PA_SUCCESS ? pa__latent_kernel_family(plan) : NULL;
  const int ok = got && strcmp(got, want) == 0;
  if (!ok) {
    char message[256];
    pa_last_error_message(message, sizeof message);
    fprintf(stderr, "FAIL kernel_family (%d heads, dtype %d, cache dtype %d, %d / %d): expected "
            "%s, got %s (%s: %s)\n", num_heads, (int)dtype, (int)cache_dtype, head_size, v_head_size,
            want, got ? got : "no LATENT plan", pa_status_string(st), message);
  }
  pa_plan_destroy(plan);
  pa_case_free(&c);
  return ok;
}

static int kernel_family(void) {
  int device = 0;
  struct cudaDeviceProp prop;
  const char *env = getenv("PA_LATENT_KERNEL");
  const int hopper = !(env && strcmp(env, "mma.sync") == 0) &&
                     cudaGetDevice(&device) == cudaSuccess &&
                     cudaGetDeviceProperties(&prop, device) == cudaSuccess && prop.major == 9 &&
                     prop.minor == 0;
  /* the 64-row tile: whole tiles above 32 rows per sequence, half stages up to 32 */
  const char *want = hopper ? "wgmma whole" : "mma.sync";
  const char *want_half = hopper ? "wgmma" : "mma.sync";
  /* PA_LATENT_KERNEL=wgmma64 gives the narrow rows to the 64-row wgmma kernel */
  const char *want_narrow =
      !hopper ? "mma.sync" : env && strcmp(env, "wgmma64") == 0 ? "wgmma" : "wgmma narrow";
  int ok = expect_family(128, 2, PA_DTYPE_BFLOAT16, PA_DTYPE_BFLOAT16, 576, 512, want);
  ok &= expect_family(128, 2, PA_DTYPE_FLOAT16, PA_DTYPE_FLOAT16, 576, 512, want);
  ok &= expect_family(32, 2, PA_DTYPE_BFLOAT16, PA_DTYPE_BFLOAT16, 576, 512, want);
  ok &= expect_family(32, 1, PA_DTYPE_BFLOAT16, PA_DTYPE_BFLOAT16, 576, 512, want_half);
  ok &= expect_family(128, 2, PA_DTYPE_FLOAT16, PA_DTYPE_INT8, 576, 512, "mma.sync");
  ok &= expect_family(128, 2, PA_DTYPE_BFLOAT16, PA_DTYPE_BFLOAT16, 128, 64, "mma.sync");
  ok &= expect_family(128, 2, PA_DTYPE_FLOAT16, PA_DTYPE_FLOAT16, 576, 448, "mma.sync");
  /* 16 heads x 1 token per sequence: the narrow wgmma kernel (16 rows, keys as M); 16 heads x 2
   * tokens: the 64-row one with half stages (the narrow kernel at 32 rows measured slower); the
   * 32-row mma.sync tile where wgmma does not serve (here an int8 cache) */
  ok &= expect_family(16, 1, PA_DTYPE_BFLOAT16, PA_DTYPE_BFLOAT16, 576, 512, want_narrow);
  ok &= expect_family(16, 2, PA_DTYPE_BFLOAT16, PA_DTYPE_BFLOAT16, 576, 512, want_half);
  ok &= expect_family(16, 2, PA_DTYPE_BFLOAT16, PA_DTYPE_INT8, 576, 512, "mma.sync");
  fprintf(stderr, "latent: fp16 / bf16 caches at 576 / 512 channels run on the %s "
                  "kernel\n", want);
  return ok;
}

int main(void) {
  if (!gpu_available()) {
    fprintf(stderr, "no CUDA device: skipped\n");
    return GPU_SKIP;
  }
  seed = gpu_test_seed();
  const int quick = gpu_test_quick();
  gpu_matrix_result all = {0, 0, 0, 0};
  const int family_ok = kernel_family();
  gpu_matrix_count(&all, family_ok ? GPU_PASS : GPU_FAIL);
  fprintf(stderr, "%s kernel_family\n", family_ok ? "ok  " : "FAIL");
  matrix(&all, quick);
  replay_and_bounds(&all, quick);
  {
    /* decode-shaped steps through AUTO, end to end */
    backend = PA_BACKEND_AUTO;
    gpu_case through_auto = deepseek("latent_through_auto");
    through_auto.batch_size = 5;
    through_auto.max_q_len = 4;
    through_auto.scale = 0.0f; /* 1/sqrt(576): 8-bit caches (see latent_heads_8bit) */
    const gpu_axis axes[] = {GPU_AXIS(num_heads, 16, 128),
                             GPU_AXIS(cache_dtype, 0, PA_DTYPE_FLOAT8_E4M3FN),
                             GPU_AXIS(k_quant, PA_QUANT_NONE, PA_QUANT_PER_CHANNEL)};
    gpu_matrix_add(&all, run(&through_auto, axes, NUM(axes)));
    backend = PA_BACKEND_LATENT;
  }
  const int mla_ok = absorbed_mla_on_latent();
  gpu_matrix_count(&all, mla_ok ? GPU_PASS : GPU_FAIL);
  fprintf(stderr, "%s absorbed_mla_on_latent\n", mla_ok ? "ok  " : "FAIL");

  fprintf(stderr, "latent: %d passed, %d failed, %d unsupported, %d skipped\n", all.passed,
          all.failed, all.unsupported, all.skipped);
  if (all.unsupported) {
    fprintf(stderr, "FAIL: LATENT must serve every case of this matrix (PA_TEST_VERBOSE=1 prints "
                    "the reasons)\n");
    return 1;
  }
  return gpu_matrix_exit_code(&all);
}
