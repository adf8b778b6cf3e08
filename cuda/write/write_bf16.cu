// The write path's instantiations for T = __nv_bfloat16 (one translation unit per T, so that
// nvcc runs them in parallel): a T cache, int8 and, when built with it, fp8 e4m3.
#include "write_kernel.cuh"

namespace pa {
namespace detail {

PA_WRITE_INSTANTIATE(__nv_bfloat16, __nv_bfloat16);
PA_WRITE_INSTANTIATE(__nv_bfloat16, int8_t);
#if PA_FP8_KV_CACHE
PA_WRITE_INSTANTIATE(__nv_bfloat16, fp8_e4m3);
#endif

}  // namespace detail
}  // namespace pa
