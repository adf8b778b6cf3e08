/* PLACEHOLDER */
#include "internal.h"
pa_status pa__validate(pa__problem *p, const pa_attributes *attrs,
                       const pa_tensor_desc inputs[PA_NUM_INPUTS],
                       const pa_tensor_desc outputs[PA_NUM_OUTPUTS], const int32_t *metadata,
                       uint64_t max_qk_bytes) {
  (void)p; (void)attrs; (void)inputs; (void)outputs; (void)metadata; (void)max_qk_bytes;
  return pa__fail(PA_ERROR_INTERNAL, "validate: not written");
}
