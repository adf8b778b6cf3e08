/* Speed of the reference executor: a decode step of 4 sequences x 2k context, 32 query / 8 KV heads,
 * head_size 128 must take under 2 s (release build), for an fp16 and an int8 cache. The assertion is
 * on the process's CPU time (single-threaded), so that a loaded CI machine does not make it flaky;
 * the wall time is printed beside it. */
#include "test_common.h"

static double seconds_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void decode_4x2k_under_2s(void **state) {
  (void)state;
  static const int32_t q_lens[4] = {1, 1, 1, 1}, past[4] = {2047, 2047, 2047, 2047};
  for (int quantized = 0; quantized < 2; quantized++) {
    pa_case_config cfg;
    pa_case_config_init(&cfg);
    cfg.seed = test_seed();
    cfg.attrs.num_heads = 32;
    cfg.attrs.kv_num_heads = 8;
    cfg.head_size = 128;
    cfg.batch_size = 4;
    cfg.q_lens = q_lens;
    cfg.past_lens = past;
    cfg.attrs.do_rotary = 1;
    if (quantized) {
      cfg.cache_dtype = PA_DTYPE_INT8;
      cfg.attrs.k_quant_type = PA_QUANT_PER_CHANNEL;
      cfg.attrs.v_quant_type = PA_QUANT_PER_CHANNEL;
    }
    pa_case c;
    expect_status(pa_case_build(&c, &cfg), PA_SUCCESS);
    pa_plan *plan = NULL;
    expect_status(pa_case_plan(&c, &plan), PA_SUCCESS);
    double start = seconds_now();
    clock_t cpu_start = clock();
    expect_status(pa_execute_reference(plan, (const void *const *)c.inputs, c.outputs), PA_SUCCESS);
    double cpu = (double)(clock() - cpu_start) / CLOCKS_PER_SEC;
    double wall = seconds_now() - start;
    print_message("decode 4 x 2048, 32/8 heads, d128, %s cache: %.3f s CPU (%.3f s wall)\n",
                  quantized ? "int8" : "fp16", cpu, wall);
    assert_true(cpu < 2.0);
    assert_false(isnan(pa_case_output(&c, 3, 31, 127)));
    pa_plan_destroy(plan);
    pa_case_free(&c);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(decode_4x2k_under_2s)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
