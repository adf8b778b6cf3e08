// UNFUSED's cuBLASLt descriptor management (cublaslt_gemm.cuh).
#include "cublaslt_gemm.cuh"

#include "internal.h"

namespace pa {
namespace detail {
namespace {

pa_status cublas_fail(cublasStatus_t s, const char *what) {
  return pa__fail(PA_ERROR_CUBLAS, "UNFUSED %s: cuBLASLt returned %d", what, (int)s);
}

#define PA_CUBLAS(call, what)                                                \
  do {                                                                       \
    cublasStatus_t status_ = (call);                                         \
    if (status_ != CUBLAS_STATUS_SUCCESS) return cublas_fail(status_, what); \
  } while (0)

cublasStatus_t make_layout(cublasLtMatrixLayout_t *layout, cudaDataType_t type, uint64_t rows,
                           uint64_t cols, int64_t ld, int32_t batch, int64_t batch_stride) {
  cublasStatus_t s = cublasLtMatrixLayoutCreate(layout, type, rows, cols, ld);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                         sizeof batch);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                         &batch_stride, sizeof batch_stride);
  return s;
}

// The operand layouts of shape s (g->desc is left alone).
pa_status make_gemm_layouts(gemm_plan *g, const gemm_shape &s, const char *what) {
  PA_CUBLAS(make_layout(&g->a, CUDA_R_32F, s.transpose_a ? s.k : s.m, s.transpose_a ? s.m : s.k,
                        s.lda, s.batch, s.stride_a),
            what);
  PA_CUBLAS(make_layout(&g->b, CUDA_R_32F, s.k, s.n, s.ldb, s.batch, s.stride_b), what);
  PA_CUBLAS(make_layout(&g->d, CUDA_R_32F, s.m, s.n, s.ldd, s.batch, s.stride_d), what);
  return PA_SUCCESS;
}

// The heuristic's first algorithm for shape s without split-K (found = 0 when there is none).
cublasStatus_t heuristic_algo(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                              const gemm_plan &layouts, cublasLtMatmulAlgo_t *algo, int *found) {
  cublasLtMatmulPreference_t preference;
  cublasStatus_t status = cublasLtMatmulPreferenceCreate(&preference);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  const uint64_t workspace = kCublasWorkspaceBytes;
  const uint32_t no_reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
  status = cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace);
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &no_reduction, sizeof no_reduction);
  cublasLtMatmulHeuristicResult_t result;
  *found = 0;
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulAlgoGetHeuristic(handle, desc, layouts.a, layouts.b, layouts.d,
                                            layouts.d, preference, 1, &result, found);
  cublasLtMatmulPreferenceDestroy(preference);
  if (status == CUBLAS_STATUS_SUCCESS && *found > 0) *algo = result.algo;
  return status;
}

}  // namespace

void destroy_gemm(gemm_plan *g) {
  if (g->desc) cublasLtMatmulDescDestroy(g->desc);
  if (g->a) cublasLtMatrixLayoutDestroy(g->a);
  if (g->b) cublasLtMatrixLayoutDestroy(g->b);
  if (g->d) cublasLtMatrixLayoutDestroy(g->d);
}

// Creates the descriptors for shape `actual` and fixes the algorithm at plan time
// (doc/cuda-graphs.md, "What the library guarantees", item 5): the heuristic's choice for
// `chosen_for`, a shape that does not depend on the attention_metadata bounds, with split-K forced
// to 1 and no reduction scheme, then checked to serve `actual`. One kernel without split-K
// accumulates each output over k in the same order whatever m, n and the strides are, so S (k =
// head_size) is the same for every bound.
pa_status make_gemm(cublasLtHandle_t handle, gemm_plan *g, const gemm_shape &actual,
                    const gemm_shape &chosen_for, const char *what) {
  PA_CUBLAS(cublasLtMatmulDescCreate(&g->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), what);
  const cublasOperation_t op_a = actual.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  PA_CUBLAS(
      cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a),
      what);
  gemm_plan heuristic_layouts = {};
  pa_status s = make_gemm_layouts(&heuristic_layouts, chosen_for, what);
  int found = 0;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  if (s == PA_SUCCESS)
    status = heuristic_algo(handle, g->desc, heuristic_layouts, &g->algo, &found);
  destroy_gemm(&heuristic_layouts);
  if (s != PA_SUCCESS) return s;
  if (status != CUBLAS_STATUS_SUCCESS) return cublas_fail(status, what);
  if (found < 1)
    return pa__fail(PA_ERROR_NOT_SUPPORTED,
                    "UNFUSED %s: cuBLASLt has no algorithm for m=%llu n=%llu k=%llu batch=%d", what,
                    (unsigned long long)chosen_for.m, (unsigned long long)chosen_for.n,
                    (unsigned long long)chosen_for.k, chosen_for.batch);
  const uint32_t one_split = 1, no_reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
  PA_CUBLAS(cublasLtMatmulAlgoConfigSetAttribute(&g->algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                 &one_split, sizeof one_split),
            what);
  PA_CUBLAS(cublasLtMatmulAlgoConfigSetAttribute(&g->algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                 &no_reduction, sizeof no_reduction),
            what);
  if ((s = make_gemm_layouts(g, actual, what)) != PA_SUCCESS) return s;
  cublasLtMatmulHeuristicResult_t check = {};
  status = cublasLtMatmulAlgoCheck(handle, g->desc, g->a, g->b, g->d, g->d, &g->algo, &check);
  if (status != CUBLAS_STATUS_SUCCESS || check.workspaceSize > kCublasWorkspaceBytes)
    return pa__fail(PA_ERROR_NOT_SUPPORTED,
                    "UNFUSED %s: the algorithm chosen for m=%llu n=%llu (bound-free extents) "
                    "does not serve m=%llu n=%llu k=%llu batch=%d (cuBLASLt check "
                    "returned %d, workspace %llu of %llu bytes)",
                    what, (unsigned long long)chosen_for.m, (unsigned long long)chosen_for.n,
                    (unsigned long long)actual.m, (unsigned long long)actual.n,
                    (unsigned long long)actual.k, actual.batch, (int)status,
                    (unsigned long long)check.workspaceSize,
                    (unsigned long long)kCublasWorkspaceBytes);
  return PA_SUCCESS;
}

pa_status run_gemm(cublasLtHandle_t handle, const gemm_plan &g, const float *a, const float *b,
                   float *d, void *workspace, cudaStream_t stream, const char *what) {
  const float one = 1.0f, zero = 0.0f;
  PA_CUBLAS(cublasLtMatmul(handle, g.desc, &one, a, g.a, b, g.b, &zero, d, g.d, d, g.d, &g.algo,
                           workspace, kCublasWorkspaceBytes, stream),
            what);
  return PA_SUCCESS;
}

pa_status create_gemm_handle(cublasLtHandle_t *handle) {
  PA_CUBLAS(cublasLtCreate(handle), "handle");
  return PA_SUCCESS;
}

}  // namespace detail
}  // namespace pa
