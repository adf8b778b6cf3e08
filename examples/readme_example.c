#include <pagedattn/pagedattn.h>
#include <stdio.h>

int main(void) { /* one sequence, 3 new tokens, 4 query heads over 2 KV heads of size 64, bf16 */
  enum { N = 3, H = 4, HK = 2, D = 64, BLOCK = 16 };
  static uint16_t q[N * H * D], k[N * HK * D], v[N * HK * D], out[N * H * D];
  static uint16_t k_cache[1 * BLOCK * HK * D], v_cache[1 * BLOCK * HK * D]; /* 1 block */
  int32_t cu_seqlens[] = {0, N}, past_seqlens[] = {0}, block_table[] = {0};
  for (int i = 0; i < N * H * D; i++) q[i] = 0x3f80 + i % 64; /* bf16 values in [1, 1.5) */
  for (int i = 0; i < N * HK * D; i++) k[i] = v[i] = 0x3f00 + i % 128;
  pa_tensor_desc in[PA_NUM_INPUTS] = {{0}}, outd[PA_NUM_OUTPUTS] = {{0}};
  in[PA_IN_QUERY] = outd[PA_OUT_OUTPUT] = (pa_tensor_desc){PA_DTYPE_BFLOAT16, 2, {N, H * D}};
  in[PA_IN_KEY] = in[PA_IN_VALUE] = (pa_tensor_desc){PA_DTYPE_BFLOAT16, 2, {N, HK * D}};
  in[PA_IN_KEY_CACHE] = in[PA_IN_VALUE_CACHE] = (pa_tensor_desc){PA_DTYPE_BFLOAT16, 4, {1, BLOCK, HK, D}};
  in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH] = (pa_tensor_desc){PA_DTYPE_INT32, 1, {2}};
  in[PA_IN_PAST_SEQLENS] = (pa_tensor_desc){PA_DTYPE_INT32, 1, {1}};
  in[PA_IN_BLOCK_TABLE] = (pa_tensor_desc){PA_DTYPE_INT32, 2, {1, 1}};
  pa_attributes attrs;
  pa_attributes_init(&attrs);
  attrs.num_heads = H, attrs.kv_num_heads = HK;
  pa_plan_options opts; /* on the host: the reference executor; use a GPU ordinal + pa_execute there */
  pa_plan_options_init(&opts);
  opts.device = PA_DEVICE_HOST;
  pa_plan *plan = NULL;
  pa_status st = pa_plan_create(&plan, &attrs, in, outd, &opts);
  const void *inputs[PA_NUM_INPUTS] = {q, k, v, k_cache, v_cache, cu_seqlens, past_seqlens, block_table};
  void *outputs[PA_NUM_OUTPUTS] = {out};
  if (st == PA_SUCCESS) st = pa_execute_reference(plan, inputs, outputs);
  char msg[256];
  pa_last_error_message(msg, sizeof msg); /* "" after a success */
  union { uint32_t bits; float value; } first = {(uint32_t)out[0] << 16}; /* bf16 -> float */
  printf("%s%s%s, output[0][0] = %.4f\n", pa_status_string(st), *msg ? ": " : "", msg, first.value);
  pa_plan_destroy(plan);
  return st != PA_SUCCESS;
}
