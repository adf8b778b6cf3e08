// LATENT kernels for latent caches that hold T itself (float16, bfloat16).
#include "latent_kernel.cuh"

namespace pa {
namespace detail {
PA_LATENT_INSTANTIATE(__half, __half)
PA_LATENT_INSTANTIATE(__nv_bfloat16, __nv_bfloat16)
}  // namespace detail
}  // namespace pa
