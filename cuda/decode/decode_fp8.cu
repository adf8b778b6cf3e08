// DECODE kernels for float8 e4m3fn caches (only when the build supports fp8 caches).
#include "decode_kernel.cuh"

#if PA_FP8_KV_CACHE
namespace pa {
namespace detail {
PA_DECODE_INSTANTIATE(__half, fp8_e4m3, 64)
PA_DECODE_INSTANTIATE(__half, fp8_e4m3, 128)
PA_DECODE_INSTANTIATE(__half, fp8_e4m3, 256)
PA_DECODE_INSTANTIATE(__nv_bfloat16, fp8_e4m3, 64)
PA_DECODE_INSTANTIATE(__nv_bfloat16, fp8_e4m3, 128)
PA_DECODE_INSTANTIATE(__nv_bfloat16, fp8_e4m3, 256)
}  // namespace detail
}  // namespace pa
#endif
