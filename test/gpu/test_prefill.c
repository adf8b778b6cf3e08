/* The PREFILL backend (issue 16) forced over the testing.md matrix on multi-token steps, against the
 * reference executor (harness): head sizes that are multiples of 16 up to 256, GQA groups 1..32
 * (3 and 6 too), block sizes 16..512, every cache type and quantization mode, windows (1, small, a
 * 64-key tile boundary, >= context), softcap, sinks, query_positions, is_causal = 0, ragged batches
 * with zero-token sequences and token rows of no sequence, chunked prefill over long cached
 * prefixes, mixed steps (decode tokens beside prefill chunks), speculative-verify steps, a long
 * sequence with few new tokens (splits), batches of 257 / 300, shuffled, shared and unmapped block
 * tables, packed QKV / RoPE / QK-Norm through the shared prologue. Then CUDA-graph replay while the
 * lengths grow (64 replays), the ring-buffer sliding window (== the full-cache run, bitwise, at every
 * step), attention_metadata invariance (absent == tight == loose, bitwise), under-sized bounds and
 * out-of-range ids (for compute-sanitizer), and plan-level checks on the real device: AUTO picks
 * PREFILL for prefill-shaped steps and DECODE for decode-shaped ones, the kernel family PREFILL
 * plans pick (wgmma on compute capability 9.0, 8-bit caches from 64 channels), forced PREFILL refuses
 * attention_bias / output_qk / LATENT / head_size 72 naming the feature, the workspace of a
 * 256 x 4-token verify step over 4k stays below 1 GiB without attention_metadata, and an execute
 * with one byte too little workspace launches nothing.
 *
 * PA_GPU_TEST_QUICK=1 runs a reduced matrix (for compute-sanitizer); PA_GPU_TEST_SHARD=i/n splits
 * the matrices between processes (harness). PA_PREFILL_TEST_BACKEND=DECODE|UNFUSED|AUTO runs the
 * matrices on that backend instead (to check the cases themselves against a backend that exists;
 * the plan-level checks always concern PREFILL). PA_PREFILL_KERNEL=mma.sync keeps PREFILL on its
 * mma.sync kernels (where the wgmma ones would run otherwise). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "harness.h"
#include "internal.h" /* pa__prefill_kernel_family */

/* Quant types exactly with a quantized cache (NONE there means PER_TENSOR); a window only with
 * causal attention. */
static int valid_combination(const gpu_case *c) {
  int quantized = c->cache_dtype == PA_DTYPE_INT8 || c->cache_dtype == PA_DTYPE_FLOAT8_E4M3FN;
  if (!quantized && (c->k_quant != PA_QUANT_NONE || c->v_quant != PA_QUANT_NONE)) return 0;
  if (c->non_causal && c->window) return 0;
  return 1;
}

static unsigned seed;
static pa_backend backend = PA_BACKEND_PREFILL; /* of the matrices */

static gpu_matrix_result run_mode(const gpu_case *base, const gpu_axis *axes, int num_axes,
                                  gpu_mode mode, int steps) {
  return gpu_run_matrix_mode(base, axes, num_axes, valid_combination, backend, seed++, mode, steps);
}
static gpu_matrix_result run(const gpu_case *base, const gpu_axis *axes, int num_axes) {
  return run_mode(base, axes, num_axes, GPU_MODE_EAGER, 0);
}
static gpu_matrix_result run_graph(const gpu_case *base, const gpu_axis *axes, int num_axes,
                                   int steps) {
  return run_mode(base, axes, num_axes, GPU_MODE_GRAPH, steps);
}
#define NUM(axes) ((int)(sizeof(axes) / sizeof((axes)[0])))
/* The quick or the full axes of a section. */
#define RUN_QUICK_OR_FULL(all, base, quick_axes, full_axes)             \
  do {                                                                  \
    if (quick)                                                          \
      gpu_matrix_add(&(all), run(&(base), quick_axes, NUM(quick_axes))); \
    else                                                                \
      gpu_matrix_add(&(all), run(&(base), full_axes, NUM(full_axes)));   \
  } while (0)

/* ---- the operator over the matrix ------------------------------------------------------------ */

static void matrix(gpu_matrix_result *all, int quick) {
  /* Where the cache holds T, the sections below use scale 0.5 instead of 1/sqrt(head_size): a
   * peaked softmax, so that a key range read twice, skipped or misplaced moves the output past the
   * tolerance, where a near-uniform average over hundreds of keys would hide it. 8-bit caches keep
   * the default scale over short contexts and take 0.25 over long ones: there Q reaches the tensor
   * cores rounded once more (with a per-channel k_scale folded in; to T on mma.sync, to fp16 on the
   * Hopper kernels), an error a large scale magnifies (simulated on this harness's data: at 0.25
   * such rounding reaches under a fifth of the 2e-2 tolerance over 400..3000 keys; a skipped 64-key
   * tile over 3000 keys exceeds it with an int8 cache, but not always with fp8, whose random codes
   * make the attention near-uniform).
   *
   * head sizes (multiples of 16 up to 256, 16-48 on the Hopper kernels with 64-channel boxes wider
   * than the head, 48 and 112 not powers of two) and types, over query
   * chunks that cross a 64-row tile, several KV tiles, block sizes 16 and 64 */
  gpu_case heads = gpu_case_default("prefill_heads");
  heads.num_heads = 8;
  heads.kv_num_heads = 2;
  heads.scale = 0.5f;
  heads.batch_size = 3;
  heads.max_q_len = quick ? 40 : 70;
  heads.max_past_len = quick ? 100 : 300;
  {
    /* 160 and 192: the 256-channel Hopper kernel with a last 64-channel panel wholly past the
     * head (and, at 160, one partly past it) */
    const gpu_axis q[] = {GPU_AXIS(head_size, 48, 128, 160, 256),
                          GPU_AXIS(dtype, PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16)};
    const gpu_axis f[] = {GPU_AXIS(head_size, 16, 32, 48, 64, 96, 112, 128, 160, 192, 256),
                          GPU_AXIS(dtype, PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16),
                          GPU_AXIS(block_size, 16, 64)};
    RUN_QUICK_OR_FULL(*all, heads, q, f);
  }

  /* GQA groups 1, 3 (not a power of two), 4, 6, 8, 16, 32, 64 and 128: the group's heads times
   * the query tokens share the M dimension (a row block of 128 rows is one token's heads at 128,
   * so the Hopper kernel's second warpgroup holds heads 64.. of the same token) */
  gpu_case groups = gpu_case_default("prefill_groups");
  groups.kv_num_heads = 2;
  groups.scale = 0.5f;
  groups.batch_size = 3;
  groups.max_q_len = 40;
  groups.max_past_len = quick ? 80 : 200;
  {
    const gpu_axis q[] = {GPU_AXIS(num_heads, 2, 6, 32, 64)};
    const gpu_axis f[] = {GPU_AXIS(num_heads, 2, 6, 8, 12, 16, 32, 64, 128, 256),
                          GPU_AXIS(dtype, PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16)};
    RUN_QUICK_OR_FULL(*all, groups, q, f);
  }

  /* block sizes 16..512; shuffled and partly unmapped (-1, large negatives, >= num_blocks,
   * INT32_MAX) block tables under prefill chunks */
  gpu_case blocks = gpu_case_default("prefill_blocks");
  blocks.num_heads = 8;
  blocks.kv_num_heads = 2;
  blocks.scale = 0.5f;
  blocks.batch_size = 3;
  blocks.max_q_len = quick ? 50 : 100;
  blocks.max_past_len = quick ? 500 : 1000;
  {
    const gpu_axis q[] = {GPU_AXIS(block_size, 16, 128, 512), GPU_AXIS(shuffled_blocks, 1),
                          GPU_AXIS(unmapped_blocks, 0, 1)};
    const gpu_axis f[] = {GPU_AXIS(block_size, 16, 32, 64, 128, 256, 512),
                          GPU_AXIS(shuffled_blocks, 0, 1), GPU_AXIS(unmapped_blocks, 0, 1)};
    RUN_QUICK_OR_FULL(*all, blocks, q, f);
  }

  /* batch sizes with short queries (257 / 300 sequences of 0..4 tokens: prefill-shaped), zero-token
   * sequences, token rows that belong to no sequence. No attention_metadata: the workspace must not
   * grow with batch x token_count x KV length. */
  gpu_case batches = gpu_case_default("prefill_batches");
  batches.num_heads = 8;
  batches.kv_num_heads = 2;
  batches.head_size = 64;
  batches.max_q_len = 4;
  batches.max_past_len = 120;
  batches.zero_q_lens = 1;
  {
    const gpu_axis q[] = {GPU_AXIS(batch_size, 1, 300), GPU_AXIS(extra_tokens, 3)};
    const gpu_axis f[] = {GPU_AXIS(batch_size, 1, 3, 257, 300), GPU_AXIS(extra_tokens, 0, 3)};
    RUN_QUICK_OR_FULL(*all, batches, q, f);
  }

  /* masks on ragged prefill chunks: window 1, small, one 64-key tile, >= context; is_causal = 0;
   * query_positions (reversed); sinks; then the same with a softcap small enough to bend the random
   * logits */
  for (int softcap = 0; softcap < 2; softcap++) {
    gpu_case masks = gpu_case_default(softcap ? "prefill_masks_softcap" : "prefill_masks");
    masks.num_heads = 16;
    masks.kv_num_heads = 2;
    masks.batch_size = 5;
    masks.max_q_len = quick ? 30 : 80;
    masks.max_past_len = quick ? 80 : 200;
    masks.zero_q_lens = 1;
    masks.extra_tokens = 2;
    masks.softcap = softcap ? 2.5f : 0.0f;
    masks.scale = softcap ? 0.5f : 0.0f;
    const gpu_axis q[] = {GPU_AXIS(window, 0, 1, 64), GPU_AXIS(non_causal, 0, 1),
                          GPU_AXIS(query_positions, 1), GPU_AXIS(head_sink, 1)};
    const gpu_axis f[] = {GPU_AXIS(window, 0, 1, 7, 64, 100000), GPU_AXIS(non_causal, 0, 1),
                          GPU_AXIS(query_positions, 0, 1), GPU_AXIS(head_sink, 0, 1)};
    if (softcap && quick) continue;
    RUN_QUICK_OR_FULL(*all, masks, q, f);
  }

  /* every cache type and quantization mode, K and V independent, fp16 and bf16, narrow and wide
   * heads: dequantized on the way to the tensor cores */
  gpu_case quant = gpu_case_default("prefill_quant");
  quant.num_heads = 16;
  quant.kv_num_heads = 4;
  quant.batch_size = 3;
  quant.max_q_len = quick ? 30 : 50;
  quant.max_past_len = quick ? 150 : 400;
  {
    /* (the quick matrix takes head size 256 too: gpu_prefill_mma_sync runs it on the mma.sync
     * kernel, whose 8-bit path at 256 channels runs nowhere else on Hopper) */
    const gpu_axis q[] = {GPU_AXIS(cache_dtype, PA_DTYPE_INT8, PA_DTYPE_FLOAT8_E4M3FN),
                          GPU_AXIS(k_quant, PA_QUANT_PER_CHANNEL),
                          GPU_AXIS(v_quant, PA_QUANT_PER_TENSOR, PA_QUANT_PER_CHANNEL),
                          GPU_AXIS(dtype, PA_DTYPE_BFLOAT16), GPU_AXIS(head_size, 128, 256)};
    const gpu_axis f[] = {GPU_AXIS(cache_dtype, PA_DTYPE_INT8, PA_DTYPE_FLOAT8_E4M3FN),
                          GPU_AXIS(k_quant, PA_QUANT_PER_TENSOR, PA_QUANT_PER_CHANNEL),
                          GPU_AXIS(v_quant, PA_QUANT_PER_TENSOR, PA_QUANT_PER_CHANNEL),
                          GPU_AXIS(dtype, PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16),
                          GPU_AXIS(head_size, 64, 256)};
    RUN_QUICK_OR_FULL(*all, quant, q, f);
  }

  /* Q far from 1, the scale shrunk to match: with an 8-bit cache the tensor cores take Q in fp16,
   * scaled by a power of two per unit. |Q| up to 2^24 is beyond fp16's range even times a
   * per-channel k_scale (~1/64), 2^-24 below its subnormals; without the power of two both
   * fail; head sizes 64 (mma.sync) and 128 (wgmma on Hopper) */
  gpu_case magnitude = quant;
  magnitude.name = "prefill_query_magnitude";
  magnitude.dtype = PA_DTYPE_BFLOAT16;
  {
    const gpu_axis q[] = {GPU_AXIS(query_exponent, 24, -24),
                          GPU_AXIS(cache_dtype, PA_DTYPE_INT8, PA_DTYPE_FLOAT8_E4M3FN),
                          GPU_AXIS(k_quant, PA_QUANT_PER_CHANNEL), GPU_AXIS(head_size, 64, 128)};
    const gpu_axis f[] = {GPU_AXIS(query_exponent, 24, -24),
                          GPU_AXIS(cache_dtype, 0, PA_DTYPE_INT8, PA_DTYPE_FLOAT8_E4M3FN),
                          GPU_AXIS(k_quant, PA_QUANT_NONE, PA_QUANT_PER_TENSOR,
                                   PA_QUANT_PER_CHANNEL),
                          GPU_AXIS(head_size, 64, 128)};
    RUN_QUICK_OR_FULL(*all, magnitude, q, f);
  }

  /* rows whose maxima rise along their keys by more than the softmax reference's slack (2^8) a
   * 128-key tile: the reference moves on later tiles, not only on a row's first (the Hopper
   * kernel's speculative exponentials then fall back to the full step) */
  {
    static const int32_t past[2] = {0, 0};
    static const int32_t q_lens[2] = {600, 300};
    gpu_case rising = gpu_case_default("prefill_rising_max");
    rising.num_heads = 8;
    rising.kv_num_heads = 2;
    rising.batch_size = 2;
    rising.past_lens = past;
    rising.q_lens = q_lens;
    rising.key_growth = 16;
    const gpu_axis q[] = {GPU_AXIS(dtype, PA_DTYPE_BFLOAT16), GPU_AXIS(head_size, 128)};
    const gpu_axis f[] = {GPU_AXIS(dtype, PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16),
                          GPU_AXIS(head_size, 64, 128, 256)};
    RUN_QUICK_OR_FULL(*all, rising, q, f);
  }

  /* chunked prefill over long cached prefixes (past several hundred to a few thousand, chunks of
   * tens to hundreds), shuffled blocks */
  {
    static const int32_t past[4] = {3000, 700, 1500, 0};
    static const int32_t chunk[4] = {200, 64, 17, 130};
    static const int32_t past_quick[4] = {900, 300, 64, 0};
    static const int32_t chunk_quick[4] = {100, 64, 17, 30};
    gpu_case chunked = gpu_case_default("prefill_chunked");
    chunked.num_heads = 8;
    chunked.kv_num_heads = 2;
    chunked.batch_size = 4;
    chunked.past_lens = quick ? past_quick : past;
    chunked.q_lens = quick ? chunk_quick : chunk;
    chunked.shuffled_blocks = 1;
    chunked.scale = 0.5f;
    const gpu_axis q[] = {GPU_AXIS(dtype, PA_DTYPE_BFLOAT16), GPU_AXIS(block_size, 16, 256)};
    const gpu_axis f[] = {GPU_AXIS(dtype, PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16),
                          GPU_AXIS(block_size, 16, 256), GPU_AXIS(window, 0, 500)};
    RUN_QUICK_OR_FULL(*all, chunked, q, f);
    chunked.name = "prefill_chunked_quant";
    chunked.scale = 0.25f;
    const gpu_axis qq[] = {GPU_AXIS(cache_dtype, PA_DTYPE_FLOAT8_E4M3FN),
                           GPU_AXIS(k_quant, PA_QUANT_PER_CHANNEL)};
    const gpu_axis fq[] = {GPU_AXIS(cache_dtype, PA_DTYPE_INT8, PA_DTYPE_FLOAT8_E4M3FN),
                           GPU_AXIS(k_quant, PA_QUANT_PER_TENSOR, PA_QUANT_PER_CHANNEL),
                           GPU_AXIS(dtype, PA_DTYPE_BFLOAT16)};
    RUN_QUICK_OR_FULL(*all, chunked, qq, fq);
  }

  /* mixed continuous-batching steps: decode tokens (1 new token over a long past) beside prefill
   * chunks (one from scratch), a zero-token sequence, tokens of no sequence */
  {
    static const int32_t past[8] = {900, 0, 1200, 40, 500, 0, 300, 2000};
    static const int32_t q_lens[8] = {1, 150, 1, 1, 33, 1, 0, 1};
    gpu_case mixed = gpu_case_default("prefill_mixed");
    mixed.batch_size = 8;
    mixed.past_lens = past;
    mixed.q_lens = q_lens;
    mixed.extra_tokens = 2;
    mixed.scale = 0.5f;
    const gpu_axis q[] = {GPU_AXIS(dtype, PA_DTYPE_BFLOAT16), GPU_AXIS(window, 0, 256)};
    const gpu_axis f[] = {GPU_AXIS(dtype, PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16),
                          GPU_AXIS(block_size, 16, 64), GPU_AXIS(window, 0, 256)};
    RUN_QUICK_OR_FULL(*all, mixed, q, f);
    mixed.name = "prefill_mixed_quant";
    mixed.scale = 0.25f;
    const gpu_axis qq[] = {GPU_AXIS(cache_dtype, PA_DTYPE_INT8)};
    const gpu_axis fq[] = {GPU_AXIS(cache_dtype, PA_DTYPE_INT8, PA_DTYPE_FLOAT8_E4M3FN),
                           GPU_AXIS(k_quant, PA_QUANT_PER_TENSOR, PA_QUANT_PER_CHANNEL),
                           GPU_AXIS(dtype, PA_DTYPE_BFLOAT16)};
    RUN_QUICK_OR_FULL(*all, mixed, qq, fq);
    /* a sharp softmax (scale 2: the scores spread over tens of log2 units), so that a row's
     * reference moves past the slack well inside its keys (attention_rules.cuh,
     * kSoftmaxReferenceSlack), not only at its first tile; head sizes 64 (mma.sync), 128 and 256
     * (the Hopper kernel's 128- and 64-key tiles) */
    mixed.name = "prefill_sharp_softmax";
    mixed.scale = 2.0f;
    mixed.cache_dtype = 0;
    const gpu_axis qs[] = {GPU_AXIS(head_size, 64, 128, 256)};
    const gpu_axis fs[] = {GPU_AXIS(head_size, 64, 128, 256),
                           GPU_AXIS(dtype, PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16),
                           GPU_AXIS(block_size, 16, 64)};
    RUN_QUICK_OR_FULL(*all, mixed, qs, fs);
  }

  /* speculative verify: 2-4 tokens per sequence over long pasts */
  {
    enum { kVerify = 12 };
    static int32_t past[kVerify], q_lens[kVerify];
    for (int b = 0; b < kVerify; b++) {
      past[b] = 1000 + 181 * b; /* 1000 .. 2991 */
      q_lens[b] = 2 + b % 3;
    }
    gpu_case verify = gpu_case_default("prefill_spec_verify");
    verify.num_heads = 16;
    verify.kv_num_heads = 4;
    verify.dtype = PA_DTYPE_BFLOAT16;
    verify.batch_size = quick ? 4 : kVerify;
    verify.past_lens = past;
    verify.q_lens = q_lens;
    verify.shuffled_blocks = 1;
    verify.scale = 0.5f;
    const gpu_axis q[] = {GPU_AXIS(block_size, 16)};
    const gpu_axis f[] = {GPU_AXIS(block_size, 16, 64), GPU_AXIS(dtype, PA_DTYPE_FLOAT16,
                                                                 PA_DTYPE_BFLOAT16)};
    RUN_QUICK_OR_FULL(*all, verify, q, f);
    verify.name = "prefill_spec_verify_quant";
    verify.scale = 0.25f;
    const gpu_axis qq[] = {GPU_AXIS(cache_dtype, PA_DTYPE_FLOAT8_E4M3FN)};
    const gpu_axis fq[] = {GPU_AXIS(cache_dtype, PA_DTYPE_INT8, PA_DTYPE_FLOAT8_E4M3FN),
                           GPU_AXIS(k_quant, PA_QUANT_PER_TENSOR, PA_QUANT_PER_CHANNEL)};
    RUN_QUICK_OR_FULL(*all, verify, qq, fq);
  }

  /* a long single sequence with few new tokens: 8 KV heads cannot fill the GPU, so the KV range
   * must be split and merged */
  {
    static const int32_t past[1] = {20000}, past_quick[1] = {5000};
    static const int32_t three[1] = {3};
    gpu_case longctx = gpu_case_default("prefill_long_few_tokens");
    longctx.batch_size = 1;
    longctx.past_lens = quick ? past_quick : past;
    longctx.q_lens = three;
    longctx.scale = 0.5f;
    const gpu_axis q[] = {GPU_AXIS(dtype, PA_DTYPE_BFLOAT16), GPU_AXIS(block_size, 16)};
    const gpu_axis f[] = {GPU_AXIS(dtype, PA_DTYPE_BFLOAT16), GPU_AXIS(block_size, 16, 256),
                          GPU_AXIS(window, 0, 3000)};
    RUN_QUICK_OR_FULL(*all, longctx, q, f);
    if (!quick) {
      const gpu_axis fp16[] = {GPU_AXIS(dtype, PA_DTYPE_FLOAT16), GPU_AXIS(block_size, 16)};
      gpu_matrix_add(all, run(&longctx, fp16, NUM(fp16)));
    }
  }
  {
    /* pa_bench_prefill's "2k chunk over 30k cached", scaled down: a chunk of a few hundred tokens
     * over a long prefix (splits with many query rows) */
    static const int32_t past[1] = {5000}, past_quick[1] = {2000};
    static const int32_t chunk[1] = {150}, chunk_quick[1] = {70};
    gpu_case long_chunk = gpu_case_default("prefill_long_chunk");
    long_chunk.num_heads = 8;
    long_chunk.kv_num_heads = 2;
    long_chunk.dtype = PA_DTYPE_BFLOAT16;
    long_chunk.batch_size = 1;
    long_chunk.past_lens = quick ? past_quick : past;
    long_chunk.q_lens = quick ? chunk_quick : chunk;
    long_chunk.shuffled_blocks = 1;
    long_chunk.scale = 0.5f;
    const gpu_axis q[] = {GPU_AXIS(block_size, 16)};
    const gpu_axis f[] = {GPU_AXIS(block_size, 16, 128)};
    RUN_QUICK_OR_FULL(*all, long_chunk, q, f);
  }
  {
    /* one long sequence with a chunk among many short decode / verify sequences (pa_bench_prefill's
     * mixed step scaled down): the device schedule must balance a long split range with many
     * one-tile items. The harness gives every sequence as many table entries as the longest:
     * about 100 MB per cache (25 MB quick). */
    enum { kSkew = 32 };
    static int32_t past[kSkew], q_lens[kSkew];
    for (int b = 0; b < kSkew; b++) {
      past[b] = b == 0 ? 6000 : 200 + 7 * b;
      q_lens[b] = b == 0 ? 64 : 1 + b % 3;
    }
    static int32_t past_quick[kSkew / 2];
    for (int b = 0; b < kSkew / 2; b++) past_quick[b] = b == 0 ? 3000 : past[b];
    gpu_case skew = gpu_case_default("prefill_skewed");
    skew.num_heads = 8;
    skew.kv_num_heads = 2;
    skew.dtype = PA_DTYPE_BFLOAT16;
    skew.batch_size = quick ? kSkew / 2 : kSkew;
    skew.past_lens = quick ? past_quick : past;
    skew.q_lens = q_lens;
    skew.shuffled_blocks = 1;
    skew.scale = 0.5f;
    const gpu_axis q[] = {GPU_AXIS(metadata, GPU_METADATA_NONE)};
    const gpu_axis f[] = {GPU_AXIS(metadata, GPU_METADATA_NONE, GPU_METADATA_TIGHT),
                          GPU_AXIS(block_size, 16, 64)};
    RUN_QUICK_OR_FULL(*all, skew, q, f);
  }

  /* the prologue in front of PREFILL: staged Q (packed, RoPE plain / interleaved, QK-Norm) and
   * explicit slots, some invalid (nothing written there, the canaries stay) */
  gpu_case front = gpu_case_default("prefill_prologue_inputs");
  front.num_heads = 8;
  front.kv_num_heads = 2;
  front.batch_size = 3;
  front.max_q_len = 20;
  front.max_past_len = 100;
  {
    const gpu_axis q[] = {GPU_AXIS(packed, 1), GPU_AXIS(rotary, 1), GPU_AXIS(qk_norm, 1),
                          GPU_AXIS(slots, GPU_SLOTS_WITH_INVALID)};
    const gpu_axis f[] = {GPU_AXIS(packed, 0, 1), GPU_AXIS(rotary, 0, 1),
                          GPU_AXIS(rotary_interleaved, 0, 1), GPU_AXIS(qk_norm, 0, 1),
                          GPU_AXIS(slots, GPU_SLOTS_NONE, GPU_SLOTS_WITH_INVALID)};
    RUN_QUICK_OR_FULL(*all, front, q, f);
  }
  /* a step writes before it attends (doc/semantics.md): each sequence's first new token writing
   * key 0 of the next sequence, which that sequence reads in its first tile (GPU_SLOTS_INTO_PAST) */
  front.name = "prefill_written_past";
  front.slots = GPU_SLOTS_INTO_PAST;
  {
    const gpu_axis q[] = {GPU_AXIS(block_size, 16)};
    const gpu_axis f[] = {GPU_AXIS(block_size, 16, 64), GPU_AXIS(dtype, PA_DTYPE_FLOAT16,
                                                                 PA_DTYPE_BFLOAT16)};
    RUN_QUICK_OR_FULL(*all, front, q, f);
  }

  /* an output that starts 2 or 4 bytes into its allocation (a view of a larger buffer: doc/api.md
   * asks the output for its element's alignment only), at head sizes 64 (the mma.sync kernel on
   * Hopper) and 128 (the wgmma kernel's 16-byte row stores fall back): every row stored, nothing
   * past it (the harness compares the whole output) */
  gpu_case offset = gpu_case_default("prefill_output_offset");
  offset.num_heads = 8;
  offset.kv_num_heads = 2;
  offset.batch_size = 3;
  offset.max_q_len = 40;
  offset.max_past_len = 100;
  offset.extra_tokens = 3; /* rows of no sequence: zeroed by the schedule kernel */
  {
    const gpu_axis q[] = {GPU_AXIS(output_offset_bytes, 2, 4), GPU_AXIS(head_size, 64, 128)};
    const gpu_axis f[] = {GPU_AXIS(output_offset_bytes, 2, 4), GPU_AXIS(head_size, 64, 128, 256),
                          GPU_AXIS(dtype, PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16)};
    RUN_QUICK_OR_FULL(*all, offset, q, f);
  }

  /* shared prefix blocks: every sequence's leading table entries are sequence 0's (already
   * cached), the new chunks go to private blocks; eager and graph replay */
  gpu_case shared = gpu_case_default("prefill_shared_prefix");
  shared.num_heads = 8;
  shared.kv_num_heads = 2;
  shared.batch_size = 4;
  shared.max_q_len = 40;
  shared.max_past_len = quick ? 120 : 400;
  shared.shuffled_blocks = 1;
  {
    const gpu_axis q[] = {GPU_AXIS(shared_prefix_blocks, 5), GPU_AXIS(block_size, 16)};
    const gpu_axis f[] = {GPU_AXIS(shared_prefix_blocks, 1, 5),
                          GPU_AXIS(slots, GPU_SLOTS_NONE, GPU_SLOTS_DERIVED),
                          GPU_AXIS(block_size, 16, 64)};
    RUN_QUICK_OR_FULL(*all, shared, q, f);
    const gpu_axis graph_axes[] = {GPU_AXIS(shared_prefix_blocks, 2)};
    gpu_matrix_add(all, run_graph(&shared, graph_axes, NUM(graph_axes), quick ? 4 : 16));
  }

  /* out-of-range block ids (-1, large negatives, >= num_blocks, INT32_MAX) and slots (negative,
   * >= num_blocks * bs, INT32_MIN / INT32_MAX): masked and skipped, compared with the reference */
  gpu_case range = gpu_case_default("prefill_out_of_range");
  range.num_heads = 8;
  range.kv_num_heads = 2;
  range.batch_size = 5;
  range.max_q_len = 30;
  range.max_past_len = 300;
  range.unmapped_blocks = 1;
  range.slots = GPU_SLOTS_WITH_INVALID;
  {
    const gpu_axis axes[] = {GPU_AXIS(block_size, 16, 128), GPU_AXIS(window, 0, 50)};
    gpu_matrix_add(all, run(&range, axes, NUM(axes)));
  }

  /* a batch whose sequences all have zero new tokens, plus tokens of no sequence */
  {
    static const int32_t zero_lens[4] = {0, 0, 0, 0};
    gpu_case empty = gpu_case_default("prefill_all_sequences_empty");
    empty.batch_size = 4;
    empty.q_lens = zero_lens;
    empty.extra_tokens = 3;
    const gpu_axis axes[] = {GPU_AXIS(block_size, 16)};
    gpu_matrix_add(all, run(&empty, axes, NUM(axes)));
  }
}

/* ---- CUDA graphs, ring buffers, bounds ------------------------------------------------------- */

static void replay_and_bounds(gpu_matrix_result *all, int quick) {
  /* CUDA graph: captured once, replayed while the KV lengths grow (each sequence by its own
   * q_len per step): a prefill-shaped mixed step (decode tokens, chunks, a zero-token sequence) */
  {
    static const int32_t q_lens[5] = {1, 7, 3, 0, 12};
    gpu_case graph = gpu_case_default("prefill_graph");
    graph.num_heads = 16;
    graph.kv_num_heads = 2;
    graph.batch_size = 5;
    graph.q_lens = q_lens;
    graph.max_past_len = 90;
    graph.extra_tokens = 1;
    const gpu_axis q[] = {GPU_AXIS(metadata, GPU_METADATA_NONE),
                          GPU_AXIS(cache_dtype, 0, PA_DTYPE_INT8), GPU_AXIS(window, 0, 40)};
    const gpu_axis f[] = {GPU_AXIS(metadata, GPU_METADATA_NONE, GPU_METADATA_LOOSE),
                          GPU_AXIS(cache_dtype, 0, PA_DTYPE_INT8), GPU_AXIS(window, 0, 40)};
    if (quick)
      gpu_matrix_add(all, run_graph(&graph, q, NUM(q), 16));
    else
      gpu_matrix_add(all, run_graph(&graph, f, NUM(f), 64));
  }
  {
    /* speculative verify replayed: 2-4 tokens per sequence over a growing past */
    static const int32_t q_lens[8] = {4, 2, 3, 4, 2, 3, 4, 3};
    gpu_case verify = gpu_case_default("prefill_graph_spec_verify");
    verify.num_heads = 16;
    verify.kv_num_heads = 4;
    verify.dtype = PA_DTYPE_BFLOAT16;
    verify.batch_size = 8;
    verify.q_lens = q_lens;
    verify.max_past_len = 300;
    verify.shuffled_blocks = 1;
    const gpu_axis axes[] = {GPU_AXIS(cache_dtype, 0, PA_DTYPE_FLOAT8_E4M3FN)};
    gpu_matrix_add(all, run_graph(&verify, axes, NUM(axes), quick ? 8 : 64));
  }
  if (!quick) {
    /* replayed with the mask features: query_positions, sinks, softcap */
    static const int32_t q_lens[4] = {5, 1, 9, 2};
    gpu_case features = gpu_case_default("prefill_graph_features");
    features.num_heads = 8;
    features.kv_num_heads = 2;
    features.batch_size = 4;
    features.q_lens = q_lens;
    features.max_past_len = 60;
    features.softcap = 2.5f;
    features.scale = 0.5f;
    const gpu_axis axes[] = {GPU_AXIS(query_positions, 0, 1), GPU_AXIS(head_sink, 0, 1)};
    gpu_matrix_add(all, run_graph(&features, axes, NUM(axes), 16));
  }

  /* ring-buffer sliding window (design 9.3.2) with chunks of new tokens: ceil((W + q_len - 1) / bs)
   * + 1 recycled blocks per sequence == the full cache, bitwise, at every step; eager and graph
   * replay with the table and slots updated on the device between replays */
  gpu_case ring = gpu_case_default("prefill_ring");
  ring.num_heads = 16;
  ring.kv_num_heads = 2;
  ring.batch_size = 4;
  ring.max_q_len = 8;
  ring.max_past_len = 150;
  ring.zero_q_lens = 1;
  ring.extra_tokens = 2;
  ring.shuffled_blocks = 1;
  if (quick) {
    const gpu_axis axes[] = {GPU_AXIS(window, 1, 40), GPU_AXIS(cache_dtype, 0, PA_DTYPE_INT8)};
    gpu_matrix_add(all, run_mode(&ring, axes, NUM(axes), GPU_MODE_RING, 6));
    gpu_matrix_add(all, run_mode(&ring, axes, NUM(axes), GPU_MODE_RING_GRAPH, 6));
  } else {
    const gpu_axis axes[] = {GPU_AXIS(window, 1, 16, 64, 100), GPU_AXIS(block_size, 16, 64),
                             GPU_AXIS(cache_dtype, 0, PA_DTYPE_INT8), GPU_AXIS(head_sink, 0, 1)};
    gpu_matrix_add(all, run_mode(&ring, axes, NUM(axes), GPU_MODE_RING, 20));
    gpu_matrix_add(all, run_mode(&ring, axes, NUM(axes), GPU_MODE_RING_GRAPH, 20));
    gpu_case ring_qp = ring; /* positions given explicitly (reversed within each chunk) */
    ring_qp.name = "prefill_ring_query_positions";
    ring_qp.max_q_len = 20;
    const gpu_axis qp_axes[] = {GPU_AXIS(window, 7, 64), GPU_AXIS(query_positions, 1)};
    gpu_matrix_add(all, run_mode(&ring_qp, qp_axes, NUM(qp_axes), GPU_MODE_RING, 10));
  }

  /* metadata absent == tight == loose, bitwise: ragged prefill steps, windows, an 8-bit cache */
  gpu_case bitwise = gpu_case_default("prefill_metadata_bitwise");
  bitwise.num_heads = 8;
  bitwise.kv_num_heads = 2;
  bitwise.batch_size = 5;
  bitwise.max_past_len = quick ? 600 : 2000;
  bitwise.zero_q_lens = 1;
  bitwise.extra_tokens = 1;
  {
    const gpu_axis q[] = {GPU_AXIS(max_q_len, 7, 100), GPU_AXIS(window, 0, 100)};
    const gpu_axis f[] = {GPU_AXIS(max_q_len, 7, 100), GPU_AXIS(window, 0, 100),
                          GPU_AXIS(cache_dtype, 0, PA_DTYPE_FLOAT8_E4M3FN)};
    if (quick)
      gpu_matrix_add(all, run_mode(&bitwise, q, NUM(q), GPU_MODE_METADATA, 0));
    else
      gpu_matrix_add(all, run_mode(&bitwise, f, NUM(f), GPU_MODE_METADATA, 0));
  }
  {
    /* many splits (a long sequence with few tokens, beside short ones) and a mixed step: the split
     * partition must not depend on the bound */
    static const int32_t past[4] = {0, 37, 1000, 6000};
    static const int32_t q_lens[4] = {3, 1, 40, 3};
    gpu_case splits = gpu_case_default("prefill_metadata_bitwise_splits");
    splits.num_heads = 16;
    splits.kv_num_heads = 2;
    splits.dtype = PA_DTYPE_BFLOAT16;
    splits.batch_size = 4;
    splits.past_lens = past;
    splits.q_lens = q_lens;
    splits.blocks_per_seq = 400; /* beyond the longest sequence: the bound is what changes */
    const gpu_axis axes[] = {GPU_AXIS(block_size, 16)};
    gpu_matrix_add(all, run_mode(&splits, axes, NUM(axes), GPU_MODE_METADATA, 0));
  }

  /* under-sized bounds (a contract violation): unspecified results, nothing compared; pa_execute
   * must succeed and the run stay clean (run under compute-sanitizer by tools/gpu-check.sh) */
  gpu_case undersized = gpu_case_default("prefill_undersized_bounds");
  undersized.num_heads = 8;
  undersized.kv_num_heads = 2;
  undersized.batch_size = 4;
  undersized.max_past_len = quick ? 800 : 3000;
  undersized.metadata = GPU_METADATA_UNDERSIZED;
  {
    const gpu_axis axes[] = {GPU_AXIS(max_q_len, 6, 64), GPU_AXIS(window, 0, 64),
                             GPU_AXIS(unmapped_blocks, 0, 1)};
    gpu_matrix_add(all, run(&undersized, axes, NUM(axes)));
    const gpu_axis graph_axes[] = {GPU_AXIS(max_q_len, 16)};
    gpu_matrix_add(all, run_graph(&undersized, graph_axes, NUM(graph_axes), 3));
  }

  /* a decreasing cumulative_sequence_length (a contract violation): unspecified results, nothing
   * compared; pa_execute must succeed and the run stay clean */
  gpu_case decreasing = undersized;
  decreasing.name = "prefill_decreasing_cu";
  decreasing.metadata = GPU_METADATA_NONE;
  decreasing.decreasing_cu = 1;
  decreasing.batch_size = 5;
  {
    const gpu_axis axes[] = {GPU_AXIS(max_q_len, 6, 200), GPU_AXIS(window, 0, 64),
                             GPU_AXIS(metadata, GPU_METADATA_NONE, GPU_METADATA_TIGHT),
                             GPU_AXIS(head_size, 64, 128)};
    gpu_matrix_add(all, run(&decreasing, axes, NUM(axes)));
    const gpu_axis graph_axes[] = {GPU_AXIS(max_q_len, 16)};
    gpu_matrix_add(all, run_graph(&decreasing, graph_axes, NUM(graph_axes), 3));
  }
}

/* ---- plan-level checks on the real device ---------------------------------------------------- */

static pa_tensor_desc tensor_desc(pa_dtype t, int rank, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  pa_tensor_desc d = {t, rank, {d0, d1, d2, d3}};
  return d;
}

/* A request of B sequences and N tokens, blocks_per_seq table entries each; SEPARATE unless latent
 * (then H heads over one latent row of 576 channels, V the first 512). */
typedef struct request {
  pa_attributes attrs;
  pa_tensor_desc in[PA_NUM_INPUTS], out[PA_NUM_OUTPUTS];
} request;

static request make_request(int32_t H, int32_t Hk, int32_t D, pa_dtype T, int32_t B, int64_t N,
                            int32_t block_size, int32_t blocks_per_seq) {
  request r;
  memset(&r, 0, sizeof r);
  pa_attributes_init(&r.attrs);
  r.attrs.num_heads = H;
  r.attrs.kv_num_heads = Hk;
  r.in[PA_IN_QUERY] = tensor_desc(T, 2, N, (int64_t)H * D, 0, 0);
  r.in[PA_IN_KEY] = r.in[PA_IN_VALUE] = tensor_desc(T, 2, N, (int64_t)Hk * D, 0, 0);
  r.in[PA_IN_KEY_CACHE] = r.in[PA_IN_VALUE_CACHE] =
      tensor_desc(T, 4, (int64_t)B * blocks_per_seq, block_size, Hk, D);
  r.in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH] = tensor_desc(PA_DTYPE_INT32, 1, B + 1, 0, 0, 0);
  r.in[PA_IN_PAST_SEQLENS] = tensor_desc(PA_DTYPE_INT32, 1, B, 0, 0, 0);
  r.in[PA_IN_BLOCK_TABLE] = tensor_desc(PA_DTYPE_INT32, 2, B, blocks_per_seq, 0, 0);
  r.out[PA_OUT_OUTPUT] = tensor_desc(T, 2, N, (int64_t)H * D, 0, 0);
  return r;
}

/* The prefill-shaped request of the checks: 3 sequences, 40 tokens, 32/8 heads, bf16, block 16. */
static request prefill_shaped(int32_t D) {
  return make_request(32, 8, D, PA_DTYPE_BFLOAT16, 3, 40, 16, 8);
}

static void make_latent(request *r) {
  const int64_t N = r->in[PA_IN_QUERY].dims[0], H = r->attrs.num_heads;
  const int64_t blocks = r->in[PA_IN_KEY_CACHE].dims[0], bs = r->in[PA_IN_KEY_CACHE].dims[1];
  const pa_dtype T = r->in[PA_IN_QUERY].dtype;
  r->attrs.kv_num_heads = 1;
  r->attrs.kv_cache_layout = PA_KV_CACHE_LAYOUT_LATENT;
  r->attrs.v_head_size = 512;
  r->attrs.scale = 0.1147f;
  r->in[PA_IN_QUERY] = tensor_desc(T, 2, N, H * 576, 0, 0);
  r->in[PA_IN_KEY] = tensor_desc(T, 2, N, 576, 0, 0);
  r->in[PA_IN_VALUE] = tensor_desc(PA_DTYPE_UNDEFINED, 0, 0, 0, 0, 0);
  r->in[PA_IN_KEY_CACHE] = tensor_desc(T, 4, blocks, bs, 1, 576);
  r->in[PA_IN_VALUE_CACHE] = tensor_desc(PA_DTYPE_UNDEFINED, 0, 0, 0, 0, 0);
  r->out[PA_OUT_OUTPUT] = tensor_desc(T, 2, N, H * 512, 0, 0);
}

/* NULL: plan for the current device (the checks below). A described device instead lets a
 * development machine try the descriptors. */
static const pa_device_caps *described_device = NULL;

static pa_status plan_request(const request *r, pa_backend b, const int32_t *metadata,
                              pa_plan **plan) {
  pa_plan_options o;
  pa_plan_options_init(&o);
  o.backend = b;
  o.attention_metadata = metadata;
  if (described_device) {
    o.device = 0;
    o.device_caps = described_device;
  }
  *plan = NULL;
  return pa_plan_create(plan, &r->attrs, r->in, r->out, &o);
}

static int expect(int ok, const char *what) {
  if (!ok) {
    char msg[512];
    pa_last_error_message(msg, sizeof msg);
    fprintf(stderr, "FAIL %s (last error: %s)\n", what, msg);
  }
  return ok;
}

static int message_names(const char *needle) {
  char msg[512];
  pa_last_error_message(msg, sizeof msg);
  return strstr(msg, needle) != NULL;
}

/* Plans r with backend b and requires the plan to run on want. */
static int expect_backend(const request *r, pa_backend b, pa_backend want, const char *what) {
  pa_plan *plan = NULL;
  pa_status st = plan_request(r, b, NULL, &plan);
  int ok = st == PA_SUCCESS && pa_plan_backend(plan) == want;
  if (!ok) {
    char msg[512];
    pa_last_error_message(msg, sizeof msg);
    fprintf(stderr, "FAIL %s: expected %s, got %s (%s%s%s)\n", what, pa_backend_name(want),
            st == PA_SUCCESS ? pa_backend_name(pa_plan_backend(plan)) : "no plan",
            pa_status_string(st), *msg ? ": " : "", msg);
  }
  pa_plan_destroy(plan);
  return ok;
}

/* AUTO picks PREFILL for every prefill-shaped step (token_count > batch_size) PREFILL serves: head
 * sizes, types, 8-bit caches, a mixed step with a zero-token sequence's worth of tokens; DECODE for
 * a decode-shaped one; UNFUSED for head_size 72 (not a multiple of 16). */
static int auto_choice(void) {
  int ok = 1;
  const int32_t heads[] = {48, 64, 96, 112, 128, 256};
  for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) {
    request r = prefill_shaped(heads[i]);
    char what[128];
    snprintf(what, sizeof what, "auto_choice: prefill-shaped step, head_size %d", heads[i]);
    ok &= expect_backend(&r, PA_BACKEND_AUTO, PA_BACKEND_PREFILL, what);
  }
  {
    request r = make_request(32, 8, 128, PA_DTYPE_FLOAT16, 64, 65, 16, 256);
    ok &= expect_backend(&r, PA_BACKEND_AUTO, PA_BACKEND_PREFILL,
                         "auto_choice: 64 sequences, 65 tokens (one sequence of 2), fp16");
    r = make_request(32, 8, 128, PA_DTYPE_BFLOAT16, 256, 1024, 16, 257);
    ok &= expect_backend(&r, PA_BACKEND_AUTO, PA_BACKEND_PREFILL,
                         "auto_choice: 256 x 4-token verify step");
  }
  {
    const pa_dtype caches[] = {PA_DTYPE_INT8, PA_DTYPE_FLOAT8_E4M3FN};
    for (int k = 0; k < 2; k++) {
      request r = prefill_shaped(128);
      r.in[PA_IN_KEY_CACHE].dtype = r.in[PA_IN_VALUE_CACHE].dtype = caches[k];
      r.attrs.k_quant_type = PA_QUANT_PER_CHANNEL;
      r.attrs.v_quant_type = PA_QUANT_PER_TENSOR;
      r.in[PA_IN_K_SCALE] = tensor_desc(PA_DTYPE_FLOAT32, 3, 8, 1, 128, 0);
      r.in[PA_IN_V_SCALE] = tensor_desc(PA_DTYPE_FLOAT32, 1, 1, 0, 0, 0);
      ok &= expect_backend(&r, PA_BACKEND_AUTO, PA_BACKEND_PREFILL,
                           k ? "auto_choice: prefill-shaped, fp8 cache"
                             : "auto_choice: prefill-shaped, int8 cache");
    }
  }
  {
    request r = make_request(32, 8, 128, PA_DTYPE_BFLOAT16, 64, 64, 16, 256);
    ok &= expect_backend(&r, PA_BACKEND_AUTO, PA_BACKEND_DECODE,
                         "auto_choice: decode-shaped step (64 sequences, 64 tokens)");
    r = prefill_shaped(72);
    ok &= expect_backend(&r, PA_BACKEND_AUTO, PA_BACKEND_UNFUSED,
                         "auto_choice: prefill-shaped, head_size 72 (PREFILL serves multiples "
                         "of 16)");
  }
  return ok;
}

/* The kernel family PREFILL plans pick (pa__prefill_kernel_family): on compute capability 9.0, the
 * sm_90a wgmma kernels for every head size with fp16 / bf16 caches and from 64 with int8 / fp8
 * caches (converted by the producer), forced and through AUTO, and mma.sync below those; mma.sync
 * elsewhere, or everywhere with PA_PREFILL_KERNEL=mma.sync. So a run of the matrices on an H200
 * proves which kernels it tested. */
static int expect_family(const request *r, pa_backend b, const char *want, const char *what) {
  pa_plan *plan = NULL;
  pa_status st = plan_request(r, b, NULL, &plan);
  const char *got = st == PA_SUCCESS ? pa__prefill_kernel_family(plan) : NULL;
  int ok = got && strcmp(got, want) == 0;
  if (!ok)
    fprintf(stderr, "FAIL kernel_family %s: expected %s, got %s (%s)\n", what, want,
            got ? got : "no PREFILL plan", pa_status_string(st));
  pa_plan_destroy(plan);
  return ok;
}

static const char *wide_head_family(void) {
  int device = 0;
  struct cudaDeviceProp prop;
  const char *env = getenv("PA_PREFILL_KERNEL");
  if (env && strcmp(env, "mma.sync") == 0) return "mma.sync";
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess)
    return "mma.sync";
  return prop.major == 9 && prop.minor == 0 ? "wgmma" : "mma.sync";
}

static int kernel_family(void) {
  const char *want = wide_head_family();
  int ok = 1;
  const int32_t heads[] = {48, 64, 80, 128, 256};
  for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) {
    request r = prefill_shaped(heads[i]);
    char what[96];
    snprintf(what, sizeof what, "bf16, head_size %d, forced PREFILL", heads[i]);
    ok &= expect_family(&r, PA_BACKEND_PREFILL, want, what);
    snprintf(what, sizeof what, "bf16, head_size %d, AUTO", heads[i]);
    ok &= expect_family(&r, PA_BACKEND_AUTO, want, what);
  }
  request r = make_request(32, 8, 128, PA_DTYPE_FLOAT16, 3, 40, 64, 8);
  ok &= expect_family(&r, PA_BACKEND_PREFILL, want, "fp16, head_size 128, block 64");
  /* 8-bit caches: the same families from 64 channels, mma.sync below (per-tensor int8,
   * per-channel fp8) */
  const int32_t quantized_heads[] = {48, 64, 128, 256};
  for (size_t i = 0; i < sizeof quantized_heads / sizeof quantized_heads[0]; i++) {
    const int32_t head_size = quantized_heads[i];
    const char *want_here = head_size < 64 ? "mma.sync" : want;
    char what[96];
    r = prefill_shaped(head_size);
    r.in[PA_IN_KEY_CACHE].dtype = r.in[PA_IN_VALUE_CACHE].dtype = PA_DTYPE_INT8;
    r.attrs.k_quant_type = r.attrs.v_quant_type = PA_QUANT_PER_TENSOR;
    r.in[PA_IN_K_SCALE] = r.in[PA_IN_V_SCALE] = tensor_desc(PA_DTYPE_FLOAT32, 1, 1, 0, 0, 0);
    snprintf(what, sizeof what, "int8 cache per tensor, head_size %d", head_size);
    ok &= expect_family(&r, PA_BACKEND_PREFILL, want_here, what);
    r = prefill_shaped(head_size);
    r.in[PA_IN_KEY_CACHE].dtype = r.in[PA_IN_VALUE_CACHE].dtype = PA_DTYPE_FLOAT8_E4M3FN;
    r.attrs.k_quant_type = r.attrs.v_quant_type = PA_QUANT_PER_CHANNEL;
    r.in[PA_IN_K_SCALE] = r.in[PA_IN_V_SCALE] =
        tensor_desc(PA_DTYPE_FLOAT32, 3, r.attrs.kv_num_heads, 1, head_size, 0);
    snprintf(what, sizeof what, "fp8 cache per channel, head_size %d", head_size);
    ok &= expect_family(&r, PA_BACKEND_PREFILL, want_here, what);
  }
  fprintf(stderr, "prefill: 16-bit caches, and 8-bit ones from 64 channels, run on the %s kernels\n",
          want);
  return ok;
}

/* Forced PREFILL refuses what it does not serve with NOT_SUPPORTED naming the feature. */
static int expect_refusal(const request *r, const char *feature) {
  pa_plan *plan = NULL;
  pa_status st = plan_request(r, PA_BACKEND_PREFILL, NULL, &plan);
  char what[160];
  snprintf(what, sizeof what, "forced PREFILL with %s: NOT_SUPPORTED naming \"%s\" and PREFILL",
           feature, feature);
  int ok = expect(st == PA_ERROR_NOT_SUPPORTED && plan == NULL && message_names(feature) &&
                      message_names("PREFILL"),
                  what);
  if (!ok && st != PA_ERROR_NOT_SUPPORTED)
    fprintf(stderr, "  (pa_plan_create returned %s)\n", pa_status_string(st));
  pa_plan_destroy(plan);
  return ok;
}

static int refusals(void) {
  int ok = 1;
  request r = prefill_shaped(128);
  r.in[PA_IN_ATTENTION_BIAS] = tensor_desc(PA_DTYPE_BFLOAT16, 4, 3, 32, 40, 8 * 16);
  ok &= expect_refusal(&r, "attention_bias");
  ok &= expect_backend(&r, PA_BACKEND_AUTO, PA_BACKEND_UNFUSED, "AUTO with attention_bias");

  r = prefill_shaped(128);
  r.attrs.qk_output = 1;
  r.out[PA_OUT_QK] = tensor_desc(PA_DTYPE_FLOAT32, 3, 32, 40, 8 * 16, 0);
  ok &= expect_refusal(&r, "output_qk");
  ok &= expect_backend(&r, PA_BACKEND_AUTO, PA_BACKEND_UNFUSED, "AUTO with output_qk");

  r = make_request(16, 1, 576, PA_DTYPE_BFLOAT16, 3, 40, 16, 8);
  make_latent(&r);
  ok &= expect_refusal(&r, "LATENT");

  r = prefill_shaped(72);
  ok &= expect_refusal(&r, "head_size");
  return ok;
}

/* Without attention_metadata, a 256 x 4-token verify step over 4k (32/8 heads, d128, bf16, block
 * 16) must fit in a small workspace: UNFUSED asked for 144 GiB (issue 16). */
static int workspace_bounded(void) {
  request r = make_request(32, 8, 128, PA_DTYPE_BFLOAT16, 256, 1024, 16, 257);
  pa_plan *plan = NULL;
  if (!expect(plan_request(&r, PA_BACKEND_PREFILL, NULL, &plan) == PA_SUCCESS,
              "workspace_bounded: forced PREFILL plans the 256 x 4 verify step"))
    return 0;
  const size_t bytes = pa_plan_workspace_size(plan);
  int ok = bytes < ((size_t)1 << 30);
  if (!ok)
    fprintf(stderr, "FAIL workspace_bounded: 256 x 4 over 4k without metadata asks for %zu bytes "
                    "(>= 1 GiB)\n", bytes);
  pa_plan_destroy(plan);
  return ok;
}

/* Workspace too small, NULL or misaligned: pa_execute fails before any launch, which a stream
 * capture shows as an empty graph. The same capture with the right workspace records launches, so
 * the check can fail. The step is one that PREFILL splits (3 tokens over 20000 keys on 8 KV heads
 * cannot fill the GPU), so its partial results need workspace. */
static int workspace_checked_before_launch(void) {
  request r = make_request(32, 8, 128, PA_DTYPE_BFLOAT16, 1, 3, 16, 20003 / 16 + 1);
  pa_plan *plan = NULL;
  if (!expect(plan_request(&r, PA_BACKEND_PREFILL, NULL, &plan) == PA_SUCCESS,
              "workspace_checked_before_launch: plan"))
    return 0;
  const size_t bytes = pa_plan_workspace_size(plan);
  /* one zeroed buffer stands behind every pointer: nothing captured is ever run */
  const size_t arena_bytes = (size_t)1 << 20;
  void *arena = NULL, *workspace = NULL;
  cudaStream_t stream = NULL;
  int ok = expect(bytes > 0, "workspace_checked_before_launch: PREFILL needs workspace for the "
                             "partial results of a split step") &&
           expect(cudaMalloc(&arena, arena_bytes) == cudaSuccess &&
                      cudaMemset(arena, 0, arena_bytes) == cudaSuccess &&
                      cudaMalloc(&workspace, bytes + PA_WORKSPACE_ALIGNMENT) == cudaSuccess &&
                      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess &&
                      cudaDeviceSynchronize() == cudaSuccess,
                  "workspace_checked_before_launch: device allocations");
  if (ok) {
    const void *inputs[PA_NUM_INPUTS] = {0};
    for (int i = 0; i < PA_NUM_INPUTS; i++)
      if (r.in[i].dtype != PA_DTYPE_UNDEFINED) inputs[i] = arena;
    void *outputs[PA_NUM_OUTPUTS] = {arena, NULL, NULL, NULL};
    pa_status st = PA_SUCCESS;
    size_t nodes = gpu_captured_nodes(plan, inputs, outputs, workspace, bytes - 1, stream, &st);
    ok &= expect(st == PA_ERROR_WORKSPACE_TOO_SMALL && message_names("workspace") && nodes == 0,
                 "workspace one byte short: WORKSPACE_TOO_SMALL and nothing launched");
    nodes = gpu_captured_nodes(plan, inputs, outputs, NULL, bytes, stream, &st);
    ok &= expect(st == PA_ERROR_WORKSPACE_TOO_SMALL && nodes == 0,
                 "workspace NULL: WORKSPACE_TOO_SMALL and nothing launched");
    nodes = gpu_captured_nodes(plan, inputs, outputs, (char *)workspace + 16, bytes, stream, &st);
    ok &= expect(st == PA_ERROR_MISALIGNED && message_names("workspace") && nodes == 0,
                 "workspace misaligned: MISALIGNED and nothing launched");
    nodes = gpu_captured_nodes(plan, inputs, outputs, workspace, bytes, stream, &st);
    ok &= expect(st == PA_SUCCESS && nodes > 0 && nodes != (size_t)-1,
                 "workspace exact: the same capture records the launches");
  }
  if (stream) cudaStreamDestroy(stream);
  cudaFree(workspace);
  cudaFree(arena);
  pa_plan_destroy(plan);
  return ok;
}

static pa_backend matrix_backend(void) {
  const char *env = getenv("PA_PREFILL_TEST_BACKEND");
  if (!env || !*env) return PA_BACKEND_PREFILL;
  const pa_backend choices[] = {PA_BACKEND_AUTO, PA_BACKEND_DECODE, PA_BACKEND_PREFILL,
                                PA_BACKEND_UNFUSED};
  for (size_t i = 0; i < sizeof choices / sizeof choices[0]; i++)
    if (strcmp(env, pa_backend_name(choices[i])) == 0) {
      fprintf(stderr, "prefill: the matrices run on %s (PA_PREFILL_TEST_BACKEND)\n", env);
      return choices[i];
    }
  fprintf(stderr, "prefill: PA_PREFILL_TEST_BACKEND=%s is not AUTO, DECODE, PREFILL or UNFUSED: "
                  "running PREFILL\n", env);
  return PA_BACKEND_PREFILL;
}

int main(void) {
  if (!gpu_available()) {
    fprintf(stderr, "no CUDA device: skipped\n");
    return GPU_SKIP;
  }
  seed = gpu_test_seed();
  backend = matrix_backend();
  const int quick = gpu_test_quick();
  gpu_matrix_result all = {0, 0, 0, 0};
  matrix(&all, quick);
  replay_and_bounds(&all, quick);
  {
    /* two prefill-shaped cases through AUTO, end to end */
    static const int32_t q_lens[3] = {1, 30, 9};
    gpu_case through_auto = gpu_case_default("prefill_through_auto");
    through_auto.batch_size = 3;
    through_auto.q_lens = q_lens;
    through_auto.max_past_len = 200;
    const gpu_axis axes[] = {GPU_AXIS(dtype, PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16)};
    gpu_matrix_add(&all, gpu_run_matrix(&through_auto, axes, NUM(axes), valid_combination,
                                        PA_BACKEND_AUTO, seed++));
  }
  const int checks_ok[5] = {auto_choice(), kernel_family(), refusals(), workspace_bounded(),
                            workspace_checked_before_launch()};
  const char *const check_names[5] = {"auto_choice", "kernel_family", "refusals",
                                      "workspace_bounded", "workspace_checked_before_launch"};
  for (int i = 0; i < 5; i++) {
    gpu_matrix_count(&all, checks_ok[i] ? GPU_PASS : GPU_FAIL);
    fprintf(stderr, "%s %s\n", checks_ok[i] ? "ok  " : "FAIL", check_names[i]);
  }

  fprintf(stderr, "prefill: %d passed, %d failed, %d unsupported, %d skipped\n", all.passed,
          all.failed, all.unsupported, all.skipped);
  if (all.unsupported) {
    fprintf(stderr, "FAIL: %s must serve every case of this matrix (PA_TEST_VERBOSE=1 prints the "
                    "reasons)\n", pa_backend_name(backend));
    return 1;
  }
  return gpu_matrix_exit_code(&all);
}
