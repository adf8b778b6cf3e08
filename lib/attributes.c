/* Defaults, names and the parsers of the operator's string attributes. */
#include <string.h>

#include "internal.h"

void pa_attributes_init(pa_attributes *a) {
  if (!a) return;
  memset(a, 0, sizeof *a);
  a->struct_size = sizeof *a;
  a->local_window_size = -1;
  a->qk_norm_epsilon = 1e-6f;
  a->is_causal = 1;
}

void pa_plan_options_init(pa_plan_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->device = PA_DEVICE_CURRENT;
  o->backend = PA_BACKEND_AUTO;
}

size_t pa_dtype_size(pa_dtype dtype) {
  switch (dtype) {
  case PA_DTYPE_FLOAT32: case PA_DTYPE_INT32: return 4;
  case PA_DTYPE_FLOAT16: case PA_DTYPE_BFLOAT16: return 2;
  case PA_DTYPE_INT8: case PA_DTYPE_FLOAT8_E4M3FN: case PA_DTYPE_UINT8: return 1;
  case PA_DTYPE_UNDEFINED: break;
  }
  return 0;
}

const char *pa_backend_name(pa_backend b) {
  switch (b) {
  case PA_BACKEND_AUTO: return "AUTO";
  case PA_BACKEND_REFERENCE: return "REFERENCE";
  case PA_BACKEND_DECODE: return "DECODE";
  case PA_BACKEND_PREFILL: return "PREFILL";
  case PA_BACKEND_UNFUSED: return "UNFUSED";
  case PA_BACKEND_LATENT: return "LATENT";
  }
  return "UNKNOWN";
}

static int is_default_name(const char *s) { return s == NULL || s[0] == '\0'; }

pa_status pa_cache_dtype_parse(const char *onnx_name, pa_cache_dtype *out) {
  static const struct { const char *name; pa_cache_dtype value; } names[] = {
      {"float16", PA_CACHE_DTYPE_FLOAT16}, {"bfloat16", PA_CACHE_DTYPE_BFLOAT16},
      {"int8", PA_CACHE_DTYPE_INT8},       {"float8e4m3fn", PA_CACHE_DTYPE_FLOAT8E4M3FN},
      {"int4", PA_CACHE_DTYPE_INT4},       {"float4e2m1", PA_CACHE_DTYPE_FLOAT4E2M1},
  };
  pa__clear_error();
  if (!out) return pa__fail(PA_ERROR_INVALID_ARGUMENT, "cache_dtype: out must not be NULL");
  if (is_default_name(onnx_name)) {
    *out = PA_CACHE_DTYPE_DEFAULT;
    return PA_SUCCESS;
  }
  if (!strcmp(onnx_name, "uint8") || !strcmp(onnx_name, "uint4"))
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "cache_dtype: \"%s\" is unsigned, but quantization here has no zero point "
                    "(design 8.3.1); expected \"\", float16, bfloat16, int8 or float8e4m3fn",
                    onnx_name);
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (!strcmp(onnx_name, names[i].name)) {
      *out = names[i].value;
      return PA_SUCCESS;
    }
  }
  return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                  "cache_dtype: expected \"\", float16, bfloat16, int8 or float8e4m3fn, got \"%s\"",
                  onnx_name);
}

pa_status pa_quant_type_parse(const char *onnx_name, pa_quant_type *out) {
  pa__clear_error();
  if (!out) return pa__fail(PA_ERROR_INVALID_ARGUMENT, "quant_type: out must not be NULL");
  if (is_default_name(onnx_name) || !strcmp(onnx_name, "NONE")) *out = PA_QUANT_NONE;
  else if (!strcmp(onnx_name, "PER_TENSOR")) *out = PA_QUANT_PER_TENSOR;
  else if (!strcmp(onnx_name, "PER_CHANNEL")) *out = PA_QUANT_PER_CHANNEL;
  else
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "quant_type: expected NONE, PER_TENSOR or PER_CHANNEL, got \"%s\"", onnx_name);
  return PA_SUCCESS;
}

pa_status pa_kv_cache_layout_parse(const char *onnx_name, pa_kv_cache_layout *out) {
  pa__clear_error();
  if (!out) return pa__fail(PA_ERROR_INVALID_ARGUMENT, "kv_cache_layout: out must not be NULL");
  if (is_default_name(onnx_name) || !strcmp(onnx_name, "SEPARATE")) *out = PA_KV_CACHE_LAYOUT_SEPARATE;
  else if (!strcmp(onnx_name, "LATENT")) *out = PA_KV_CACHE_LAYOUT_LATENT;
  else
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "kv_cache_layout: expected SEPARATE or LATENT, got \"%s\"", onnx_name);
  return PA_SUCCESS;
}
