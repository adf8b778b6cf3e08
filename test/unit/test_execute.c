/*
 * The checks of pa_execute and pa_execute_reference that come before any work: required pointers
 * (V47), cache outputs aliasing their inputs (V32), the workspace (V45), and which plans each
 * accepts.
 *
 * No GPU here. pa_execute_reference shares the pointer checks (pa__check_io) with pa_execute, so
 * V32/V47 run on host plans. pa_execute refuses host and described plans before anything else, so
 * its own checks are reached with a host-planned problem relabelled as a plan for device 0 (the
 * struct is internal); every call below must fail a check, since passing them would launch.
 * test_execute_gpu.c (suite gpu) repeats these through real GPU plans.
 */
#include <string.h>

#include "cases.h"

/* Stand-in pointers: distinct, non-NULL, never dereferenced (every call fails a check first). */
static char buffers[PA_NUM_INPUTS + PA_NUM_OUTPUTS][16];

typedef struct io {
  const void *in[PA_NUM_INPUTS];
  void *out[PA_NUM_OUTPUTS];
} io;

/* A pointer for every present descriptor, caches aliased as the contract requires. */
static io io_for(const pa_case *c) {
  io x;
  memset(&x, 0, sizeof x);
  for (int i = 0; i < PA_NUM_INPUTS; i++)
    if (c->in[i].dtype != PA_DTYPE_UNDEFINED) x.in[i] = buffers[i];
  for (int i = 0; i < PA_NUM_OUTPUTS; i++)
    if (c->out[i].dtype != PA_DTYPE_UNDEFINED) x.out[i] = buffers[PA_NUM_INPUTS + i];
  x.out[PA_OUT_KEY_CACHE] = (void *)x.in[PA_IN_KEY_CACHE];
  x.out[PA_OUT_VALUE_CACHE] = (void *)x.in[PA_IN_VALUE_CACHE];
  return x;
}

static pa_case with_optional_inputs(void) {
  case_config cfg = case_config_default();
  cfg.mode = CASE_PACKED; /* key and value absent: their pointers are not needed */
  cfg.rotary_dim = 32;
  cfg.slot_mapping = cfg.head_sink = cfg.qk_norm = cfg.query_positions = cfg.bias = 1;
  cfg.cache_dtype = PA_DTYPE_INT8;
  cfg.quant = PA_QUANT_PER_CHANNEL;
  cfg.qk_output = 1;
  pa_case c;
  case_build(&c, &cfg);
  return c;
}

/* ---- V47 required pointers (through pa_execute_reference's shared checks) -------------------- */

static void V47_required_input_null(void **state) {
  (void)state;
  pa_case c = with_optional_inputs();
  pa_plan *plan = case_plan_ok(&c);
  const int needed[] = {PA_IN_QUERY,           PA_IN_KEY_CACHE,
                        PA_IN_VALUE_CACHE,     PA_IN_CUMULATIVE_SEQUENCE_LENGTH,
                        PA_IN_PAST_SEQLENS,    PA_IN_BLOCK_TABLE,
                        PA_IN_COS_CACHE,       PA_IN_SIN_CACHE,
                        PA_IN_SLOT_MAPPING,    PA_IN_HEAD_SINK,
                        PA_IN_Q_NORM_WEIGHT,   PA_IN_K_NORM_WEIGHT,
                        PA_IN_K_SCALE,         PA_IN_V_SCALE,
                        PA_IN_QUERY_POSITIONS, PA_IN_ATTENTION_BIAS};
  const char *const names[] = {
      "query",        "key_cache",   "value_cache",     "cumulative_sequence_length",
      "past_seqlens", "block_table", "cos_cache",       "sin_cache",
      "slot_mapping", "head_sink",   "q_norm_weight",   "k_norm_weight",
      "k_scale",      "v_scale",     "query_positions", "attention_bias"};
  for (size_t i = 0; i < sizeof needed / sizeof needed[0]; i++) {
    io x = io_for(&c);
    x.in[needed[i]] = NULL;
    x.out[PA_OUT_KEY_CACHE] = x.out[PA_OUT_VALUE_CACHE] = NULL;
    CASE_ASSERT_STATUS(pa_execute_reference(plan, x.in, x.out), PA_ERROR_INVALID_ARGUMENT, names[i],
                       "NULL");
  }
  pa_plan_destroy(plan);
}

static void V47_separate_key_and_value_pointers(void **state) {
  (void)state;
  pa_case c = case_default();
  pa_plan *plan = case_plan_ok(&c);
  io x = io_for(&c);
  x.in[PA_IN_KEY] = NULL;
  CASE_ASSERT_STATUS(pa_execute_reference(plan, x.in, x.out), PA_ERROR_INVALID_ARGUMENT, "key",
                     "NULL");
  x = io_for(&c);
  x.in[PA_IN_VALUE] = NULL;
  CASE_ASSERT_STATUS(pa_execute_reference(plan, x.in, x.out), PA_ERROR_INVALID_ARGUMENT, "value",
                     "NULL");
  pa_plan_destroy(plan);
}

static void V47_outputs_null(void **state) {
  (void)state;
  pa_case c = with_optional_inputs();
  pa_plan *plan = case_plan_ok(&c);
  io x = io_for(&c);
  x.out[PA_OUT_OUTPUT] = NULL;
  CASE_ASSERT_STATUS(pa_execute_reference(plan, x.in, x.out), PA_ERROR_INVALID_ARGUMENT, "output",
                     "NULL");
  x = io_for(&c);
  x.out[PA_OUT_QK] = NULL;
  CASE_ASSERT_STATUS(pa_execute_reference(plan, x.in, x.out), PA_ERROR_INVALID_ARGUMENT,
                     "output_qk", "NULL");
  CASE_ASSERT_STATUS(pa_execute_reference(plan, NULL, x.out), PA_ERROR_INVALID_ARGUMENT, "inputs",
                     "NULL");
  CASE_ASSERT_STATUS(pa_execute_reference(plan, x.in, NULL), PA_ERROR_INVALID_ARGUMENT, "outputs",
                     "NULL");
  pa_plan_destroy(plan);
}

/* ---- V32 cache outputs alias their inputs ---------------------------------------------------- */

static void V32_cache_outputs_must_alias_their_inputs(void **state) {
  (void)state;
  pa_case c = case_default();
  pa_plan *plan = case_plan_ok(&c);
  io x = io_for(&c);
  x.out[PA_OUT_KEY_CACHE] = buffers[PA_NUM_INPUTS + PA_OUT_KEY_CACHE];
  CASE_ASSERT_STATUS(pa_execute_reference(plan, x.in, x.out), PA_ERROR_INVALID_ARGUMENT,
                     "key_cache_out", "very buffer of key_cache");
  x = io_for(&c);
  x.out[PA_OUT_VALUE_CACHE] = (void *)x.in[PA_IN_KEY_CACHE];
  CASE_ASSERT_STATUS(pa_execute_reference(plan, x.in, x.out), PA_ERROR_INVALID_ARGUMENT,
                     "value_cache_out", "very buffer of value_cache");
  pa_plan_destroy(plan);
}

/* ---- pa_execute: which plans it accepts, V45 workspace --------------------------------------- */

/* The host plan's problem, relabelled as an UNFUSED plan for device 0 whose workspace holds the
 * write path's regions and backend_bytes of scratch (see the top of the file: only for calls that
 * fail a check). */
static pa_plan device_plan(const pa_plan *host_plan, size_t backend_bytes) {
  pa_plan plan = *host_plan;
  plan.device = 0;
  plan.backend = PA_BACKEND_UNFUSED;
  memset(&plan.workspace, 0, sizeof plan.workspace);
  plan.q_staged_region = pa__write_workspace(&plan.problem, &plan.workspace);
  pa__workspace_add(&plan.workspace, "scratch", backend_bytes, 1, PA_WORKSPACE_ALIGNMENT);
  return plan;
}

static void execute_refuses_host_and_described_plans(void **state) {
  (void)state;
  pa_case c = case_default();
  pa_plan *host = case_plan_ok(&c);
  io x = io_for(&c);
  CASE_ASSERT_STATUS(pa_execute(host, x.in, x.out, NULL, 0, NULL), PA_ERROR_INVALID_ARGUMENT,
                     "plan", "pa_execute_reference");
  pa_plan described = device_plan(host, 4096);
  described.described = 1;
  CASE_ASSERT_STATUS(pa_execute(&described, x.in, x.out, NULL, 0, NULL), PA_ERROR_INVALID_ARGUMENT,
                     "plan", "device_caps");
  pa_plan_destroy(host);
}

static void V45_workspace_too_small(void **state) {
  (void)state;
  pa_case c = case_default();
  pa_plan *host = case_plan_ok(&c);
  pa_plan plan = device_plan(host, 1000);
  const size_t need = pa_plan_workspace_size(&plan);
  assert_int_equal(need, 1024);
  io x = io_for(&c);
  _Alignas(PA_WORKSPACE_ALIGNMENT) static char workspace[2048];
  CASE_ASSERT_STATUS(pa_execute(&plan, x.in, x.out, workspace, need - 1, NULL),
                     PA_ERROR_WORKSPACE_TOO_SMALL, "workspace", "at least 1024", "got 1023");
  CASE_ASSERT_STATUS(pa_execute(&plan, x.in, x.out, NULL, need, NULL), PA_ERROR_WORKSPACE_TOO_SMALL,
                     "workspace", "NULL");
  pa_plan_destroy(host);
}

static void V45_workspace_misaligned(void **state) {
  (void)state;
  pa_case c = case_default();
  pa_plan *host = case_plan_ok(&c);
  pa_plan plan = device_plan(host, 1000);
  io x = io_for(&c);
  _Alignas(PA_WORKSPACE_ALIGNMENT) static char workspace[2048];
  CASE_ASSERT_STATUS(pa_execute(&plan, x.in, x.out, workspace + 16, 2000, NULL),
                     PA_ERROR_MISALIGNED, "workspace", "256-byte alignment");
  pa_plan_destroy(host);
}

/* The pointer checks come before the workspace ones in pa_execute too. */
static void V47_execute_checks_pointers(void **state) {
  (void)state;
  pa_case c = case_default();
  pa_plan *host = case_plan_ok(&c);
  pa_plan plan = device_plan(host, 1000);
  io x = io_for(&c);
  x.in[PA_IN_BLOCK_TABLE] = NULL;
  CASE_ASSERT_STATUS(pa_execute(&plan, x.in, x.out, NULL, 0, NULL), PA_ERROR_INVALID_ARGUMENT,
                     "block_table", "NULL");
  x = io_for(&c);
  x.out[PA_OUT_VALUE_CACHE] = buffers[0];
  CASE_ASSERT_STATUS(pa_execute(&plan, x.in, x.out, NULL, 0, NULL), PA_ERROR_INVALID_ARGUMENT,
                     "value_cache_out");
  pa_plan_destroy(host);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(V47_required_input_null),
      cmocka_unit_test(V47_separate_key_and_value_pointers),
      cmocka_unit_test(V47_outputs_null),
      cmocka_unit_test(V47_execute_checks_pointers),
      cmocka_unit_test(V32_cache_outputs_must_alias_their_inputs),
      cmocka_unit_test(execute_refuses_host_and_described_plans),
      cmocka_unit_test(V45_workspace_too_small),
      cmocka_unit_test(V45_workspace_misaligned),
  };
  return CASE_RUN_TESTS("execute", tests, argc, argv);
}
