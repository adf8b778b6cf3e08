/*
 * V24 in a library built without fp8 caches (meson option fp8_kv_cache=false): lib/validate.c is
 * compiled a second time with PA_FP8_KV_CACHE=0 into this test, which calls pa__validate directly.
 */
#include "cases.h"

static void V24_fp8_cache_not_built(void **state) {
  (void)state;
  const case_mode modes[] = {CASE_SEPARATE, CASE_LATENT};
  for (size_t m = 0; m < 2; m++) {
    case_config cfg = m ? case_config_latent() : case_config_default();
    cfg.mode = modes[m];
    cfg.cache_dtype = PA_DTYPE_FLOAT8_E4M3FN;
    pa_case c;
    case_build(&c, &cfg);
    pa__problem p;
    CASE_ASSERT_STATUS(case_validate(&c, &p), PA_ERROR_NOT_SUPPORTED, "key_cache", "float8e4m3fn",
                       "fp8_kv_cache");
  }
}

static void V24_int8_cache_still_served(void **state) {
  (void)state;
  case_config cfg = case_config_default();
  cfg.cache_dtype = PA_DTYPE_INT8;
  pa_case c;
  case_build(&c, &cfg);
  pa__problem p;
  CASE_ASSERT_STATUS(case_validate(&c, &p), PA_SUCCESS, "");
  assert_int_equal(p.k_cache_dtype, PA_DTYPE_INT8);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(V24_fp8_cache_not_built),
      cmocka_unit_test(V24_int8_cache_still_served),
  };
  return CASE_RUN_TESTS("no_fp8", tests, argc, argv);
}
