/*
 * pa_plan_create beyond the request rules: its own argument checks (V46), devices (V49), and the
 * dispatch of doc/backends.md ("What AUTO picks, and why") for described devices (V43, V44, the
 * backend AUTO picks, workspace sizes, UNFUSED's workspace budget and chunks). Described devices: an H200 (sm_90, 132 SMs, 232448 B opt-in shared memory) and an A100
 * (sm_80, 108 SMs, 166912 B). No GPU is touched.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cases.h"

static pa_case decode_case(case_device device) {
  case_config cfg = case_config_decode();
  pa_case c;
  case_build(&c, &cfg);
  c.device = device;
  return c;
}

/* token_count (5) > batch_size (3): prefill-shaped */
static pa_case prefill_case(case_device device) {
  pa_case c = case_default();
  c.device = device;
  return c;
}

static pa_case built(case_config cfg, case_device device) {
  pa_case c;
  case_build(&c, &cfg);
  c.device = device;
  return c;
}

/* Whether this build has kernels for a described device (meson option gpu_archs): a build without
 * sm_80 must refuse the A100 with NOT_SUPPORTED naming the device (V44) instead of dispatching. */
static int device_built(const pa_case *c) {
  if (c->device != CASE_A100) return 1;
  pa_plan *plan = NULL;
  if (strstr(PA_GPU_ARCHS, "80")) return 1;
  CASE_ASSERT_STATUS(case_plan(c, &plan), PA_ERROR_NOT_SUPPORTED, "sm_80");
  return 0;
}

/* Plans c and asserts the backend AUTO (or the forced one) picked. */
static pa_plan *expect_backend(const pa_case *c, pa_backend want) {
  pa_plan *plan = case_plan_ok(c);
  if (pa_plan_backend(plan) != want)
    fprintf(stderr, "backend: expected %s, got %s\n", pa_backend_name(want),
            pa_backend_name(pa_plan_backend(plan)));
  assert_int_equal(pa_plan_backend(plan), want);
  return plan;
}

static void expect_backend_only(const pa_case *c, pa_backend want) {
  if (device_built(c)) pa_plan_destroy(expect_backend(c, want));
}

/* ---- V43 forced backends, V44 no backend ----------------------------------------------------- */

static void V43_forced_decode_rejects_attention_bias(void **state) {
  (void)state;
  case_config cfg = case_config_decode();
  cfg.bias = 1;
  pa_case c = built(cfg, CASE_H200);
  c.backend = PA_BACKEND_DECODE;
  CASE_EXPECT_PLAN_FAILURE(&c, PA_ERROR_NOT_SUPPORTED, "DECODE", "attention_bias");
}

static void V43_forced_latent_rejects_separate(void **state) {
  (void)state;
  pa_case c = decode_case(CASE_H200);
  c.backend = PA_BACKEND_LATENT;
  CASE_EXPECT_PLAN_FAILURE(&c, PA_ERROR_NOT_SUPPORTED, "LATENT", "kv_cache_layout SEPARATE");
}

static void V43_forced_prefill_rejects_output_qk(void **state) {
  (void)state;
  case_config cfg = case_config_decode();
  cfg.qk_output = 1;
  pa_case c = built(cfg, CASE_H200);
  c.backend = PA_BACKEND_PREFILL;
  CASE_EXPECT_PLAN_FAILURE(&c, PA_ERROR_NOT_SUPPORTED, "PREFILL", "output_qk");
}

static void V43_host_plan_runs_only_reference(void **state) {
  (void)state;
  pa_case c = decode_case(CASE_HOST);
  c.backend = PA_BACKEND_DECODE;
  CASE_EXPECT_PLAN_FAILURE(&c, PA_ERROR_NOT_SUPPORTED, "DECODE", "REFERENCE");
}

/* No kernel of this library is built for sm_75: every backend must decline a Turing device. */
static void V44_no_backend_for_the_device(void **state) {
  (void)state;
  pa_case c = decode_case(CASE_H200);
  pa_device_caps t4 = {sizeof t4, 7, 5, 40, 65536};
  pa_plan_options options;
  pa_plan_options_init(&options);
  options.device = 0;
  options.device_caps = &t4;
  pa_plan *plan = NULL;
  CASE_ASSERT_STATUS(pa_plan_create(&plan, &c.attrs, c.in, c.out, &options), PA_ERROR_NOT_SUPPORTED,
                     "no backend", "sm_75");
  assert_null(plan);
}

/* ---- V46 arguments of pa_plan_create / pa_execute -------------------------------------------- */

static void V46_null_plan_pointer(void **state) {
  (void)state;
  pa_case c = prefill_case(CASE_HOST);
  pa_plan_options options;
  pa_plan_options_init(&options);
  options.device = PA_DEVICE_HOST;
  CASE_ASSERT_STATUS(pa_plan_create(NULL, &c.attrs, c.in, c.out, &options),
                     PA_ERROR_INVALID_ARGUMENT, "plan", "NULL");
}

static void V46_null_attributes_inputs_outputs(void **state) {
  (void)state;
  pa_case c = prefill_case(CASE_HOST);
  pa_plan_options options;
  pa_plan_options_init(&options);
  options.device = PA_DEVICE_HOST;
  pa_plan *earlier = case_plan_ok(&c);
  pa_plan *plan = earlier; /* a failed create must reset it to NULL */
  CASE_ASSERT_STATUS(pa_plan_create(&plan, NULL, c.in, c.out, &options), PA_ERROR_INVALID_ARGUMENT,
                     "attributes", "NULL");
  assert_null(plan);
  CASE_ASSERT_STATUS(pa_plan_create(&plan, &c.attrs, NULL, c.out, &options),
                     PA_ERROR_INVALID_ARGUMENT, "inputs", "NULL");
  CASE_ASSERT_STATUS(pa_plan_create(&plan, &c.attrs, c.in, NULL, &options),
                     PA_ERROR_INVALID_ARGUMENT, "outputs", "NULL");
  pa_plan_destroy(earlier);
}

static void V46_struct_sizes(void **state) {
  (void)state;
  pa_case c = prefill_case(CASE_HOST);
  pa_plan_options options;
  pa_plan_options_init(&options);
  options.device = PA_DEVICE_HOST;
  pa_plan *plan = NULL;
  c.attrs.struct_size = sizeof c.attrs - 4;
  CASE_ASSERT_STATUS(pa_plan_create(&plan, &c.attrs, c.in, c.out, &options),
                     PA_ERROR_INVALID_ARGUMENT, "attributes", "struct_size");
  c.attrs.struct_size = 0; /* a zeroed struct: not initialized with pa_attributes_init */
  CASE_ASSERT_STATUS(pa_plan_create(&plan, &c.attrs, c.in, c.out, &options),
                     PA_ERROR_INVALID_ARGUMENT, "attributes", "struct_size");
  c.attrs.struct_size = sizeof c.attrs;
  options.struct_size = 8;
  CASE_ASSERT_STATUS(pa_plan_create(&plan, &c.attrs, c.in, c.out, &options),
                     PA_ERROR_INVALID_ARGUMENT, "options", "struct_size");
  pa_plan_options_init(&options);
  pa_device_caps caps = case_caps_h200();
  caps.struct_size = 4;
  options.device = 0;
  options.device_caps = &caps;
  CASE_ASSERT_STATUS(pa_plan_create(&plan, &c.attrs, c.in, c.out, &options),
                     PA_ERROR_INVALID_ARGUMENT, "device_caps", "struct_size");
  assert_null(plan);
}

static void V46_option_values(void **state) {
  (void)state;
  pa_case c = prefill_case(CASE_HOST);
  pa_plan_options options;
  pa_plan_options_init(&options);
  options.device = -3;
  pa_plan *plan = NULL;
  CASE_ASSERT_STATUS(pa_plan_create(&plan, &c.attrs, c.in, c.out, &options),
                     PA_ERROR_INVALID_ARGUMENT, "device", "got -3");
  options.device = PA_DEVICE_HOST;
  options.backend = (pa_backend)17;
  CASE_ASSERT_STATUS(pa_plan_create(&plan, &c.attrs, c.in, c.out, &options),
                     PA_ERROR_INVALID_ARGUMENT, "backend", "17");
}

static void V46_null_plan_at_execute(void **state) {
  (void)state;
  const void *inputs[PA_NUM_INPUTS] = {0};
  void *outputs[PA_NUM_OUTPUTS] = {0};
  CASE_ASSERT_STATUS(pa_execute(NULL, inputs, outputs, NULL, 0, NULL), PA_ERROR_INVALID_ARGUMENT,
                     "plan", "NULL");
  CASE_ASSERT_STATUS(pa_execute_reference(NULL, inputs, outputs), PA_ERROR_INVALID_ARGUMENT, "plan",
                     "NULL");
}

static void V46_plan_queries_accept_null(void **state) {
  (void)state;
  assert_int_equal(pa_plan_workspace_size(NULL), 0);
  assert_int_equal(pa_plan_backend(NULL), PA_BACKEND_AUTO);
  pa_plan_destroy(NULL);
}

/* ---- V49 devices ----------------------------------------------------------------------------- */

static int gpu_present(void) {
  pa_device_caps caps;
  return pa_device_caps_query(0, &caps) == PA_SUCCESS;
}

static void V49_gpu_plan_without_a_gpu(void **state) {
  (void)state;
  if (gpu_present()) skip(); /* this machine has a GPU: V49_absent_device_ordinal covers it */
  pa_case c = decode_case(CASE_DEVICE_0);
  CASE_EXPECT_PLAN_FAILURE(&c, PA_ERROR_NO_DEVICE, "device");
  pa_plan_options options;
  pa_plan_options_init(&options); /* PA_DEVICE_CURRENT */
  pa_plan *plan = NULL;
  CASE_ASSERT_STATUS(pa_plan_create(&plan, &c.attrs, c.in, c.out, &options), PA_ERROR_NO_DEVICE,
                     "device");
  pa_device_caps caps;
  CASE_ASSERT_STATUS(pa_device_caps_query(PA_DEVICE_CURRENT, &caps), PA_ERROR_NO_DEVICE, "device");
}

static void V49_absent_device_ordinal(void **state) {
  (void)state;
  pa_case c = decode_case(CASE_HOST);
  pa_plan_options options;
  pa_plan_options_init(&options);
  options.device = 1000;
  pa_plan *plan = NULL;
  CASE_ASSERT_STATUS(pa_plan_create(&plan, &c.attrs, c.in, c.out, &options), PA_ERROR_NO_DEVICE,
                     "device");
  pa_device_caps caps;
  CASE_ASSERT_STATUS(pa_device_caps_query(1000, NULL), PA_ERROR_INVALID_ARGUMENT, "caps");
  CASE_ASSERT_STATUS(pa_device_caps_query(1000, &caps), PA_ERROR_NO_DEVICE, "device");
}

/* ---- dispatch (doc/backends.md): AUTO on described devices ---------------------------------- */

/* decode-shaped (token_count <= batch_size), SEPARATE, fp16/bf16 on both devices */
static void dispatch_decode_shaped_is_decode(void **state) {
  (void)state;
  const pa_dtype types[] = {PA_DTYPE_FLOAT16, PA_DTYPE_BFLOAT16};
  const case_device devices[] = {CASE_H200, CASE_A100};
  for (size_t t = 0; t < 2; t++)
    for (size_t d = 0; d < 2; d++) {
      case_config cfg = case_config_decode();
      cfg.dtype = types[t];
      pa_case c = built(cfg, devices[d]);
      expect_backend_only(&c, PA_BACKEND_DECODE);
    }
}

/* fewer tokens than sequences is decode-shaped too (some sequences contribute none) */
static void dispatch_fewer_tokens_than_sequences_is_decode(void **state) {
  (void)state;
  case_config cfg = case_config_decode();
  cfg.token_count = 17;
  pa_case c = built(cfg, CASE_H200);
  expect_backend_only(&c, PA_BACKEND_DECODE);
}

static void dispatch_decode_quantized_cache_is_decode(void **state) {
  (void)state;
  const pa_dtype caches[] = {PA_DTYPE_INT8, PA_DTYPE_FLOAT8_E4M3FN};
  const pa_quant_type quants[] = {PA_QUANT_PER_TENSOR, PA_QUANT_PER_CHANNEL};
  for (size_t k = 0; k < 2; k++)
    for (size_t q = 0; q < 2; q++) {
      if (caches[k] == PA_DTYPE_FLOAT8_E4M3FN && !PA_FP8_KV_CACHE) continue;
      case_config cfg = case_config_decode();
      cfg.cache_dtype = caches[k];
      cfg.quant = quants[q];
      pa_case c = built(cfg, CASE_H200);
      expect_backend_only(&c, PA_BACKEND_DECODE);
    }
}

/* the write-path features do not change the backend */
static void dispatch_decode_with_write_path_features_is_decode(void **state) {
  (void)state;
  case_config cfg = case_config_decode();
  cfg.mode = CASE_PACKED;
  cfg.rotary_dim = 128;
  cfg.rotary_positions = 8192;
  cfg.qk_norm = cfg.slot_mapping = cfg.head_sink = cfg.metadata = 1;
  cfg.metadata_values[0] = 1;
  cfg.metadata_values[1] = 4096;
  pa_case c = built(cfg, CASE_H200);
  c.attrs.local_window_size = 1024;
  c.attrs.softcap = 50.0f;
  expect_backend_only(&c, PA_BACKEND_DECODE);
}

/* Prefill-shaped requests go to PREFILL on sm_80 and newer. */
static void dispatch_prefill_shaped_is_prefill(void **state) {
  (void)state;
  const case_device devices[] = {CASE_H200, CASE_A100};
  for (size_t d = 0; d < 2; d++) {
    pa_case c = prefill_case(devices[d]);
    expect_backend_only(&c, PA_BACKEND_PREFILL);
  }
}

static void dispatch_attention_bias_is_unfused(void **state) {
  (void)state;
  case_config cfg = case_config_decode();
  cfg.bias = 1;
  pa_case c = built(cfg, CASE_H200);
  expect_backend_only(&c, PA_BACKEND_UNFUSED);
}

static void dispatch_output_qk_is_unfused(void **state) {
  (void)state;
  case_config cfg = case_config_decode();
  cfg.qk_output = 2;
  pa_case c = built(cfg, CASE_H200);
  expect_backend_only(&c, PA_BACKEND_UNFUSED);
}

/* LATENT (issue 17): AUTO takes it for decode-shaped LATENT steps (token_count <= 4 x batch_size)
 * it serves on a described H200, with 16 and 128 heads, 8-bit caches and a smaller latent row;
 * UNFUSED for longer steps, attention_bias, output_qk, and on the A100 (the 16-bit kernel's 224,928 (32-row tile) or 225,920 bytes
 * of shared memory do not fit its 163 KB). */
static void dispatch_latent_decode_shaped_is_latent(void **state) {
  (void)state;
  case_config cfg = case_config_latent(); /* 5 tokens over 3 sequences */
  pa_case c = built(cfg, CASE_H200);
  expect_backend_only(&c, PA_BACKEND_LATENT);
  cfg.token_count = cfg.batch_size;
  cfg.num_heads = 128;
  c = built(cfg, CASE_H200);
  expect_backend_only(&c, PA_BACKEND_LATENT);
  cfg = case_config_latent();
  cfg.token_count = 4 * cfg.batch_size;
  cfg.cache_dtype = PA_DTYPE_INT8;
  cfg.quant = PA_QUANT_PER_CHANNEL;
  c = built(cfg, CASE_H200);
  expect_backend_only(&c, PA_BACKEND_LATENT);
  cfg.cache_dtype = PA_DTYPE_FLOAT8_E4M3FN;
  cfg.quant = PA_QUANT_PER_TENSOR;
  c = built(cfg, CASE_H200);
  expect_backend_only(&c, PA_BACKEND_LATENT);
  cfg = case_config_latent();
  cfg.head_size = 128;
  cfg.v_head_size = 64;
  cfg.rotary_offset = 64;
  c = built(cfg, CASE_H200);
  expect_backend_only(&c, PA_BACKEND_LATENT);

  cfg = case_config_latent();
  cfg.token_count = 4 * cfg.batch_size + 1; /* not decode-shaped */
  c = built(cfg, CASE_H200);
  expect_backend_only(&c, PA_BACKEND_UNFUSED);
  c.backend = PA_BACKEND_LATENT; /* but served when forced */
  expect_backend_only(&c, PA_BACKEND_LATENT);
  cfg = case_config_latent();
  cfg.bias = 1;
  c = built(cfg, CASE_H200);
  expect_backend_only(&c, PA_BACKEND_UNFUSED);
  cfg = case_config_latent();
  cfg.qk_output = 1;
  c = built(cfg, CASE_H200);
  expect_backend_only(&c, PA_BACKEND_UNFUSED);
  c = built(case_config_latent(), CASE_A100);
  expect_backend_only(&c, PA_BACKEND_UNFUSED);
}

/* LATENT's split slots (issue 17): the number of fp32 partial slots per token its workspace holds,
 * 1 when the step runs unsplit (no partials, no merge). */
static int64_t latent_split_slots(const pa_case *c) {
  pa_plan *plan = case_plan_ok(c);
  assert_int_equal(plan->backend, PA_BACKEND_LATENT);
  int64_t slots = 1;
  for (int32_t i = 0; i < plan->workspace.count; i++) {
    const pa__workspace_region *r = &plan->workspace.regions[i];
    if (strstr(r->name, "LATENT partial outputs"))
      slots = (int64_t)(r->bytes / ((uint64_t)c->attrs.num_heads * 512 * sizeof(float) *
                                    (uint64_t)c->in[PA_IN_QUERY].dims[0]));
  }
  pa_plan_destroy(plan);
  return slots;
}

/* The kernel family of the plan for c, as family_of names it (pa__latent_kernel_family,
 * pa__prefill_kernel_family: string literals). */
static const char *plan_family(const pa_case *c, const char *(*family_of)(const pa_plan *)) {
  pa_plan *plan = case_plan_ok(c);
  const char *family = family_of(plan);
  pa_plan_destroy(plan);
  return family;
}
static const char *latent_family(const pa_case *c) {
  return plan_family(c, pa__latent_kernel_family);
}
static const char *prefill_family(const pa_case *c) {
  return plan_family(c, pa__prefill_kernel_family);
}

/* The 64-row tile and the wgmma kernels split a sequence's keys only where that balances the CTAs
 * (balanced_split_tiles_for): 128 heads x 64 sequences of 4k are 128 row blocks on 132
 * multiprocessors and run unsplit, 32 sequences split in two; 16 heads x 32 sequences on the
 * narrow wgmma kernel (a build with sm_90a) split in four. The 32-row mma.sync tile (memory-bound)
 * keeps aiming at twice as many units as multiprocessors. */
static void latent_splits_balance_the_ctas(void **state) {
  (void)state;
  case_config cfg = case_config_latent();
  cfg.num_heads = 128;
  cfg.batch_size = 64;
  cfg.token_count = 64;
  cfg.block_size = 64;
  cfg.blocks_per_seq = 4096 / 64;
  cfg.num_blocks = (int64_t)cfg.batch_size * cfg.blocks_per_seq;
  pa_case c = built(cfg, CASE_H200);
  assert_int_equal(latent_split_slots(&c), 1);
  cfg.batch_size = cfg.token_count = 32;
  cfg.num_blocks = (int64_t)cfg.batch_size * cfg.blocks_per_seq;
  c = built(cfg, CASE_H200);
  assert_int_equal(latent_split_slots(&c), 2);
  cfg.num_heads = 16; /* one row block per token: 32 units */
  c = built(cfg, CASE_H200);
  if (strcmp(latent_family(&c), "wgmma narrow") == 0)
    assert_int_equal(latent_split_slots(&c), 4); /* 128 units on 132 multiprocessors */
  setenv("PA_LATENT_KERNEL", "mma.sync", 1);     /* the 32-row tile: 2 x 2 x 132 units wanted */
  assert_string_equal(latent_family(&c), "mma.sync");
  assert_true(latent_split_slots(&c) >= 8);
  unsetenv("PA_LATENT_KERNEL");
}

/* PREFILL's kernel family on a described H200 (issue 18), by head size and cache type: in a build
 * with sm_90a (where the 128-channel plan is "wgmma") the wgmma kernels at every head size with
 * fp16 / bf16 caches and from 64 with int8 / fp8 ones, mma.sync below; mma.sync on an A100. (A
 * described plan encodes no tensor map.) */
static void prefill_family_by_head_size(void **state) {
  (void)state;
  case_config cfg = case_config_default();
  cfg.head_size = 128;
  pa_case c = built(cfg, CASE_H200);
  c.backend = PA_BACKEND_PREFILL;
  const char *wide = strcmp(prefill_family(&c), "wgmma") == 0 ? "wgmma" : "mma.sync";
  const struct {
    int32_t head_size;
    pa_dtype cache_dtype;
    const char *want;
  } rows[] = {{48, PA_DTYPE_UNDEFINED, wide},       {64, PA_DTYPE_UNDEFINED, wide},
              {256, PA_DTYPE_UNDEFINED, wide},      {64, PA_DTYPE_INT8, wide},
              {64, PA_DTYPE_FLOAT8_E4M3FN, wide},   {128, PA_DTYPE_INT8, wide},
              {48, PA_DTYPE_INT8, "mma.sync"}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    cfg = case_config_default();
    cfg.head_size = rows[i].head_size;
    cfg.cache_dtype = rows[i].cache_dtype;
    if (rows[i].cache_dtype != PA_DTYPE_UNDEFINED) cfg.quant = PA_QUANT_PER_TENSOR;
    c = built(cfg, CASE_H200);
    c.backend = PA_BACKEND_PREFILL;
    assert_string_equal(prefill_family(&c), rows[i].want);
  }
  c = built(case_config_default(), CASE_A100);
  c.backend = PA_BACKEND_PREFILL;
  assert_string_equal(prefill_family(&c), "mma.sync");
}

/* The workspace region of plan whose name contains `name`, or -1. */
static int32_t region_named(const pa_plan *plan, const char *name) {
  for (int32_t i = 0; i < plan->workspace.count; i++)
    if (strstr(plan->workspace.regions[i].name, name)) return i;
  return -1;
}

/* DECODE's split slots: its partial outputs' region over one slot's bytes for every token. */
static int64_t decode_split_slots(const pa_plan *plan) {
  const int32_t r = region_named(plan, "DECODE partial outputs");
  if (r < 0) return 1;
  return (int64_t)(plan->workspace.regions[r].bytes /
                   ((uint64_t)plan->problem.token_count * plan->problem.num_heads *
                    plan->problem.head_size * sizeof(float)));
}

/* One token's DECODE splits are sized on the device: the plan fixes a sizing count from static
 * shapes and the device (one wave of resident CTAs per KV head: 132 multiprocessors x 2 CTAs / 8
 * KV heads = 33 for 32/8 heads d128 with a 16-bit cache on the H200), each split takes
 * ceil(tiles / 33) of the token's own tiles, and the grid has min(33, the bound's tiles) slots: a
 * 128k table 33 (the merge kernel) without a bound and with a loose one, 16 with a bound of 1k keys
 * (merged in the kernel). The partition does not depend on the bound, only the slot count. */
static void decode_single_token_splits_sized_on_device(void **state) {
  (void)state;
  case_config cfg = case_config_decode();
  cfg.batch_size = cfg.token_count = 1;
  cfg.blocks_per_seq = 131072 / 16;
  cfg.num_blocks = cfg.blocks_per_seq;
  const int32_t bounds[3] = {0, 100000, 1024}, slots[3] = {33, 33, 16};
  for (int i = 0; i < 3; i++) {
    cfg.metadata = bounds[i] > 0;
    cfg.metadata_values[0] = 1;
    cfg.metadata_values[1] = bounds[i];
    pa_case c = built(cfg, CASE_H200);
    c.backend = PA_BACKEND_DECODE;
    pa_plan *plan = case_plan_ok(&c);
    assert_int_equal(decode_split_slots(plan), slots[i]);
    assert_int_equal(plan->arrivals_region >= 0, slots[i] <= 16);
    pa_plan_destroy(plan);
  }
}

/* Several tokens' DECODE splits aim at two waves of the resident CTAs, and those follow the ring's
 * stages: three with a 16-bit cache, so two CTAs per multiprocessor (a two-stage ring for three
 * CTAs was 2-4 % slower on the H200, twenty-seventh measurement), and two up to DMAX 128 with an
 * 8-bit one, so four. 8 tokens x 8 KV heads = 64 units, an 8k table = 128 tiles on the H200's 132
 * multiprocessors: 16-bit 2 x 264 / 64 -> 9 splits of 15 tiles, int8 2 x 528 / 64 -> 17 splits
 * of 8 tiles, 16 slots. */
static void decode_several_tokens_splits_follow_the_ring(void **state) {
  (void)state;
  case_config cfg = case_config_decode();
  cfg.batch_size = cfg.token_count = 8;
  cfg.blocks_per_seq = 8192 / 16;
  cfg.num_blocks = (int64_t)cfg.batch_size * cfg.blocks_per_seq;
  const pa_dtype caches[2] = {PA_DTYPE_UNDEFINED, PA_DTYPE_INT8};
  const int64_t slots[2] = {9, 16};
  for (int i = 0; i < 2; i++) {
    cfg.cache_dtype = caches[i];
    pa_case c = built(cfg, CASE_H200);
    c.backend = PA_BACKEND_DECODE;
    pa_plan *plan = case_plan_ok(&c);
    assert_int_equal(decode_split_slots(plan), slots[i]);
    pa_plan_destroy(plan);
  }
}

/* A forced LATENT plan on a described H200 for `sequences` one-token sequences of 4k keys (16
 * heads: the narrow kernel). */
static pa_plan *latent_4k_plan(int32_t sequences) {
  case_config cfg = case_config_latent();
  cfg.batch_size = cfg.token_count = sequences;
  cfg.blocks_per_seq = 4096 / 16;
  cfg.num_blocks = (int64_t)cfg.blocks_per_seq * cfg.batch_size;
  pa_case c = built(cfg, CASE_H200);
  c.backend = PA_BACKEND_LATENT;
  return case_plan_ok(&c);
}

/* LATENT's narrow kernel (16 heads of one token on a described H200) merges 2-4 split slots
 * itself, counted on pa_plan::arrivals_region; more slots take the merge kernel. */
static void latent_few_splits_merge_in_kernel(void **state) {
  (void)state;
  pa_plan *plan = latent_4k_plan(64); /* 64 x 4k: two split slots */
  const int32_t arrivals = region_named(plan, "LATENT merge arrivals");
  assert_true(arrivals >= 0);
  assert_int_equal(plan->arrivals_region, arrivals);
  assert_int_equal(plan->arrival_count, 64); /* a row block per token */
  pa_plan_destroy(plan);

  plan = latent_4k_plan(20); /* six split slots: the merge kernel */
  assert_int_equal(plan->arrivals_region, -1);
  assert_true(region_named(plan, "LATENT partial outputs") >= 0);
  pa_plan_destroy(plan);
}

/* LATENT's Hopper kernels take every unit by their CTA's index, with no schedule kernel and no
 * schedule regions, where the plan's bound on units fits the grid (16 heads x 64 x 4k on a
 * described H200: 64 row blocks x 2 split slots <= 132 CTAs); 200 sequences do not fit. */
static void latent_units_fit_grid_need_no_schedule(void **state) {
  (void)state;
  pa_plan *plan = latent_4k_plan(64);
  assert_true(region_named(plan, "LATENT schedule: counter") < 0);
  assert_true(region_named(plan, "LATENT schedule: first unit per sequence") < 0);
  pa_plan_destroy(plan);

  plan = latent_4k_plan(200);
  assert_true(region_named(plan, "LATENT schedule: counter") >= 0);
  pa_plan_destroy(plan);
}

/* A single token's DECODE step with at most 16 split slots merges them in the kernel: its plan
 * holds one arrival counter per KV head and head chunk, which the write kernel zeroes
 * (pa_plan::arrivals_region); more slots, or several tokens, keep the merge kernel and no
 * counters. 32/8 heads d128 on the H200: one 64-key tile per split. */
static void decode_single_token_merges_in_kernel(void **state) {
  (void)state;
  case_config cfg = case_config_decode();
  cfg.batch_size = cfg.token_count = 1;
  cfg.blocks_per_seq = 1024 / 16; /* 16 tiles: 16 split slots */
  cfg.num_blocks = cfg.blocks_per_seq;
  pa_case c = built(cfg, CASE_H200);
  c.backend = PA_BACKEND_DECODE;
  pa_plan *plan = case_plan_ok(&c);
  const int32_t arrivals = region_named(plan, "DECODE merge arrivals");
  assert_true(arrivals >= 0);
  assert_int_equal(plan->arrivals_region, arrivals);
  assert_int_equal(plan->arrival_count, 8);
  assert_true(region_named(plan, "DECODE partial outputs") >= 0);
  pa_plan_destroy(plan);

  cfg.blocks_per_seq = 1040 / 16; /* 17 tiles: the merge kernel */
  cfg.num_blocks = cfg.blocks_per_seq;
  c = built(cfg, CASE_H200);
  c.backend = PA_BACKEND_DECODE;
  plan = case_plan_ok(&c);
  assert_int_equal(region_named(plan, "DECODE merge arrivals"), -1);
  assert_int_equal(plan->arrivals_region, -1);
  assert_true(region_named(plan, "DECODE partial outputs") >= 0);
  pa_plan_destroy(plan);

  c = decode_case(CASE_H200); /* 64 tokens: the device work list and the merge kernel */
  c.backend = PA_BACKEND_DECODE;
  plan = case_plan_ok(&c);
  assert_int_equal(plan->arrivals_region, -1);
  pa_plan_destroy(plan);
}

/* Forced LATENT refuses what it does not serve, naming the feature and the backend. */
static void V43_forced_latent_refusals(void **state) {
  (void)state;
  case_config cfg = case_config_latent();
  cfg.bias = 1;
  pa_case c = built(cfg, CASE_H200);
  c.backend = PA_BACKEND_LATENT;
  CASE_EXPECT_PLAN_FAILURE(&c, PA_ERROR_NOT_SUPPORTED, "LATENT", "attention_bias");
  cfg = case_config_latent();
  cfg.qk_output = 2;
  c = built(cfg, CASE_H200);
  c.backend = PA_BACKEND_LATENT;
  CASE_EXPECT_PLAN_FAILURE(&c, PA_ERROR_NOT_SUPPORTED, "LATENT", "output_qk");
  cfg = case_config_latent();
  cfg.v_head_size = 520;
  c = built(cfg, CASE_H200);
  c.backend = PA_BACKEND_LATENT;
  CASE_EXPECT_PLAN_FAILURE(&c, PA_ERROR_NOT_SUPPORTED, "LATENT", "v_head_size 520");
  cfg = case_config_latent();
  cfg.head_size = 72;
  cfg.v_head_size = 64;
  cfg.rotary_offset = 64;
  cfg.rotary_dim = 8;
  c = built(cfg, CASE_H200);
  c.backend = PA_BACKEND_LATENT;
  CASE_EXPECT_PLAN_FAILURE(&c, PA_ERROR_NOT_SUPPORTED, "LATENT", "head_size 72");
  c = built(case_config_latent(), CASE_A100);
  c.backend = PA_BACKEND_LATENT;
  if (device_built(&c))
    CASE_EXPECT_PLAN_FAILURE(&c, PA_ERROR_NOT_SUPPORTED, "LATENT", "shared memory");
}

static void dispatch_forced_backends(void **state) {
  (void)state;
  pa_case c = decode_case(CASE_H200);
  c.backend = PA_BACKEND_UNFUSED;
  expect_backend_only(&c, PA_BACKEND_UNFUSED);
  c = prefill_case(CASE_H200); /* DECODE is correct for any ragged batch when forced */
  c.backend = PA_BACKEND_DECODE;
  expect_backend_only(&c, PA_BACKEND_DECODE);
}

static void dispatch_reference_needs_no_workspace(void **state) {
  (void)state;
  pa_case c = decode_case(CASE_H200);
  c.backend = PA_BACKEND_REFERENCE;
  pa_plan *plan = expect_backend(&c, PA_BACKEND_REFERENCE);
  assert_int_equal(pa_plan_workspace_size(plan), 0);
  pa_plan_destroy(plan);
}

/* Host plans: REFERENCE, workspace 0, for every kind of request. */
static void dispatch_host_plans_are_reference(void **state) {
  (void)state;
  case_config cfgs[4] = {case_config_decode(), case_config_default(), case_config_latent(),
                         case_config_default()};
  cfgs[1].mode = CASE_PACKED;
  cfgs[1].rotary_dim = 64;
  cfgs[3].bias = 1;
  cfgs[3].qk_output = 1;
  for (size_t i = 0; i < 4; i++) {
    pa_case c = built(cfgs[i], CASE_HOST);
    pa_plan *plan = expect_backend(&c, PA_BACKEND_REFERENCE);
    assert_int_equal(pa_plan_workspace_size(plan), 0);
    pa_plan_destroy(plan);
    c.backend = PA_BACKEND_REFERENCE;
    expect_backend_only(&c, PA_BACKEND_REFERENCE);
  }
}

/* ---- PREFILL (issue 16): these two FAIL until PA_BACKEND_PREFILL is built ------------------ */

/* A 32/8-head, head 128, bf16, block 16 step of `batch` sequences of `tokens_per_seq` new tokens
 * over `past` cached ones, no attention_metadata. */
static pa_case prefill_step(int32_t batch, int64_t tokens_per_seq, int32_t past) {
  case_config cfg = case_config_decode();
  cfg.dtype = PA_DTYPE_BFLOAT16;
  cfg.batch_size = batch;
  cfg.token_count = (int64_t)batch * tokens_per_seq;
  cfg.blocks_per_seq = (int32_t)((past + tokens_per_seq + cfg.block_size - 1) / cfg.block_size);
  cfg.num_blocks = (int64_t)batch * cfg.blocks_per_seq;
  return built(cfg, CASE_H200);
}

/* Expected to fail until the PREFILL backend lands: AUTO must pick PREFILL for prefill-shaped steps
 * (token_count > batch_size) it serves on a described H200 (sm_90, 132 SMs): the default prefill
 * case (8/2 heads, d64, fp16, 5 tokens over 3 sequences), a chunk, a mixed step (one chunk among
 * decode tokens) and a verify step; decode-shaped steps stay on DECODE. */
static void prefill_expected_auto_picks_prefill_on_h200(void **state) {
  (void)state;
  pa_case c = prefill_case(CASE_H200);
  expect_backend_only(&c, PA_BACKEND_PREFILL);
  c = prefill_step(1, 2048, 30720); /* a 2k chunk over 30k cached */
  expect_backend_only(&c, PA_BACKEND_PREFILL);
  c = prefill_step(64, 1, 4096); /* 64 decode tokens, plus 2047 more of one sequence: mixed */
  c.in[PA_IN_QUERY].dims[0] = c.in[PA_IN_KEY].dims[0] = c.in[PA_IN_VALUE].dims[0] =
      c.out[PA_OUT_OUTPUT].dims[0] = 64 + 2047;
  expect_backend_only(&c, PA_BACKEND_PREFILL);
  c = prefill_step(64, 4, 4096); /* speculative verify */
  expect_backend_only(&c, PA_BACKEND_PREFILL);
  c = prefill_step(64, 1, 4096); /* decode-shaped */
  expect_backend_only(&c, PA_BACKEND_DECODE);
}

/* Expected to fail until the PREFILL backend lands: without attention_metadata, the workspace of a
 * 256 x 4-token verify step over 4k (32/8 heads, d128, bf16, block 16) on PREFILL is below 1 GiB
 * (UNFUSED's worst case is 144 GiB: it sizes scores for batch x token_count x KV capacity, and
 * runs it in chunks within its budget, unfused_verify_256x4_within_budget). */
static void prefill_expected_verify_256x4_workspace_below_1gib(void **state) {
  (void)state;
  pa_case c = prefill_step(256, 4, 4096);
  c.backend = PA_BACKEND_PREFILL;
  pa_plan *plan = expect_backend(&c, PA_BACKEND_PREFILL);
  const size_t bytes = pa_plan_workspace_size(plan);
  if (bytes >= ((size_t)1 << 30))
    fprintf(stderr, "PREFILL workspace of the 256 x 4 verify step: %zu bytes (>= 1 GiB)\n", bytes);
  assert_true(bytes < ((size_t)1 << 30));
  assert_int_equal(bytes % PA_WORKSPACE_ALIGNMENT, 0);
  pa_plan_destroy(plan);
}

/* ---- UNFUSED's workspace budget (issue 16) ------------------------------------------------- */

/* kUnfusedWorkspaceBudget (cuda/unfused/launch_extents.cuh, doc/backends.md) */
#define UNFUSED_BUDGET ((uint64_t)2 << 30)

/* The bytes of UNFUSED's regions in a plan: everything after the staged Q, if any. */
static uint64_t unfused_scratch(const pa_plan *plan) {
  const pa__workspace_layout *w = &plan->workspace;
  uint64_t start = 0;
  if (plan->q_staged_region >= 0) {
    const pa__workspace_region *q = &w->regions[plan->q_staged_region];
    start = (q->offset + q->bytes + PA_WORKSPACE_ALIGNMENT - 1) / PA_WORKSPACE_ALIGNMENT *
            PA_WORKSPACE_ALIGNMENT;
  }
  return w->total - start;
}

/* Plans c forced onto UNFUSED on a described H200: its scratch within `budget`, and chunks that
 * cover every sequence and every query row up to the bound; returns the chunking. */
static pa__unfused_chunks expect_unfused_within(pa_case *c, uint64_t budget) {
  c->backend = PA_BACKEND_UNFUSED;
  pa_plan *plan = expect_backend(c, PA_BACKEND_UNFUSED);
  pa__unfused_chunks k;
  assert_int_equal(pa__unfused_chunking(plan, &k), 1);
  const uint64_t bytes = unfused_scratch(plan);
  if (bytes > budget)
    fprintf(stderr, "UNFUSED scratch: %llu bytes, budget %llu (%lld x %lld sequences, %lld x %lld "
            "query rows)\n", (unsigned long long)bytes, (unsigned long long)budget,
            (long long)k.sequence_chunks, (long long)k.sequences_per_chunk,
            (long long)k.query_chunks, (long long)k.query_rows_per_chunk);
  assert_true(bytes <= budget);
  assert_true(bytes > 0);
  const int64_t batch = plan->problem.batch_size, max_q = plan->problem.max_query_len;
  assert_true(k.sequences_per_chunk >= 1 && k.sequences_per_chunk <= batch);
  assert_int_equal(k.sequence_chunks, (batch + k.sequences_per_chunk - 1) / k.sequences_per_chunk);
  assert_true(k.query_rows_per_chunk >= 1 && k.query_rows_per_chunk <= max_q);
  assert_int_equal(k.query_chunks, (max_q + k.query_rows_per_chunk - 1) / k.query_rows_per_chunk);
  pa_plan_destroy(plan);
  return k;
}

/* The shape: a 256 x 4-token verify step over 4k, 32/8 heads, d128, bf16, block 16, no
 * attention_metadata (max_query_len is then token_count = 1024), forced onto UNFUSED. It asked for
 * 144 GiB; now it plans within the budget, in 86 chunks of 3 sequences (each ~606 MB: scores
 * 8 x 4096 x 4112 fp32 plus the gathers). With tight bounds, chunks of ~52 sequences. */
static void unfused_verify_256x4_within_budget(void **state) {
  (void)state;
  pa_case c = prefill_step(256, 4, 4096);
  pa__unfused_chunks k = expect_unfused_within(&c, UNFUSED_BUDGET);
  assert_int_equal(k.sequences_per_chunk, 3);
  assert_int_equal(k.sequence_chunks, 86);
  assert_int_equal(k.query_rows_per_chunk, 1024);
  assert_int_equal(k.query_chunks, 1);

  case_config cfg = case_config_decode();
  cfg.dtype = PA_DTYPE_BFLOAT16;
  cfg.batch_size = 256;
  cfg.token_count = 1024;
  cfg.blocks_per_seq = (4096 + 4 + 15) / 16;
  cfg.num_blocks = (int64_t)256 * cfg.blocks_per_seq;
  cfg.metadata = 1;
  cfg.metadata_values[0] = 4;
  cfg.metadata_values[1] = 4100;
  c = built(cfg, CASE_H200);
  k = expect_unfused_within(&c, UNFUSED_BUDGET);
  assert_int_equal(k.query_rows_per_chunk, 4); /* 256 x K_g and V_g of 4104 rows are 8.6 GB */
  assert_int_equal(k.query_chunks, 1);
  assert_true(k.sequence_chunks <= 5);
}

/* Large steps forced onto UNFUSED never exceed the budget: chunks of sequences, or of one
 * sequence's query rows when one sequence does not fit (1 x 8k prefill: 8 x 32768 x 8192 scores
 * alone are 8 GiB). */
static void unfused_workspace_never_exceeds_budget(void **state) {
  (void)state;
  pa_case c = prefill_step(1, 8192, 0); /* 1 x 8k prefill */
  pa__unfused_chunks k = expect_unfused_within(&c, UNFUSED_BUDGET);
  assert_int_equal(k.sequence_chunks, 1);
  assert_true(k.query_chunks > 1);
  c = prefill_step(4, 2048, 0); /* 4 x 2k prefill */
  k = expect_unfused_within(&c, UNFUSED_BUDGET);
  assert_true(k.sequences_per_chunk == 1 && k.query_chunks > 1);
  c = prefill_step(64, 1, 131072); /* 64 decodes at 128k: K_g and V_g of one sequence ~1 GiB */
  k = expect_unfused_within(&c, UNFUSED_BUDGET);
  assert_int_equal(k.sequences_per_chunk, 1);
  c = prefill_step(300, 4, 4096); /* a ragged-sized verify batch: 300 sequences */
  expect_unfused_within(&c, UNFUSED_BUDGET);
  c = prefill_step(64, 32, 2048); /* a mixed-size step, with a window */
  c.attrs.local_window_size = 256;
  expect_unfused_within(&c, UNFUSED_BUDGET);

  /* absorbed MLA over 32k, 64 sequences of 2 tokens, RoPE (staged Q outside the budget) */
  case_config cfg = case_config_latent();
  cfg.batch_size = 64;
  cfg.token_count = 128;
  cfg.blocks_per_seq = 32768 / 16;
  cfg.num_blocks = (int64_t)64 * cfg.blocks_per_seq;
  c = built(cfg, CASE_H200);
  expect_unfused_within(&c, UNFUSED_BUDGET);

  /* attention_bias and output_qk (UNFUSED's alone) on a 16 x 8-token step over 8k */
  cfg = case_config_decode();
  cfg.batch_size = 16;
  cfg.token_count = 128;
  cfg.blocks_per_seq = 8192 / 16;
  cfg.num_blocks = (int64_t)16 * cfg.blocks_per_seq;
  cfg.bias = 1;
  cfg.qk_output = 2;
  c = built(cfg, CASE_H200);
  expect_unfused_within(&c, UNFUSED_BUDGET);
}

/* When not even one sequence with one query row fits (here 1M keys of KV capacity x 8 KV heads x
 * d128: K_g and V_g alone are 8 GiB), UNFUSED refuses, naming itself, the size and the budget;
 * AUTO's message lists the reason. A max_kv_len bound that fits makes it plan. */
static void unfused_refuses_what_no_chunk_fits(void **state) {
  (void)state;
  case_config cfg = case_config_decode();
  cfg.batch_size = 2;
  cfg.token_count = 4;
  cfg.blocks_per_seq = 65536;
  cfg.num_blocks = 65536;
  cfg.bias = 1; /* no fused backend serves it */
  pa_case c = built(cfg, CASE_H200);
  c.backend = PA_BACKEND_UNFUSED;
  CASE_EXPECT_PLAN_FAILURE(&c, PA_ERROR_NOT_SUPPORTED, "UNFUSED", "budget of 2147483648 bytes",
                           "bytes of workspace", "max_kv_len");
  c.backend = PA_BACKEND_AUTO;
  CASE_EXPECT_PLAN_FAILURE(&c, PA_ERROR_NOT_SUPPORTED, "UNFUSED: a step whose smallest chunk");
  cfg.metadata = 1;
  cfg.metadata_values[0] = 2;
  cfg.metadata_values[1] = 100000;
  c = built(cfg, CASE_H200);
  expect_unfused_within(&c, UNFUSED_BUDGET);
}

/* The test hook (lib/internal.h): caps on the chunk sizes, and a budget, for the plans created
 * afterwards. The default prefill case: 3 sequences, 5 tokens, no bounds (max_query_len 5). */
static void unfused_test_limits_shape_the_chunks(void **state) {
  (void)state;
  pa_case c = prefill_case(CASE_H200);
  pa__unfused_set_test_limits(0, 2, 3);
  pa__unfused_chunks k = expect_unfused_within(&c, UNFUSED_BUDGET);
  assert_int_equal(k.sequences_per_chunk, 2);
  assert_int_equal(k.sequence_chunks, 2);
  assert_int_equal(k.query_rows_per_chunk, 3);
  assert_int_equal(k.query_chunks, 2);

  /* a budget of exactly the smallest chunk (one sequence, one query row) plans it; a byte less
   * refuses */
  pa__unfused_set_test_limits(0, 1, 1);
  c.backend = PA_BACKEND_UNFUSED;
  pa_plan *plan = expect_backend(&c, PA_BACKEND_UNFUSED);
  const uint64_t smallest = unfused_scratch(plan);
  pa_plan_destroy(plan);
  pa__unfused_set_test_limits(smallest, 0, 0);
  k = expect_unfused_within(&c, smallest);
  assert_int_equal(k.sequences_per_chunk, 1);
  assert_int_equal(k.query_rows_per_chunk, 1);
  pa__unfused_set_test_limits(smallest + 300000, 0, 0); /* several sequences, all rows */
  k = expect_unfused_within(&c, smallest + 300000);
  pa__unfused_set_test_limits(smallest - 1, 0, 0);
  CASE_EXPECT_PLAN_FAILURE(&c, PA_ERROR_NOT_SUPPORTED, "UNFUSED", "budget");
  pa__unfused_set_test_limits(0, 0, 0);
  k = expect_unfused_within(&c, UNFUSED_BUDGET);
  assert_int_equal(k.sequence_chunks, 1);
  assert_int_equal(k.query_chunks, 1);
}

/* ---- workspace sizes on described devices ---------------------------------------------------- */

static void expect_workspace(const pa_case *c, size_t at_least) {
  if (!device_built(c)) return;
  pa_plan *plan = case_plan_ok(c);
  const size_t bytes = pa_plan_workspace_size(plan);
  if (bytes == 0 || bytes % PA_WORKSPACE_ALIGNMENT != 0 || bytes < at_least)
    fprintf(stderr, "workspace of %s: %zu bytes (expected > 0, >= %zu, multiple of %d)\n",
            pa_backend_name(pa_plan_backend(plan)), bytes, at_least, PA_WORKSPACE_ALIGNMENT);
  assert_true(bytes > 0);
  assert_true(bytes >= at_least);
  assert_int_equal(bytes % PA_WORKSPACE_ALIGNMENT, 0);
  pa_plan_destroy(plan);
}

static void workspace_positive_and_aligned(void **state) {
  (void)state;
  const case_device devices[] = {CASE_H200, CASE_A100};
  for (size_t d = 0; d < 2; d++) {
    pa_case c = decode_case(devices[d]);
    expect_workspace(&c, 1);
    c = prefill_case(devices[d]);
    expect_workspace(&c, 1);
    c = built(case_config_latent(), devices[d]);
    expect_workspace(&c, 1);
  }
}

/* Packed input, rotary or QK-Norm stage Q (token_count * num_heads * head_size elements of T). */
static void workspace_holds_staged_query(void **state) {
  (void)state;
  case_config cfg = case_config_decode();
  cfg.mode = CASE_PACKED;
  pa_case c = built(cfg, CASE_H200);
  expect_workspace(&c, (size_t)64 * 32 * 128 * 2);
  cfg = case_config_decode();
  cfg.qk_norm = 1;
  c = built(cfg, CASE_A100);
  expect_workspace(&c, (size_t)64 * 32 * 128 * 2);
}

/* The layout's one function: regions at multiples of their alignment, in order, the total the end
 * rounded up to PA_WORKSPACE_ALIGNMENT; an overflow marks the layout and gives -1. */
static void workspace_add_sizes_and_carves(void **state) {
  (void)state;
  pa__workspace_layout w;
  memset(&w, 0, sizeof w);
  assert_int_equal(pa__workspace_add(&w, "a", 10, 4, 256), 0);
  assert_int_equal(pa__workspace_add(&w, "b", 3, 1, 16), 1);
  assert_int_equal(pa__workspace_add(&w, "c", 0, 4, 256), 2);
  assert_int_equal(w.regions[0].offset, 0);
  assert_int_equal(w.regions[1].offset, 48);
  assert_int_equal(w.regions[2].offset, 256);
  assert_int_equal(w.total, 256);
  assert_int_equal(pa__workspace_add(&w, "d", 1, 1, 256), 3);
  assert_int_equal(w.total, 512);
  assert_int_equal(pa__workspace_add(&w, "huge", UINT64_MAX / 2, 4, 256), -1);
  assert_true(w.overflowed);
  assert_int_equal(w.total, SIZE_MAX);
}

/* Every plan's regions: the staged Q first when there is one, each at a multiple of its alignment,
 * none overlapping the next, the total covering them all. */
static void expect_regions_well_formed(const pa_case *c) {
  if (!device_built(c)) return;
  pa_plan *plan = case_plan_ok(c);
  const pa__workspace_layout *w = &plan->workspace;
  assert_true(w->count > 0);
  assert_false(w->overflowed);
  if (plan->q_staged_region >= 0) assert_int_equal(plan->q_staged_region, 0);
  for (int32_t i = 0; i < w->count; i++) {
    const pa__workspace_region *r = &w->regions[i];
    assert_non_null(r->name);
    assert_int_equal(r->offset % r->alignment, 0);
    assert_true(r->alignment <= PA_WORKSPACE_ALIGNMENT);
    if (i + 1 < w->count) assert_true(r->offset + r->bytes <= w->regions[i + 1].offset);
    assert_true(r->offset + r->bytes <= w->total);
  }
  assert_int_equal(pa_plan_workspace_size(plan), w->total);
  pa_plan_destroy(plan);
}

static void workspace_regions_well_formed(void **state) {
  (void)state;
  case_config cfg = case_config_decode();
  cfg.mode = CASE_PACKED;
  pa_case c = built(cfg, CASE_H200);
  expect_regions_well_formed(&c);
  c = prefill_case(CASE_H200);
  expect_regions_well_formed(&c);
  c = built(case_config_latent(), CASE_A100);
  expect_regions_well_formed(&c);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(V43_forced_decode_rejects_attention_bias),
      cmocka_unit_test(V43_forced_latent_rejects_separate),
      cmocka_unit_test(V43_forced_latent_refusals),
      cmocka_unit_test(V43_forced_prefill_rejects_output_qk),
      cmocka_unit_test(V43_host_plan_runs_only_reference),
      cmocka_unit_test(V44_no_backend_for_the_device),
      cmocka_unit_test(V46_null_plan_pointer),
      cmocka_unit_test(V46_null_attributes_inputs_outputs),
      cmocka_unit_test(V46_struct_sizes),
      cmocka_unit_test(V46_option_values),
      cmocka_unit_test(V46_null_plan_at_execute),
      cmocka_unit_test(V46_plan_queries_accept_null),
      cmocka_unit_test(V49_gpu_plan_without_a_gpu),
      cmocka_unit_test(V49_absent_device_ordinal),
      cmocka_unit_test(dispatch_decode_shaped_is_decode),
      cmocka_unit_test(dispatch_fewer_tokens_than_sequences_is_decode),
      cmocka_unit_test(dispatch_decode_quantized_cache_is_decode),
      cmocka_unit_test(dispatch_decode_with_write_path_features_is_decode),
      cmocka_unit_test(dispatch_prefill_shaped_is_prefill),
      cmocka_unit_test(dispatch_attention_bias_is_unfused),
      cmocka_unit_test(dispatch_output_qk_is_unfused),
      cmocka_unit_test(dispatch_latent_decode_shaped_is_latent),
      cmocka_unit_test(latent_splits_balance_the_ctas),
      cmocka_unit_test(prefill_family_by_head_size),
      cmocka_unit_test(decode_single_token_merges_in_kernel),
      cmocka_unit_test(latent_few_splits_merge_in_kernel),
      cmocka_unit_test(latent_units_fit_grid_need_no_schedule),
      cmocka_unit_test(decode_single_token_splits_sized_on_device),
      cmocka_unit_test(decode_several_tokens_splits_follow_the_ring),
      cmocka_unit_test(dispatch_forced_backends),
      cmocka_unit_test(dispatch_reference_needs_no_workspace),
      cmocka_unit_test(dispatch_host_plans_are_reference),
      cmocka_unit_test(workspace_positive_and_aligned),
      cmocka_unit_test(workspace_holds_staged_query),
      cmocka_unit_test(prefill_expected_auto_picks_prefill_on_h200),
      cmocka_unit_test(prefill_expected_verify_256x4_workspace_below_1gib),
      cmocka_unit_test(unfused_verify_256x4_within_budget),
      cmocka_unit_test(unfused_workspace_never_exceeds_budget),
      cmocka_unit_test(unfused_refuses_what_no_chunk_fits),
      cmocka_unit_test(unfused_test_limits_shape_the_chunks),
      cmocka_unit_test(workspace_add_sizes_and_carves),
      cmocka_unit_test(workspace_regions_well_formed),
  };
  return CASE_RUN_TESTS("plan", tests, argc, argv);
}
