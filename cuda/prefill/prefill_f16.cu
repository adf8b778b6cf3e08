// PREFILL kernels for caches that hold T itself (float16, bfloat16).
#include "prefill_kernel.cuh"

namespace pa {
namespace detail {
PA_PREFILL_INSTANTIATE(__half, __half, 64)
PA_PREFILL_INSTANTIATE(__half, __half, 128)
PA_PREFILL_INSTANTIATE(__half, __half, 256)
PA_PREFILL_INSTANTIATE(__nv_bfloat16, __nv_bfloat16, 64)
PA_PREFILL_INSTANTIATE(__nv_bfloat16, __nv_bfloat16, 128)
PA_PREFILL_INSTANTIATE(__nv_bfloat16, __nv_bfloat16, 256)
}  // namespace detail
}  // namespace pa
