/*
 * Regression tests for the reproducers of issue 19 (found by fuzzing and review): shapes that
 * validation accepts must never crash the planner, wrap a size, launch a grid the device refuses,
 * or make the reference executor work on keys nobody can see. None needs a GPU: plans for
 * described devices run the backends' host code (check and plan) on the CPU.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cases.h"

/* A described device this build has kernels for (meson option gpu_archs). */
static case_device built_device(void) {
  return strstr(PA_GPU_ARCHS, "80") ? CASE_A100 : CASE_H200;
}

/* One decode token of one sequence, float16, 8/2 heads, head_size 64: few enough partial-output
 * bytes per split that DECODE's split size was the table's tiles / 65535 (gridDim.y), which is
 * 2^32 for 2^30-key blocks and a table of 16776960 = 65535 * 256 entries. */
static case_config one_token(int32_t block_size, int32_t blocks_per_seq) {
  case_config cfg = case_config_default();
  cfg.num_heads = 8;
  cfg.kv_num_heads = 2;
  cfg.head_size = 64;
  cfg.token_count = 1;
  cfg.batch_size = 1;
  cfg.num_blocks = 1;
  cfg.block_size = block_size;
  cfg.blocks_per_seq = blocks_per_seq;
  return cfg;
}

/* The bytes of the DECODE partial outputs for two split slots of one token: a plan whose grid
 * splits the keys at all needs at least this much workspace. */
static size_t two_split_slots_bytes(const case_config *cfg) {
  return 2 * (size_t)cfg->num_heads * (size_t)cfg->head_size * sizeof(float);
}

/* Reproducer 1: block_size 2^30 with a block table of 16776960 entries made DECODE's split size
 * truncate to 0 (a division by zero inside pa_plan_create, SIGFPE); with 8388608 entries it became
 * negative and every split was empty (a silently zero output). The plan must now split the keys. */
static void issue19_1_decode_split_size_huge_table(void **state) {
  (void)state;
  const int32_t tables[] = {16776960, 8388608};
  for (size_t i = 0; i < 2 * sizeof tables / sizeof tables[0]; i++) {
    /* one token (the split size from the sizing count) and two (the fixed split size) */
    case_config cfg = one_token(1 << 30, tables[i / 2]);
    cfg.token_count = cfg.batch_size = 1 + (int32_t)(i % 2);
    pa_case c;
    case_build(&c, &cfg);
    c.device = built_device();
    c.backend = PA_BACKEND_DECODE;
    pa_plan *plan = case_plan_ok(&c);
    assert_int_equal(pa_plan_backend(plan), PA_BACKEND_DECODE);
    assert_true(pa_plan_workspace_size(plan) >= two_split_slots_bytes(&cfg));
    pa_plan_destroy(plan);
  }
}

/* A decode step with num_heads query heads over 16 KV heads, head_size 16, and a block table of
 * blocks_per_seq blocks of 16 keys. */
static pa_case many_heads(int32_t num_heads, int32_t blocks_per_seq, int32_t tokens) {
  case_config cfg = one_token(16, blocks_per_seq);
  cfg.token_count = cfg.batch_size = tokens;
  cfg.num_heads = num_heads;
  cfg.kv_num_heads = 16;
  cfg.head_size = 16;
  cfg.num_blocks = blocks_per_seq;
  pa_case c;
  case_build(&c, &cfg);
  c.device = built_device();
  return c;
}

/* Reproducer 2: DECODE merges the splits with gridDim.y = num_heads, at most 65535; 65552 heads
 * were planned anyway and the launch would fail in pa_execute after the cache write. (Two tokens:
 * a single token's 4112 CTAs of 65552 heads fill a wave unsplit.) */
static void issue19_2_decode_merge_grid_refused_at_plan_time(void **state) {
  (void)state;
  pa_case c = many_heads(65552, 4096, 2); /* 64k keys: several splits, so the merge runs */
  c.backend = PA_BACKEND_DECODE;
  CASE_EXPECT_PLAN_FAILURE(&c, PA_ERROR_NOT_SUPPORTED, "backend DECODE", "num_heads 65552",
                           "gridDim.y", "65535");
  /* AUTO: PREFILL's merge grid has the same limit, and UNFUSED's smallest chunk (one sequence of
   * 65552 heads over 64k keys) exceeds its workspace budget: refused at plan time, every reason
   * named, never a launch failure in pa_execute */
  c.backend = PA_BACKEND_AUTO;
  CASE_EXPECT_PLAN_FAILURE(&c, PA_ERROR_NOT_SUPPORTED, "DECODE: num_heads 65552",
                           "PREFILL: num_heads 65552", "UNFUSED: a step whose smallest chunk");
}

/* Without splits there is no merge launch: DECODE still serves that many heads, over one block,
 * and one token over 64k keys (its CTAs fill a wave, so it runs unsplit). */
static void issue19_2_decode_single_split_serves_many_heads(void **state) {
  (void)state;
  pa_case c = many_heads(65552, 1, 1);
  c.backend = PA_BACKEND_DECODE;
  pa_plan_destroy(case_plan_ok(&c));
  c = many_heads(65552, 4096, 1);
  c.backend = PA_BACKEND_DECODE;
  pa_plan_destroy(case_plan_ok(&c));
}

/* Reproducer 3: key_cache (2^60, 16, 1, 8) was accepted and num_blocks * block_size overflowed
 * int64 in the reference executor (and in the plan, the prologue and the reference's slots). */
static void issue19_3_cache_size_overflow_rejected(void **state) {
  (void)state;
  case_config cfg = case_config_default();
  cfg.num_heads = 1;
  cfg.kv_num_heads = 1;
  cfg.head_size = 8;
  cfg.num_blocks = (int64_t)1 << 60;
  pa_case c;
  case_build(&c, &cfg);
  CASE_EXPECT_PLAN_FAILURE(&c, PA_ERROR_INVALID_ARGUMENT, "key_cache", "fit in int64",
                           "(1152921504606846976, 16, 1, 8)");
  c.device = built_device(); /* the same rule before any backend runs */
  CASE_EXPECT_PLAN_FAILURE(&c, PA_ERROR_INVALID_ARGUMENT, "key_cache", "fit in int64");
}

/* Reproducer 4: rotary_dim = 2 * cos_cache.dims[1] wrapped before its bound was checked, and the
 * message read "got rotary_dim -9223372036854775808". */
static void issue19_4_rotary_dim_never_wraps(void **state) {
  (void)state;
  case_config cfg = case_config_default();
  cfg.rotary_dim = 32;
  pa_case c;
  case_build(&c, &cfg);
  c.in[PA_IN_COS_CACHE].dims[1] = c.in[PA_IN_SIN_CACHE].dims[1] = (int64_t)1 << 62;
  c.in[PA_IN_COS_CACHE].dims[0] = c.in[PA_IN_SIN_CACHE].dims[0] = 1;
  CASE_EXPECT_PLAN_FAILURE(&c, PA_ERROR_INVALID_ARGUMENT, "cos_cache", "(1, 4611686018427387904)");
  char message[512];
  pa_last_error_message(message, sizeof message);
  assert_null(strstr(message, "-9223372036854775808"));
  /* the largest dim1 the byte size allows still gets the rotary bound, with its true value */
  c.in[PA_IN_COS_CACHE].dims[1] = c.in[PA_IN_SIN_CACHE].dims[1] = INT64_MAX / 2;
  CASE_EXPECT_PLAN_FAILURE(&c, PA_ERROR_INVALID_ARGUMENT, "cos_cache",
                           "got rotary_dim 9223372036854775806");
}

/* Reproducer 5: block_size 2^30, a block table of one unmapped block (-1), 2^24 keys of past and
 * 64 tokens x 32 heads: the reference gathered every key of the table's reach (45 s, gigabytes of
 * scratch) to return zeros. Its work now follows the mapped keys: nothing here. The cache pointers
 * are 16-byte stand-ins that must never be touched (ASan builds would report it). */
static void issue19_5_reference_skips_unmapped_blocks(void **state) {
  (void)state;
  case_config cfg = case_config_default();
  cfg.num_heads = 32;
  cfg.kv_num_heads = 8;
  cfg.head_size = 64;
  cfg.token_count = 64;
  cfg.batch_size = 1;
  cfg.num_blocks = 1;
  cfg.block_size = 1 << 30;
  cfg.blocks_per_seq = 1;
  pa_case c;
  case_build(&c, &cfg);
  pa_plan *plan = case_plan_ok(&c);

  const int64_t q_elems = 64 * 32 * 64, kv_elems = 64 * 8 * 64;
  uint16_t *query = malloc((size_t)q_elems * 2), *key = malloc((size_t)kv_elems * 2),
           *value = malloc((size_t)kv_elems * 2), *output = malloc((size_t)q_elems * 2);
  assert_non_null(query);
  assert_non_null(key);
  assert_non_null(value);
  assert_non_null(output);
  for (int64_t i = 0; i < q_elems; i++) query[i] = output[i] = 0x3c00; /* 1.0 */
  for (int64_t i = 0; i < kv_elems; i++) key[i] = value[i] = 0x3c00;
  static uint16_t key_cache[8], value_cache[8];
  const int32_t cu[2] = {0, 64}, past[1] = {1 << 24}, table[1] = {-1};
  const void *in[PA_NUM_INPUTS] = {0};
  void *out[PA_NUM_OUTPUTS] = {0};
  in[PA_IN_QUERY] = query;
  in[PA_IN_KEY] = key;
  in[PA_IN_VALUE] = value;
  in[PA_IN_KEY_CACHE] = key_cache;
  in[PA_IN_VALUE_CACHE] = value_cache;
  in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH] = cu;
  in[PA_IN_PAST_SEQLENS] = past;
  in[PA_IN_BLOCK_TABLE] = table;
  out[PA_OUT_OUTPUT] = output;

  clock_t start = clock();
  CASE_ASSERT_STATUS(pa_execute_reference(plan, in, out), PA_SUCCESS, "");
  double cpu_seconds = (double)(clock() - start) / CLOCKS_PER_SEC;
  print_message("reference over an unmapped 2^30-key block: %.3f s CPU\n", cpu_seconds);
  assert_true(cpu_seconds < 1.0);
  for (int64_t i = 0; i < q_elems; i++) assert_int_equal(output[i], 0); /* no visible key */
  for (int i = 0; i < 8; i++) assert_int_equal(key_cache[i] | value_cache[i], 0);
  free(query);
  free(key);
  free(value);
  free(output);
  pa_plan_destroy(plan);
}

/* Reproducer 6 (fuzz_plan, a timeout): LATENT's balanced split search tried every split count up
 * to the block table's capacity in tiles, 2^47 for a table of 2^23 blocks of 2^30 keys: the plan
 * took minutes. It is now bounded by the device's CTAs and the partials' cap. 128 heads take the
 * 64-row tiles, which use that search: the wgmma kernel on an H200, the mma.sync kernel on an A100
 * with an int8 cache (a 16-bit one needs more shared memory than an A100 has). */
static void issue19_6_latent_split_search_bounded(void **state) {
  (void)state;
  int planned = 0;
  for (int on_a100 = 0; on_a100 < 2; on_a100++) {
    if (!strstr(PA_GPU_ARCHS, on_a100 ? "80" : "90a")) continue;
    case_config cfg = case_config_latent();
    cfg.num_heads = 128;
    cfg.token_count = 1;
    cfg.batch_size = 1;
    cfg.num_blocks = 1;
    cfg.block_size = 1 << 30;
    cfg.blocks_per_seq = 1 << 23;
    if (on_a100) {
      cfg.cache_dtype = PA_DTYPE_INT8;
      cfg.quant = PA_QUANT_PER_TENSOR;
    }
    pa_case c;
    case_build(&c, &cfg);
    c.device = on_a100 ? CASE_A100 : CASE_H200;
    c.backend = PA_BACKEND_LATENT;
    clock_t start = clock();
    pa_plan *plan = case_plan_ok(&c);
    double cpu_seconds = (double)(clock() - start) / CLOCKS_PER_SEC;
    print_message("LATENT plan on %s over 2^53 keys of block table: %.3f s CPU\n",
                  on_a100 ? "an A100" : "an H200", cpu_seconds);
    assert_true(cpu_seconds < 1.0);
    assert_int_equal(pa_plan_backend(plan), PA_BACKEND_LATENT);
    pa_plan_destroy(plan);
    planned++;
  }
  assert_true(planned > 0); /* gpu_archs has 80 or 90a (built_device's assumption too) */
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(issue19_1_decode_split_size_huge_table),
      cmocka_unit_test(issue19_2_decode_merge_grid_refused_at_plan_time),
      cmocka_unit_test(issue19_2_decode_single_split_serves_many_heads),
      cmocka_unit_test(issue19_3_cache_size_overflow_rejected),
      cmocka_unit_test(issue19_4_rotary_dim_never_wraps),
      cmocka_unit_test(issue19_5_reference_skips_unmapped_blocks),
      cmocka_unit_test(issue19_6_latent_split_search_bounded),
  };
  return CASE_RUN_TESTS("reliability", tests, argc, argv);
}
