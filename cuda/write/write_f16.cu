// The write path's instantiations for T = __half (one translation unit per T, so that
// nvcc runs them in parallel): a T cache, int8 and, when built with it, fp8 e4m3.
#include "write_kernel.cuh"

namespace pa {
namespace detail {

PA_WRITE_INSTANTIATE(__half, __half);
PA_WRITE_INSTANTIATE(__half, int8_t);
#if PA_FP8_KV_CACHE
PA_WRITE_INSTANTIATE(__half, fp8_e4m3);
#endif

}  // namespace detail
}  // namespace pa
