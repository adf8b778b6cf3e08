/* pa_execute_reference: the operator on host memory (doc/semantics.md), for any plan. The write path
 * runs for every token before attention reads the cache. */
#include <stdlib.h>

#include "reference.h"

/* Token -> sequence (the lowest b whose [cu[b], cu[b+1]) holds it) and its position. */
static void map_tokens(pa__ref_call *call) {
  const pa__problem *p = call->p;
  const int32_t *cu = call->io.cu_seqlens;
  for (int64_t t = 0; t < p->token_count; t++) call->sequence_of_token[t] = -1;
  for (int32_t b = 0; b < p->batch_size; b++) {
    int64_t begin = cu[b] > 0 ? cu[b] : 0;
    int64_t end = cu[b + 1] < p->token_count ? cu[b + 1] : p->token_count;
    for (int64_t t = begin; t < end; t++) {
      if (call->sequence_of_token[t] >= 0) continue;
      call->sequence_of_token[t] = b;
      call->position_of_token[t] = call->io.query_positions
                                       ? (int64_t)call->io.query_positions[t]
                                       : (int64_t)call->io.past_seqlens[b] + (t - cu[b]);
    }
  }
}

/* The step on the host: the write path, then attention unless write_only. */
static pa_status execute_reference(const pa_plan *plan, const void *const inputs[PA_NUM_INPUTS],
                                   void *const outputs[PA_NUM_OUTPUTS], int write_only) {
  pa__clear_error();
  if (!plan) return pa__fail(PA_ERROR_INVALID_ARGUMENT, "plan: must not be NULL");
  pa_status st = pa__check_io(plan, inputs, outputs);
  if (st != PA_SUCCESS) return st;
  const pa__problem *p = &plan->problem;
  if (p->token_count == 0) return PA_SUCCESS;

  pa__ref_call call;
  call.p = p;
  call.io = pa__io_from(p, inputs, outputs);
  size_t tokens = (size_t)p->token_count, q_bytes, kv_bytes;
  int sizes_fit = pa__mul3_size(tokens, (size_t)pa__q_row_elems(p), sizeof *call.q, &q_bytes) &&
                  pa__mul3_size(2, (size_t)pa__kv_row_elems(p), sizeof *call.kv_rows, &kv_bytes);
  call.sequence_of_token = malloc(tokens * sizeof *call.sequence_of_token); /* tokens <= INT32_MAX */
  call.position_of_token = malloc(tokens * sizeof *call.position_of_token);
  call.q = sizes_fit ? malloc(q_bytes) : NULL;
  call.kv_rows = sizes_fit ? malloc(kv_bytes) : NULL;
  if (!call.sequence_of_token || !call.position_of_token || !call.q || !call.kv_rows) {
    st = pa__fail(PA_ERROR_OUT_OF_MEMORY, "reference: host scratch for %lld tokens",
                  (long long)p->token_count);
  } else {
    map_tokens(&call);
    pa__ref_write(&call);
    if (!write_only) st = pa__ref_attention(&call);
  }
  free(call.sequence_of_token);
  free(call.position_of_token);
  free(call.q);
  free(call.kv_rows);
  return st;
}

pa_status pa_execute_reference(const pa_plan *plan, const void *const inputs[PA_NUM_INPUTS],
                               void *const outputs[PA_NUM_OUTPUTS]) {
  return execute_reference(plan, inputs, outputs, 0);
}

pa_status pa__execute_reference_write(const pa_plan *plan, const void *const inputs[PA_NUM_INPUTS],
                                      void *const outputs[PA_NUM_OUTPUTS]) {
  return execute_reference(plan, inputs, outputs, 1);
}
