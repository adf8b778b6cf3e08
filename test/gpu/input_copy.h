/* The harness's kernel that writes a step's inputs (input_copy.cu; gpu_case::inputs_by_kernel). */
#ifndef PA_TEST_GPU_INPUT_COPY_H
#define PA_TEST_GPU_INPUT_COPY_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPU_MAX_INPUT_COPIES 24

typedef struct gpu_input_copy {
  void *dst;
  const void *src;
  size_t bytes;
} gpu_input_copy;

/* One kernel launch on stream that copies every (src -> dst, bytes) of copies (at most
 * GPU_MAX_INPUT_COPIES), device to device. */
cudaError_t gpu_copy_inputs_by_kernel(const gpu_input_copy *copies, int count,
                                      cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
