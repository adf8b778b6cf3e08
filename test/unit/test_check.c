/*
 * The device contract checker's host side (doc/api.md, "Checking device data"), on described
 * devices: it is planned only when asked (pa_plan_options.contract_check or PA_CHECK=1), its two
 * workspace regions come first (the status at offset 0) and are all it adds, host plans have none,
 * and pa_plan_check_status refuses what it cannot read. The checker's kernel runs in
 * test/gpu/test_check.c.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cases.h"

static pa_case described(case_config cfg, int contract_check) {
  pa_case c;
  case_build(&c, &cfg);
  c.device = CASE_H200;
  c.contract_check = contract_check;
  return c;
}

/* The configurations of the three GPU backends' plans: DECODE, PREFILL, UNFUSED (bias). */
static case_config backend_config(int which) {
  case_config cfg = which == 0 ? case_config_decode() : case_config_default();
  if (which == 2) cfg.bias = 1;
  return cfg;
}

static void expect_region(const pa__workspace_region *r, const char *name_start) {
  if (strncmp(r->name, name_start, strlen(name_start)) != 0)
    fprintf(stderr, "region: expected \"%s...\", got \"%s\"\n", name_start, r->name);
  assert_int_equal(strncmp(r->name, name_start, strlen(name_start)), 0);
}

/* With the checker the layout is the checker's two regions, then every region of the plan without
 * it, in order and of the same sizes; without it nothing is added. */
static void check_regions_come_first_and_only_when_on(void **state) {
  (void)state;
  for (int which = 0; which < 3; which++) {
    const pa_case off_case = described(backend_config(which), 0);
    const pa_case on_case = described(backend_config(which), 1);
    pa_plan *off = case_plan_ok(&off_case), *on = case_plan_ok(&on_case);
    assert_int_equal(pa_plan_backend(off), pa_plan_backend(on));
    assert_int_equal(pa_plan_contract_check(off), 0);
    assert_int_equal(pa_plan_contract_check(on), 1);
    assert_null(off->check_state);
    const pa__workspace_layout *a = &off->workspace, *b = &on->workspace;
    assert_int_equal(b->count, a->count + 2);
    expect_region(&b->regions[0], "contract check status");
    expect_region(&b->regions[1], "contract check scratch");
    assert_int_equal(b->regions[0].offset, 0);
    for (int i = 0; i < a->count; i++) {
      assert_string_equal(a->regions[i].name, b->regions[i + 2].name);
      assert_int_equal(a->regions[i].bytes, b->regions[i + 2].bytes);
    }
    assert_true(pa_plan_workspace_size(on) > pa_plan_workspace_size(off));
    /* the scratch holds a counter, a bit per cache slot twice, and the partials */
    const pa__problem *p = &on->problem;
    const uint64_t slots = (uint64_t)p->num_blocks * (uint64_t)p->block_size;
    assert_true(b->regions[1].bytes >= 256 + (slots + 31) / 32 * 8);
    pa_plan_destroy(off);
    pa_plan_destroy(on);
  }
}

/* PA_CHECK=1 in the environment turns it on for plans created afterwards; other values do not. */
static void check_environment_turns_it_on(void **state) {
  (void)state;
  const pa_case c = described(case_config_decode(), 0);
  const char *const values[] = {"1", "0", "yes", NULL};
  const int expected[] = {1, 0, 0, 0};
  for (int i = 0; i < 4; i++) {
    if (values[i])
      setenv("PA_CHECK", values[i], 1);
    else
      unsetenv("PA_CHECK");
    pa_plan *plan = case_plan_ok(&c);
    if (pa_plan_contract_check(plan) != expected[i])
      fprintf(stderr, "PA_CHECK=%s: expected %d\n", values[i] ? values[i] : "(unset)",
              expected[i]);
    assert_int_equal(pa_plan_contract_check(plan), expected[i]);
    pa_plan_destroy(plan);
  }
}

/* Host plans run the reference only: they have no checker and no workspace, whatever is asked. */
static void check_host_plans_have_no_checker(void **state) {
  (void)state;
  pa_case c = described(case_config_default(), 1);
  c.device = CASE_HOST;
  pa_plan *plan = case_plan_ok(&c);
  assert_int_equal(pa_plan_contract_check(plan), 0);
  assert_int_equal(pa_plan_workspace_size(plan), 0);
  pa_plan_destroy(plan);
}

static void check_option_rejects_other_values(void **state) {
  (void)state;
  pa_case c = described(case_config_default(), 2);
  CASE_EXPECT_PLAN_FAILURE(&c, PA_ERROR_INVALID_ARGUMENT, "contract_check", "0 or 1", "got 2");
}

/* A caller built before contract_check existed passes the shorter struct: accepted, and whatever
 * lies beyond its struct_size is not read (the checker stays off). */
static void check_options_of_the_first_release(void **state) {
  (void)state;
  pa_case c = described(case_config_default(), 0);
  pa_device_caps caps = case_caps_h200();
  pa_plan_options options;
  pa_plan_options_init(&options);
  options.device = 0;
  options.device_caps = &caps;
  options.struct_size = offsetof(pa_plan_options, contract_check);
  options.contract_check = 1; /* beyond struct_size */
  pa_plan *plan = NULL;
  CASE_ASSERT_STATUS(pa_plan_create(&plan, &c.attrs, c.in, c.out, &options), PA_SUCCESS, "");
  assert_int_equal(pa_plan_contract_check(plan), 0);
  pa_plan_destroy(plan);
  options.struct_size = offsetof(pa_plan_options, contract_check) - 1;
  CASE_ASSERT_STATUS(pa_plan_create(&plan, &c.attrs, c.in, c.out, &options),
                     PA_ERROR_INVALID_ARGUMENT, "options: struct_size");
}

/* What pa_plan_check_status refuses before touching a device; the message buffer is "" after. */
static void check_status_refusals(void **state) {
  (void)state;
  char message[64] = "stale";
  static char workspace[1024];
  CASE_ASSERT_STATUS(pa_plan_check_status(NULL, workspace, NULL, message, sizeof message),
                     PA_ERROR_INVALID_ARGUMENT, "plan: must not be NULL");
  assert_string_equal(message, "");

  const pa_case off_case = described(case_config_default(), 0);
  pa_plan *off = case_plan_ok(&off_case);
  CASE_ASSERT_STATUS(pa_plan_check_status(off, workspace, NULL, message, sizeof message),
                     PA_ERROR_INVALID_ARGUMENT, "plan: made without the contract checker",
                     "PA_CHECK=1");
  pa_plan_destroy(off);

  const pa_case on_case = described(case_config_default(), 1);
  pa_plan *on = case_plan_ok(&on_case);
  CASE_ASSERT_STATUS(pa_plan_check_status(on, workspace, NULL, NULL, 0),
                     PA_ERROR_INVALID_ARGUMENT, "plan: made for described device_caps");
  pa_plan_destroy(on);
  assert_int_equal(pa_plan_contract_check(NULL), 0);
}

/* PA_DEBUG=1 names the checker and its regions. Only that the plan succeeds is asserted here (the
 * report goes to stderr). */
static void check_debug_report(void **state) {
  (void)state;
  setenv("PA_DEBUG", "1", 1);
  const pa_case c = described(case_config_decode(), 1);
  pa_plan_destroy(case_plan_ok(&c));
  unsetenv("PA_DEBUG");
}

int main(int argc, char **argv) {
  unsetenv("PA_CHECK");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(check_regions_come_first_and_only_when_on),
      cmocka_unit_test(check_environment_turns_it_on),
      cmocka_unit_test(check_host_plans_have_no_checker),
      cmocka_unit_test(check_option_rejects_other_values),
      cmocka_unit_test(check_options_of_the_first_release),
      cmocka_unit_test(check_status_refusals),
      cmocka_unit_test(check_debug_report),
  };
  return CASE_RUN_TESTS("check", tests, argc, argv);
}
