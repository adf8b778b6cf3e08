// PREFILL's Hopper kernels (prefill_hopper_kernel.cuh) for float8e4m3fn caches, the codes converted
// to fp16 by the producer. Their bodies exist only in the sm_90a pass; the launcher plans them only
// where that cubin runs.
#include "prefill_hopper_kernel.cuh"

#if PA_FP8_KV_CACHE
namespace pa {
namespace detail {
PA_PREFILL_HOPPER_INSTANTIATE(__half, fp8_e4m3, 64)
PA_PREFILL_HOPPER_INSTANTIATE(__half, fp8_e4m3, 128)
PA_PREFILL_HOPPER_INSTANTIATE(__half, fp8_e4m3, 256)
PA_PREFILL_HOPPER_INSTANTIATE(__nv_bfloat16, fp8_e4m3, 64)
PA_PREFILL_HOPPER_INSTANTIATE(__nv_bfloat16, fp8_e4m3, 128)
PA_PREFILL_HOPPER_INSTANTIATE(__nv_bfloat16, fp8_e4m3, 256)
}  // namespace detail
}  // namespace pa
#endif
