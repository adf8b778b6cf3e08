// DECODE kernels for caches that hold T itself (float16, bfloat16).
#include "decode_kernel.cuh"

namespace pa {
namespace detail {
PA_DECODE_INSTANTIATE(__half, __half, 64, 2)
PA_DECODE_INSTANTIATE(__half, __half, 64, 3)
PA_DECODE_INSTANTIATE(__half, __half, 128, 2)
PA_DECODE_INSTANTIATE(__half, __half, 128, 3)
PA_DECODE_INSTANTIATE(__half, __half, 256, 3)
PA_DECODE_INSTANTIATE(__nv_bfloat16, __nv_bfloat16, 64, 2)
PA_DECODE_INSTANTIATE(__nv_bfloat16, __nv_bfloat16, 64, 3)
PA_DECODE_INSTANTIATE(__nv_bfloat16, __nv_bfloat16, 128, 2)
PA_DECODE_INSTANTIATE(__nv_bfloat16, __nv_bfloat16, 128, 3)
PA_DECODE_INSTANTIATE(__nv_bfloat16, __nv_bfloat16, 256, 3)
}  // namespace detail
}  // namespace pa
