/*
 * pa_plan_create + pa_plan_destroy for one decode step (32/8 heads, head_size 128, block 16,
 * batch 64, 4k context, float16): the per-step planning cost a serving loop pays. Median of
 * 10000 (1000 with --quick), in microseconds, for a described sm_90 device (132 SMs) and for a host
 * plan. Target: under 20 us. Touches no GPU.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pagedattn/pagedattn.h"

enum { HEADS = 32, KV_HEADS = 8, HEAD_SIZE = 128, BLOCK_SIZE = 16, BATCH = 64, CONTEXT = 4096 };

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static int by_value(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static pa_tensor_desc desc(pa_dtype dtype, int32_t rank, int64_t d0, int64_t d1, int64_t d2,
                           int64_t d3) {
  pa_tensor_desc d = {dtype, rank, {d0, d1, d2, d3}};
  return d;
}

/* Times `iterations` plans; prints the median and returns 0, or prints the error and returns 1. */
static int time_plans(const char *label, const pa_plan_options *options, int iterations) {
  pa_attributes attrs;
  pa_attributes_init(&attrs);
  attrs.num_heads = HEADS;
  attrs.kv_num_heads = KV_HEADS;
  const int64_t blocks_per_seq = CONTEXT / BLOCK_SIZE;
  pa_tensor_desc in[PA_NUM_INPUTS], out[PA_NUM_OUTPUTS];
  memset(in, 0, sizeof in);
  memset(out, 0, sizeof out);
  in[PA_IN_QUERY] = desc(PA_DTYPE_FLOAT16, 2, BATCH, HEADS * HEAD_SIZE, 0, 0);
  in[PA_IN_KEY] = desc(PA_DTYPE_FLOAT16, 2, BATCH, KV_HEADS * HEAD_SIZE, 0, 0);
  in[PA_IN_VALUE] = in[PA_IN_KEY];
  in[PA_IN_KEY_CACHE] =
      desc(PA_DTYPE_FLOAT16, 4, BATCH * blocks_per_seq, BLOCK_SIZE, KV_HEADS, HEAD_SIZE);
  in[PA_IN_VALUE_CACHE] = in[PA_IN_KEY_CACHE];
  in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH] = desc(PA_DTYPE_INT32, 1, BATCH + 1, 0, 0, 0);
  in[PA_IN_PAST_SEQLENS] = desc(PA_DTYPE_INT32, 1, BATCH, 0, 0, 0);
  in[PA_IN_BLOCK_TABLE] = desc(PA_DTYPE_INT32, 2, BATCH, blocks_per_seq, 0, 0);
  out[PA_OUT_OUTPUT] = desc(PA_DTYPE_FLOAT16, 2, BATCH, HEADS * HEAD_SIZE, 0, 0);

  double *samples = malloc((size_t)iterations * sizeof *samples);
  if (!samples) return 1;
  pa_backend backend = PA_BACKEND_AUTO;
  for (int i = 0; i < iterations; i++) {
    pa_plan *plan = NULL;
    const double start = now_us();
    pa_status st = pa_plan_create(&plan, &attrs, in, out, options);
    pa_plan_destroy(plan);
    samples[i] = now_us() - start;
    if (st != PA_SUCCESS) {
      char message[512];
      pa_last_error_message(message, sizeof message);
      printf("%-28s failed: %s: %s\n", label, pa_status_string(st), message);
      free(samples);
      return 1;
    }
    if (i == 0) {
      pa_plan_create(&plan, &attrs, in, out, options);
      backend = pa_plan_backend(plan);
      pa_plan_destroy(plan);
    }
  }
  qsort(samples, (size_t)iterations, sizeof *samples, by_value);
  printf("%-28s backend %-9s median %7.3f us  p99 %7.3f us  (%d plans; target < 20 us)\n", label,
         pa_backend_name(backend), samples[iterations / 2], samples[iterations * 99 / 100],
         iterations);
  free(samples);
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);  // rows already printed survive a timeout or a crash
  const int iterations = argc > 1 && strcmp(argv[1], "--quick") == 0 ? 1000 : 10000;
  printf("plan create + destroy, decode step: %d/%d heads, d%d, block %d, batch %d, context %d, "
         "float16\n",
         HEADS, KV_HEADS, HEAD_SIZE, BLOCK_SIZE, BATCH, CONTEXT);
  pa_device_caps h200 = {sizeof h200, 9, 0, 132, 232448};
  pa_plan_options described;
  pa_plan_options_init(&described);
  described.device = 0;
  described.device_caps = &h200;
  pa_plan_options host;
  pa_plan_options_init(&host);
  host.device = PA_DEVICE_HOST;
  int failures = time_plans("described sm_90 (H200)", &described, iterations);
  failures += time_plans("host (PA_DEVICE_HOST)", &host, iterations);
  return failures ? 1 : 0;
}
