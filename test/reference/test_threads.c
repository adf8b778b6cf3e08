/* Threads on the host paths (contract §2: one const plan may be executed from several threads;
 * pa_last_error_message is thread-local). Four threads share one host plan, each on its own
 * buffers: every run's output and caches must equal a serial run's bit for bit, and each thread's
 * failures must leave its own message, untouched by the other threads' failures. Built a second
 * time with TSan (meson option sanitizers, suite unit_tsan) so that data races fail CI. */
#define _POSIX_C_SOURCE 200809L /* pthread barriers */
#include <pthread.h>

#include "test_common.h"

enum { THREADS = 4, ROUNDS = 25 };

static pa_case_config threads_config(void) {
  static const int32_t q_lens[3] = {1, 5, 0}, past[3] = {40, 7, 3};
  pa_case_config cfg;
  pa_case_config_init(&cfg);
  cfg.seed = test_seed();
  cfg.attrs.num_heads = 8;
  cfg.attrs.kv_num_heads = 2;
  cfg.attrs.do_rotary = 1;
  cfg.attrs.softcap = 20.0f;
  cfg.head_size = 32;
  cfg.batch_size = 3;
  cfg.q_lens = q_lens;
  cfg.past_lens = past;
  cfg.block_order = PA_CASE_BLOCKS_SHUFFLED;
  cfg.cache_dtype = PA_DTYPE_INT8;
  cfg.attrs.k_quant_type = PA_QUANT_PER_CHANNEL;
  cfg.attrs.v_quant_type = PA_QUANT_PER_TENSOR;
  return cfg;
}

typedef struct worker {
  int index;
  const pa_plan *plan;       /* shared */
  const pa_case *expected;   /* the serial run: outputs and caches after it */
  pa_case own;               /* this thread's buffers, as built (before any run) */
  pthread_barrier_t *barrier;
  int mismatches, wrong_messages, failed_runs;
} worker;

static int same_bytes(const void *a, const void *b, size_t n) { return !n || !memcmp(a, b, n); }

/* Restores the thread's caches to their built state (each run writes the new tokens' slots). */
static void restore_caches(worker *w, void *const saved[2]) {
  for (int c = 0; c < 2; c++) {
    int i = c ? PA_IN_VALUE_CACHE : PA_IN_KEY_CACHE;
    if (w->own.inputs[i]) memcpy(w->own.inputs[i], saved[c], w->own.inputs_bytes[i]);
  }
}

static void *run_worker(void *arg) {
  worker *w = arg;
  void *saved[2] = {NULL, NULL};
  for (int c = 0; c < 2; c++) {
    int i = c ? PA_IN_VALUE_CACHE : PA_IN_KEY_CACHE;
    saved[c] = malloc(w->own.inputs_bytes[i] ? w->own.inputs_bytes[i] : 1);
    memcpy(saved[c], w->own.inputs[i], w->own.inputs_bytes[i]);
  }
  char want[64], got[256];
  snprintf(want, sizeof want, "num_heads: must be > 0, got %d", -(w->index + 1));
  pa_attributes bad;
  pa_attributes_init(&bad);
  bad.num_heads = -(w->index + 1);
  for (int round = 0; round < ROUNDS; round++) {
    /* a failure of this thread's own, then everyone fails at once, then the message is checked */
    pa_plan *none = NULL;
    if (pa_plan_create(&none, &bad, w->own.inputs_desc, w->own.outputs_desc, NULL) !=
        PA_ERROR_INVALID_ARGUMENT)
      w->wrong_messages++;
    pthread_barrier_wait(w->barrier);
    pa_last_error_message(got, sizeof got);
    if (strcmp(got, want) != 0) w->wrong_messages++;

    pa_case_poison_outputs(&w->own);
    restore_caches(w, saved);
    if (pa_execute_reference(w->plan, (const void *const *)w->own.inputs, w->own.outputs) !=
        PA_SUCCESS)
      w->failed_runs++;
    if (pa_last_error_message(NULL, 0) != 0) w->wrong_messages++; /* success clears it */
    for (int i = 0; i < PA_NUM_OUTPUTS; i++)
      if (w->own.outputs[i] &&
          !same_bytes(w->own.outputs[i], w->expected->outputs[i], w->own.outputs_bytes[i]))
        w->mismatches++;
    for (int i = PA_IN_KEY_CACHE; i <= PA_IN_VALUE_CACHE; i++)
      if (!same_bytes(w->own.inputs[i], w->expected->inputs[i], w->own.inputs_bytes[i]))
        w->mismatches++;
  }
  free(saved[0]);
  free(saved[1]);
  return NULL;
}

static void shared_plan_four_threads(void **state) {
  (void)state;
  pa_case_config cfg = threads_config();
  pa_case serial;
  expect_status(pa_case_build(&serial, &cfg), PA_SUCCESS);
  pa_plan *plan = NULL;
  expect_status(pa_case_plan(&serial, &plan), PA_SUCCESS);

  worker workers[THREADS];
  pthread_t threads[THREADS];
  pthread_barrier_t barrier;
  assert_int_equal(pthread_barrier_init(&barrier, NULL, THREADS), 0);
  for (int i = 0; i < THREADS; i++) { /* identical data: the same configuration and seed */
    memset(&workers[i], 0, sizeof workers[i]);
    expect_status(pa_case_build(&workers[i].own, &cfg), PA_SUCCESS);
    workers[i].index = i;
    workers[i].plan = plan;
    workers[i].expected = &serial;
    workers[i].barrier = &barrier;
  }
  pa_case_poison_outputs(&serial);
  expect_status(pa_execute_reference(plan, (const void *const *)serial.inputs, serial.outputs),
                PA_SUCCESS);

  for (int i = 0; i < THREADS; i++)
    assert_int_equal(pthread_create(&threads[i], NULL, run_worker, &workers[i]), 0);
  for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_join(threads[i], NULL), 0);
  int mismatches = 0, wrong_messages = 0, failed_runs = 0;
  for (int i = 0; i < THREADS; i++) {
    print_message("thread %d: %d runs, %d mismatches, %d wrong messages, %d failed runs\n", i,
                  ROUNDS, workers[i].mismatches, workers[i].wrong_messages, workers[i].failed_runs);
    mismatches += workers[i].mismatches;
    wrong_messages += workers[i].wrong_messages;
    failed_runs += workers[i].failed_runs;
    pa_case_free(&workers[i].own);
  }
  if (mismatches || wrong_messages || failed_runs)
    fprintf(stderr, "seed %" PRIu64 "\n", test_seed());
  assert_int_equal(failed_runs, 0);
  assert_int_equal(mismatches, 0);
  assert_int_equal(wrong_messages, 0);
  pthread_barrier_destroy(&barrier);
  pa_plan_destroy(plan);
  pa_case_free(&serial);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(shared_plan_four_threads)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
