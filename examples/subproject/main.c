/* Links libpagedattn statically (see meson.build) and runs one decode step on the reference
 * executor: two sequences with 5 and 17 cached tokens, one new token each. */
#include <stdio.h>
#include <string.h>

#include <pagedattn/pagedattn.h>

enum { BATCH = 2, HEADS = 2, HEAD_SIZE = 32, BLOCK = 16, BLOCKS = 4 };

int main(void) {
  static uint16_t q[BATCH * HEADS * HEAD_SIZE], k[BATCH * HEADS * HEAD_SIZE],
      v[BATCH * HEADS * HEAD_SIZE], out[BATCH * HEADS * HEAD_SIZE];
  static uint16_t k_cache[BLOCKS * BLOCK * HEADS * HEAD_SIZE], v_cache[BLOCKS * BLOCK * HEADS * HEAD_SIZE];
  int32_t cu_seqlens[] = {0, 1, 2}, past_seqlens[] = {5, 17};
  int32_t block_table[] = {3, -1, 0, 2}; /* sequence 0: block 3; sequence 1: blocks 0 and 2 */
  for (size_t i = 0; i < sizeof q / 2; i++) q[i] = k[i] = v[i] = (uint16_t)(0x3c00 + i % 512); /* fp16 */
  for (size_t i = 0; i < sizeof k_cache / 2; i++) k_cache[i] = v_cache[i] = (uint16_t)(0x3800 + i % 1024);

  pa_tensor_desc in[PA_NUM_INPUTS], outd[PA_NUM_OUTPUTS];
  memset(in, 0, sizeof in);
  memset(outd, 0, sizeof outd);
  in[PA_IN_QUERY] = in[PA_IN_KEY] = in[PA_IN_VALUE] = outd[PA_OUT_OUTPUT] =
      (pa_tensor_desc){PA_DTYPE_FLOAT16, 2, {BATCH, HEADS * HEAD_SIZE}};
  in[PA_IN_KEY_CACHE] = in[PA_IN_VALUE_CACHE] =
      (pa_tensor_desc){PA_DTYPE_FLOAT16, 4, {BLOCKS, BLOCK, HEADS, HEAD_SIZE}};
  in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH] = (pa_tensor_desc){PA_DTYPE_INT32, 1, {BATCH + 1}};
  in[PA_IN_PAST_SEQLENS] = (pa_tensor_desc){PA_DTYPE_INT32, 1, {BATCH}};
  in[PA_IN_BLOCK_TABLE] = (pa_tensor_desc){PA_DTYPE_INT32, 2, {BATCH, 2}};

  pa_attributes attrs;
  pa_attributes_init(&attrs);
  attrs.num_heads = attrs.kv_num_heads = HEADS;
  pa_plan_options opts;
  pa_plan_options_init(&opts);
  opts.device = PA_DEVICE_HOST;
  pa_plan *plan = NULL;
  const void *inputs[PA_NUM_INPUTS] = {q, k, v, k_cache, v_cache, cu_seqlens, past_seqlens, block_table};
  void *outputs[PA_NUM_OUTPUTS] = {out};
  pa_status st = pa_plan_create(&plan, &attrs, in, outd, &opts);
  if (st == PA_SUCCESS) st = pa_execute_reference(plan, inputs, outputs);
  char message[256];
  pa_last_error_message(message, sizeof message);
  printf("libpagedattn %d.%d.%d (static): %s%s%s\n", PA_VERSION_MAJOR, PA_VERSION_MINOR,
         PA_VERSION_PATCH, pa_status_string(st), *message ? ": " : "", message);
  pa_plan_destroy(plan);
  return st != PA_SUCCESS;
}
