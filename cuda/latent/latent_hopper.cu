// LATENT's Hopper kernels (latent_hopper_kernel.cuh) for caches that hold T itself. Their bodies
// exist only in the sm_90a pass; the launcher plans them only where that cubin runs.
#include "latent_hopper_kernel.cuh"

namespace pa {
namespace detail {
PA_LATENT_HOPPER_INSTANTIATE(__half)
PA_LATENT_HOPPER_INSTANTIATE(__nv_bfloat16)
}  // namespace detail
}  // namespace pa
