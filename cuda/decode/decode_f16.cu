// DECODE kernels for caches that hold T itself (float16, bfloat16).
#include "decode_kernel.cuh"

namespace pa {
namespace detail {
PA_DECODE_INSTANTIATE(__half, __half, 64)
PA_DECODE_INSTANTIATE(__half, __half, 128)
PA_DECODE_INSTANTIATE(__half, __half, 256)
PA_DECODE_INSTANTIATE(__nv_bfloat16, __nv_bfloat16, 64)
PA_DECODE_INSTANTIATE(__nv_bfloat16, __nv_bfloat16, 128)
PA_DECODE_INSTANTIATE(__nv_bfloat16, __nv_bfloat16, 256)
}  // namespace detail
}  // namespace pa
