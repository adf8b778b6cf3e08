// DECODE kernels for int8 caches.
#include "decode_kernel.cuh"

namespace pa {
namespace detail {
PA_DECODE_INSTANTIATE(__half, int8_t, 64, 2)
PA_DECODE_INSTANTIATE(__half, int8_t, 128, 2)
PA_DECODE_INSTANTIATE(__half, int8_t, 256, 3)
PA_DECODE_INSTANTIATE(__nv_bfloat16, int8_t, 64, 2)
PA_DECODE_INSTANTIATE(__nv_bfloat16, int8_t, 128, 2)
PA_DECODE_INSTANTIATE(__nv_bfloat16, int8_t, 256, 3)
}  // namespace detail
}  // namespace pa
