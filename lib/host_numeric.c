/* Host conversions by bit manipulation, so that rounding is exact and independent of the compiler's
 * floating-point flags. */
#include "host_numeric.h"

#include <math.h>
#include <string.h>

static uint32_t float_bits(float x) {
  uint32_t b;
  memcpy(&b, &x, sizeof b);
  return b;
}

static float bits_float(uint32_t b) {
  float x;
  memcpy(&x, &b, sizeof x);
  return x;
}

/* Rounds value >> shift to nearest, ties to even (shift in 1..31). */
static uint32_t shift_round_even(uint32_t value, uint32_t shift) {
  uint32_t kept = value >> shift;
  uint32_t rest = value & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (kept & 1u))) kept++;
  return kept;
}

float pa__half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return bits_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    float magnitude = ldexpf((float)mantissa, -24); /* subnormal (or zero): exact */
    return sign ? -magnitude : magnitude;
  }
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

uint16_t pa__float_to_half(float x) {
  uint32_t b = float_bits(x);
  uint16_t sign = (uint16_t)((b >> 16) & 0x8000u);
  uint32_t magnitude = b & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);   /* NaN */
  if (magnitude >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520: infinity */
  uint32_t exponent = magnitude >> 23;
  if (exponent < 113) { /* below 2^-14: a subnormal half, in units of 2^-24 */
    if (exponent < 101) return sign; /* below 2^-26: rounds to zero */
    uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
    /* value = significand * 2^(exponent - 150) = units * 2^-24 */
    return (uint16_t)(sign | shift_round_even(significand, 126u - exponent));
  }
  /* normal: rebias and round the mantissa to 10 bits; a carry moves into the exponent */
  uint32_t rebased = magnitude - (112u << 23);
  return (uint16_t)(sign | shift_round_even(rebased, 13));
}

float pa__bfloat16_to_float(uint16_t bits) { return bits_float((uint32_t)bits << 16); }

uint16_t pa__float_to_bfloat16(float x) {
  uint32_t b = float_bits(x);
  if ((b & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((b >> 16) | 0x40u); /* quiet NaN */
  uint32_t rounded = b + 0x7fffu + ((b >> 16) & 1u);
  return (uint16_t)(rounded >> 16);
}

/* e4m3fn: bias 7, no infinity, 0x7f / 0xff NaN, largest finite 0x7e = 448, subnormals m * 2^-9. */
float pa__e4m3_to_float(uint8_t bits) {
  uint32_t exponent = (bits >> 3) & 0xfu;
  uint32_t mantissa = bits & 0x7u;
  float magnitude;
  if (exponent == 0xfu && mantissa == 0x7u)
    magnitude = NAN;
  else if (exponent == 0)
    magnitude = ldexpf((float)mantissa, -9);
  else
    magnitude = ldexpf((float)(8u + mantissa), (int)exponent - 10);
  return (bits & 0x80u) ? -magnitude : magnitude;
}

uint8_t pa__float_to_e4m3(float x) {
  uint32_t b = float_bits(x);
  uint8_t sign = (uint8_t)((b >> 24) & 0x80u);
  uint32_t magnitude = b & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return (uint8_t)(sign | 0x7fu);
  uint32_t exponent = magnitude >> 23;
  uint32_t code;
  if (exponent < 121) { /* below 2^-6: subnormal e4m3, in units of 2^-9 */
    if (exponent < 115) return sign; /* below 2^-11: rounds to zero */
    uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
    code = shift_round_even(significand, 141u - exponent); /* 8 becomes the smallest normal */
  } else if (exponent > 135) { /* 2^9 and beyond */
    code = 0x7eu;
  } else {
    code = shift_round_even(magnitude - (120u << 23), 20);
  }
  if (code > 0x7eu) code = 0x7eu; /* saturate: 0x7f would be NaN */
  return (uint8_t)(sign | code);
}

float pa__load_as_float(pa_dtype dtype, const void *base, int64_t i) {
  switch (dtype) {
  case PA_DTYPE_FLOAT32: return ((const float *)base)[i];
  case PA_DTYPE_FLOAT16: return pa__half_to_float(((const uint16_t *)base)[i]);
  case PA_DTYPE_BFLOAT16: return pa__bfloat16_to_float(((const uint16_t *)base)[i]);
  case PA_DTYPE_INT8: return (float)((const int8_t *)base)[i];
  case PA_DTYPE_FLOAT8_E4M3FN: return pa__e4m3_to_float(((const uint8_t *)base)[i]);
  case PA_DTYPE_INT32: return (float)((const int32_t *)base)[i];
  case PA_DTYPE_UINT8: return (float)((const uint8_t *)base)[i];
  default: return NAN;
  }
}

void pa__load_row_as_float(pa_dtype dtype, const void *base, int64_t first, int64_t count,
                           float *dst) {
  switch (dtype) {
  case PA_DTYPE_FLOAT16:
    for (int64_t i = 0; i < count; i++) dst[i] = pa__half_to_float(((const uint16_t *)base)[first + i]);
    break;
  case PA_DTYPE_BFLOAT16:
    for (int64_t i = 0; i < count; i++)
      dst[i] = pa__bfloat16_to_float(((const uint16_t *)base)[first + i]);
    break;
  case PA_DTYPE_INT8:
    for (int64_t i = 0; i < count; i++) dst[i] = (float)((const int8_t *)base)[first + i];
    break;
  default:
    for (int64_t i = 0; i < count; i++) dst[i] = pa__load_as_float(dtype, base, first + i);
    break;
  }
}

void pa__store_from_float(pa_dtype dtype, void *base, int64_t i, float x) {
  switch (dtype) {
  case PA_DTYPE_FLOAT32: ((float *)base)[i] = x; break;
  case PA_DTYPE_FLOAT16: ((uint16_t *)base)[i] = pa__float_to_half(x); break;
  case PA_DTYPE_BFLOAT16: ((uint16_t *)base)[i] = pa__float_to_bfloat16(x); break;
  default: break;
  }
}

float pa__round_to(pa_dtype dtype, float x) {
  switch (dtype) {
  case PA_DTYPE_FLOAT16: return pa__half_to_float(pa__float_to_half(x));
  case PA_DTYPE_BFLOAT16: return pa__bfloat16_to_float(pa__float_to_bfloat16(x));
  default: return x;
  }
}

uint8_t pa__quantize(pa_dtype cache_dtype, float x, float inv_scale) {
  float y = x * inv_scale;
  if (cache_dtype == PA_DTYPE_INT8) {
    y = fminf(fmaxf(y, -128.0f), 127.0f); /* saturating first is equivalent for finite y */
    int8_t q = (int8_t)nearbyintf(y);      /* default rounding mode: half to even */
    return (uint8_t)q;
  }
  return pa__float_to_e4m3(fminf(fmaxf(y, -448.0f), 448.0f));
}
