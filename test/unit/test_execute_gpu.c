/*
 * pa_execute's checks (V32, V45, V47) on a real plan for device 0 with device buffers; suite gpu,
 * exit 77 (skipped) without a GPU. The inputs are zeroed, so the one call that passes the checks
 * runs a well-defined step: cumulative_sequence_length all 0 puts no token in any sequence.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

#include "cases.h"

typedef struct device_io {
  const void *in[PA_NUM_INPUTS];
  void *out[PA_NUM_OUTPUTS];
  void *allocations[PA_NUM_INPUTS + PA_NUM_OUTPUTS + 1];
  int count;
  void *workspace;
  size_t workspace_bytes;
} device_io;

static size_t desc_bytes(const pa_tensor_desc *d) {
  size_t bytes = pa_dtype_size(d->dtype);
  for (int32_t axis = 0; axis < d->rank; axis++)
    bytes *= (size_t)d->dims[axis];
  return bytes ? bytes : 1;
}

static void *device_zeros(device_io *x, size_t bytes) {
  void *p = NULL;
  assert_int_equal(cudaMalloc(&p, bytes), cudaSuccess);
  assert_int_equal(cudaMemset(p, 0, bytes), cudaSuccess);
  x->allocations[x->count++] = p;
  return p;
}

/* Device buffers for every present descriptor, caches aliased, and the plan's workspace. */
static device_io device_io_for(const pa_case *c, const pa_plan *plan) {
  device_io x;
  memset(&x, 0, sizeof x);
  for (int i = 0; i < PA_NUM_INPUTS; i++)
    if (c->in[i].dtype != PA_DTYPE_UNDEFINED && i != PA_IN_ATTENTION_METADATA)
      x.in[i] = device_zeros(&x, desc_bytes(&c->in[i]));
  for (int i = 0; i < PA_NUM_OUTPUTS; i++)
    if (c->out[i].dtype != PA_DTYPE_UNDEFINED) x.out[i] = device_zeros(&x, desc_bytes(&c->out[i]));
  x.out[PA_OUT_KEY_CACHE] = (void *)x.in[PA_IN_KEY_CACHE];
  x.out[PA_OUT_VALUE_CACHE] = (void *)x.in[PA_IN_VALUE_CACHE];
  x.workspace_bytes = pa_plan_workspace_size(plan);
  x.workspace = device_zeros(&x, x.workspace_bytes + PA_WORKSPACE_ALIGNMENT);
  return x;
}

static void device_io_free(device_io *x) {
  for (int i = 0; i < x->count; i++)
    cudaFree(x->allocations[i]);
}

/* Packed QKV stages Q in the workspace, so the workspace is never empty. */
static pa_case packed_case(void) {
  case_config cfg = case_config_default();
  cfg.mode = CASE_PACKED;
  pa_case c;
  case_build(&c, &cfg);
  c.device = CASE_DEVICE_0;
  return c;
}

static void V45_workspace_checks_on_device(void **state) {
  (void)state;
  pa_case c = packed_case();
  pa_plan *plan = case_plan_ok(&c);
  device_io x = device_io_for(&c, plan);
  const size_t need = x.workspace_bytes;
  assert_true(need > 0);
  CASE_ASSERT_STATUS(pa_execute(plan, x.in, x.out, x.workspace, need - 1, NULL),
                     PA_ERROR_WORKSPACE_TOO_SMALL, "workspace");
  CASE_ASSERT_STATUS(pa_execute(plan, x.in, x.out, NULL, need, NULL), PA_ERROR_WORKSPACE_TOO_SMALL,
                     "workspace");
  CASE_ASSERT_STATUS(pa_execute(plan, x.in, x.out, (char *)x.workspace + 16, need, NULL),
                     PA_ERROR_MISALIGNED, "workspace");
  device_io_free(&x);
  pa_plan_destroy(plan);
}

static void V47_V32_pointer_checks_on_device(void **state) {
  (void)state;
  pa_case c = packed_case();
  pa_plan *plan = case_plan_ok(&c);
  device_io x = device_io_for(&c, plan);
  const void *block_table = x.in[PA_IN_BLOCK_TABLE];
  x.in[PA_IN_BLOCK_TABLE] = NULL;
  CASE_ASSERT_STATUS(pa_execute(plan, x.in, x.out, x.workspace, x.workspace_bytes, NULL),
                     PA_ERROR_INVALID_ARGUMENT, "block_table", "NULL");
  x.in[PA_IN_BLOCK_TABLE] = block_table;
  x.out[PA_OUT_VALUE_CACHE] = (void *)x.in[PA_IN_KEY_CACHE];
  CASE_ASSERT_STATUS(pa_execute(plan, x.in, x.out, x.workspace, x.workspace_bytes, NULL),
                     PA_ERROR_INVALID_ARGUMENT, "value_cache_out");
  device_io_free(&x);
  pa_plan_destroy(plan);
}

static void execute_with_valid_arguments_succeeds(void **state) {
  (void)state;
  pa_case c = packed_case();
  pa_plan *plan = case_plan_ok(&c);
  device_io x = device_io_for(&c, plan);
  cudaStream_t stream;
  assert_int_equal(cudaStreamCreate(&stream), cudaSuccess);
  CASE_ASSERT_STATUS(pa_execute(plan, x.in, x.out, x.workspace, x.workspace_bytes, stream),
                     PA_SUCCESS, "");
  x.out[PA_OUT_KEY_CACHE] = x.out[PA_OUT_VALUE_CACHE] = NULL; /* absent cache outputs are fine */
  CASE_ASSERT_STATUS(pa_execute(plan, x.in, x.out, x.workspace, x.workspace_bytes, stream),
                     PA_SUCCESS, "");
  assert_int_equal(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
  device_io_free(&x);
  pa_plan_destroy(plan);
}

int main(int argc, char **argv) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    printf("no CUDA device: skipped\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(V45_workspace_checks_on_device),
      cmocka_unit_test(V47_V32_pointer_checks_on_device),
      cmocka_unit_test(execute_with_valid_arguments_succeeds),
  };
  return CASE_RUN_TESTS("execute_gpu", tests, argc, argv);
}
