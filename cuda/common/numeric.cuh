// Element types and the per-element math every kernel shares: conversions, quantize / dequantize,
// packed pairs for the tensor cores. One definition each (doc/semantics.md); the reference executor
// has its own, separately. Device side only: includes nothing from lib/.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include <type_traits>

#include "pagedattn/pagedattn.h"

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

// Quantization exactly as doc/semantics.md ("The write path", step 5) says: reciprocal multiply,
// round half to even, saturate. The input x is the T-rounded value.
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

// Two values as a packed pair of T (low half = first), the layout mma.sync operands use. Exact for
// cache codes: int8 codes and e4m3 values are representable in fp16 and bf16, so the scale is
// applied elsewhere, in fp32.
template <typename T>
__device__ __forceinline__ uint32_t pack_t2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack_t2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack_t2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}

// The e4m3 pair in half kHalf of `r` (low byte first) as an f16 pair (low half first), exactly.
// On sm_89 and newer one cvt that reads the half in place: the intrinsic takes a 16-bit value, and
// extracting the high half for it cost a shift per register (the 8-bit loops are issue-bound).
template <int kHalf>
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t r) {
  static_assert(kHalf == 0 || kHalf == 1, "a half of the register");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t h;
  if constexpr (kHalf == 0)
    asm("{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %1;\n\tcvt.rn.f16x2.e4m3x2 %0, lo;\n\t}"
        : "=r"(h)
        : "r"(r));
  else
    asm("{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %1;\n\tcvt.rn.f16x2.e4m3x2 %0, hi;\n\t}"
        : "=r"(h)
        : "r"(r));
  return h;
#else
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(r >> 16 * kHalf), __NV_E4M3);
  return (uint32_t)h.x | ((uint32_t)h.y << 16);
#endif
}

// int8 codes x as float16 x + kInt8CodeBias, exactly, in one byte permute per pair: the biased
// code u = x + 128 (one XOR per four codes) becomes the low mantissa bits of 1024. A kernel that
// takes the codes so (DECODE's) removes the bias from its products instead of from every code.
constexpr float kInt8CodeBias = 1152.0f;
constexpr uint32_t kInt8CodeBiasPair = 0x64806480u;  // (kInt8CodeBias, kInt8CodeBias) in float16
template <int kLo, int kHi>
__device__ __forceinline__ uint32_t int8_codes_to_biased_f16x2(uint32_t codes) {
  static_assert(kLo >= 0 && kLo < 4 && kHi >= 0 && kHi < 4, "two of 4 bytes");
  return __byte_perm(codes ^ 0x80808080u, 0x6464u, 0x5040 | kHi << 8 | kLo);  // (0x64, u) x 2
}

// Two of the four 8-bit codes in `codes` (bytes kLo and kHi; ldmatrix hands a lane four) as a
// packed T pair, low half = byte kLo. int8 without I2F (a quarter-rate conversion): the biased code
// x + 128 becomes the low mantissa bits of a constant, which is then subtracted (1024 + u in
// float16; 2^23 + u in float32 on the way to bfloat16).
template <typename T, typename C, int kLo, int kHi>
__device__ __forceinline__ uint32_t codes_to_t2(uint32_t codes) {
  static_assert(sizeof(C) == 1 && kLo >= 0 && kLo < 4 && kHi >= 0 && kHi < 4, "two of 4 bytes");
  if constexpr (dtype_of<C>::value == PA_DTYPE_INT8) {
    const uint32_t biased = codes ^ 0x80808080u;
    if constexpr (dtype_of<T>::value == PA_DTYPE_FLOAT16) {
      const uint32_t bits = int8_codes_to_biased_f16x2<kLo, kHi>(codes);
      const __half2 v = __hsub2(*reinterpret_cast<const __half2 *>(&bits),
                                __half2(kInt8CodeBias, kInt8CodeBias));
      return *reinterpret_cast<const uint32_t *>(&v);
    } else {
      const float lo = __uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7540 | kLo)) - 8388736.0f;
      const float hi = __uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7540 | kHi)) - 8388736.0f;
      return pack_t2<T>(lo, hi);
    }
  } else {
    // The pair as a half of a register: bytes (0, 1) and (2, 3) are halves already; (0, 2) and
    // (1, 3), the two pairs of a transposed ldmatrix register, are the halves of one byte permute
    // that both calls share; any other pair takes a permute of its own.
    constexpr bool kAdjacent = kLo % 2 == 0 && kHi == kLo + 1;
    constexpr bool kSpread = kHi == kLo + 2 && kLo < 2;
    constexpr int kHalf = kAdjacent ? kLo / 2 : kSpread ? kLo : 0;
    const uint32_t halves = kAdjacent  ? codes
                            : kSpread ? __byte_perm(codes, 0u, 0x3120)
                                      : __byte_perm(codes, 0u, kHi << 4 | kLo);
    const uint32_t h = e4m3x2_to_f16x2<kHalf>(halves);
    if constexpr (dtype_of<T>::value == PA_DTYPE_FLOAT16) {
      return h;
    } else {
      const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&h));
      return pack_t2<T>(f.x, f.y);
    }
  }
}

// Eight 8-bit codes (channel order, low byte first) as eight T values in order: one 16-byte chunk
// of a T row, the codes converted exactly (the scales are applied elsewhere, as above).
template <typename T, typename C>
__device__ __forceinline__ uint4 codes8_to_t8(uint2 codes) {
  return make_uint4(codes_to_t2<T, C, 0, 1>(codes.x), codes_to_t2<T, C, 2, 3>(codes.x),
                    codes_to_t2<T, C, 0, 1>(codes.y), codes_to_t2<T, C, 2, 3>(codes.y));
}

// The element type the tensor cores take for queries T over a cache of C: T, or fp16 for 8-bit
// caches, whose codes convert to fp16 in one instruction per code (int8: the magic-number
// subtraction on a pair; e4m3: cvt on a pair) where bf16 takes 2.5. Q then goes to fp16 times a
// power of two (fp16_q_shift below) that the score scale takes back; P in fp16 rounds finer than in
// bf16.
template <typename T, typename C>
using mma_input_t = std::conditional_t<sizeof(C) == 1, __half, T>;

// The power of two 2^shift that brings a Q block whose largest finite |element| is q_max into
// [2^14, 2^15) (fp16's largest finite value is 65504): elements within 2^28 of the largest stay
// normal fp16 numbers, and no finite element overflows. 0 for a block with no nonzero finite
// element. q_max < 2^128 puts shift <= 113; the floor keeps 2^-shift a finite float for tiny
// blocks.
// The scale of the scores takes 2^shift back, exactly (a power of two).
__device__ __forceinline__ int fp16_q_shift(float q_max) {
  return q_max > 0.0f ? max(-100, ilogbf(q_max) - 14) : 0;
}
// The largest finite |element * scale| of a 16-byte chunk of eight T values (channels c .. c + 7;
// scale per channel, or none). A NaN or Inf is left out, so that it does not change the shift of
// the other rows of its block: it reaches the scores as NaN or Inf either way.
template <typename T>
__device__ __forceinline__ float q_chunk_max(uint4 v, const float *scale, int c) {
  const T *e = reinterpret_cast<const T *>(&v);
  float m = 0.0f;
#pragma unroll
  for (int k = 0; k < 8; k++) {
    const float a = fabsf(to_float(e[k]) * (scale ? __ldg(scale + c + k) : 1.0f));
    m = a < INFINITY ? fmaxf(m, a) : m;
  }
  return m;
}
// The sum of a chunk of eight float16 values, in float32.
__device__ __forceinline__ float half8_sum(uint4 v) {
  const __half2 *h = reinterpret_cast<const __half2 *>(&v);
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < 4; k++) {
    const float2 f = __half22float2(h[k]);
    sum += f.x + f.y;
  }
  return sum;
}
// The same chunk times its channels' scales (or none) and the power of two `down`, rounded once to
// fp16.
template <typename T>
__device__ __forceinline__ uint4 q_chunk_to_half(uint4 v, const float *scale, int c, float down) {
  const T *e = reinterpret_cast<const T *>(&v);
  uint4 out;
  __half *h = reinterpret_cast<__half *>(&out);
#pragma unroll
  for (int k = 0; k < 8; k++)
    h[k] = __float2half_rn(to_float(e[k]) * (scale ? __ldg(scale + c + k) : 1.0f) * down);
  return out;
}

}  // namespace detail
}  // namespace pa
