// DECODE kernels for int8 caches.
#include "decode_kernel.cuh"

namespace pa {
namespace detail {
PA_DECODE_INSTANTIATE(__half, int8_t, 64)
PA_DECODE_INSTANTIATE(__half, int8_t, 128)
PA_DECODE_INSTANTIATE(__half, int8_t, 256)
PA_DECODE_INSTANTIATE(__nv_bfloat16, int8_t, 64)
PA_DECODE_INSTANTIATE(__nv_bfloat16, int8_t, 128)
PA_DECODE_INSTANTIATE(__nv_bfloat16, int8_t, 256)
}  // namespace detail
}  // namespace pa
