/* Invariants of the reference executor that need no oracle (doc/development.md, "Oracles and tolerances", 4):
 * two runs that must agree because the operator's definition says so. */
#include "mla_case.h"
#include "test_common.h"

static void build(pa_case *c, const pa_case_config *cfg) {
  expect_status(pa_case_build(c, cfg), PA_SUCCESS);
}

static void run(pa_case *c) { expect_status(pa_case_run_reference(c), PA_SUCCESS); }

/* A ragged batch with most features on: GQA 8/2, head_size 32, rotary, QK-Norm, sink, softcap. */
static const int32_t batch_q_lens[4] = {1, 7, 0, 3};
static const int32_t batch_past[4] = {37, 3, 20, 0};

static void batch_config(pa_case_config *cfg) {
  pa_case_config_init(cfg);
  cfg->seed = test_seed();
  cfg->attrs.num_heads = 8;
  cfg->attrs.kv_num_heads = 2;
  cfg->head_size = 32;
  cfg->batch_size = 4;
  cfg->q_lens = batch_q_lens;
  cfg->past_lens = batch_past;
  cfg->attrs.do_rotary = 1;
  cfg->attrs.softcap = 20.0f;
  cfg->qk_norm = 1;
  cfg->head_sink = 1;
}

/* The cached K and V of every position [0, kv_len) of every sequence agree between two cases. */
static void expect_same_logical_cache(const pa_case *a, const pa_case *b, const char *what) {
  const pa_case_config *cfg = &a->config;
  size_t row = (size_t)cfg->attrs.kv_num_heads * cfg->head_size * pa_dtype_size(cfg->cache_dtype);
  for (int32_t s = 0; s < cfg->batch_size; s++)
    for (int64_t pos = 0; pos < (int64_t)cfg->past_lens[s] + cfg->q_lens[s]; pos++) {
      int64_t slot_a = slot_of_position(a, s, pos), slot_b = slot_of_position(b, s, pos);
      for (int input = PA_IN_KEY_CACHE; input <= PA_IN_VALUE_CACHE; input++) {
        if (!a->inputs[input]) continue;
        if (memcmp((const uint8_t *)a->inputs[input] + slot_a * row,
                   (const uint8_t *)b->inputs[input] + slot_b * row, row) != 0)
          fail_msg("seed %" PRIu64 ": %s: cache %d differs at sequence %d position %" PRId64,
                   test_seed(), what, input, s, pos);
      }
    }
}

/* Identity block table (contiguous pages) == shuffled table over a larger pool, for several block
 * sizes; outputs and every cached position identical. */
static void paged_equals_contiguous_equals_shuffled(void **state) {
  (void)state;
  static const int32_t block_sizes[3] = {16, 32, 64};
  for (int i = 0; i < 3; i++) {
    pa_case_config cfg;
    batch_config(&cfg);
    cfg.block_size = block_sizes[i];
    cfg.dtype = i == 1 ? PA_DTYPE_BFLOAT16 : PA_DTYPE_FLOAT16;
    pa_case contiguous, shuffled;
    build(&contiguous, &cfg);
    cfg.block_order = PA_CASE_BLOCKS_SHUFFLED;
    cfg.num_blocks = 4 * 4 + 5;
    build(&shuffled, &cfg);
    run(&contiguous);
    run(&shuffled);
    expect_outputs_close(&contiguous, &shuffled, 0.0, "contiguous vs shuffled");
    expect_same_logical_cache(&contiguous, &shuffled, "contiguous vs shuffled");
    pa_case_free(&contiguous);
    pa_case_free(&shuffled);
  }
}

/* slot_mapping equal to the derived slots == no slot_mapping: outputs and caches byte-identical. */
static void explicit_slots_equal_derived(void **state) {
  (void)state;
  pa_case_config cfg;
  batch_config(&cfg);
  cfg.cache_dtype = PA_DTYPE_FLOAT8_E4M3FN;
  cfg.attrs.k_quant_type = PA_QUANT_PER_CHANNEL;
  cfg.attrs.v_quant_type = PA_QUANT_PER_TENSOR;
  pa_case derived, explicit_slots;
  build(&derived, &cfg);
  cfg.slots = PA_CASE_SLOTS_DERIVED;
  build(&explicit_slots, &cfg);
  run(&derived);
  run(&explicit_slots);
  expect_outputs_close(&derived, &explicit_slots, 0.0, "explicit vs derived slots");
  for (int input = PA_IN_KEY_CACHE; input <= PA_IN_VALUE_CACHE; input++)
    assert_memory_equal(derived.inputs[input], explicit_slots.inputs[input],
                        derived.inputs_bytes[input]);
  pa_case_free(&derived);
  pa_case_free(&explicit_slots);
}

/* slot_mapping all -1: the caches stay byte-identical (attention still reads them). */
static void skipped_slots_leave_cache_identical(void **state) {
  (void)state;
  pa_case_config cfg;
  batch_config(&cfg);
  cfg.cache_dtype = PA_DTYPE_INT8;
  cfg.attrs.k_quant_type = PA_QUANT_PER_TENSOR;
  cfg.attrs.v_quant_type = PA_QUANT_PER_CHANNEL;
  int32_t slots[11];
  for (int i = 0; i < 11; i++) slots[i] = -1;
  cfg.slots = PA_CASE_SLOTS_EXPLICIT;
  cfg.slot_mapping = slots;
  pa_case c;
  build(&c, &cfg);
  assert_int_equal(c.token_count, 11);
  uint8_t *before[2];
  for (int i = 0; i < 2; i++) {
    before[i] = malloc(c.inputs_bytes[PA_IN_KEY_CACHE + i]);
    memcpy(before[i], c.inputs[PA_IN_KEY_CACHE + i], c.inputs_bytes[PA_IN_KEY_CACHE + i]);
  }
  run(&c);
  for (int i = 0; i < 2; i++) {
    assert_memory_equal(before[i], c.inputs[PA_IN_KEY_CACHE + i], c.inputs_bytes[PA_IN_KEY_CACHE + i]);
    free(before[i]);
  }
  pa_case_free(&c);
}

/* local_window_size >= every context == no window. */
static void window_covering_context_equals_no_window(void **state) {
  (void)state;
  pa_case_config cfg;
  batch_config(&cfg);
  pa_case no_window, wide_window;
  build(&no_window, &cfg);
  cfg.attrs.local_window_size = 40; /* longest kv_len: 38 */
  build(&wide_window, &cfg);
  run(&no_window);
  run(&wide_window);
  expect_outputs_close(&no_window, &wide_window, 0.0, "window >= context vs none");
  pa_case_free(&no_window);
  pa_case_free(&wide_window);
}

/* The cache write then read loses at most half a quantization step: int8 steps are the scale, fp8
 * steps 2^-3 of the binade (2^-9 below 2^-6) in units of the scale. */
static void quantized_write_read_round_trip(void **state) {
  (void)state;
  static const pa_dtype types[2] = {PA_DTYPE_INT8, PA_DTYPE_FLOAT8_E4M3FN};
  for (int ti = 0; ti < 2; ti++) {
    pa_case_config cfg;
    batch_config(&cfg);
    cfg.attrs.do_rotary = 0;
    cfg.qk_norm = 0;
    cfg.cache_dtype = types[ti];
    cfg.attrs.k_quant_type = PA_QUANT_PER_CHANNEL;
    cfg.attrs.v_quant_type = PA_QUANT_PER_TENSOR;
    pa_case c;
    build(&c, &cfg);
    run(&c);
    const int32_t *cu = c.inputs[PA_IN_CUMULATIVE_SEQUENCE_LENGTH];
    int32_t hk = cfg.attrs.kv_num_heads, d = cfg.head_size;
    for (int32_t s = 0; s < cfg.batch_size; s++)
      for (int64_t t = cu[s]; t < cu[s + 1]; t++) {
        int64_t slot = slot_of_position(&c, s, cfg.past_lens[s] + (t - cu[s]));
        for (int32_t i = 0; i < hk * d; i++) {
          for (int input = 0; input < 2; input++) {
            int scale_input = input == 0 ? PA_IN_K_SCALE : PA_IN_V_SCALE;
            float scale = pa_case_input(&c, scale_input,
                                        c.inputs_desc[scale_input].rank == 1 ? 0 : i);
            float x = pa_case_input(&c, input == 0 ? PA_IN_KEY : PA_IN_VALUE, t * hk * d + i);
            float y = pa_case_input(&c, PA_IN_KEY_CACHE + input, slot * hk * d + i);
            float back = y * scale;
            float step = types[ti] == PA_DTYPE_INT8
                             ? scale
                             : (fabsf(x / scale) >= 0x1p-6f ? ldexpf(scale, ilogbf(x / scale) - 3)
                                                             : 0x1p-9f * scale);
            if (fabsf(back - x) > 0.5f * step * 1.0001f)
              fail_msg("seed %" PRIu64 ": type %d %s token %" PRId64 " elem %d: x %g back %g step %g",
                       test_seed(), ti, input ? "V" : "K", t, i, x, back, step);
          }
        }
      }
    pa_case_free(&c);
  }
}

/* Sliding window with a ring-buffer cache: N = ceil(W / bs) + 1 blocks per sequence, recycled through
 * slot_mapping, evicted block_table entries -1, versus the full cache; every decode step must agree
 * exactly. Two sequences of different lengths (one past the window, one not for a while). */
static void ring_buffer_window_equals_full_cache(void **state) {
  (void)state;
  enum { B = 2, BS = 16, W = 20, N = (W + BS - 1) / BS + 1, STEPS = 60, M = 6 };
  static const int32_t prompt[B] = {9, 4};
  static const pa_dtype cache_types[2] = {PA_DTYPE_FLOAT16, PA_DTYPE_INT8};
  for (int variant = 0; variant < 2; variant++) {
    pa_case_config base;
    pa_case_config_init(&base);
    base.seed = test_seed();
    base.attrs.num_heads = 4;
    base.attrs.kv_num_heads = 2;
    base.head_size = 16;
    base.batch_size = B;
    base.block_size = BS;
    base.blocks_per_seq = M;
    base.attrs.local_window_size = W;
    base.attrs.do_rotary = 1;
    base.head_sink = 1;
    base.cache_dtype = cache_types[variant];
    if (variant == 1) {
      base.attrs.k_quant_type = PA_QUANT_PER_CHANNEL;
      base.attrs.v_quant_type = PA_QUANT_PER_TENSOR;
    }
    size_t element = pa_dtype_size(base.cache_dtype);
    size_t slot_bytes = (size_t)2 * 16 * element;
    size_t full_bytes = (size_t)B * M * BS * slot_bytes, ring_bytes = (size_t)B * N * BS * slot_bytes;
    uint8_t *full_cache[2], *ring_cache[2];
    for (int i = 0; i < 2; i++) {
      full_cache[i] = malloc(full_bytes);
      ring_cache[i] = malloc(ring_bytes);
      /* never read before written; filled with valid values anyway */
      for (size_t k = 0; k < full_bytes; k++) full_cache[i][k] = (uint8_t)(k * 37 % 61);
      for (size_t k = 0; k < ring_bytes; k++) ring_cache[i][k] = (uint8_t)(k * 37 % 61);
    }
    int32_t length[B] = {0, 0};
    for (int step = 0; step < STEPS; step++) {
      int32_t q_lens[B], past[B], table[B * M], slots[16];
      int64_t t = 0;
      for (int b = 0; b < B; b++) {
        past[b] = length[b];
        q_lens[b] = step == 0 ? prompt[b] : 1;
        int32_t lowest_needed = past[b] - W + 1 > 0 ? past[b] - W + 1 : 0;
        int32_t highest = past[b] + q_lens[b] - 1;
        for (int i = 0; i < M; i++) {
          int live = i >= lowest_needed / BS && i <= highest / BS;
          table[b * M + i] = live ? b * N + i % N : -1;
        }
        for (int32_t j = 0; j < q_lens[b]; j++, t++) {
          int32_t p = past[b] + j;
          slots[t] = (b * N + (p / BS) % N) * BS + p % BS;
        }
      }
      pa_case_config cfg = base;
      cfg.q_lens = q_lens;
      cfg.past_lens = past;
      cfg.key_cache = full_cache[0];
      cfg.value_cache = full_cache[1];
      cfg.num_blocks = B * M;
      pa_case full, ring;
      build(&full, &cfg);
      cfg.key_cache = ring_cache[0];
      cfg.value_cache = ring_cache[1];
      cfg.num_blocks = B * N;
      cfg.block_table = table;
      cfg.slots = PA_CASE_SLOTS_EXPLICIT;
      cfg.slot_mapping = slots;
      build(&ring, &cfg);
      run(&full);
      run(&ring);
      char what[64];
      snprintf(what, sizeof what, "ring vs full, variant %d step %d", variant, step);
      expect_outputs_close(&full, &ring, 0.0, what);
      pa_case_free(&full);
      pa_case_free(&ring);
      for (int b = 0; b < B; b++) length[b] += q_lens[b];
    }
    assert_true(length[0] > W + 2 * BS); /* the ring wrapped around more than once */
    for (int i = 0; i < 2; i++) {
      free(full_cache[i]);
      free(ring_cache[i]);
    }
  }
}

/* Absorbed MLA == non-absorbed attention (mla_case.h: the inputs, shared with the LATENT backend's
 * GPU test). */
static void absorbed_mla_equals_non_absorbed(void **state) {
  (void)state;
  uint64_t s = test_seed();
  mla_weights w;
  mla_weights_init(&w, &s);
  mla_caches caches;
  assert_true(mla_caches_alloc(&caches));
  const uint64_t seed = test_seed();
  int32_t past[MLA_B] = {0, 0};
  double worst = 0.0;
  for (int step = 0; step < 2; step++) {
    pa_case_config a_cfg, p_cfg;
    mla_step_configs(&a_cfg, &p_cfg, seed, step, past, &caches);
    pa_case absorbed, plain;
    build(&absorbed, &a_cfg);
    build(&plain, &p_cfg);
    mla_fill_step(&absorbed, &plain, &w, &s);
    run(&absorbed);
    run(&plain);
    float *out = malloc((size_t)absorbed.token_count * MLA_H * MLA_L * sizeof(float));
    assert_non_null(out);
    for (int64_t t = 0; t < absorbed.token_count; t++)
      for (int h = 0; h < MLA_H; h++)
        for (int l = 0; l < MLA_L; l++) out[(t * MLA_H + h) * MLA_L + l] = pa_case_output(&absorbed, t, h, l);
    for (int64_t t = 0; t < plain.token_count; t++)
      for (int h = 0; h < MLA_H; h++)
        for (int v = 0; v < MLA_V; v++) {
          double projected = mla_projected(&w, out, t, h, v);
          double got = pa_case_output(&plain, t, h, v);
          double error = fabs(got - projected) / (1.0 + fabs(projected));
          if (error > worst) worst = error;
          /* both forms round their own operands to fp16 (absorbed q, k_nope, v): fp16 tolerance */
          expect_close(got, projected, 5e-3, "MLA step %d token %" PRId64 " head %d v %d", step, t, h, v);
        }
    free(out);
    pa_case_free(&absorbed);
    pa_case_free(&plain);
    for (int b = 0; b < MLA_B; b++) past[b] += mla_step_q_lens[step][b];
  }
  print_message("absorbed vs non-absorbed MLA: worst relative error %.2e\n", worst);
  mla_caches_free(&caches);
}

/* query_positions equal to the default positions (past + j) == query_positions absent. */
static void default_query_positions_equal_absent(void **state) {
  (void)state;
  pa_case_config cfg;
  batch_config(&cfg);
  int32_t positions[11];
  int64_t t = 0;
  for (int b = 0; b < cfg.batch_size; b++)
    for (int32_t j = 0; j < cfg.q_lens[b]; j++) positions[t++] = cfg.past_lens[b] + j;
  pa_case absent, given;
  build(&absent, &cfg);
  cfg.query_positions = positions;
  build(&given, &cfg);
  run(&absent);
  run(&given);
  expect_outputs_close(&absent, &given, 0.0, "query_positions default vs absent");
  assert_memory_equal(absent.inputs[PA_IN_KEY_CACHE], given.inputs[PA_IN_KEY_CACHE],
                      absent.inputs_bytes[PA_IN_KEY_CACHE]);
  pa_case_free(&absent);
  pa_case_free(&given);
}

/* pa_execute_reference runs GPU plans too (here: planned for a described Hopper, no GPU touched) with
 * the same result as a host plan. Skipped when no GPU backend serves the configuration. */
static void gpu_plan_equals_host_plan(void **state) {
  (void)state;
  pa_case_config cfg;
  batch_config(&cfg);
  pa_case host, gpu;
  build(&host, &cfg);
  build(&gpu, &cfg);
  pa_device_caps caps = {sizeof caps, 9, 0, 132, 227 * 1024};
  pa_plan_options options;
  pa_plan_options_init(&options);
  options.device = 0;
  options.device_caps = &caps;
  pa_plan *plan = NULL;
  pa_status st = pa_plan_create(&plan, &cfg.attrs, gpu.inputs_desc, gpu.outputs_desc, &options);
  if (st == PA_ERROR_NOT_SUPPORTED) {
    pa_case_free(&host);
    pa_case_free(&gpu);
    skip();
  }
  expect_status(st, PA_SUCCESS);
  assert_int_not_equal(pa_plan_backend(plan), PA_BACKEND_REFERENCE);
  expect_status(pa_execute_reference(plan, (const void *const *)gpu.inputs, gpu.outputs), PA_SUCCESS);
  pa_plan_destroy(plan);
  run(&host);
  expect_outputs_close(&host, &gpu, 0.0, "GPU plan vs host plan");
  pa_case_free(&host);
  pa_case_free(&gpu);
}

/* The prefix-cache case: tokens whose slot is -1 attend to whatever the cache holds at their
 * positions. With the cache already holding what the tokens would write, slot -1 == writing. */
static void skipped_slots_read_the_cached_prefix(void **state) {
  (void)state;
  pa_case_config cfg;
  batch_config(&cfg);
  cfg.cache_dtype = PA_DTYPE_INT8;
  cfg.attrs.k_quant_type = PA_QUANT_PER_CHANNEL;
  cfg.attrs.v_quant_type = PA_QUANT_PER_CHANNEL;
  pa_case writing, cached;
  build(&writing, &cfg);
  int32_t slots[11];
  for (int i = 0; i < 11; i++) slots[i] = -1;
  cfg.slots = PA_CASE_SLOTS_EXPLICIT;
  cfg.slot_mapping = slots;
  build(&cached, &cfg);
  run(&writing);
  for (int input = PA_IN_KEY_CACHE; input <= PA_IN_VALUE_CACHE; input++)
    memcpy(cached.inputs[input], writing.inputs[input], writing.inputs_bytes[input]);
  run(&cached);
  expect_outputs_close(&writing, &cached, 0.0, "cached prefix vs writing");
  pa_case_free(&writing);
  pa_case_free(&cached);
}

/* Chunked prefill: a prompt in one step == the same prompt in two steps (the second one reading the
 * first one's keys from the cache), for the tokens of the second chunk. Rotary, int8 cache. */
static void chunked_prefill_equals_one_step(void **state) {
  (void)state;
  enum { PROMPT = 13, FIRST = 8 };
  static const int32_t zero = 0, first = FIRST, second = PROMPT - FIRST, whole = PROMPT;
  pa_case_config cfg;
  batch_config(&cfg);
  cfg.batch_size = 1;
  cfg.blocks_per_seq = 2;
  cfg.cache_dtype = PA_DTYPE_INT8;
  cfg.attrs.k_quant_type = PA_QUANT_PER_CHANNEL;
  cfg.attrs.v_quant_type = PA_QUANT_PER_TENSOR;
  cfg.past_lens = &zero;
  cfg.q_lens = &whole;
  pa_case one_step;
  build(&one_step, &cfg);
  run(&one_step);
  /* the chunked run: its own cache, same canaries (same seed and shapes) */
  cfg.q_lens = &first;
  pa_case chunk;
  build(&chunk, &cfg);
  void *caches[2];
  for (int i = 0; i < 2; i++) {
    caches[i] = malloc(chunk.inputs_bytes[PA_IN_KEY_CACHE + i]);
    memcpy(caches[i], chunk.inputs[PA_IN_KEY_CACHE + i], chunk.inputs_bytes[PA_IN_KEY_CACHE + i]);
  }
  pa_case_free(&chunk);
  cfg.key_cache = caches[0];
  cfg.value_cache = caches[1];
  int32_t offset = 0;
  for (int step = 0; step < 2; step++) {
    cfg.past_lens = step == 0 ? &zero : &first;
    cfg.q_lens = step == 0 ? &first : &second;
    build(&chunk, &cfg);
    for (int input = PA_IN_QUERY; input <= PA_IN_VALUE; input++) {
      int64_t width = chunk.inputs_desc[input].dims[1];
      for (int64_t i = 0; i < chunk.token_count * width; i++)
        set_input(&chunk, input, i, pa_case_input(&one_step, input, offset * width + i));
    }
    run(&chunk);
    for (int64_t t = 0; t < chunk.token_count; t++)
      for (int32_t h = 0; h < cfg.attrs.num_heads; h++)
        for (int32_t ch = 0; ch < cfg.head_size; ch++)
          expect_close(pa_case_output(&chunk, t, h, ch), pa_case_output(&one_step, offset + t, h, ch),
                       0.0, "chunk %d token %" PRId64 " head %d ch %d", step, t, h, ch);
    offset += (int32_t)chunk.token_count;
    pa_case_free(&chunk);
  }
  for (int i = 0; i < 2; i++) {
    assert_memory_equal(caches[i], one_step.inputs[PA_IN_KEY_CACHE + i],
                        one_step.inputs_bytes[PA_IN_KEY_CACHE + i]);
    free(caches[i]);
  }
  pa_case_free(&one_step);
}

/* A decode batch of 300 sequences of varied lengths (zero-token sequences among them): identity ==
 * shuffled block table. */
static void large_batch_contiguous_equals_shuffled(void **state) {
  (void)state;
  enum { B = 300 };
  int32_t q_lens[B], past[B];
  uint64_t s = test_seed();
  for (int b = 0; b < B; b++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    past[b] = (int32_t)((s >> 33) % 50);
    q_lens[b] = b % 7 == 3 ? 0 : 1;
  }
  pa_case_config cfg;
  batch_config(&cfg);
  cfg.batch_size = B;
  cfg.q_lens = q_lens;
  cfg.past_lens = past;
  pa_case contiguous, shuffled;
  build(&contiguous, &cfg);
  cfg.block_order = PA_CASE_BLOCKS_SHUFFLED;
  build(&shuffled, &cfg);
  run(&contiguous);
  run(&shuffled);
  expect_outputs_close(&contiguous, &shuffled, 0.0, "batch 300: contiguous vs shuffled");
  expect_same_logical_cache(&contiguous, &shuffled, "batch 300: contiguous vs shuffled");
  pa_case_free(&contiguous);
  pa_case_free(&shuffled);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(paged_equals_contiguous_equals_shuffled),
      cmocka_unit_test(large_batch_contiguous_equals_shuffled),
      cmocka_unit_test(explicit_slots_equal_derived),
      cmocka_unit_test(skipped_slots_leave_cache_identical),
      cmocka_unit_test(window_covering_context_equals_no_window),
      cmocka_unit_test(quantized_write_read_round_trip),
      cmocka_unit_test(ring_buffer_window_equals_full_cache),
      cmocka_unit_test(absorbed_mla_equals_non_absorbed),
      cmocka_unit_test(default_query_positions_equal_absent),
      cmocka_unit_test(gpu_plan_equals_host_plan),
      cmocka_unit_test(skipped_slots_read_the_cached_prefix),
      cmocka_unit_test(chunked_prefill_equals_one_step),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
