/* Threads and streams: one plan of each GPU backend executed from 4 host threads at once, each on
 * its own stream and buffers, against a serial run of the same plan (bitwise) and the reference;
 * each thread's pa_last_error_message stays its own (harness.h, gpu_case_run_concurrent). On an
 * sm_90a device the PREFILL and LATENT plans run the Hopper kernels, whose tensor maps each thread
 * encodes for its own call. Then PREFILL, LATENT and DECODE steps on a thread whose first CUDA call
 * is the step's pa_execute (gpu_case_run_fresh_thread). */
#include <stdio.h>

#include "harness.h"

enum { THREADS = 4 };

int main(void) {
  if (!gpu_available()) {
    fprintf(stderr, "no CUDA device: skipped\n");
    return GPU_SKIP;
  }
  unsigned seed = gpu_test_seed();
  const int rounds = gpu_test_quick() ? 1 : 3;
  gpu_matrix_result all = {0, 0, 0, 0};

  /* DECODE: a decode step with splits (long past), rotary (a staged Q in the workspace) */
  gpu_case decode = gpu_case_default("concurrency_decode");
  decode.batch_size = 8;
  decode.max_past_len = 2000;
  decode.rotary = 1;
  decode.cache_dtype = PA_DTYPE_INT8;
  /* UNFUSED: ragged prefill with output_qk (its cuBLASLt handle and heuristic are shared) */
  gpu_case unfused = gpu_case_default("concurrency_unfused");
  unfused.batch_size = 3;
  unfused.max_q_len = 24;
  unfused.max_past_len = 100;
  unfused.qk_output = 1;
  unfused.head_sink = 1;
  /* PREFILL: a ragged prefill over a short past, bf16 at head size 128 (page, query and output
   * maps on Hopper) */
  gpu_case prefill = gpu_case_default("concurrency_prefill");
  prefill.dtype = PA_DTYPE_BFLOAT16;
  prefill.batch_size = 3;
  prefill.max_q_len = 80;
  prefill.max_past_len = 150;
  /* LATENT: DeepSeek's latent rows (576 channels, V the first 512), 16 heads, 1-2 query tokens */
  gpu_case latent = gpu_case_default("concurrency_latent");
  latent.layout = PA_KV_CACHE_LAYOUT_LATENT;
  latent.num_heads = 16;
  latent.kv_num_heads = 1;
  latent.head_size = 576;
  latent.v_head_size = 512;
  latent.scale = 0.25f;
  latent.batch_size = 3;
  latent.max_q_len = 2;
  latent.max_past_len = 300;
  for (int round = 0; round < rounds; round++) {
    gpu_matrix_count(&all, gpu_case_run_concurrent(&decode, PA_BACKEND_DECODE, seed++, THREADS));
    gpu_matrix_count(&all, gpu_case_run_concurrent(&unfused, PA_BACKEND_UNFUSED, seed++, THREADS));
    gpu_matrix_count(&all, gpu_case_run_concurrent(&prefill, PA_BACKEND_PREFILL, seed++, THREADS));
    gpu_matrix_count(&all, gpu_case_run_concurrent(&latent, PA_BACKEND_LATENT, seed++, THREADS));
  }
  /* a step on a thread that made no CUDA call before it */
  gpu_matrix_count(&all, gpu_case_run_fresh_thread(&prefill, PA_BACKEND_PREFILL, seed++));
  gpu_matrix_count(&all, gpu_case_run_fresh_thread(&latent, PA_BACKEND_LATENT, seed++));
  gpu_matrix_count(&all, gpu_case_run_fresh_thread(&decode, PA_BACKEND_DECODE, seed++));
  fprintf(stderr, "concurrency: %d passed, %d failed, %d unsupported (%d threads each)\n",
          all.passed, all.failed, all.unsupported, THREADS);
  return gpu_matrix_exit_code(&all);
}
