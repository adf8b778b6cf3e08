// LATENT's Hopper kernels (latent_hopper_kernel.cuh, latent_whole_kernel.cuh,
// latent_narrow_kernel.cuh) for caches that hold T itself. Their bodies exist only in the sm_90a
// pass; the launcher plans them only where that cubin runs.
#include "latent_narrow_kernel.cuh"
#include "latent_whole_kernel.cuh"

namespace pa {
namespace detail {
PA_LATENT_HOPPER_ENTRY_POINTS(latent_hopper, __half)
PA_LATENT_HOPPER_ENTRY_POINTS(latent_hopper, __nv_bfloat16)
PA_LATENT_HOPPER_ENTRY_POINTS(latent_whole, __half)
PA_LATENT_HOPPER_ENTRY_POINTS(latent_whole, __nv_bfloat16)
PA_LATENT_NARROW_INSTANTIATE(__half, kLatentNarrowRows)
PA_LATENT_NARROW_INSTANTIATE(__nv_bfloat16, kLatentNarrowRows)
}  // namespace detail
}  // namespace pa
