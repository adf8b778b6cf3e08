// UNFUSED's cuBLASLt descriptor management: the operand layouts of a strided-batched fp32 GEMM,
// its algorithm fixed at plan time, and its launch. Host side only; includes nothing from lib/.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "pagedattn/pagedattn.h"

namespace pa {
namespace detail {

// cuBLASLt's workspace inside ours: a fixed budget, so that a plan for described caps and one for the
// device agree on the size.
constexpr size_t kCublasWorkspaceBytes = (size_t)4 << 20;

// One strided-batched GEMM D = op(A) B, column-major as cuBLASLt sees it, all in fp32.
struct gemm_plan {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, d;
  cublasLtMatmulAlgo_t algo;
};

struct gemm_shape {
  bool transpose_a;
  uint64_t m, n, k;
  int64_t lda, stride_a, ldb, stride_b, ldd, stride_d;
  int32_t batch;
};

// Creates g's descriptors for shape `actual` with the algorithm cuBLASLt's heuristic picks for
// `chosen_for` (split-K off), checked to serve `actual` within kCublasWorkspaceBytes. `what` names
// the GEMM in messages. PA_ERROR_CUBLAS, or NOT_SUPPORTED when no algorithm fits.
pa_status make_gemm(cublasLtHandle_t handle, gemm_plan *g, const gemm_shape &actual,
                    const gemm_shape &chosen_for, const char *what);
// Frees g's descriptors (any of them may be NULL).
void destroy_gemm(gemm_plan *g);
// D = op(A) B with g's descriptors and algorithm, on stream; workspace: kCublasWorkspaceBytes.
pa_status run_gemm(cublasLtHandle_t handle, const gemm_plan &g, const float *a, const float *b,
                   float *d, void *workspace, cudaStream_t stream, const char *what);
// Creates the handle (PA_ERROR_CUBLAS on failure).
pa_status create_gemm_handle(cublasLtHandle_t *handle);

}  // namespace detail
}  // namespace pa
