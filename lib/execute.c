/* pa_execute: the host checks that cost nothing, then the contract checker's launch (checked plans
 * only), the write path's and the backend's, all decided at plan time. Never allocates,
 * synchronizes or reads device memory (doc/cuda-graphs.md, "What the library guarantees").
 * pa_plan_check_status, off the execute path, reads what the checker recorded. */
#include <stdint.h>
#include <string.h>

#include "internal.h"

/* Which inputs the plan reads on the device (attention_metadata is host data, read at plan time). */
static int input_required(const pa__problem *p, int i) {
  switch (i) {
  case PA_IN_QUERY: case PA_IN_KEY_CACHE: case PA_IN_CUMULATIVE_SEQUENCE_LENGTH:
  case PA_IN_PAST_SEQLENS: case PA_IN_BLOCK_TABLE:
    return 1;
  case PA_IN_KEY: return p->input_mode != PA__MODE_PACKED;
  case PA_IN_VALUE: return p->input_mode == PA__MODE_SEPARATE;
  case PA_IN_VALUE_CACHE: return p->input_mode != PA__MODE_LATENT;
  case PA_IN_COS_CACHE: case PA_IN_SIN_CACHE: return p->do_rotary;
  case PA_IN_SLOT_MAPPING: return p->has_slot_mapping;
  case PA_IN_HEAD_SINK: return p->has_head_sink;
  case PA_IN_Q_NORM_WEIGHT: case PA_IN_K_NORM_WEIGHT: return p->has_qk_norm;
  case PA_IN_K_SCALE: return p->k_quant != PA_QUANT_NONE;
  case PA_IN_V_SCALE: return p->v_quant != PA_QUANT_NONE;
  case PA_IN_QUERY_POSITIONS: return p->has_query_positions;
  case PA_IN_ATTENTION_BIAS: return p->has_bias;
  default: return 0;
  }
}

pa_status pa__check_io(const pa_plan *plan, const void *const inputs[PA_NUM_INPUTS],
                       void *const outputs[PA_NUM_OUTPUTS]) {
  const pa__problem *p = &plan->problem;
  if (!inputs) return pa__fail(PA_ERROR_INVALID_ARGUMENT, "inputs: must not be NULL");
  if (!outputs) return pa__fail(PA_ERROR_INVALID_ARGUMENT, "outputs: must not be NULL");
  for (int i = 0; i < PA_NUM_INPUTS; i++)
    if (input_required(p, i) && !inputs[i])
      return pa__fail(PA_ERROR_INVALID_ARGUMENT, "%s: the plan needs it, but its pointer is NULL",
                      pa__input_names[i]);
  if (!outputs[PA_OUT_OUTPUT])
    return pa__fail(PA_ERROR_INVALID_ARGUMENT, "output: the pointer is NULL");
  if (p->qk_output && !outputs[PA_OUT_QK])
    return pa__fail(PA_ERROR_INVALID_ARGUMENT, "output_qk: qk_output is %d but the pointer is NULL",
                    p->qk_output);
  if (outputs[PA_OUT_KEY_CACHE] && outputs[PA_OUT_KEY_CACHE] != inputs[PA_IN_KEY_CACHE])
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "key_cache_out: must be the very buffer of key_cache (%p), got %p",
                    inputs[PA_IN_KEY_CACHE], outputs[PA_OUT_KEY_CACHE]);
  if (outputs[PA_OUT_VALUE_CACHE] && outputs[PA_OUT_VALUE_CACHE] != inputs[PA_IN_VALUE_CACHE])
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "value_cache_out: must be the very buffer of value_cache (%p), got %p",
                    inputs[PA_IN_VALUE_CACHE], outputs[PA_OUT_VALUE_CACHE]);
  return PA_SUCCESS;
}

pa__io pa__io_from(const pa__problem *p, const void *const in[PA_NUM_INPUTS],
                   void *const out[PA_NUM_OUTPUTS]) {
  pa__io io;
  memset(&io, 0, sizeof io);
  io.query = in[PA_IN_QUERY];
  io.key = in[PA_IN_KEY];
  io.value = in[PA_IN_VALUE];
  io.key_cache = (void *)in[PA_IN_KEY_CACHE];
  io.value_cache = p->input_mode == PA__MODE_LATENT ? NULL : (void *)in[PA_IN_VALUE_CACHE];
  io.cu_seqlens = in[PA_IN_CUMULATIVE_SEQUENCE_LENGTH];
  io.past_seqlens = in[PA_IN_PAST_SEQLENS];
  io.block_table = in[PA_IN_BLOCK_TABLE];
  io.cos_cache = p->do_rotary ? in[PA_IN_COS_CACHE] : NULL;
  io.sin_cache = p->do_rotary ? in[PA_IN_SIN_CACHE] : NULL;
  io.slot_mapping = p->has_slot_mapping ? in[PA_IN_SLOT_MAPPING] : NULL;
  io.head_sink = p->has_head_sink ? in[PA_IN_HEAD_SINK] : NULL;
  io.q_norm_weight = p->has_qk_norm ? in[PA_IN_Q_NORM_WEIGHT] : NULL;
  io.k_norm_weight = p->has_qk_norm ? in[PA_IN_K_NORM_WEIGHT] : NULL;
  io.k_scale = p->k_quant != PA_QUANT_NONE ? in[PA_IN_K_SCALE] : NULL;
  io.v_scale = p->v_quant != PA_QUANT_NONE ? in[PA_IN_V_SCALE] : NULL;
  io.query_positions = p->has_query_positions ? in[PA_IN_QUERY_POSITIONS] : NULL;
  io.attention_bias = p->has_bias ? in[PA_IN_ATTENTION_BIAS] : NULL;
  io.output = out[PA_OUT_OUTPUT];
  io.output_qk = p->qk_output ? out[PA_OUT_QK] : NULL;
  io.q_attn = io.query;
  io.q_attn_row_stride = pa__query_row_elems(p);
  return io;
}

pa_status pa_execute(const pa_plan *plan, const void *const inputs[PA_NUM_INPUTS],
                     void *const outputs[PA_NUM_OUTPUTS], void *workspace, size_t workspace_bytes,
                     pa_stream stream) {
  pa__clear_error();
  if (!plan) return pa__fail(PA_ERROR_INVALID_ARGUMENT, "plan: must not be NULL");
  if (plan->device == PA_DEVICE_HOST || plan->backend == PA_BACKEND_REFERENCE)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "plan: backend %s on device %d runs only through pa_execute_reference",
                    pa_backend_name(plan->backend), plan->device);
  if (plan->described)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "plan: made for described device_caps, not for a device; plan again without "
                    "pa_plan_options.device_caps to execute");
  pa_status st = pa__check_io(plan, inputs, outputs);
  if (st != PA_SUCCESS) return st;
  const pa__workspace_layout *ws = &plan->workspace;
  if (workspace_bytes < ws->total)
    return pa__fail(PA_ERROR_WORKSPACE_TOO_SMALL, "workspace: expected at least %zu bytes, got %zu",
                    ws->total, workspace_bytes);
  if (ws->total && !workspace)
    return pa__fail(PA_ERROR_WORKSPACE_TOO_SMALL, "workspace: expected %zu bytes, got NULL",
                    ws->total);
  if ((uintptr_t)workspace % PA_WORKSPACE_ALIGNMENT)
    return pa__fail(PA_ERROR_MISALIGNED, "workspace: expected %d-byte alignment, got address %p",
                    PA_WORKSPACE_ALIGNMENT, workspace);
  if (plan->problem.token_count == 0) return PA_SUCCESS;

  pa__io io = pa__io_from(&plan->problem, inputs, outputs);
  io.workspace = workspace;
  if (plan->q_staged_region >= 0) {
    io.q_staged = pa__workspace_at(ws, plan->q_staged_region, workspace);
    io.q_attn = io.q_staged;
    io.q_attn_row_stride = pa__q_row_elems(&plan->problem);
  }
  /* the tensors' alignment before anything is enqueued (the checker included) */
  st = pa__write_check_alignment(plan, &io);
  if (st != PA_SUCCESS) return st;
  if (plan->check_state) {
    st = pa__check_run(plan, &io, (pa__stream)stream);
    if (st != PA_SUCCESS) return st;
  }
  st = pa__write_run(plan, &io, (pa__stream)stream);
  if (st != PA_SUCCESS) return st;
  return plan->ops->run(plan, &io, (pa__stream)stream);
}

int pa_plan_contract_check(const pa_plan *plan) { return plan && plan->check_state ? 1 : 0; }

pa_status pa_plan_check_status(const pa_plan *plan, const void *workspace, pa_stream stream,
                               char *message, size_t size) {
  pa__clear_error();
  if (message && size > 0) message[0] = '\0';
  if (!plan) return pa__fail(PA_ERROR_INVALID_ARGUMENT, "plan: must not be NULL");
  if (!plan->check_state)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "plan: made without the contract checker (set pa_plan_options.contract_check "
                    "= 1, or PA_CHECK=1 in the environment, before pa_plan_create)");
  if (plan->described)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "plan: made for described device_caps, not for a device");
  if (!workspace)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "workspace: must be the workspace of the checked pa_execute calls, got NULL");
  return pa__check_report(plan, workspace, (pa__stream)stream, message, size);
}
