// PREFILL's Hopper kernels (prefill_hopper_kernel.cuh) for caches that hold T itself. Their bodies
// exist only in the sm_90a pass; the launcher plans them only where that cubin runs.
#include "prefill_hopper_kernel.cuh"

namespace pa {
namespace detail {
PA_PREFILL_HOPPER_INSTANTIATE(__half, __half, 64)
PA_PREFILL_HOPPER_INSTANTIATE(__half, __half, 128)
PA_PREFILL_HOPPER_INSTANTIATE(__half, __half, 256)
PA_PREFILL_HOPPER_INSTANTIATE(__nv_bfloat16, __nv_bfloat16, 64)
PA_PREFILL_HOPPER_INSTANTIATE(__nv_bfloat16, __nv_bfloat16, 128)
PA_PREFILL_HOPPER_INSTANTIATE(__nv_bfloat16, __nv_bfloat16, 256)
}  // namespace detail
}  // namespace pa
