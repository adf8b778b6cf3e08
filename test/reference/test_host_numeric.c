/* Host conversions and quantization (lib/host_numeric.c) against known bit patterns, exhaustive
 * round trips, and (fp16) the compiler's own _Float16 conversion as an independent oracle. */
#include "test_common.h"

static float bits_to_float(uint32_t b) {
  float x;
  memcpy(&x, &b, sizeof x);
  return x;
}

static void half_known_patterns(void **state) {
  (void)state;
  static const struct { float x; uint16_t bits; } cases[] = {
      {1.0f, 0x3c00}, {-2.0f, 0xc000}, {0.1f, 0x2e66}, {65504.0f, 0x7bff}, {65519.0f, 0x7bff},
      {65520.0f, 0x7c00}, {1e9f, 0x7c00}, {-INFINITY, 0xfc00}, {0x1p-14f, 0x0400},
      {0x1p-24f, 0x0001}, {0x1p-25f, 0x0000} /* tie to even */, {0x1.8p-25f, 0x0001},
      {0x1.8p-24f, 0x0002} /* tie: 1.5 units -> 2 */, {0x1.ffcp-15f, 0x0400} /* tie: rounds up to the smallest normal */, {0x1.ff8p-15f, 0x03ff},
      {1.0f + 0x1p-11f, 0x3c00} /* tie to even */, {1.0f + 0x3p-11f, 0x3c02}, {-0.0f, 0x8000},
      {0x3ffp-24f, 0x03ff},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (pa__float_to_half(cases[i].x) != cases[i].bits)
      fail_msg("float_to_half(%a) = 0x%04x, expected 0x%04x", cases[i].x,
               pa__float_to_half(cases[i].x), cases[i].bits);
  static const struct { uint16_t bits; float x; } exact[] = {
      {0x3c00, 1.0f}, {0xc000, -2.0f}, {0x7bff, 65504.0f}, {0x0400, 0x1p-14f},
      {0x0001, 0x1p-24f}, {0x03ff, 0x3ffp-24f}, {0x3555, 0x1.554p-2f}, {0x8000, -0.0f},
  };
  for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
    assert_true(pa__half_to_float(exact[i].bits) == exact[i].x);
  assert_true(isnan(pa__half_to_float(0x7e00)));
  uint16_t nan = pa__float_to_half(NAN);
  assert_true((nan & 0x7c00) == 0x7c00 && (nan & 0x3ff) != 0);
  assert_true(pa__half_to_float(0x0001) == 0x1p-24f);
  assert_true(isinf(pa__half_to_float(0x7c00)));
}

static void half_exhaustive_round_trip(void **state) {
  (void)state;
  for (uint32_t b = 0; b < 0x10000; b++) {
    if ((b & 0x7c00) == 0x7c00 && (b & 0x3ff)) continue; /* NaN */
    assert_int_equal(pa__float_to_half(pa__half_to_float((uint16_t)b)), b);
  }
}

/* Against the compiler's conversion (round to nearest even, IEEE binary16) on random floats of every
 * magnitude the type can reach, subnormals and overflow included. */
static void half_matches_compiler(void **state) {
  (void)state;
#ifdef __FLT16_MAX__
  uint64_t s = test_seed();
  for (int i = 0; i < 2000000; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t exponent = 95u + (uint32_t)((s >> 33) % 50u); /* 2^-32 .. 2^17 */
    uint32_t bits = ((uint32_t)(s >> 63) << 31) | (exponent << 23) | (uint32_t)((s >> 7) & 0x7fffffu);
    float x = bits_to_float(bits);
    _Float16 h = (_Float16)x;
    uint16_t want;
    memcpy(&want, &h, sizeof want);
    if (pa__float_to_half(x) != want)
      fail_msg("seed %" PRIu64 ": float_to_half(%a) = 0x%04x, compiler 0x%04x", test_seed(), x,
               pa__float_to_half(x), want);
    assert_true(pa__half_to_float(want) == (float)h);
  }
#else
  skip();
#endif
}

static void bfloat16_known_patterns(void **state) {
  (void)state;
  assert_int_equal(pa__float_to_bfloat16(1.0f), 0x3f80);
  assert_int_equal(pa__float_to_bfloat16(1.0f + 0x1p-8f), 0x3f80); /* tie to even */
  assert_int_equal(pa__float_to_bfloat16(1.0f + 0x3p-8f), 0x3f82); /* tie to even (up) */
  assert_int_equal(pa__float_to_bfloat16(1.0f + 0x1.8p-8f), 0x3f81);
  assert_int_equal(pa__float_to_bfloat16(3.14159265f), 0x4049);
  assert_int_equal(pa__float_to_bfloat16(-0.0f), 0x8000);
  assert_int_equal(pa__float_to_bfloat16(bits_to_float(0x7f7fffffu)), 0x7f80); /* FLT_MAX -> inf */
  assert_int_equal(pa__float_to_bfloat16(INFINITY), 0x7f80);
  assert_int_equal(pa__float_to_bfloat16(bits_to_float(0x00010000u)), 0x0001); /* subnormal */
  uint16_t nan = pa__float_to_bfloat16(NAN);
  assert_true((nan & 0x7f80) == 0x7f80 && (nan & 0x7f) != 0);
  assert_true(pa__bfloat16_to_float(0x4049) == 3.140625f);
  for (uint32_t b = 0; b < 0x10000; b++) {
    if ((b & 0x7f80) == 0x7f80 && (b & 0x7f)) continue;
    assert_int_equal(pa__float_to_bfloat16(pa__bfloat16_to_float((uint16_t)b)), b);
  }
}

static void e4m3_known_patterns(void **state) {
  (void)state;
  static const struct { float x; uint8_t bits; } cases[] = {
      {1.0f, 0x38}, {0.5f, 0x30}, {-1.5f, 0xbc}, {448.0f, 0x7e}, {-448.0f, 0xfe}, {240.0f, 0x77},
      {500.0f, 0x7e} /* saturates */, {1e9f, 0x7e}, {INFINITY, 0x7e}, {-INFINITY, 0xfe},
      {464.0f, 0x7e}, {0x1p-9f, 0x01}, {0x1p-10f, 0x00} /* tie to even */, {0x3p-10f, 0x02},
      {0x1p-6f, 0x08}, {0x7p-9f, 0x07}, {1.0625f, 0x38} /* tie to even */, {1.1875f, 0x3a},
      {30.0f, 0x5f}, {-0.0f, 0x80}, {0x1p-12f, 0x00},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (pa__float_to_e4m3(cases[i].x) != cases[i].bits)
      fail_msg("float_to_e4m3(%a) = 0x%02x, expected 0x%02x", cases[i].x,
               pa__float_to_e4m3(cases[i].x), cases[i].bits);
  assert_int_equal(pa__float_to_e4m3(NAN) & 0x7f, 0x7f);
  assert_true(pa__e4m3_to_float(0x7e) == 448.0f);
  assert_true(pa__e4m3_to_float(0x01) == 0x1p-9f);
  assert_true(pa__e4m3_to_float(0x08) == 0x1p-6f);
  assert_true(pa__e4m3_to_float(0xbc) == -1.5f);
  assert_true(isnan(pa__e4m3_to_float(0x7f)) && isnan(pa__e4m3_to_float(0xff)));
  for (uint32_t b = 0; b < 0x100; b++) {
    if ((b & 0x7f) == 0x7f) continue;
    assert_int_equal(pa__float_to_e4m3(pa__e4m3_to_float((uint8_t)b)), b);
  }
}

/* Nearest-even rounding of e4m3 checked against a brute-force search over the 254 finite codes. */
static void e4m3_is_nearest_even(void **state) {
  (void)state;
  uint64_t s = test_seed();
  for (int i = 0; i < 200000; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    float x = ldexpf((float)((s >> 40) & 0xffffff) / 16777216.0f - 0.5f, (int)((s >> 20) % 22) - 11);
    x *= 2.0f;
    uint8_t got = pa__float_to_e4m3(x);
    double best_error = INFINITY;
    int best = -1;
    for (int code = 0; code < 0x100; code++) {
      if ((code & 0x7f) == 0x7f) continue;
      double error = fabs((double)pa__e4m3_to_float((uint8_t)code) - x);
      if (error < best_error || (error == best_error && (code & 1) == 0 && (best & 1))) {
        best_error = error;
        best = code;
      }
    }
    if (fabs((double)pa__e4m3_to_float(got) - x) != best_error ||
        (pa__e4m3_to_float(got) != pa__e4m3_to_float((uint8_t)best)))
      fail_msg("seed %" PRIu64 ": e4m3(%a) = 0x%02x, nearest-even 0x%02x", test_seed(), x, got,
               best);
  }
}

static void quantize_int8(void **state) {
  (void)state;
  assert_int_equal((int8_t)pa__quantize(PA_DTYPE_INT8, 2.5f, 1.0f), 2);
  assert_int_equal((int8_t)pa__quantize(PA_DTYPE_INT8, 3.5f, 1.0f), 4);
  assert_int_equal((int8_t)pa__quantize(PA_DTYPE_INT8, -2.5f, 1.0f), -2);
  assert_int_equal((int8_t)pa__quantize(PA_DTYPE_INT8, 0.3f, 10.0f), 3);
  assert_int_equal((int8_t)pa__quantize(PA_DTYPE_INT8, 200.0f, 1.0f), 127);
  assert_int_equal((int8_t)pa__quantize(PA_DTYPE_INT8, -200.0f, 1.0f), -128);
  assert_int_equal((int8_t)pa__quantize(PA_DTYPE_INT8, -INFINITY, 1.0f), -128);
  assert_int_equal((int8_t)pa__quantize(PA_DTYPE_INT8, NAN, 1.0f), -128); /* as fmaxf on device */
}

static void quantize_fp8(void **state) {
  (void)state;
  assert_int_equal(pa__quantize(PA_DTYPE_FLOAT8_E4M3FN, 0.3f, 100.0f), 0x5f); /* 30 */
  assert_int_equal(pa__quantize(PA_DTYPE_FLOAT8_E4M3FN, 5.0f, 100.0f), 0x7e); /* 500 saturates */
  assert_int_equal(pa__quantize(PA_DTYPE_FLOAT8_E4M3FN, -5.0f, 100.0f), 0xfe);
  assert_int_equal(pa__quantize(PA_DTYPE_FLOAT8_E4M3FN, INFINITY, 1.0f), 0x7e);
  assert_int_equal(pa__quantize(PA_DTYPE_FLOAT8_E4M3FN, NAN, 1.0f), 0xfe);
}

/* dequantize(quantize(x)) is within half a quantization step of x, for in-range x: int8 steps are
 * the scale, fp8 steps 2^-3 of the binade (2^-9 below 2^-6), in units of the scale. */
static void quantize_round_trip(void **state) {
  (void)state;
  uint64_t s = test_seed();
  for (int i = 0; i < 100000; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    float scale = 0.008f + (float)((s >> 40) & 0xffff) / 65536.0f * 0.008f; /* |y| <= 125 */
    float x = (float)((s >> 16) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
    float inv = 1.0f / scale;
    float y = x * inv;
    float int8_back = (float)(int8_t)pa__quantize(PA_DTYPE_INT8, x, inv);
    if (fabsf(int8_back - y) > 0.5f)
      fail_msg("seed %" PRIu64 ": int8 x=%a scale=%a -> %g", test_seed(), x, scale, int8_back);
    float fp8_back = pa__e4m3_to_float(pa__quantize(PA_DTYPE_FLOAT8_E4M3FN, x, inv));
    float half_step = fabsf(y) >= 0x1p-6f ? ldexpf(1.0f, ilogbf(y) - 4) : 0x1p-10f;
    if (fabsf(fp8_back - y) > half_step)
      fail_msg("seed %" PRIu64 ": fp8 x=%a scale=%a -> %g", test_seed(), x, scale, fp8_back);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(half_known_patterns),     cmocka_unit_test(half_exhaustive_round_trip),
      cmocka_unit_test(half_matches_compiler),   cmocka_unit_test(bfloat16_known_patterns),
      cmocka_unit_test(e4m3_known_patterns),     cmocka_unit_test(e4m3_is_nearest_even),
      cmocka_unit_test(quantize_int8),           cmocka_unit_test(quantize_fp8),
      cmocka_unit_test(quantize_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
