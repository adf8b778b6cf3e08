/* The DECODE backend forced over the test matrix of doc/development.md ("Oracles and
 * tolerances"), against the reference executor (harness), CUDA-graph replay while the KV lengths
 * grow, shared prefix blocks, the ring-buffer sliding window (== the full-cache run, bitwise, at every step), out-of-range block ids and slots, under-sized
 * bounds (for compute-sanitizer: nothing compared), and attention_metadata invariance: absent,
 * tight and loose bounds give bitwise equal outputs (the split partition never depends on the
 * bound). PA_GPU_TEST_QUICK=1 runs a reduced matrix (for compute-sanitizer). */
#include <stdio.h>

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
static gpu_matrix_result run_mode(const gpu_case *base, const gpu_axis *axes, int num_axes,
                                  gpu_mode mode, int steps) {
  return gpu_run_matrix_mode(base, axes, num_axes, valid_combination, PA_BACKEND_DECODE, seed++,
                             mode, steps);
}
static gpu_matrix_result run_graph(const gpu_case *base, const gpu_axis *axes, int num_axes,
                                   int steps) {
  return run_mode(base, axes, num_axes, GPU_MODE_GRAPH, steps);
}
#define NUM(axes) ((int)(sizeof(axes) / sizeof((axes)[0])))

int main(void) {
  if (!gpu_available()) {
    fprintf(stderr, "no CUDA device: skipped\n");
    return GPU_SKIP;
  }
  seed = gpu_test_seed();
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

  /* every cache type and quantization mode, fp16 and bf16; head size 80 pads its 128-channel
   * kernel, whose padding channels must not take a per-channel scale (the last head's would be past
   * the k_scale tensor, where the harness's guard bytes are NaN) */
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
                             GPU_AXIS(head_size, 64, 80, 256)};
    gpu_matrix_add(&all, run(&quant, axes, NUM(axes)));
  }

  /* Q far from 1, the scale shrunk to match: with an 8-bit cache the tensor cores take Q in fp16,
   * scaled by a power of two per row. |Q| up to 2^24 is beyond fp16's range even times a
   * per-channel k_scale (~1/64), 2^-24 below its subnormals; without the power of two both
   * fail */
  gpu_case magnitude = quant;
  magnitude.name = "decode_query_magnitude";
  magnitude.dtype = PA_DTYPE_BFLOAT16;
  {
    const gpu_axis axes[] = {GPU_AXIS(query_exponent, 24, -24),
                             GPU_AXIS(cache_dtype, 0, PA_DTYPE_INT8, PA_DTYPE_FLOAT8_E4M3FN),
                             GPU_AXIS(k_quant, PA_QUANT_NONE, PA_QUANT_PER_TENSOR,
                                      PA_QUANT_PER_CHANNEL),
                             GPU_AXIS(head_size, 64, 128)};
    gpu_matrix_add(&all, run(&magnitude, axes, NUM(axes)));
  }

  /* one token (the latency step): the static grid with up to 16 split slots merges them in the
   * kernel, the last CTA of each row block counting on arrivals the write kernel zeroes; over
   * head sizes, groups (48 heads over 2: a second, partial head chunk), 8-bit caches, windows and
   * sinks */
  static const int32_t single_q[1] = {1}, single_past[1] = {800};
  gpu_case single = gpu_case_default("decode_single_token");
  single.kv_num_heads = 2;
  single.batch_size = 1;
  single.q_lens = single_q;
  single.past_lens = single_past; /* 13 tiles of 64 keys: 13 split slots (14 after 32 replays) */
  {
    const gpu_axis axes[] = {GPU_AXIS(head_size, 64, 128, 256), GPU_AXIS(num_heads, 8, 48),
                             GPU_AXIS(cache_dtype, 0, PA_DTYPE_INT8, PA_DTYPE_FLOAT8_E4M3FN),
                             GPU_AXIS(window, 0, 100), GPU_AXIS(head_sink, 0, 1)};
    gpu_matrix_add(&all, run(&single, axes, NUM(axes)));
    /* replays: the counters are zeroed again by every step's write kernel */
    const gpu_axis graph_axes[] = {GPU_AXIS(block_size, 16, 64)};
    gpu_matrix_add(&all, run_graph(&single, graph_axes, NUM(graph_axes), quick ? 8 : 32));
    /* the static grid reads Q, the lengths and its first block-table entries before its wait:
     * here a kernel writes every input right before pa_execute (eager, and in the graph) */
    single.name = "decode_single_token_inputs_by_kernel";
    single.inputs_by_kernel = 1;
    const gpu_axis kernel_axes[] = {GPU_AXIS(query_positions, 0, 1), GPU_AXIS(window, 0, 100)};
    gpu_matrix_add(&all, run(&single, kernel_axes, NUM(kernel_axes)));
    gpu_matrix_add(&all, run_graph(&single, graph_axes, NUM(graph_axes), quick ? 8 : 32));
  }

  /* two plans alive: one token's plan (the in-kernel merge), then two tokens' (the work list),
   * then the first executed; both plans set up the same kernel's shared memory at every head
   * size */
  {
    static const int32_t two_q[2] = {1, 1}, two_past[2] = {700, 300};
    const int32_t head_sizes[3] = {64, 128, 256};
    for (int i = 0; i < 3; i++) {
      gpu_case one = gpu_case_default("decode_plans_alive [one token, then two]");
      one.kv_num_heads = 2;
      one.num_heads = 8;
      one.head_size = head_sizes[i];
      one.batch_size = 1;
      one.q_lens = single_q;
      one.past_lens = single_past;
      gpu_case two = one;
      two.name = "decode_plans_alive [two tokens, created second]";
      two.batch_size = 2;
      two.q_lens = two_q;
      two.past_lens = two_past;
      gpu_matrix_count(&all, gpu_case_run_plans_alive(&one, &two, PA_BACKEND_DECODE, seed++));
    }
  }

  /* one token whose splits hold several tiles each: a single token's split is its own tiles
   * over the plan's sizing count (one wave of resident CTAs per KV head: 33 at 32/8 heads d128
   * with a 16-bit cache on 132 multiprocessors, 66 with an 8-bit one, 16 at d256), so 4000 keys
   * (63 tiles) make splits of 2 to 4 tiles; a window of 1000 cuts the range the splits divide;
   * 33 and 66 slots take the merge kernel, 16 merge in the kernel; the replays grow the past */
  static const int32_t wide_past[1] = {4000};
  gpu_case wide = gpu_case_default("decode_single_token_wide_splits");
  wide.num_heads = 32;
  wide.kv_num_heads = 8;
  wide.batch_size = 1;
  wide.q_lens = single_q;
  wide.past_lens = wide_past;
  {
    const gpu_axis axes[] = {GPU_AXIS(head_size, 128, 256),
                             GPU_AXIS(cache_dtype, 0, PA_DTYPE_INT8), GPU_AXIS(window, 0, 1000)};
    gpu_matrix_add(&all, run(&wide, axes, NUM(axes)));
    const gpu_axis graph_axes[] = {GPU_AXIS(head_size, 128, 256)};
    gpu_matrix_add(&all, run_graph(&wide, graph_axes, NUM(graph_axes), quick ? 8 : 32));
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

  {
    /* pa_bench_decode's skewed batch scaled down (its check once failed at block 64 on the H200):
     * one long sequence among many short ones, shuffled blocks, so the device work list mixes a
     * token with a split in every split slot (tight bound) with one-split tokens. The harness gives
     * every table entry its own block: about 270 MB per cache (68 MB quick). Scale 0.5 instead of
     * 1/sqrt(128) makes the softmax peaked enough (a few hundred keys carry the weight) that a
     * wrong or missing split moves the output well past the tolerance, where a near-uniform
     * average over thousands of keys would hide it. */
    enum { kSkewBatch = 64 };
    static int32_t many_past[kSkewBatch], many_q[kSkewBatch];
    for (int b = 0; b < kSkewBatch; b++) {
      many_past[b] = b == 0 ? (quick ? 4095 : 8191) : 511;
      many_q[b] = 1;
    }
    gpu_case skew = gpu_case_default("decode_skewed_many");
    skew.num_heads = 8;
    skew.kv_num_heads = 2;
    skew.dtype = PA_DTYPE_BFLOAT16;
    skew.batch_size = quick ? kSkewBatch / 2 : kSkewBatch;
    skew.past_lens = many_past;
    skew.q_lens = many_q;
    skew.shuffled_blocks = 1;
    skew.scale = 0.5f;
    const gpu_axis axes[] = {GPU_AXIS(block_size, 16, 64),
                             GPU_AXIS(metadata, GPU_METADATA_NONE, GPU_METADATA_TIGHT)};
    gpu_matrix_add(&all, run(&skew, axes, NUM(axes)));
  }

  /* a sharp softmax (scale 2: the scores spread over tens of log2 units), so that a row's
   * reference moves past the slack well inside its keys (attention_rules.cuh,
   * kSoftmaxReferenceSlack), not only at its first tile. 48 tokens x 8 KV heads are 384 work
   * units, so a split holds several tiles (with a handful of units every split is one tile, whose
   * single step from -inf is exact under any rule). Then an int8 cache at scale 0.25 (its Q is
   * rounded to fp16 once more, an error a large scale magnifies): tile maxima within the slack
   * above the reference give probabilities above 1 to the bias's extra MMA. */
  gpu_case sharp = gpu_case_default("decode_sharp_softmax");
  sharp.num_heads = 16;
  sharp.kv_num_heads = 8;
  sharp.batch_size = 48;
  sharp.max_past_len = quick ? 600 : 1000;
  sharp.scale = 2.0f;
  {
    const gpu_axis axes[] = {GPU_AXIS(head_size, 64, 128, 256),
                             GPU_AXIS(dtype, PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16)};
    gpu_matrix_add(&all, run(&sharp, axes, NUM(axes)));
    sharp.name = "decode_sharp_softmax_int8";
    sharp.scale = 0.25f;
    sharp.cache_dtype = PA_DTYPE_INT8;
    const gpu_axis int8_axes[] = {GPU_AXIS(head_size, 128),
                                  GPU_AXIS(k_quant, PA_QUANT_PER_TENSOR, PA_QUANT_PER_CHANNEL)};
    gpu_matrix_add(&all, run(&sharp, int8_axes, NUM(int8_axes)));
  }

  /* write-path features in front of DECODE: staged Q (rotary, QK-Norm, packed) and explicit slots */
  gpu_case front = gpu_case_default("decode_write_path_inputs");
  front.num_heads = 8;
  front.kv_num_heads = 2;
  front.batch_size = 3;
  front.max_past_len = 100;
  {
    const gpu_axis axes[] = {GPU_AXIS(rotary, 0, 1), GPU_AXIS(qk_norm, 0, 1),
                             GPU_AXIS(slots, GPU_SLOTS_NONE, GPU_SLOTS_WITH_INVALID)};
    gpu_matrix_add(&all, run(&front, axes, NUM(axes)));
  }

  /* a step writes before it attends (doc/semantics.md): each sequence's token writing key 0 of
   * the next sequence, which that sequence reads in its first tile (GPU_SLOTS_INTO_PAST) */
  gpu_case written = gpu_case_default("decode_written_past");
  written.num_heads = 8;
  written.kv_num_heads = 2;
  written.batch_size = 4;
  written.max_past_len = 100;
  {
    const gpu_axis axes[] = {GPU_AXIS(slots, GPU_SLOTS_INTO_PAST), GPU_AXIS(block_size, 16, 64),
                             GPU_AXIS(max_q_len, 1, 3)};
    gpu_matrix_add(&all, run(&written, axes, NUM(axes)));
  }

  /* an output that starts 2 bytes into its allocation (doc/api.md asks the output for its
   * element's alignment only), with one and several tokens per sequence */
  gpu_case offset = gpu_case_default("decode_output_offset");
  offset.num_heads = 8;
  offset.kv_num_heads = 2;
  offset.batch_size = 4;
  offset.max_past_len = 300;
  offset.output_offset_bytes = 2;
  {
    const gpu_axis axes[] = {GPU_AXIS(max_q_len, 1, 3), GPU_AXIS(head_size, 64, 128)};
    gpu_matrix_add(&all, run(&offset, axes, NUM(axes)));
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

  /* shared prefix blocks: every sequence's leading table entries are sequence 0's (already
   * cached), new tokens go to private blocks; eager and graph replay */
  gpu_case shared = gpu_case_default("decode_shared_prefix");
  shared.num_heads = 8;
  shared.kv_num_heads = 2;
  shared.batch_size = 4;
  shared.max_past_len = quick ? 120 : 400;
  shared.shuffled_blocks = 1;
  {
    const gpu_axis axes[] = {GPU_AXIS(shared_prefix_blocks, 1, 5),
                             GPU_AXIS(slots, GPU_SLOTS_NONE, GPU_SLOTS_DERIVED),
                             GPU_AXIS(block_size, 16, 64)};
    gpu_matrix_add(&all, run(&shared, axes, NUM(axes)));
    const gpu_axis graph_axes[] = {GPU_AXIS(shared_prefix_blocks, 2)};
    gpu_matrix_add(&all, run_graph(&shared, graph_axes, NUM(graph_axes), quick ? 4 : 16));
  }

  /* ring-buffer sliding window (design 9.3.2): ceil(W / bs) + 1 recycled blocks per sequence ==
   * the full cache, bitwise, at every step; eager, and graph replay with the table and slots
   * updated on the device between replays */
  gpu_case ring = gpu_case_default("decode_ring");
  ring.num_heads = 16;
  ring.kv_num_heads = 2;
  ring.batch_size = 4;
  ring.max_past_len = 150;
  ring.shuffled_blocks = 1;
  if (quick) {
    const gpu_axis axes[] = {GPU_AXIS(window, 1, 40), GPU_AXIS(cache_dtype, 0, PA_DTYPE_INT8)};
    gpu_matrix_add(&all, run_mode(&ring, axes, NUM(axes), GPU_MODE_RING, 6));
    gpu_matrix_add(&all, run_mode(&ring, axes, NUM(axes), GPU_MODE_RING_GRAPH, 6));
  } else {
    const gpu_axis axes[] = {GPU_AXIS(window, 1, 16, 40, 100), GPU_AXIS(block_size, 16, 64),
                             GPU_AXIS(cache_dtype, 0, PA_DTYPE_INT8), GPU_AXIS(head_sink, 0, 1)};
    gpu_matrix_add(&all, run_mode(&ring, axes, NUM(axes), GPU_MODE_RING, 40));
    gpu_matrix_add(&all, run_mode(&ring, axes, NUM(axes), GPU_MODE_RING_GRAPH, 40));
  }
  {
    gpu_case ragged_ring = ring; /* chunks of new tokens: the ring holds W + q_len - 1 positions */
    ragged_ring.name = "decode_ring_ragged";
    ragged_ring.max_q_len = 5;
    ragged_ring.zero_q_lens = 1;
    ragged_ring.extra_tokens = 2;
    const gpu_axis axes[] = {GPU_AXIS(window, 7, 64), GPU_AXIS(query_positions, 0, 1)};
    gpu_matrix_add(&all, run_mode(&ragged_ring, axes, NUM(axes), GPU_MODE_RING, quick ? 4 : 20));
  }

  /* out-of-range block ids (-1, large negatives, >= num_blocks, INT32_MAX) and slots (negative,
   * >= num_blocks * bs, INT32_MIN / INT32_MAX): masked and skipped, compared with the reference */
  gpu_case range = gpu_case_default("decode_out_of_range");
  range.num_heads = 8;
  range.kv_num_heads = 2;
  range.batch_size = 5;
  range.max_q_len = 3;
  range.max_past_len = 300;
  range.unmapped_blocks = 1;
  range.slots = GPU_SLOTS_WITH_INVALID;
  {
    const gpu_axis axes[] = {GPU_AXIS(block_size, 16, 128), GPU_AXIS(window, 0, 50)};
    gpu_matrix_add(&all, run(&range, axes, NUM(axes)));
  }

  /* under-sized bounds (a contract violation): unspecified results, nothing compared; pa_execute
   * must succeed and the run stay clean (run under compute-sanitizer by tools/gpu-check.sh) */
  gpu_case undersized = gpu_case_default("decode_undersized_bounds");
  undersized.num_heads = 8;
  undersized.kv_num_heads = 2;
  undersized.batch_size = 4;
  undersized.max_q_len = 6;
  undersized.max_past_len = quick ? 800 : 3000;
  undersized.metadata = GPU_METADATA_UNDERSIZED;
  {
    const gpu_axis axes[] = {GPU_AXIS(max_q_len, 1, 6), GPU_AXIS(window, 0, 64),
                             GPU_AXIS(unmapped_blocks, 0, 1)};
    gpu_matrix_add(&all, run(&undersized, axes, NUM(axes)));
    const gpu_axis graph_axes[] = {GPU_AXIS(max_q_len, 1)};
    gpu_matrix_add(&all, run_graph(&undersized, graph_axes, NUM(graph_axes), 3));
  }

  /* a decreasing cumulative_sequence_length (a contract violation): unspecified results, nothing
   * compared; pa_execute must succeed and the run stay clean */
  gpu_case decreasing = undersized;
  decreasing.name = "decode_decreasing_cu";
  decreasing.metadata = GPU_METADATA_NONE;
  decreasing.decreasing_cu = 1;
  decreasing.batch_size = 5;
  {
    const gpu_axis axes[] = {GPU_AXIS(max_q_len, 1, 6), GPU_AXIS(window, 0, 64),
                             GPU_AXIS(metadata, GPU_METADATA_NONE, GPU_METADATA_TIGHT)};
    gpu_matrix_add(&all, run(&decreasing, axes, NUM(axes)));
    const gpu_axis graph_axes[] = {GPU_AXIS(max_q_len, 1)};
    gpu_matrix_add(&all, run_graph(&decreasing, graph_axes, NUM(graph_axes), 3));
  }

  /* metadata absent == tight == loose, bitwise: many splits, and one split (direct) vs a merge;
   * ragged steps, windows, a quantized cache */
  {
    static const int32_t long_past[4] = {0, 37, 1000, 2500};
    static const int32_t short_past[4] = {0, 5, 20, 30};
    static const int32_t one_token[4] = {1, 1, 1, 1};
    gpu_case bitwise = gpu_case_default("decode_metadata_bitwise_long");
    bitwise.num_heads = 16;
    bitwise.kv_num_heads = 2;
    bitwise.dtype = PA_DTYPE_BFLOAT16;
    bitwise.batch_size = 4;
    bitwise.q_lens = one_token;
    bitwise.past_lens = long_past;
    bitwise.blocks_per_seq = 160;
    gpu_matrix_count(&all, gpu_case_run_metadata_invariance(&bitwise, PA_BACKEND_DECODE, seed++));
    bitwise.name = "decode_metadata_bitwise_short";
    bitwise.past_lens = short_past;
    bitwise.blocks_per_seq = 64;
    gpu_matrix_count(&all, gpu_case_run_metadata_invariance(&bitwise, PA_BACKEND_DECODE, seed++));
    /* up to 7 split slots with a tight bound (the merge takes a warp per row), 16 without one (a
     * CTA per row): the two merges must agree bit for bit */
    static const int32_t medium_past[4] = {100, 200, 300, 400};
    bitwise.name = "decode_metadata_bitwise_merge_shapes";
    bitwise.past_lens = medium_past;
    gpu_matrix_count(&all, gpu_case_run_metadata_invariance(&bitwise, PA_BACKEND_DECODE, seed++));
    /* one token: 7 and 15 split slots merged in the kernel with a tight bound, 40 (the merge
     * kernel, a CTA per row) without one, up to that with a loose one: the same bits; and 94
     * splits of 100 slots (the merge kernel's rows in several rounds) */
    static const int32_t single_past[3][1] = {{400}, {900}, {6000}};
    static const int32_t single_blocks[3] = {160, 160, 400}; /* without a bound: 40, 40, 100 */
    bitwise.name = "decode_metadata_bitwise_single_token";
    bitwise.batch_size = 1;
    for (int i = 0; i < 3; i++) {
      bitwise.past_lens = single_past[i];
      bitwise.blocks_per_seq = single_blocks[i];
      gpu_matrix_count(&all,
                       gpu_case_run_metadata_invariance(&bitwise, PA_BACKEND_DECODE, seed++));
    }

    gpu_case mixed = gpu_case_default("decode_metadata_bitwise");
    mixed.num_heads = 8;
    mixed.kv_num_heads = 2;
    mixed.batch_size = 5;
    mixed.max_past_len = quick ? 600 : 2000;
    mixed.zero_q_lens = 1;
    mixed.extra_tokens = 1;
    const gpu_axis axes[] = {GPU_AXIS(max_q_len, 1, 7), GPU_AXIS(window, 0, 100),
                             GPU_AXIS(cache_dtype, 0, PA_DTYPE_FLOAT8_E4M3FN)};
    gpu_matrix_add(&all, run_mode(&mixed, axes, NUM(axes), GPU_MODE_METADATA, 0));
  }

  fprintf(stderr, "decode: %d passed, %d failed, %d unsupported, %d skipped\n", all.passed,
          all.failed, all.unsupported, all.skipped);
  if (all.unsupported) {
    fprintf(stderr, "FAIL: DECODE must serve every case of this matrix\n");
    return 1;
  }
  return gpu_matrix_exit_code(&all);
}
