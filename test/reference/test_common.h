/* Shared helpers of the reference tests (cmocka): the seed, element access into a case, and
 * comparisons that print what differs (and the seed) before failing. */
#ifndef PAGEDATTN_TEST_REFERENCE_COMMON_H
#define PAGEDATTN_TEST_REFERENCE_COMMON_H

#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "case_builder.h"
#include "host_numeric.h"

/* PA_TEST_SEED in the environment, else a fresh one per process (printed on failure). */
static uint64_t test_seed(void) {
  static uint64_t seed;
  if (!seed) {
    const char *env = getenv("PA_TEST_SEED");
    seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) * 2654435761u + (uint64_t)clock();
    if (!seed) seed = 1;
  }
  return seed;
}

/* Fails the test when |actual - expected| > tol * (1 + |expected|) (or NaN-ness differs). */
#define expect_close(actual, expected, tol, ...)                                                  \
  do {                                                                                            \
    double a_ = (actual), e_ = (expected);                                                        \
    int ok_ = (isnan(a_) && isnan(e_)) || (a_ == e_) || fabs(a_ - e_) <= (tol) * (1.0 + fabs(e_)); \
    if (!ok_) {                                                                                   \
      fprintf(stderr, "seed %" PRIu64 ": ", test_seed());                                          \
      fprintf(stderr, __VA_ARGS__);                                                               \
      fail_msg(" got %.9g, expected %.9g (tol %g)", a_, e_, (double)(tol));                       \
    }                                                                                             \
  } while (0)

#define expect_status(st, want)                                                                   \
  do {                                                                                            \
    pa_status st_ = (st);                                                                         \
    if (st_ != (want)) {                                                                          \
      char msg_[512];                                                                             \
      pa_last_error_message(msg_, sizeof msg_);                                                   \
      fail_msg("seed %" PRIu64 ": status %s (%s), expected %s", test_seed(),                      \
               pa_status_string(st_), msg_, pa_status_string(want));                              \
    }                                                                                             \
  } while (0)

static inline void set_input(pa_case *c, int input, int64_t i, float value) {
  pa__store_from_float(c->inputs_desc[input].dtype, c->inputs[input], i, value);
}

/* Element (slot, kv_head, channel) of a cache input, as stored (quantized caches: the code). */
static inline int64_t cache_index(const pa_case *c, int64_t slot, int32_t kv_head, int32_t ch) {
  return (slot * c->config.attrs.kv_num_heads + kv_head) * c->config.head_size + ch;
}

/* The slot of position pos of sequence b under the case's block table (-1 when unmapped). */
static inline int64_t slot_of_position(const pa_case *c, int32_t b, int64_t pos) {
  const int32_t *table = c->inputs[PA_IN_BLOCK_TABLE];
  int64_t id = table[(int64_t)b * c->blocks_per_seq + pos / c->config.block_size];
  return id < 0 ? -1 : id * c->config.block_size + pos % c->config.block_size;
}

/* Every output element of two cases equal within tol. */
static inline void expect_outputs_close(const pa_case *a, const pa_case *b, double tol,
                                        const char *what) {
  int32_t heads = a->config.attrs.num_heads;
  for (int64_t t = 0; t < a->token_count; t++)
    for (int32_t h = 0; h < heads; h++)
      for (int32_t ch = 0; ch < a->v_head_size; ch++)
        expect_close(pa_case_output(a, t, h, ch), pa_case_output(b, t, h, ch), tol,
                     "%s: output[token %" PRId64 ", head %d, channel %d]", what, t, h, ch);
}

#endif /* PAGEDATTN_TEST_REFERENCE_COMMON_H */
