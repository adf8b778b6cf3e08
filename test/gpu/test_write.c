/* The write path alone: pa__write_run against pa_execute_reference's caches (every byte: written
 * slots within one step, the rest unchanged) and the staged Q against the harness's host
 * computation of it.
 * PA_GPU_TEST_QUICK=1 runs a reduced matrix (for compute-sanitizer). */
#include <stdio.h>

#include "harness.h"

/* Quantization modes only with a quantized cache (where NONE means PER_TENSOR); PACKED and QK-Norm
 * only in SEPARATE. */
static int valid_combination(const gpu_case *c) {
  int latent = c->layout == PA_KV_CACHE_LAYOUT_LATENT;
  int quantized = c->cache_dtype == PA_DTYPE_INT8 || c->cache_dtype == PA_DTYPE_FLOAT8_E4M3FN;
  if (!quantized && (c->k_quant != PA_QUANT_NONE || c->v_quant != PA_QUANT_NONE)) return 0;
  if (latent && (c->packed || c->qk_norm || c->head_sink)) return 0;
  return 1;
}

#define RUN(result, base, axes_array)                                                            \
  gpu_matrix_add(&(result),                                                                      \
                 gpu_run_matrix_mode(                                                            \
                     &(base), (axes_array), (int)(sizeof(axes_array) / sizeof((axes_array)[0])), \
                     valid_combination, PA_BACKEND_REFERENCE, seed++, GPU_MODE_WRITE, 0))

int main(void) {
  if (!gpu_available()) {
    fprintf(stderr, "no CUDA device: skipped\n");
    return GPU_SKIP;
  }
  unsigned seed = gpu_test_seed();
  const int quick = gpu_test_quick();
  gpu_matrix_result all = {0, 0, 0, 0};

  /* every head size, input mode and type, with and without the transforms; ragged, zero-token
   * sequences */
  gpu_case heads = gpu_case_default("write_heads");
  heads.num_heads = 8;
  heads.kv_num_heads = 2;
  heads.batch_size = 5;
  heads.max_q_len = 6;
  heads.zero_q_lens = 1;
  if (quick) {
    const gpu_axis axes[] = {GPU_AXIS(head_size, 64, 80, 256), GPU_AXIS(packed, 0, 1),
                             GPU_AXIS(dtype, PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16),
                             GPU_AXIS(rotary, 0, 1), GPU_AXIS(qk_norm, 0, 1)};
    RUN(all, heads, axes);
  } else {
    const gpu_axis axes[] = {GPU_AXIS(head_size, 64, 80, 96, 128, 256), GPU_AXIS(packed, 0, 1),
                             GPU_AXIS(dtype, PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16),
                             GPU_AXIS(rotary, 0, 1), GPU_AXIS(qk_norm, 0, 1)};
    RUN(all, heads, axes);
  }

  /* RoPE variants: half-split / interleaved, offset, partial rotary_dim (one whose half is not a
   * multiple of 8), positions beyond the table (pass through), query_positions */
  gpu_case rope = gpu_case_default("write_rope");
  rope.num_heads = 4;
  rope.kv_num_heads = 2;
  rope.batch_size = 4;
  rope.max_q_len = 8;
  rope.max_past_len = 60;
  rope.rotary = 1;
  rope.rotary_dim = 64;
  {
    const gpu_axis axes[] = {GPU_AXIS(rotary_interleaved, 0, 1),
                             GPU_AXIS(rotary_offset, 0, 64),
                             GPU_AXIS(rotary_dim, 64, 36), /* 36: pairs straddle 8-channel chunks */
                             GPU_AXIS(rotary_positions, 0, 30),
                             GPU_AXIS(query_positions, 0, 1),
                             GPU_AXIS(qk_norm, 0, 1)};
    RUN(all, rope, axes);
  }

  /* block sizes and batch sizes; shuffled and partly unmapped block tables; with RoPE (the
   * register kernel) and without (on sm_90, the bulk-copy kernel) */
  gpu_case blocks = gpu_case_default("write_blocks");
  blocks.num_heads = 4;
  blocks.kv_num_heads = 1;
  blocks.head_size = 64;
  blocks.max_q_len = 4;
  blocks.max_past_len = 40;
  blocks.zero_q_lens = 1;
  blocks.rotary = 1;
  if (quick) {
    const gpu_axis axes[] = {GPU_AXIS(block_size, 16, 512), GPU_AXIS(batch_size, 1, 300),
                             GPU_AXIS(shuffled_blocks, 1), GPU_AXIS(unmapped_blocks, 0, 1),
                             GPU_AXIS(rotary, 1, 0)};
    RUN(all, blocks, axes);
  } else {
    const gpu_axis axes[] = {GPU_AXIS(block_size, 16, 32, 64, 128, 256, 512),
                             GPU_AXIS(batch_size, 1, 257, 300), GPU_AXIS(shuffled_blocks, 0, 1),
                             GPU_AXIS(unmapped_blocks, 0, 1), GPU_AXIS(rotary, 1, 0)};
    RUN(all, blocks, axes);
  }

  /* every quantized cache type and quantization mode, K and V independent (T caches: above) */
  gpu_case quant = gpu_case_default("write_quant");
  quant.num_heads = 8;
  quant.kv_num_heads = 4;
  quant.batch_size = 6;
  quant.max_q_len = 5;
  quant.zero_q_lens = 1;
  quant.rotary = 1;
  quant.qk_norm = 1;
  {
    const gpu_axis axes[] = {GPU_AXIS(cache_dtype, PA_DTYPE_INT8, PA_DTYPE_FLOAT8_E4M3FN),
                             GPU_AXIS(k_quant, PA_QUANT_PER_TENSOR, PA_QUANT_PER_CHANNEL),
                             GPU_AXIS(v_quant, PA_QUANT_PER_TENSOR, PA_QUANT_PER_CHANNEL),
                             GPU_AXIS(dtype, PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16),
                             GPU_AXIS(packed, 0, 1)};
    RUN(all, quant, axes);
  }

  /* the same without QK-Norm and RoPE: on sm_90 unpacked inputs take the bulk-copy kernel, which
   * quantizes in shared memory, where a run's codes are a multiple of 16 bytes (one KV head: 128
   * channels are, 80 are not and take the register kernel) */
  gpu_case quant_copy = quant;
  quant_copy.name = "write_quant_copy";
  quant_copy.kv_num_heads = 1;
  quant_copy.rotary = 0;
  quant_copy.qk_norm = 0;
  {
    const gpu_axis axes[] = {GPU_AXIS(head_size, 128, 80),
                             GPU_AXIS(cache_dtype, PA_DTYPE_INT8, PA_DTYPE_FLOAT8_E4M3FN),
                             GPU_AXIS(k_quant, PA_QUANT_PER_TENSOR, PA_QUANT_PER_CHANNEL),
                             GPU_AXIS(v_quant, PA_QUANT_PER_TENSOR, PA_QUANT_PER_CHANNEL),
                             GPU_AXIS(dtype, PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16),
                             GPU_AXIS(packed, 0, 1)};
    RUN(all, quant_copy, axes);
  }

  /* explicit slot_mapping, with -1, out-of-range and negative slots, and tokens of no sequence
   * (t >= cu[B]) whose valid-looking slots must stay unwritten */
  gpu_case slots = gpu_case_default("write_slots");
  slots.num_heads = 4;
  slots.kv_num_heads = 2;
  slots.max_q_len = 5;
  slots.zero_q_lens = 1;
  {
    const gpu_axis axes[] = {GPU_AXIS(slots, GPU_SLOTS_DERIVED, GPU_SLOTS_WITH_INVALID),
                             GPU_AXIS(query_positions, 0, 1),
                             GPU_AXIS(extra_tokens, 0, 5), GPU_AXIS(batch_size, 1, 257),
                             GPU_AXIS(cache_dtype, 0, PA_DTYPE_INT8),
                             GPU_AXIS(block_size, 16, 128)};
    RUN(all, slots, axes);
  }

  /* a large ragged step with a zero-token sequence between, which every later token's sequence
   * lookup must step over (smaller under PA_GPU_TEST_QUICK, which the memcheck runs use: the full
   * case alone outlasts their time) */
  gpu_case many = gpu_case_default("write_many_tokens");
  const int32_t many_lens[3] = {4000, 0, 3001}, many_lens_quick[3] = {700, 0, 301};
  many.q_lens = quick ? many_lens_quick : many_lens;
  {
    const gpu_axis axes[] = {GPU_AXIS(rotary, 0, 1), GPU_AXIS(cache_dtype, 0, PA_DTYPE_INT8)};
    RUN(all, many, axes);
  }

  /* a batch whose sequences all have zero new tokens, plus tokens of no sequence */
  gpu_case empty = gpu_case_default("write_all_sequences_empty");
  const int32_t zero_lens[4] = {0, 0, 0, 0};
  empty.batch_size = 4;
  empty.q_lens = zero_lens;
  empty.extra_tokens = 3;
  empty.slots = GPU_SLOTS_DERIVED;
  for (empty.rotary = 0; empty.rotary <= 1; empty.rotary++)
    gpu_matrix_count(&all, gpu_case_run_write(&empty, seed++));

  /* LATENT (absorbed MLA, 576/512): only the latent row is cached; RoPE on its last 64 channels */
  gpu_case mla = gpu_case_default("write_latent");
  mla.layout = PA_KV_CACHE_LAYOUT_LATENT;
  mla.head_size = 576;
  mla.v_head_size = 512;
  mla.rotary = 1;
  mla.rotary_offset = 512;
  mla.rotary_dim = 64;
  mla.batch_size = 5;
  mla.max_q_len = 3;
  mla.zero_q_lens = 1;
  if (quick) {
    mla.num_heads = 16;
    const gpu_axis axes[] = {
        GPU_AXIS(cache_dtype, 0, PA_DTYPE_INT8, PA_DTYPE_FLOAT8_E4M3FN),
        GPU_AXIS(k_quant, PA_QUANT_NONE, PA_QUANT_PER_TENSOR, PA_QUANT_PER_CHANNEL),
        GPU_AXIS(slots, GPU_SLOTS_NONE, GPU_SLOTS_WITH_INVALID)};
    RUN(all, mla, axes);
  } else {
    const gpu_axis axes[] = {
        GPU_AXIS(num_heads, 1, 16),
        GPU_AXIS(cache_dtype, 0, PA_DTYPE_INT8, PA_DTYPE_FLOAT8_E4M3FN),
        GPU_AXIS(k_quant, PA_QUANT_NONE, PA_QUANT_PER_TENSOR, PA_QUANT_PER_CHANNEL),
        GPU_AXIS(block_size, 16, 64),
        GPU_AXIS(slots, GPU_SLOTS_NONE, GPU_SLOTS_WITH_INVALID),
        GPU_AXIS(dtype, PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16)};
    RUN(all, mla, axes);
  }

  /* LATENT without RoPE: the latent row alone, copied or quantized (on sm_90, by the bulk-copy
   * kernel) */
  gpu_case mla_copy = mla;
  mla_copy.name = "write_latent_copy";
  mla_copy.rotary = 0;
  mla_copy.rotary_offset = 0;
  mla_copy.rotary_dim = 0;
  mla_copy.num_heads = 16;
  {
    const gpu_axis axes[] = {
        GPU_AXIS(slots, GPU_SLOTS_NONE, GPU_SLOTS_WITH_INVALID),
        GPU_AXIS(dtype, PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16), GPU_AXIS(block_size, 16, 64),
        GPU_AXIS(cache_dtype, 0, PA_DTYPE_INT8, PA_DTYPE_FLOAT8_E4M3FN),
        GPU_AXIS(k_quant, PA_QUANT_NONE, PA_QUANT_PER_TENSOR, PA_QUANT_PER_CHANNEL)};
    RUN(all, mla_copy, axes);
  }

  fprintf(stderr, "test_write: %d passed, %d failed, %d unsupported, %d skipped\n", all.passed,
          all.failed, all.unsupported, all.skipped);
  return gpu_matrix_exit_code(&all);
}
