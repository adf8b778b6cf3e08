// A kernel that writes a step's inputs (harness.c, gpu_case::inputs_by_kernel): the inputs are
// uploaded to staging buffers, and this kernel copies them into the tensors pa_execute reads, on
// the same stream just before it (captured with it in graph mode). A library kernel that reads an
// input before its chained wait (DECODE's static grid) then reads what a kernel two launches back
// wrote, as in a serving loop whose own kernels fill the lengths and the block table.
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "input_copy.h"

namespace {

struct copy_list {
  gpu_input_copy copies[GPU_MAX_INPUT_COPIES];
  int count;
};

__global__ void copy_inputs_kernel(const copy_list list) {
  for (int k = 0; k < list.count; k++) {
    const unsigned char *src = static_cast<const unsigned char *>(list.copies[k].src);
    unsigned char *dst = static_cast<unsigned char *>(list.copies[k].dst);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < list.copies[k].bytes;
         i += (size_t)gridDim.x * blockDim.x)
      dst[i] = src[i];
  }
}

}  // namespace

extern "C" cudaError_t gpu_copy_inputs_by_kernel(const gpu_input_copy *copies, int count,
                                                 cudaStream_t stream) {
  if (count < 0 || count > GPU_MAX_INPUT_COPIES) return cudaErrorInvalidValue;
  copy_list list = {};
  for (int k = 0; k < count; k++) list.copies[k] = copies[k];
  list.count = count;
  copy_inputs_kernel<<<128, 256, 0, stream>>>(list);
  return cudaGetLastError();
}
