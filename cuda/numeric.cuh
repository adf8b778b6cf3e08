// Element types and the per-element math every kernel shares: conversions, quantize / dequantize.
// One definition each (doc/semantics.md); the reference executor has its own, separately.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "problem.h"

namespace pa {
namespace detail {

// Storage types by pa_dtype. fp8 is stored as its raw byte (conversions go through cuda_fp8.h).
struct fp8_e4m3 {
  uint8_t bits;
};

template <typename T> struct dtype_of;
template <> struct dtype_of<__half> { static constexpr pa_dtype value = PA_DTYPE_FLOAT16; };
template <> struct dtype_of<__nv_bfloat16> { static constexpr pa_dtype value = PA_DTYPE_BFLOAT16; };
template <> struct dtype_of<int8_t> { static constexpr pa_dtype value = PA_DTYPE_INT8; };
template <> struct dtype_of<fp8_e4m3> { static constexpr pa_dtype value = PA_DTYPE_FLOAT8_E4M3FN; };
template <> struct dtype_of<float> { static constexpr pa_dtype value = PA_DTYPE_FLOAT32; };

__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(int8_t x) { return (float)x; }
__device__ __forceinline__ float to_float(fp8_e4m3 x) {
  __nv_fp8_e4m3 v;
  v.__x = x.bits;
  return (float)v;
}

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }

// Quantization exactly as spec/tables.md §8.3: reciprocal multiply, round half to even, saturate.
// The input x is the T-rounded value (doc/semantics.md, prologue step 5).
template <typename C> __device__ __forceinline__ C quantize(float x, float inv_scale);
// round(x * inv_scale) to nearest even, saturated to [-128, 127]. Clamping before rounding gives
// the same code (the bounds are integers; NaN clamps to -128 either way); adding 1.5 * 2^23 then
// leaves the rounded value in the sum's low mantissa bits, which avoids the slow float-to-integer
// conversion and rounding instructions.
template <> __device__ __forceinline__ int8_t quantize<int8_t>(float x, float inv_scale) {
  const float y = fminf(fmaxf(__fmul_rn(x, inv_scale), -128.0f), 127.0f);
  return (int8_t)(__float_as_int(__fadd_rn(y, 12582912.0f)) & 0xff);
}
template <> __device__ __forceinline__ fp8_e4m3 quantize<fp8_e4m3>(float x, float inv_scale) {
  float y = x * inv_scale;
  y = fminf(fmaxf(y, -448.0f), 448.0f);  // clamp first, then round to nearest even
  fp8_e4m3 out;
  out.bits = (uint8_t)__nv_cvt_float_to_fp8(y, __NV_SATFINITE, __NV_E4M3);
  return out;
}
// Unquantized caches store T itself.
template <> __device__ __forceinline__ __half quantize<__half>(float x, float) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 quantize<__nv_bfloat16>(float x, float) {
  return __float2bfloat16_rn(x);
}

// Whether a cache element type is quantized (carries a scale).
template <typename C> struct is_quantized { static constexpr bool value = false; };
template <> struct is_quantized<int8_t> { static constexpr bool value = true; };
template <> struct is_quantized<fp8_e4m3> { static constexpr bool value = true; };

// The scale of channel c of KV head h: scale[0] per tensor, scale[h*D + c] per channel.
__device__ __forceinline__ float cache_scale(const float *scale, pa_quant_type quant, int kv_head,
                                             int head_size, int channel) {
  if (quant == PA_QUANT_PER_CHANNEL) return scale[(int64_t)kv_head * head_size + channel];
  if (quant == PA_QUANT_PER_TENSOR) return scale[0];
  return 1.0f;
}

}  // namespace detail
}  // namespace pa
