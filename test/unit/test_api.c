/*
 * The small public functions: status strings, the thread-local last-error message, attribute and
 * option defaults, element sizes, backend names, and the parsers of the string attributes (V33 for
 * unknown names; the cache dtype vocabulary of V23).
 */
#include <pthread.h>
#include <string.h>

#include "cases.h"

static void status_strings(void **state) {
  (void)state;
  const struct {
    pa_status status;
    const char *name;
  } statuses[] = {
      {PA_SUCCESS, "PA_SUCCESS"},
      {PA_ERROR_INVALID_ARGUMENT, "PA_ERROR_INVALID_ARGUMENT"},
      {PA_ERROR_WORKSPACE_TOO_SMALL, "PA_ERROR_WORKSPACE_TOO_SMALL"},
      {PA_ERROR_MISALIGNED, "PA_ERROR_MISALIGNED"},
      {PA_ERROR_NOT_SUPPORTED, "PA_ERROR_NOT_SUPPORTED"},
      {PA_ERROR_NO_DEVICE, "PA_ERROR_NO_DEVICE"},
      {PA_ERROR_CUDA, "PA_ERROR_CUDA"},
      {PA_ERROR_CUBLAS, "PA_ERROR_CUBLAS"},
      {PA_ERROR_OUT_OF_MEMORY, "PA_ERROR_OUT_OF_MEMORY"},
      {PA_ERROR_INTERNAL, "PA_ERROR_INTERNAL"},
  };
  for (size_t i = 0; i < sizeof statuses / sizeof statuses[0]; i++)
    assert_string_equal(pa_status_string(statuses[i].status), statuses[i].name);
  const char *unknown = pa_status_string((pa_status)1234);
  assert_non_null(unknown);
  assert_non_null(strstr(unknown, "UNKNOWN"));
}

static void status_codes_grouped(void **state) {
  (void)state;
  assert_int_equal(PA_SUCCESS, 0);
  assert_int_equal(PA_ERROR_INVALID_ARGUMENT / 1000, 1);
  assert_int_equal(PA_ERROR_WORKSPACE_TOO_SMALL / 1000, 1);
  assert_int_equal(PA_ERROR_MISALIGNED / 1000, 1);
  assert_int_equal(PA_ERROR_NOT_SUPPORTED / 1000, 2);
  assert_int_equal(PA_ERROR_NO_DEVICE / 1000, 2);
  assert_int_equal(PA_ERROR_CUDA / 1000, 3);
  assert_int_equal(PA_ERROR_CUBLAS / 1000, 3);
  assert_int_equal(PA_ERROR_OUT_OF_MEMORY / 1000, 4);
  assert_int_equal(PA_ERROR_INTERNAL / 1000, 5);
}

/* Leaves a known message as the thread's last error. */
static const char *fail_with_known_message(void) {
  pa_kv_cache_layout layout;
  assert_int_equal(pa_kv_cache_layout_parse("PAGED", &layout), PA_ERROR_INVALID_ARGUMENT);
  return "kv_cache_layout: expected SEPARATE or LATENT, got \"PAGED\"";
}

static void last_error_message_truncation(void **state) {
  (void)state;
  const char *full = fail_with_known_message();
  const size_t len = strlen(full);
  assert_int_equal(pa_last_error_message(NULL, 0), len);
  assert_int_equal(pa_last_error_message(NULL, 100), len);

  char buf[128];
  memset(buf, 'x', sizeof buf);
  assert_int_equal(pa_last_error_message(buf, 0), len);
  assert_int_equal(buf[0], 'x'); /* size 0: nothing written */
  assert_int_equal(pa_last_error_message(buf, 1), len);
  assert_string_equal(buf, "");
  memset(buf, 'x', sizeof buf);
  assert_int_equal(pa_last_error_message(buf, 5), len);
  assert_string_equal(buf, "kv_c");
  assert_int_equal(buf[5], 'x'); /* nothing past the terminator */
  assert_int_equal(pa_last_error_message(buf, len), len);
  assert_int_equal(strlen(buf), len - 1);
  assert_int_equal(pa_last_error_message(buf, len + 1), len);
  assert_string_equal(buf, full);
  assert_int_equal(pa_last_error_message(buf, sizeof buf), len);
  assert_string_equal(buf, full);
}

static void last_error_cleared_by_success(void **state) {
  (void)state;
  fail_with_known_message();
  pa_quant_type quant;
  assert_int_equal(pa_quant_type_parse("PER_TENSOR", &quant), PA_SUCCESS);
  char buf[64] = "stale";
  assert_int_equal(pa_last_error_message(buf, sizeof buf), 0);
  assert_string_equal(buf, "");

  fail_with_known_message();
  pa_case c = case_default();
  pa_plan_destroy(case_plan_ok(&c));
  assert_int_equal(pa_last_error_message(NULL, 0), 0);
}

static void *fail_in_thread(void *arg) {
  (void)arg;
  pa_quant_type quant;
  pa_quant_type_parse("PER_BLOCK", &quant);
  return NULL;
}

static void last_error_is_thread_local(void **state) {
  (void)state;
  const char *full = fail_with_known_message();
  pthread_t thread;
  assert_int_equal(pthread_create(&thread, NULL, fail_in_thread, NULL), 0);
  assert_int_equal(pthread_join(thread, NULL), 0);
  char buf[128];
  pa_last_error_message(buf, sizeof buf);
  assert_string_equal(buf, full);
}

static void attributes_init_defaults(void **state) {
  (void)state;
  pa_attributes a;
  memset(&a, 0x5a, sizeof a);
  pa_attributes_init(&a);
  assert_int_equal(a.struct_size, sizeof a);
  assert_int_equal(a.num_heads, 0);
  assert_int_equal(a.kv_num_heads, 0);
  assert_true(a.scale == 0.0f);
  assert_true(a.softcap == 0.0f);
  assert_int_equal(a.local_window_size, -1);
  assert_int_equal(a.do_rotary, 0);
  assert_int_equal(a.rotary_interleaved, 0);
  assert_true(a.qk_norm_epsilon == 1e-6f);
  assert_int_equal(a.k_quant_type, PA_QUANT_NONE);
  assert_int_equal(a.v_quant_type, PA_QUANT_NONE);
  assert_int_equal(a.k_cache_dtype, PA_CACHE_DTYPE_DEFAULT);
  assert_int_equal(a.v_cache_dtype, PA_CACHE_DTYPE_DEFAULT);
  assert_int_equal(a.v_head_size, 0);
  assert_int_equal(a.rotary_offset, 0);
  assert_int_equal(a.kv_cache_layout, PA_KV_CACHE_LAYOUT_SEPARATE);
  assert_int_equal(a.qk_output, 0);
  assert_int_equal(a.is_causal, 1);
  pa_attributes_init(NULL);
}

static void plan_options_init_defaults(void **state) {
  (void)state;
  pa_plan_options o;
  memset(&o, 0x5a, sizeof o);
  pa_plan_options_init(&o);
  assert_int_equal(o.struct_size, sizeof o);
  assert_int_equal(o.device, PA_DEVICE_CURRENT);
  assert_int_equal(o.backend, PA_BACKEND_AUTO);
  assert_null(o.attention_metadata);
  assert_int_equal(o.max_output_qk_bytes, 0);
  assert_null(o.device_caps);
  pa_plan_options_init(NULL);
}

static void dtype_sizes(void **state) {
  (void)state;
  assert_int_equal(pa_dtype_size(PA_DTYPE_UNDEFINED), 0);
  assert_int_equal(pa_dtype_size(PA_DTYPE_FLOAT32), 4);
  assert_int_equal(pa_dtype_size(PA_DTYPE_FLOAT16), 2);
  assert_int_equal(pa_dtype_size(PA_DTYPE_BFLOAT16), 2);
  assert_int_equal(pa_dtype_size(PA_DTYPE_INT8), 1);
  assert_int_equal(pa_dtype_size(PA_DTYPE_FLOAT8_E4M3FN), 1);
  assert_int_equal(pa_dtype_size(PA_DTYPE_INT32), 4);
  assert_int_equal(pa_dtype_size(PA_DTYPE_UINT8), 1);
  assert_int_equal(pa_dtype_size((pa_dtype)77), 0);
}

static void backend_names(void **state) {
  (void)state;
  assert_string_equal(pa_backend_name(PA_BACKEND_AUTO), "AUTO");
  assert_string_equal(pa_backend_name(PA_BACKEND_REFERENCE), "REFERENCE");
  assert_string_equal(pa_backend_name(PA_BACKEND_DECODE), "DECODE");
  assert_string_equal(pa_backend_name(PA_BACKEND_PREFILL), "PREFILL");
  assert_string_equal(pa_backend_name(PA_BACKEND_UNFUSED), "UNFUSED");
  assert_string_equal(pa_backend_name(PA_BACKEND_LATENT), "LATENT");
  assert_string_equal(pa_backend_name((pa_backend)99), "UNKNOWN");
}

static void cache_dtype_parse_values(void **state) {
  (void)state;
  const struct {
    const char *name;
    pa_cache_dtype value;
  } names[] = {
      {"", PA_CACHE_DTYPE_DEFAULT},
      {"float16", PA_CACHE_DTYPE_FLOAT16},
      {"bfloat16", PA_CACHE_DTYPE_BFLOAT16},
      {"int8", PA_CACHE_DTYPE_INT8},
      {"float8e4m3fn", PA_CACHE_DTYPE_FLOAT8E4M3FN},
      {"int4", PA_CACHE_DTYPE_INT4}, /* reserved: parsed, rejected by pa_plan_create (V23) */
      {"float4e2m1", PA_CACHE_DTYPE_FLOAT4E2M1},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    pa_cache_dtype out = (pa_cache_dtype)-1;
    assert_int_equal(pa_cache_dtype_parse(names[i].name, &out), PA_SUCCESS);
    assert_int_equal(out, names[i].value);
  }
  pa_cache_dtype out = PA_CACHE_DTYPE_INT8;
  assert_int_equal(pa_cache_dtype_parse(NULL, &out), PA_SUCCESS);
  assert_int_equal(out, PA_CACHE_DTYPE_DEFAULT);
}

static void V33_cache_dtype_parse_rejects_unknown(void **state) {
  (void)state;
  pa_cache_dtype out;
  CASE_ASSERT_STATUS(pa_cache_dtype_parse("int16", &out), PA_ERROR_INVALID_ARGUMENT, "cache_dtype",
                     "\"int16\"");
  CASE_ASSERT_STATUS(pa_cache_dtype_parse("Float16", &out), PA_ERROR_INVALID_ARGUMENT,
                     "\"Float16\"");
  CASE_ASSERT_STATUS(pa_cache_dtype_parse("int8", NULL), PA_ERROR_INVALID_ARGUMENT, "NULL");
}

static void V23_cache_dtype_parse_rejects_unsigned(void **state) {
  (void)state;
  pa_cache_dtype out;
  CASE_ASSERT_STATUS(pa_cache_dtype_parse("uint8", &out), PA_ERROR_INVALID_ARGUMENT, "\"uint8\"",
                     "zero point");
  CASE_ASSERT_STATUS(pa_cache_dtype_parse("uint4", &out), PA_ERROR_INVALID_ARGUMENT, "\"uint4\"",
                     "zero point");
}

static void quant_type_parse_values(void **state) {
  (void)state;
  const struct {
    const char *name;
    pa_quant_type value;
  } names[] = {{NULL, PA_QUANT_NONE},
               {"", PA_QUANT_NONE},
               {"NONE", PA_QUANT_NONE},
               {"PER_TENSOR", PA_QUANT_PER_TENSOR},
               {"PER_CHANNEL", PA_QUANT_PER_CHANNEL}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    pa_quant_type out = (pa_quant_type)-1;
    assert_int_equal(pa_quant_type_parse(names[i].name, &out), PA_SUCCESS);
    assert_int_equal(out, names[i].value);
  }
}

static void V33_quant_type_parse_rejects_unknown(void **state) {
  (void)state;
  pa_quant_type out;
  CASE_ASSERT_STATUS(pa_quant_type_parse("per_tensor", &out), PA_ERROR_INVALID_ARGUMENT,
                     "quant_type", "NONE, PER_TENSOR or PER_CHANNEL", "\"per_tensor\"");
  CASE_ASSERT_STATUS(pa_quant_type_parse("PER_BLOCK", &out), PA_ERROR_INVALID_ARGUMENT,
                     "\"PER_BLOCK\"");
  CASE_ASSERT_STATUS(pa_quant_type_parse("NONE", NULL), PA_ERROR_INVALID_ARGUMENT, "NULL");
}

static void kv_cache_layout_parse_values(void **state) {
  (void)state;
  pa_kv_cache_layout out = (pa_kv_cache_layout)-1;
  assert_int_equal(pa_kv_cache_layout_parse(NULL, &out), PA_SUCCESS);
  assert_int_equal(out, PA_KV_CACHE_LAYOUT_SEPARATE);
  out = (pa_kv_cache_layout)-1;
  assert_int_equal(pa_kv_cache_layout_parse("", &out), PA_SUCCESS);
  assert_int_equal(out, PA_KV_CACHE_LAYOUT_SEPARATE);
  assert_int_equal(pa_kv_cache_layout_parse("LATENT", &out), PA_SUCCESS);
  assert_int_equal(out, PA_KV_CACHE_LAYOUT_LATENT);
  assert_int_equal(pa_kv_cache_layout_parse("SEPARATE", &out), PA_SUCCESS);
  assert_int_equal(out, PA_KV_CACHE_LAYOUT_SEPARATE);
}

static void V33_kv_cache_layout_parse_rejects_unknown(void **state) {
  (void)state;
  pa_kv_cache_layout out;
  CASE_ASSERT_STATUS(pa_kv_cache_layout_parse("KV_CONCAT", &out), PA_ERROR_INVALID_ARGUMENT,
                     "kv_cache_layout", "SEPARATE or LATENT", "\"KV_CONCAT\"");
  CASE_ASSERT_STATUS(pa_kv_cache_layout_parse("latent", &out), PA_ERROR_INVALID_ARGUMENT,
                     "\"latent\"");
  CASE_ASSERT_STATUS(pa_kv_cache_layout_parse("LATENT", NULL), PA_ERROR_INVALID_ARGUMENT, "NULL");
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(status_strings),
      cmocka_unit_test(status_codes_grouped),
      cmocka_unit_test(last_error_message_truncation),
      cmocka_unit_test(last_error_cleared_by_success),
      cmocka_unit_test(last_error_is_thread_local),
      cmocka_unit_test(attributes_init_defaults),
      cmocka_unit_test(plan_options_init_defaults),
      cmocka_unit_test(dtype_sizes),
      cmocka_unit_test(backend_names),
      cmocka_unit_test(cache_dtype_parse_values),
      cmocka_unit_test(V33_cache_dtype_parse_rejects_unknown),
      cmocka_unit_test(V23_cache_dtype_parse_rejects_unsigned),
      cmocka_unit_test(quant_type_parse_values),
      cmocka_unit_test(V33_quant_type_parse_rejects_unknown),
      cmocka_unit_test(kv_cache_layout_parse_values),
      cmocka_unit_test(V33_kv_cache_layout_parse_rejects_unknown),
  };
  return CASE_RUN_TESTS("api", tests, argc, argv);
}
