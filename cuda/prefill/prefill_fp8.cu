// PREFILL kernels for float8e4m3fn caches.
#include "prefill_kernel.cuh"

#if PA_FP8_KV_CACHE
namespace pa {
namespace detail {
PA_PREFILL_INSTANTIATE(__half, fp8_e4m3, 64)
PA_PREFILL_INSTANTIATE(__half, fp8_e4m3, 128)
PA_PREFILL_INSTANTIATE(__half, fp8_e4m3, 256)
PA_PREFILL_INSTANTIATE(__nv_bfloat16, fp8_e4m3, 64)
PA_PREFILL_INSTANTIATE(__nv_bfloat16, fp8_e4m3, 128)
PA_PREFILL_INSTANTIATE(__nv_bfloat16, fp8_e4m3, 256)
}  // namespace detail
}  // namespace pa
#endif
