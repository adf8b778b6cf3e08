/*
 * Host element conversions and quantization: the reference executor's own definitions
 * (doc/semantics.md), separate on purpose from the device ones in cuda/common/numeric.cuh. Also what the
 * GPU test harness and the benchmarks convert with.
 *
 * Every float -> narrow conversion rounds to nearest, ties to even. fp16 keeps subnormals and
 * overflows to infinity; bf16 overflows to infinity; fp8 e4m3fn (no infinity, NaN = 0x7f/0xff)
 * saturates finite values to +-448. NaN stays NaN (a quiet NaN in fp16 / bf16, 0x7f in fp8).
 * Pure functions: any thread.
 */
#ifndef PAGEDATTN_HOST_NUMERIC_H
#define PAGEDATTN_HOST_NUMERIC_H

#include <stdint.h>

#include "pagedattn/pagedattn.h"

#ifdef __cplusplus
extern "C" {
#endif

float pa__half_to_float(uint16_t bits);
uint16_t pa__float_to_half(float x);
float pa__bfloat16_to_float(uint16_t bits);
uint16_t pa__float_to_bfloat16(float x);
float pa__e4m3_to_float(uint8_t bits);
uint8_t pa__float_to_e4m3(float x);

/* Element i of a dense array of `dtype` (float32, float16, bfloat16, int8, fp8 e4m3fn, int32,
 * uint8), as float. */
float pa__load_as_float(pa_dtype dtype, const void *base, int64_t i);
/* Elements [first, first + count) of a dense array of `dtype`, as float, into dst. */
void pa__load_row_as_float(pa_dtype dtype, const void *base, int64_t first, int64_t count,
                           float *dst);
/* Stores x into element i, converted to `dtype` (float32, float16 or bfloat16). */
void pa__store_from_float(pa_dtype dtype, void *base, int64_t i, float x);
/* x rounded to `dtype` and back (float16, bfloat16; float32 is the identity). */
float pa__round_to(pa_dtype dtype, float x);

/* Quantization as doc/semantics.md ("The write path", step 5) says, for a cache of `cache_dtype` (int8 or fp8 e4m3fn):
 * y = x * inv_scale in fp32, saturated to the type's range (fminf/fmaxf, so NaN gives the lower
 * bound, as on the device), then rounded half to even. Returns the stored byte. */
uint8_t pa__quantize(pa_dtype cache_dtype, float x, float inv_scale);

#ifdef __cplusplus
}
#endif

#endif /* PAGEDATTN_HOST_NUMERIC_H */
