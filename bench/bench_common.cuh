// What the CUDA benchmarks share: error checks, device-side random fills of valid values, and
// event timing. Each bench has its own shapes, oracle and report.
#pragma once

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "pagedattn/pagedattn.h"

#define CHECK_CUDA(call)                                                                       \
  do {                                                                                         \
    cudaError_t err_ = (call);                                                                 \
    if (err_ != cudaSuccess) {                                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      exit(2);                                                                                 \
    }                                                                                          \
  } while (0)

namespace bench {

inline const char *dtype_name(pa_dtype t) {
  switch (t) {
    case PA_DTYPE_FLOAT16:
      return "fp16";
    case PA_DTYPE_BFLOAT16:
      return "bf16";
    case PA_DTYPE_INT8:
      return "int8";
    case PA_DTYPE_FLOAT8_E4M3FN:
      return "fp8";
    default:
      return "?";
  }
}

// A descriptor of rank `rank` (dims past it 0), and the bytes its tensor holds (0 when absent).
inline pa_tensor_desc desc(pa_dtype t, int rank, int64_t d0, int64_t d1 = 0, int64_t d2 = 0,
                           int64_t d3 = 0) {
  pa_tensor_desc d = {t, rank, {d0, d1, d2, d3}};
  return d;
}
inline size_t desc_bytes(const pa_tensor_desc &d) {
  size_t n = pa_dtype_size(d.dtype);
  for (int i = 0; i < d.rank; i++) n *= (size_t)d.dims[i];
  return d.dtype == PA_DTYPE_UNDEFINED ? 0 : n;
}

// ---- device fill: deterministic pseudo-random bytes of valid values ----------------------------

__device__ inline uint32_t hash32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return (uint32_t)x;
}

// kind 0: fp16, 1: bf16 (uniform in [-amp, amp)); 2: int8 codes; 3: fp8 codes (no NaN)
__global__ void fill_kernel(void *dst, int64_t count, int kind, float amp, uint64_t seed) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count;
       i += (int64_t)gridDim.x * blockDim.x) {
    uint32_t h = hash32(seed * 0x9e3779b97f4a7c15ull + (uint64_t)i);
    float u = ((h >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * amp;
    if (kind == 0) {
      __half v = __float2half_rn(u);
      static_cast<uint16_t *>(dst)[i] = *reinterpret_cast<uint16_t *>(&v);
    } else if (kind == 1) {
      __nv_bfloat16 v = __float2bfloat16_rn(u);
      static_cast<uint16_t *>(dst)[i] = *reinterpret_cast<uint16_t *>(&v);
    } else if (kind == 2) {
      static_cast<int8_t *>(dst)[i] = (int8_t)((int)(h % 255u) - 127);
    } else {
      uint8_t b = (uint8_t)h;
      if ((b & 0x7f) == 0x7f) b ^= 0x01;
      static_cast<uint8_t *>(dst)[i] = b;
    }
  }
}

inline int fill_kind(pa_dtype t) {
  return t == PA_DTYPE_FLOAT16 ? 0 : t == PA_DTYPE_BFLOAT16 ? 1 : t == PA_DTYPE_INT8 ? 2 : 3;
}

// count elements of type t at dst: random values of magnitude below amp (T), or random codes.
inline void fill(void *dst, int64_t count, pa_dtype t, float amp, uint64_t seed) {
  fill_kernel<<<1024, 256>>>(dst, count, fill_kind(t), amp, seed);
  CHECK_CUDA(cudaGetLastError());
}

// ---- timing ------------------------------------------------------------------------------------

// Median microseconds of one run() on `stream`: `warmup` untimed calls, then `samples` event pairs
// around `per_sample` back-to-back calls each.
template <typename Run>
double median_us(cudaStream_t stream, int warmup, int samples, int per_sample, Run run) {
  for (int i = 0; i < warmup; i++) run();
  CHECK_CUDA(cudaGetLastError());
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  std::vector<float> times;
  for (int s = 0; s < samples; s++) {
    CHECK_CUDA(cudaEventRecord(start, stream));
    for (int i = 0; i < per_sample; i++) run();
    CHECK_CUDA(cudaEventRecord(stop, stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms * 1000.0f / per_sample);
  }
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Median microseconds of one replay of a CUDA graph of what capture() launches on `stream`
// (median_us over replays: `warmup`, then `samples` event pairs of `per_sample` replays each).
template <typename Capture>
double graph_median_us(cudaStream_t stream, int warmup, int samples, int per_sample,
                       Capture capture) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  capture();
  CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  CHECK_CUDA(cudaGraphDestroy(graph));
  const double us = median_us(stream, warmup, samples, per_sample,
                              [&]() { CHECK_CUDA(cudaGraphLaunch(exec, stream)); });
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  return us;
}

}  // namespace bench
