// LATENT kernels for int8 latent caches.
#include "latent_kernel.cuh"

namespace pa {
namespace detail {
PA_LATENT_INSTANTIATE(__half, int8_t)
PA_LATENT_INSTANTIATE(__nv_bfloat16, int8_t)
}  // namespace detail
}  // namespace pa
