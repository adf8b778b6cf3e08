// LATENT kernels for float8e4m3fn latent caches.
#include "latent_kernel.cuh"

#if PA_FP8_KV_CACHE
namespace pa {
namespace detail {
PA_LATENT_INSTANTIATE(__half, fp8_e4m3)
PA_LATENT_INSTANTIATE(__nv_bfloat16, fp8_e4m3)
}  // namespace detail
}  // namespace pa
#endif
