// The prologue's instantiations for T = __nv_bfloat16 (one translation unit per T, so that
// nvcc runs them in parallel): a T cache, int8 and, when built with it, fp8 e4m3.
#include "prologue_kernel.cuh"

namespace pa {
namespace detail {

template cudaError_t launch_prologue<__nv_bfloat16, __nv_bfloat16>(const prologue_params &,
                                                                   unsigned, size_t, cudaStream_t);
template cudaError_t launch_prologue<__nv_bfloat16, int8_t>(const prologue_params &, unsigned,
                                                            size_t, cudaStream_t);
#if PA_FP8_KV_CACHE
template cudaError_t launch_prologue<__nv_bfloat16, fp8_e4m3>(const prologue_params &, unsigned,
                                                              size_t, cudaStream_t);
#endif

}  // namespace detail
}  // namespace pa
