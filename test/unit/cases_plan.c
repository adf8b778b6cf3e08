/* Plans for unit-test cases through the public API (see cases.h). */
#include "cases.h"

pa_device_caps case_caps_h200(void) {
  pa_device_caps caps = {sizeof caps, 9, 0, 132, 232448};
  return caps;
}

pa_device_caps case_caps_a100(void) {
  pa_device_caps caps = {sizeof caps, 8, 0, 108, 166912};
  return caps;
}

pa_status case_plan(const pa_case *c, pa_plan **plan) {
  pa_plan_options options;
  pa_plan_options_init(&options);
  pa_device_caps caps;
  options.backend = c->backend;
  options.max_output_qk_bytes = c->max_output_qk_bytes;
  options.attention_metadata = c->pass_metadata ? c->metadata : NULL;
  options.contract_check = c->contract_check;
  switch (c->device) {
  case CASE_HOST: options.device = PA_DEVICE_HOST; break;
  case CASE_H200:
  case CASE_A100:
    caps = c->device == CASE_H200 ? case_caps_h200() : case_caps_a100();
    options.device = 0;
    options.device_caps = &caps;
    break;
  case CASE_DEVICE_0: options.device = 0; break;
  }
  return pa_plan_create(plan, &c->attrs, c->in, c->out, &options);
}

pa_plan *case_plan_ok(const pa_case *c) {
  pa_plan *plan = NULL;
  CASE_ASSERT_STATUS(case_plan(c, &plan), PA_SUCCESS, "");
  assert_non_null(plan);
  return plan;
}
