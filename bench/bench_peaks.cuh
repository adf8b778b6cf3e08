// The device peaks the CUDA benches report against, measured in the same run: a dense bf16 GEMM
// (cuBLASLt), a device-to-device copy, and a read-only stream of a step's own bytes.
#pragma once

#include <stdio.h>
#include <stdlib.h>

#include <cublasLt.h>

#include "bench_common.cuh"

#define CHECK_CUBLAS(call)                                                          \
  do {                                                                              \
    cublasStatus_t st_ = (call);                                                    \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                             \
      fprintf(stderr, "%s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, #call, \
              (int)st_);                                                            \
      exit(2);                                                                      \
    }                                                                               \
  } while (0)

namespace bench {

// TFLOP/s of an n x n x n bf16 GEMM (fp32 accumulation, bf16 output), random data, median of 100.
inline double gemm_peak_tflops(cudaStream_t stream, int n) {
  const size_t elems = (size_t)n * n, ws_bytes = (size_t)32 << 20;
  void *a, *b, *c, *ws;
  CHECK_CUDA(cudaMalloc(&a, elems * 2));
  CHECK_CUDA(cudaMalloc(&b, elems * 2));
  CHECK_CUDA(cudaMalloc(&c, elems * 2));
  CHECK_CUDA(cudaMalloc(&ws, ws_bytes));
  fill(a, (int64_t)elems, PA_DTYPE_BFLOAT16, 1.0f, 101);
  fill(b, (int64_t)elems, PA_DTYPE_BFLOAT16, 1.0f, 102);
  CHECK_CUDA(cudaDeviceSynchronize());
  cublasLtHandle_t lt;
  CHECK_CUBLAS(cublasLtCreate(&lt));
  cublasLtMatmulDesc_t op;
  CHECK_CUBLAS(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa));
  CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb));
  cublasLtMatrixLayout_t la, lb, lc;  // column-major; A stored k x m (used transposed)
  CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, n, n, n));
  CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, n, n, n));
  CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, n, n, n));
  cublasLtMatmulPreference_t pref;
  CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
  CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &ws_bytes, sizeof ws_bytes));
  cublasLtMatmulHeuristicResult_t heuristic;
  int found = 0;
  CHECK_CUBLAS(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &heuristic, &found));
  double tflops = 0;
  if (found > 0) {
    const float alpha = 1.0f, beta = 0.0f;
    const double us = median_us(stream, 10, 100, 1, [&]() {
      CHECK_CUBLAS(cublasLtMatmul(lt, op, &alpha, a, la, b, lb, &beta, c, lc, c, lc,
                                  &heuristic.algo, ws, ws_bytes, stream));
    });
    tflops = 2.0 * n * (double)n * n / (us * 1e-6) / 1e12;
  } else {
    fprintf(stderr, "cuBLASLt found no algorithm for the %d^3 bf16 GEMM\n", n);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(lt);
  CHECK_CUDA(cudaFree(a));
  CHECK_CUDA(cudaFree(b));
  CHECK_CUDA(cudaFree(c));
  CHECK_CUDA(cudaFree(ws));
  return tflops;
}

// Device-to-device copy bandwidth (read + write counted), TB/s.
inline double copy_tbps(cudaStream_t stream) {
  const size_t bytes = (size_t)1 << 30;
  void *a, *b;
  CHECK_CUDA(cudaMalloc(&a, bytes));
  CHECK_CUDA(cudaMalloc(&b, bytes));
  CHECK_CUDA(cudaMemsetAsync(a, 1, bytes, stream));
  const double us = median_us(stream, 5, 25, 1, [&]() {
    CHECK_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream));
  });
  CHECK_CUDA(cudaFree(a));
  CHECK_CUDA(cudaFree(b));
  return 2.0 * bytes / (us * 1e-6) / 1e12;
}

// Every 16-byte word of src[0, n) read once, four loads in flight per thread; the XOR of the words
// decides a store that never happens in practice, so the loads cannot be dropped.
__global__ void read_stream_kernel(const uint4 *__restrict__ src, int64_t n, unsigned *sink) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  uint32_t acc = 0;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int k = 0; k < 4; k++) v[k] = __ldcs(src + i + k * stride);
#pragma unroll
    for (int k = 0; k < 4; k++) acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = __ldcs(src + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) atomicAdd(sink, 1u);
}

// Microseconds of one read-only pass over `bytes` at `src` (a multiple of 16, 16-byte aligned),
// timed like the benches' steps (CUDA-graph replays, `per_sample` back to back, median of
// `samples`): the floor of a step that must read those bytes once, whatever else it does.
inline double read_stream_us(cudaStream_t stream, const void *src, size_t bytes, int samples,
                             int per_sample) {
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  unsigned *sink;
  CHECK_CUDA(cudaMalloc(&sink, sizeof(unsigned)));
  const int64_t words = (int64_t)(bytes / 16);
  auto launch = [&]() {
    read_stream_kernel<<<prop.multiProcessorCount * 8, 256, 0, stream>>>(
        static_cast<const uint4 *>(src), words, sink);
  };
  launch();
  CHECK_CUDA(cudaStreamSynchronize(stream));
  const double us = graph_median_us(stream, 2, samples, per_sample, launch);
  CHECK_CUDA(cudaFree(sink));
  return us;
}

}  // namespace bench
