/* PLACEHOLDER */
#include "internal.h"
pa_status pa_execute_reference(const pa_plan *plan, const void *const inputs[PA_NUM_INPUTS],
                               void *const outputs[PA_NUM_OUTPUTS]) {
  (void)plan; (void)inputs; (void)outputs;
  return pa__fail(PA_ERROR_INTERNAL, "reference: not written");
}
