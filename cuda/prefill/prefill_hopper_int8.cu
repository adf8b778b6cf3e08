// PREFILL's Hopper kernels (prefill_hopper_kernel.cuh) for int8 caches, the codes converted to fp16
// by the producer. Their bodies exist only in the sm_90a pass; the launcher plans them only where
// that cubin runs.
#include "prefill_hopper_kernel.cuh"

namespace pa {
namespace detail {
PA_PREFILL_HOPPER_INSTANTIATE(__half, int8_t, 64)
PA_PREFILL_HOPPER_INSTANTIATE(__half, int8_t, 128)
PA_PREFILL_HOPPER_INSTANTIATE(__half, int8_t, 256)
PA_PREFILL_HOPPER_INSTANTIATE(__nv_bfloat16, int8_t, 64)
PA_PREFILL_HOPPER_INSTANTIATE(__nv_bfloat16, int8_t, 128)
PA_PREFILL_HOPPER_INSTANTIATE(__nv_bfloat16, int8_t, 256)
}  // namespace detail
}  // namespace pa
