/* The reference executor against hand-computed cases, one per feature of doc/semantics.md: tiny
 * problems (1-4 heads, head_size 8 or 16, a few keys) whose inputs are set by hand and whose
 * expected values are computed here from the formulas. */
#include "test_common.h"

/* one rounding of the output to T (relative 2^-11 for fp16, 2^-8 for bf16), with margin */
#define T_TOL 1e-3
#define BF16_TOL 8e-3

/* One head, head_size 8, scale 1, one sequence: one cached key (position 0) and one new token
 * (position 1). */
static void tiny_config(pa_case_config *cfg) {
  static const int32_t one = 1;
  pa_case_config_init(cfg);
  cfg->seed = test_seed();
  cfg->attrs.num_heads = 1;
  cfg->attrs.kv_num_heads = 1;
  cfg->attrs.scale = 1.0f;
  cfg->head_size = 8;
  cfg->q_lens = &one;
  cfg->past_lens = &one;
}

static void build(pa_case *c, const pa_case_config *cfg) {
  expect_status(pa_case_build(c, cfg), PA_SUCCESS);
}

static void run(pa_case *c) { expect_status(pa_case_run_reference(c), PA_SUCCESS); }

/* Row `head` of token t of a T input (query / key / value), channels [0, n). */
static void set_row(pa_case *c, int input, int64_t t, int32_t head, const float *x, int32_t n) {
  int64_t width = c->inputs_desc[input].dims[1];
  for (int32_t ch = 0; ch < n; ch++)
    set_input(c, input, t * width + (int64_t)head * c->config.head_size + ch, x[ch]);
}

/* Cached K/V of position pos of sequence b, KV head h (T caches). */
static void set_cached(pa_case *c, int32_t b, int64_t pos, int32_t h, const float *k, const float *v) {
  int64_t slot = slot_of_position(c, b, pos);
  for (int32_t ch = 0; ch < c->config.head_size; ch++) {
    set_input(c, PA_IN_KEY_CACHE, cache_index(c, slot, h, ch), k[ch]);
    if (v) set_input(c, PA_IN_VALUE_CACHE, cache_index(c, slot, h, ch), v[ch]);
  }
}

static float cached(const pa_case *c, int input, int32_t b, int64_t pos, int32_t h, int32_t ch) {
  return pa_case_input(c, input, cache_index(c, slot_of_position(c, b, pos), h, ch));
}

/* Softmax over n logits with an optional sink (NULL = none), as in semantics.md. */
static void softmax(const double *logits, int n, const double *sink, double *p) {
  double m = sink ? *sink : -INFINITY;
  for (int i = 0; i < n; i++) m = fmax(m, logits[i]);
  double den = sink ? exp(*sink - m) : 0.0;
  for (int i = 0; i < n; i++) den += exp(logits[i] - m);
  for (int i = 0; i < n; i++) p[i] = exp(logits[i] - m) / den;
}

static void expect_head(const pa_case *c, int64_t t, int32_t h, const double *p, const float *const *v,
                        int n, const char *what, double tol) {
  for (int32_t ch = 0; ch < c->v_head_size; ch++) {
    double want = 0.0;
    for (int i = 0; i < n; i++) want += p[i] * v[i][ch];
    expect_close(pa_case_output(c, t, h, ch), want, tol, "%s: token %" PRId64 " head %d ch %d",
                 what, t, h, ch);
  }
}

static const float q_unit[8] = {1, 0, 0, 0, 0, 0, 0, 0};
static const float k_one[8] = {1, 0.5f, -0.25f, 0, 0, 0, 0, 0};
static const float k_two[8] = {2, 0, 0, 0.75f, 0, 0, 0, 0};
static const float v_a[8] = {1, 2, 3, 4, -1, -2, -3, -4};
static const float v_b[8] = {0.5f, -0.5f, 0.25f, 0, 1, 1, 1, 1};

/* q = e0, k0 . q = 1, k1 . q = 2: P = (1, e) / (1 + e), in fp16 and bf16. Also checks the new K/V
 * reached the cache unchanged (T in, T cache). */
static void two_keys_softmax_in(pa_dtype dtype, double tol) {
  pa_case_config cfg;
  tiny_config(&cfg);
  cfg.dtype = dtype;
  pa_case c;
  build(&c, &cfg);
  set_row(&c, PA_IN_QUERY, 0, 0, q_unit, 8);
  set_row(&c, PA_IN_KEY, 0, 0, k_two, 8);
  set_row(&c, PA_IN_VALUE, 0, 0, v_b, 8);
  set_cached(&c, 0, 0, 0, k_one, v_a);
  run(&c);
  double logits[2] = {1.0, 2.0}, p[2];
  softmax(logits, 2, NULL, p);
  const float *v[2] = {v_a, v_b};
  expect_head(&c, 0, 0, p, v, 2, dtype == PA_DTYPE_BFLOAT16 ? "two keys, bf16" : "two keys, fp16",
              tol);
  for (int ch = 0; ch < 8; ch++) {
    assert_true(cached(&c, PA_IN_KEY_CACHE, 0, 1, 0, ch) == k_two[ch]);
    assert_true(cached(&c, PA_IN_VALUE_CACHE, 0, 1, 0, ch) == v_b[ch]);
  }
  pa_case_free(&c);
}

static void two_keys_softmax(void **state) {
  (void)state;
  two_keys_softmax_in(PA_DTYPE_FLOAT16, T_TOL);
  two_keys_softmax_in(PA_DTYPE_BFLOAT16, BF16_TOL);
}

/* scale 0 = 1/sqrt(head_size); softcap after scale; sink in the denominator only. */
static void default_scale_softcap_sink(void **state) {
  (void)state;
  for (int variant = 0; variant < 3; variant++) {
    pa_case_config cfg;
    tiny_config(&cfg);
    cfg.attrs.scale = 0.0f;
    if (variant >= 1) cfg.attrs.softcap = 0.5f;
    cfg.head_sink = variant == 2;
    pa_case c;
    build(&c, &cfg);
    float q[8] = {2, 0, 0, 0, 0, 0, 0, 0};
    set_row(&c, PA_IN_QUERY, 0, 0, q, 8);
    set_row(&c, PA_IN_KEY, 0, 0, k_two, 8);
    set_row(&c, PA_IN_VALUE, 0, 0, v_b, 8);
    set_cached(&c, 0, 0, 0, k_one, v_a);
    if (cfg.head_sink) set_input(&c, PA_IN_HEAD_SINK, 0, 0.75f);
    run(&c);
    double logits[2] = {2.0 / sqrt(8.0), 4.0 / sqrt(8.0)}, p[2], sink = 0.75;
    for (int i = 0; i < 2 && variant >= 1; i++) logits[i] = 0.5 * tanh(logits[i] / 0.5);
    softmax(logits, 2, cfg.head_sink ? &sink : NULL, p);
    const float *v[2] = {v_a, v_b};
    expect_head(&c, 0, 0, p, v, 2, variant == 0 ? "default scale" : variant == 1 ? "softcap" : "sink", T_TOL);
    pa_case_free(&c);
  }
}

/* Four query heads on two KV heads: heads 0,1 read KV head 0 and heads 2,3 KV head 1. With a single
 * admitted key (prefill token 0 of a fresh sequence) the output is that key's V exactly. */
static void gqa_head_mapping(void **state) {
  (void)state;
  static const int32_t q_len = 1, past = 0;
  pa_case_config cfg;
  tiny_config(&cfg);
  cfg.attrs.num_heads = 4;
  cfg.attrs.kv_num_heads = 2;
  cfg.q_lens = &q_len;
  cfg.past_lens = &past;
  pa_case c;
  build(&c, &cfg);
  run(&c);
  for (int32_t h = 0; h < 4; h++)
    for (int32_t ch = 0; ch < 8; ch++)
      expect_close(pa_case_output(&c, 0, h, ch), pa_case_input(&c, PA_IN_VALUE, (h / 2) * 8 + ch),
                   0.0, "gqa head %d ch %d", h, ch);
  pa_case_free(&c);
}

/* Prefill of three tokens, fresh sequence, all keys identical so that every admitted key has the
 * same logit: token j averages the V of keys [0, j] (causal) or all three (is_causal = 0), and with
 * a window W the V of keys [j - W + 1, j]. */
static void causal_window_full_context(void **state) {
  (void)state;
  static const int32_t q_len = 3, past = 0;
  for (int variant = 0; variant < 4; variant++) {
    pa_case_config cfg;
    tiny_config(&cfg);
    cfg.q_lens = &q_len;
    cfg.past_lens = &past;
    if (variant == 1) cfg.attrs.is_causal = 0;
    if (variant == 2) cfg.attrs.local_window_size = 2;
    if (variant == 3) cfg.attrs.local_window_size = 1;
    pa_case c;
    build(&c, &cfg);
    for (int t = 0; t < 3; t++) set_row(&c, PA_IN_KEY, t, 0, k_one, 8);
    run(&c);
    for (int t = 0; t < 3; t++) {
      int first = 0, last = t;
      if (variant == 1) last = 2;
      if (variant >= 2) first = t - cfg.attrs.local_window_size + 1 > 0 ? t - cfg.attrs.local_window_size + 1 : 0;
      for (int ch = 0; ch < 8; ch++) {
        double want = 0.0;
        for (int k = first; k <= last; k++) want += pa_case_input(&c, PA_IN_VALUE, k * 8 + ch);
        want /= last - first + 1;
        expect_close(pa_case_output(&c, t, 0, ch), want, T_TOL, "variant %d token %d ch %d", variant,
                     t, ch);
      }
    }
    pa_case_free(&c);
  }
}

/* attention_bias added after softcap, broadcast over batch and heads, or full; keys beyond the bias
 * capacity are masked. Two sequences, two heads: bias[b][h][0][k] differs per (b, h). */
static void attention_bias_broadcast_and_capacity(void **state) {
  (void)state;
  static const int32_t q_lens[2] = {1, 1}, past[2] = {1, 1};
  for (int variant = 0; variant < 3; variant++) {
    pa_case_config cfg;
    tiny_config(&cfg);
    cfg.attrs.num_heads = 2;
    cfg.batch_size = 2;
    cfg.q_lens = q_lens;
    cfg.past_lens = past;
    cfg.attrs.softcap = 3.0f;
    cfg.bias_batch = variant == 0 ? 1 : 2;
    cfg.bias_heads = variant == 0 ? 1 : 2;
    cfg.bias_kv_capacity = variant == 2 ? 1 : 2; /* variant 2 masks key 1 */
    pa_case c;
    build(&c, &cfg);
    for (int t = 0; t < 2; t++) {
      for (int h = 0; h < 2; h++) set_row(&c, PA_IN_QUERY, t, h, q_unit, 8);
      set_row(&c, PA_IN_KEY, t, 0, k_two, 8);
      set_row(&c, PA_IN_VALUE, t, 0, v_b, 8);
      set_cached(&c, t, 0, 0, k_one, v_a);
    }
    int64_t kv_cap = cfg.bias_kv_capacity;
    int64_t bias_count = (int64_t)cfg.bias_batch * cfg.bias_heads * kv_cap;
    /* differences between a row's two entries vary per (b, h): softmax ignores a common shift */
    for (int64_t i = 0; i < bias_count; i++)
      set_input(&c, PA_IN_ATTENTION_BIAS, i, 0.25f * (float)((i * 7) % 5) - 0.5f);
    run(&c);
    const float *v[2] = {v_a, v_b};
    for (int b = 0; b < 2; b++)
      for (int h = 0; h < 2; h++) {
        int64_t bias_b = cfg.bias_batch == 1 ? 0 : b, bias_h = cfg.bias_heads == 1 ? 0 : h;
        int64_t row = (bias_b * cfg.bias_heads + bias_h) * kv_cap;
        double logits[2], p[2] = {0, 0};
        for (int k = 0; k < 2; k++)
          logits[k] = 3.0 * tanh((k + 1) / 3.0) +
                      (k < kv_cap ? pa_case_input(&c, PA_IN_ATTENTION_BIAS, row + k) : 0.0);
        softmax(logits, kv_cap == 1 ? 1 : 2, NULL, p);
        expect_head(&c, b, h, p, v, 2, "bias", T_TOL);
      }
    pa_case_free(&c);
  }
}

/* Unmapped blocks (-1 and ids >= num_blocks) are masked; a row with nothing admitted is zeros, sink
 * or not; output_qk holds -inf / 0 there. */
static void unmapped_blocks_and_zero_rows(void **state) {
  (void)state;
  static const int32_t q_len = 1, past = 20;
  for (int variant = 0; variant < 2; variant++) {
    pa_case_config cfg;
    tiny_config(&cfg);
    cfg.q_lens = &q_len;
    cfg.past_lens = &past;
    cfg.head_sink = 1;
    cfg.attrs.qk_output = 1;
    int32_t table[2] = {variant == 0 ? -1 : 99, 1};
    cfg.block_table = table;
    cfg.blocks_per_seq = 2;
    cfg.num_blocks = 4;
    pa_case c;
    build(&c, &cfg);
    float k_zero[8] = {0};
    for (int pos = 16; pos < 20; pos++) set_cached(&c, 0, pos, 0, k_zero, v_a);
    set_row(&c, PA_IN_KEY, 0, 0, k_zero, 8);
    set_row(&c, PA_IN_VALUE, 0, 0, v_a, 8);
    set_input(&c, PA_IN_HEAD_SINK, 0, 0.0f);
    run(&c);
    /* keys 16..20 admitted with logit 0, plus the sink: P = 1/6 each, output 5/6 v_a */
    for (int ch = 0; ch < 8; ch++)
      expect_close(pa_case_output(&c, 0, 0, ch), 5.0 / 6.0 * v_a[ch], T_TOL, "unmapped ch %d", ch);
    for (int k = 0; k < 32; k++)
      expect_close(pa_case_output_qk(&c, 0, 0, k), k >= 16 && k <= 20 ? 0.0 : -INFINITY, 0.0,
                   "output_qk key %d", k);
    pa_case_free(&c);
  }
  /* every block unmapped: zeros despite the sink */
  pa_case_config cfg;
  tiny_config(&cfg);
  cfg.head_sink = 1;
  int32_t table[1] = {-1};
  cfg.block_table = table;
  cfg.blocks_per_seq = 1;
  pa_case c;
  build(&c, &cfg);
  run(&c);
  for (int ch = 0; ch < 8; ch++) assert_true(pa_case_output(&c, 0, 0, ch) == 0.0f);
  pa_case_free(&c);
}

/* output_qk mode 1 (final logits) and 2 (probabilities) in each type; -inf / 0 beyond kv_len and for
 * causally masked keys. Prefill of two tokens after one cached key. */
static void output_qk_modes(void **state) {
  (void)state;
  static const int32_t q_len = 2, past = 1;
  static const pa_dtype types[3] = {PA_DTYPE_FLOAT32, PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16};
  for (int mode = 1; mode <= 2; mode++)
    for (int ti = 0; ti < 3; ti++) {
      pa_case_config cfg;
      tiny_config(&cfg);
      cfg.q_lens = &q_len;
      cfg.past_lens = &past;
      cfg.attrs.qk_output = mode;
      cfg.attrs.softcap = 4.0f;
      cfg.qk_dtype = types[ti];
      cfg.qk_capacity = 6;
      pa_case c;
      build(&c, &cfg);
      set_cached(&c, 0, 0, 0, k_one, v_a);
      set_row(&c, PA_IN_KEY, 0, 0, k_two, 8);
      set_row(&c, PA_IN_KEY, 1, 0, k_one, 8);
      for (int t = 0; t < 2; t++) set_row(&c, PA_IN_QUERY, t, 0, q_unit, 8);
      run(&c);
      double tol = types[ti] == PA_DTYPE_FLOAT32 ? 1e-6 : types[ti] == PA_DTYPE_FLOAT16 ? 1e-3 : 8e-3;
      double raw[3] = {1.0, 2.0, 1.0};
      for (int t = 0; t < 2; t++) {
        int n = t + 2; /* token t at position t + 1 sees keys 0..t+1 */
        double logits[3], p[3];
        for (int k = 0; k < n; k++) logits[k] = 4.0 * tanh(raw[k] / 4.0);
        softmax(logits, n, NULL, p);
        for (int k = 0; k < 6; k++) {
          double want = k < n ? (mode == 1 ? logits[k] : p[k]) : (mode == 1 ? -INFINITY : 0.0);
          expect_close(pa_case_output_qk(&c, 0, t, k), want, tol, "mode %d type %d token %d key %d",
                       mode, ti, t, k);
        }
      }
      pa_case_free(&c);
    }
}

/* RoPE of the written K (and of Q, seen through the score) for half-split and interleaved pairs, an
 * offset, a position from query_positions, and a position beyond the table (not rotated). */
static void rotary_variants(void **state) {
  (void)state;
  static const int32_t q_len = 1, past = 3;
  for (int variant = 0; variant < 4; variant++) {
    pa_case_config cfg;
    tiny_config(&cfg);
    cfg.head_size = 16;
    cfg.q_lens = &q_len;
    cfg.past_lens = &past;
    cfg.attrs.do_rotary = 1;
    cfg.attrs.rotary_interleaved = variant == 1;
    cfg.attrs.rotary_offset = variant == 2 ? 8 : 0;
    cfg.rotary_dim = 8;
    int32_t position = variant == 3 ? 40 : 5; /* the table has 32 rows: 40 passes through */
    cfg.query_positions = &position;
    cfg.blocks_per_seq = 3;
    cfg.rotary_positions = 32;
    pa_case c;
    build(&c, &cfg);
    run(&c);
    int64_t slot = slot_of_position(&c, 0, position);
    for (int i = 0; i < 4; i++) {
      int off = cfg.attrs.rotary_offset;
      int a = variant == 1 ? off + 2 * i : off + i, b = variant == 1 ? off + 2 * i + 1 : off + i + 4;
      double x1 = pa_case_input(&c, PA_IN_KEY, a), x2 = pa_case_input(&c, PA_IN_KEY, b);
      double cs = 1.0, sn = 0.0;
      if (variant != 3) {
        cs = pa_case_input(&c, PA_IN_COS_CACHE, position * 4 + i);
        sn = pa_case_input(&c, PA_IN_SIN_CACHE, position * 4 + i);
      }
      expect_close(pa_case_input(&c, PA_IN_KEY_CACHE, cache_index(&c, slot, 0, a)), x1 * cs - x2 * sn,
                   T_TOL, "variant %d pair %d x1", variant, i);
      expect_close(pa_case_input(&c, PA_IN_KEY_CACHE, cache_index(&c, slot, 0, b)), x2 * cs + x1 * sn,
                   T_TOL, "variant %d pair %d x2", variant, i);
    }
    for (int ch = 0; ch < 16; ch++) { /* channels outside the rotary range pass through */
      int off = cfg.attrs.rotary_offset;
      if (variant != 3 && ch >= off && ch < off + 8) continue;
      assert_true(pa_case_input(&c, PA_IN_KEY_CACHE, cache_index(&c, slot, 0, ch)) ==
                  pa_case_input(&c, PA_IN_KEY, ch));
    }
    pa_case_free(&c);
  }
}

/* QK-Norm on K: x / sqrt(mean(x^2) + eps) * w, written to the cache in T. */
static void qk_norm_written_key(void **state) {
  (void)state;
  pa_case_config cfg;
  tiny_config(&cfg);
  cfg.qk_norm = 1;
  cfg.attrs.qk_norm_epsilon = 0.01f;
  pa_case c;
  build(&c, &cfg);
  run(&c);
  double sum = 0.0;
  for (int ch = 0; ch < 8; ch++) sum += pow(pa_case_input(&c, PA_IN_KEY, ch), 2);
  double inv_rms = 1.0 / sqrt(sum / 8.0 + 0.01);
  for (int ch = 0; ch < 8; ch++)
    expect_close(cached(&c, PA_IN_KEY_CACHE, 0, 1, 0, ch),
                 pa_case_input(&c, PA_IN_KEY, ch) * inv_rms * pa_case_input(&c, PA_IN_K_NORM_WEIGHT, ch),
                 T_TOL, "qk_norm ch %d", ch);
  for (int ch = 0; ch < 8; ch++) /* V is never normalized */
    assert_true(cached(&c, PA_IN_VALUE_CACHE, 0, 1, 0, ch) == pa_case_input(&c, PA_IN_VALUE, ch));
  pa_case_free(&c);
}

/* int8 / fp8 caches: the written codes are quantize(x, 1/scale) with K and V quantized
 * independently (K per tensor, V per channel, and the other way round); the output uses q * s. */
static void quantized_cache_write_and_read(void **state) {
  (void)state;
  static const pa_dtype types[2] = {PA_DTYPE_INT8, PA_DTYPE_FLOAT8_E4M3FN};
  for (int ti = 0; ti < 2; ti++)
    for (int swap = 0; swap < 2; swap++) {
      pa_case_config cfg;
      tiny_config(&cfg);
      cfg.attrs.kv_num_heads = 1;
      cfg.cache_dtype = types[ti];
      cfg.attrs.k_quant_type = swap ? PA_QUANT_PER_CHANNEL : PA_QUANT_PER_TENSOR;
      cfg.attrs.v_quant_type = swap ? PA_QUANT_PER_TENSOR : PA_QUANT_PER_CHANNEL;
      pa_case c;
      build(&c, &cfg);
      run(&c);
      for (int ch = 0; ch < 8; ch++) {
        float ks = c.inputs_desc[PA_IN_K_SCALE].rank == 1 ? pa_case_input(&c, PA_IN_K_SCALE, 0)
                                                          : pa_case_input(&c, PA_IN_K_SCALE, ch);
        float vs = c.inputs_desc[PA_IN_V_SCALE].rank == 1 ? pa_case_input(&c, PA_IN_V_SCALE, 0)
                                                          : pa_case_input(&c, PA_IN_V_SCALE, ch);
        int64_t at = cache_index(&c, slot_of_position(&c, 0, 1), 0, ch);
        assert_int_equal(((uint8_t *)c.inputs[PA_IN_KEY_CACHE])[at],
                         pa__quantize(types[ti], pa_case_input(&c, PA_IN_KEY, ch), 1.0f / ks));
        assert_int_equal(((uint8_t *)c.inputs[PA_IN_VALUE_CACHE])[at],
                         pa__quantize(types[ti], pa_case_input(&c, PA_IN_VALUE, ch), 1.0f / vs));
      }
      /* read side: dequantize both keys by hand and compare the output */
      double logits[2] = {0, 0}, p[2];
      float values[2][8];
      for (int k = 0; k < 2; k++) {
        int64_t slot = slot_of_position(&c, 0, k);
        for (int ch = 0; ch < 8; ch++) {
          float ks = pa_case_input(&c, PA_IN_K_SCALE, c.inputs_desc[PA_IN_K_SCALE].rank == 1 ? 0 : ch);
          float vs = pa_case_input(&c, PA_IN_V_SCALE, c.inputs_desc[PA_IN_V_SCALE].rank == 1 ? 0 : ch);
          logits[k] += pa_case_input(&c, PA_IN_QUERY, ch) *
                       pa_case_input(&c, PA_IN_KEY_CACHE, cache_index(&c, slot, 0, ch)) * ks;
          values[k][ch] = pa_case_input(&c, PA_IN_VALUE_CACHE, cache_index(&c, slot, 0, ch)) * vs;
        }
      }
      softmax(logits, 2, NULL, p);
      const float *v[2] = {values[0], values[1]};
      expect_head(&c, 0, 0, p, v, 2, "quantized read", T_TOL);
      pa_case_free(&c);
    }
}

/* Slot writes: explicit slot_mapping writes where it says (even into another sequence's block);
 * -1, negative and out-of-range slots write nothing. */
static void explicit_and_skipped_slots(void **state) {
  (void)state;
  static const int32_t q_len = 4, past = 0;
  pa_case_config cfg;
  tiny_config(&cfg);
  cfg.q_lens = &q_len;
  cfg.past_lens = &past;
  cfg.slots = PA_CASE_SLOTS_EXPLICIT;
  cfg.num_blocks = 3;
  int32_t slots[4] = {40, -1, -7, 48};
  cfg.slot_mapping = slots;
  pa_case c;
  build(&c, &cfg);
  size_t bytes = c.inputs_bytes[PA_IN_KEY_CACHE];
  uint8_t *before_k = malloc(bytes), *before_v = malloc(bytes);
  memcpy(before_k, c.inputs[PA_IN_KEY_CACHE], bytes);
  memcpy(before_v, c.inputs[PA_IN_VALUE_CACHE], bytes);
  run(&c);
  size_t row = (size_t)8 * 2; /* one slot of one head, fp16 */
  for (size_t i = 0; i < bytes; i++) {
    int in_slot_40 = i >= 40 * row && i < 41 * row;
    if (in_slot_40) continue;
    assert_int_equal(((uint8_t *)c.inputs[PA_IN_KEY_CACHE])[i], before_k[i]);
    assert_int_equal(((uint8_t *)c.inputs[PA_IN_VALUE_CACHE])[i], before_v[i]);
  }
  for (int ch = 0; ch < 8; ch++) {
    assert_true(pa_case_input(&c, PA_IN_KEY_CACHE, 40 * 8 + ch) == pa_case_input(&c, PA_IN_KEY, ch));
    assert_true(pa_case_input(&c, PA_IN_VALUE_CACHE, 40 * 8 + ch) ==
                pa_case_input(&c, PA_IN_VALUE, ch));
  }
  free(before_k);
  free(before_v);
  pa_case_free(&c);
}

/* Packed QKV equals separate Q/K/V carrying the same rows: outputs and caches identical. */
static void packed_equals_separate(void **state) {
  (void)state;
  static const int32_t q_lens[2] = {3, 1}, past[2] = {5, 17};
  pa_case_config cfg;
  tiny_config(&cfg);
  cfg.attrs.num_heads = 4;
  cfg.attrs.kv_num_heads = 2;
  cfg.batch_size = 2;
  cfg.q_lens = q_lens;
  cfg.past_lens = past;
  cfg.attrs.do_rotary = 1;
  cfg.qk_norm = 1;
  pa_case packed, separate;
  cfg.packed_qkv = 1;
  build(&packed, &cfg);
  cfg.packed_qkv = 0;
  build(&separate, &cfg);
  int64_t width = (4 + 2 * 2) * 8;
  for (int64_t t = 0; t < packed.token_count; t++)
    for (int64_t i = 0; i < width; i++) {
      float x = pa_case_input(&packed, PA_IN_QUERY, t * width + i);
      if (i < 32) set_input(&separate, PA_IN_QUERY, t * 32 + i, x);
      else if (i < 48) set_input(&separate, PA_IN_KEY, t * 16 + i - 32, x);
      else set_input(&separate, PA_IN_VALUE, t * 16 + i - 48, x);
    }
  run(&packed);
  run(&separate);
  expect_outputs_close(&packed, &separate, 0.0, "packed vs separate");
  assert_memory_equal(packed.inputs[PA_IN_KEY_CACHE], separate.inputs[PA_IN_KEY_CACHE],
                      packed.inputs_bytes[PA_IN_KEY_CACHE]);
  assert_memory_equal(packed.inputs[PA_IN_VALUE_CACHE], separate.inputs[PA_IN_VALUE_CACHE],
                      packed.inputs_bytes[PA_IN_VALUE_CACHE]);
  pa_case_free(&packed);
  pa_case_free(&separate);
}

/* LATENT: V is the leading v_head_size channels of the cached latent row. */
static void latent_value_is_key_prefix(void **state) {
  (void)state;
  pa_case_config cfg;
  tiny_config(&cfg);
  cfg.head_size = 16;
  cfg.attrs.kv_cache_layout = PA_KV_CACHE_LAYOUT_LATENT;
  cfg.attrs.v_head_size = 8;
  cfg.attrs.num_heads = 2;
  pa_case c;
  build(&c, &cfg);
  run(&c);
  assert_int_equal(c.outputs_desc[PA_OUT_OUTPUT].dims[1], 16);
  for (int h = 0; h < 2; h++) {
    double logits[2] = {0, 0}, p[2];
    float values[2][8];
    for (int k = 0; k < 2; k++)
      for (int ch = 0; ch < 16; ch++) {
        float kx = cached(&c, PA_IN_KEY_CACHE, 0, k, 0, ch);
        logits[k] += pa_case_input(&c, PA_IN_QUERY, h * 16 + ch) * kx;
        if (ch < 8) values[k][ch] = kx;
      }
    softmax(logits, 2, NULL, p);
    const float *v[2] = {values[0], values[1]};
    expect_head(&c, 0, h, p, v, 2, "latent", T_TOL);
  }
  pa_case_free(&c);
}

/* token_count == 0 succeeds and touches nothing. */
static void empty_step(void **state) {
  (void)state;
  static const int32_t q_len = 0, past = 5;
  pa_case_config cfg;
  tiny_config(&cfg);
  cfg.q_lens = &q_len;
  cfg.past_lens = &past;
  pa_case c;
  build(&c, &cfg);
  size_t bytes = c.inputs_bytes[PA_IN_KEY_CACHE];
  uint8_t *before = malloc(bytes);
  memcpy(before, c.inputs[PA_IN_KEY_CACHE], bytes);
  run(&c);
  assert_memory_equal(before, c.inputs[PA_IN_KEY_CACHE], bytes);
  free(before);
  pa_case_free(&c);
}

/* Bad device data: non-monotonic / out-of-range cu, negative and huge past_seqlens, block ids and
 * slots out of range. Never out of bounds (check with -Db_sanitize=address,undefined);
 * tokens without a sequence get zero rows and write nothing. */
static void untrusted_device_data(void **state) {
  (void)state;
  static const int32_t q_lens[3] = {2, 2, 2}, past[3] = {3, 3, 3};
  pa_case_config cfg;
  tiny_config(&cfg);
  cfg.batch_size = 3;
  cfg.q_lens = q_lens;
  cfg.past_lens = past;
  cfg.attrs.qk_output = 2;
  cfg.bias_batch = 3;
  cfg.bias_heads = 1;
  pa_case c;
  build(&c, &cfg);
  int32_t *cu = c.inputs[PA_IN_CUMULATIVE_SEQUENCE_LENGTH];
  int32_t *past_in = c.inputs[PA_IN_PAST_SEQLENS];
  int32_t *table = c.inputs[PA_IN_BLOCK_TABLE];
  /* sequence 0 claims tokens 0..3 (cu[1] = 4 > cu[2] = 2), sequence 1 is empty, sequence 2 owns
   * token 4 (cu[3] = 5 < token_count: token 5 has no sequence) */
  cu[0] = 0, cu[1] = 4, cu[2] = 2, cu[3] = 5;
  past_in[0] = 2000000000; /* huge: positions far beyond the table */
  past_in[2] = -3;         /* negative: token 4 (j = 2) at position -1 */
  table[0] = 1 << 30;
  table[1] = -5;
  run(&c);
  for (int ch = 0; ch < 8; ch++) {
    assert_true(pa_case_output(&c, 5, 0, ch) == 0.0f);
    assert_true(pa_case_output(&c, 4, 0, ch) == 0.0f);
    assert_true(pa_case_output(&c, 0, 0, ch) == 0.0f); /* no mapped key */
  }
  for (int64_t k = 0; k < cfg.qk_capacity; k++) assert_true(pa_case_output_qk(&c, 0, 5, k) == 0.0f);
  pa_case_free(&c);

  /* out-of-range slots are skipped; the outputs stay finite */
  cfg.slots = PA_CASE_SLOTS_EXPLICIT;
  int32_t slots[6] = {-1, 1 << 30, -100, 3, 2, 1};
  cfg.slot_mapping = slots;
  cfg.attrs.qk_output = 0;
  build(&c, &cfg);
  run(&c);
  for (int64_t t = 0; t < c.token_count; t++)
    for (int ch = 0; ch < 8; ch++) assert_false(isnan(pa_case_output(&c, t, 0, ch)));
  pa_case_free(&c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(two_keys_softmax),
      cmocka_unit_test(default_scale_softcap_sink),
      cmocka_unit_test(gqa_head_mapping),
      cmocka_unit_test(causal_window_full_context),
      cmocka_unit_test(attention_bias_broadcast_and_capacity),
      cmocka_unit_test(unmapped_blocks_and_zero_rows),
      cmocka_unit_test(output_qk_modes),
      cmocka_unit_test(rotary_variants),
      cmocka_unit_test(qk_norm_written_key),
      cmocka_unit_test(quantized_cache_write_and_read),
      cmocka_unit_test(explicit_and_skipped_slots),
      cmocka_unit_test(packed_equals_separate),
      cmocka_unit_test(latent_value_is_key_prefix),
      cmocka_unit_test(empty_step),
      cmocka_unit_test(untrusted_device_data),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
