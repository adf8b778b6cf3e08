/* pa_plan_create: validate, dispatch (contract §5), size the workspace; PA_DEBUG=1 reports it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "internal.h"

/* The first release's struct sizes: callers built against it must keep working. */
enum {
  ATTRIBUTES_V1_SIZE = sizeof(pa_attributes),
  OPTIONS_V1_SIZE = sizeof(pa_plan_options),
  CAPS_V1_SIZE = sizeof(pa_device_caps),
};

static size_t align_up(size_t x) {
  return (x + PA_WORKSPACE_ALIGNMENT - 1) / PA_WORKSPACE_ALIGNMENT * PA_WORKSPACE_ALIGNMENT;
}

int pa__needs_q_staging(const pa__problem *p) {
  return p->input_mode == PA__MODE_PACKED || p->do_rotary || p->has_qk_norm;
}

/* total is SIZE_MAX when a size does not fit in size_t (pa_plan_create refuses the plan). */
pa__workspace_layout pa__workspace_layout_for(const pa__problem *p, size_t backend_bytes) {
  pa__workspace_layout w;
  memset(&w, 0, sizeof w);
  size_t end = 0;
  int fits = !pa__needs_q_staging(p) ||
             pa__mul3_size((size_t)p->token_count, (size_t)pa__q_row_elems(p),
                           pa_dtype_size(p->dtype), &w.q_bytes);
  w.q_offset = 0;
  fits = fits && pa__add_size(w.q_bytes, 2 * PA_WORKSPACE_ALIGNMENT, &end) &&
         pa__add_size(end, backend_bytes, &end);
  if (!fits) {
    w.total = SIZE_MAX;
    return w;
  }
  w.backend_offset = align_up(w.q_offset + w.q_bytes);
  w.backend_bytes = backend_bytes;
  w.total = backend_bytes ? align_up(w.backend_offset + backend_bytes) : align_up(w.q_bytes);
  return w;
}

/* Whether the kernels of this build run on the device: a cubin for sm_XY runs on compute capability
 * X.Z with Z >= Y; an arch-specific one (sm_90a) only on X.Y itself. */
static int built_for_device(const pa_device_caps *caps) {
  const char *arch = PA_GPU_ARCHS;
  while (*arch) {
    char *end;
    long number = strtol(arch, &end, 10);
    int specific = *end == 'a';
    int major = (int)(number / 10), minor = (int)(number % 10);
    if (caps->compute_capability_major == major &&
        (specific ? caps->compute_capability_minor == minor : caps->compute_capability_minor >= minor))
      return 1;
    arch = end + specific;
    if (*arch == ',') arch++;
    else if (*arch) break;
  }
  return 0;
}

static const pa__backend_ops *find_gpu_backend(pa_backend id) {
  for (const pa__backend_ops *const *ops = pa__gpu_backends; *ops; ops++)
    if ((*ops)->id == id) return *ops;
  return NULL;
}

/* AUTO's preference beyond eligibility: DECODE serves any ragged batch when forced, but AUTO takes
 * it only for decode-shaped steps (a static shape test, design §4.7). */
static int auto_prefers(const pa__backend_ops *ops, const pa__problem *p) {
  if (ops->id == PA_BACKEND_DECODE) return p->token_count <= p->batch_size;
  return 1;
}

static pa_status choose_backend(pa_plan *plan, pa_backend requested) {
  const pa__problem *p = &plan->problem;
  char why[256];
  if (plan->device == PA_DEVICE_HOST) {
    if (requested != PA_BACKEND_AUTO && requested != PA_BACKEND_REFERENCE)
      return pa__fail(PA_ERROR_NOT_SUPPORTED,
                      "backend %s: a host plan (device PA_DEVICE_HOST) runs only on REFERENCE",
                      pa_backend_name(requested));
    plan->backend = PA_BACKEND_REFERENCE;
    return PA_SUCCESS;
  }
  if (requested == PA_BACKEND_REFERENCE) {
    plan->backend = PA_BACKEND_REFERENCE;
    return PA_SUCCESS;
  }
  if (!built_for_device(&plan->caps))
    return pa__fail(PA_ERROR_NOT_SUPPORTED,
                    "no backend built into this library serves sm_%d%d: its kernels are built for "
                    "sm_%s (meson option gpu_archs)",
                    plan->caps.compute_capability_major, plan->caps.compute_capability_minor,
                    PA_GPU_ARCHS);
  if (requested != PA_BACKEND_AUTO) {
    const pa__backend_ops *ops = find_gpu_backend(requested);
    if (!ops)
      return pa__fail(PA_ERROR_NOT_SUPPORTED, "backend %s: not built into this library",
                      pa_backend_name(requested));
    why[0] = '\0';
    if (ops->check(p, &plan->caps, why, sizeof why) != PA_SUCCESS)
      return pa__fail(PA_ERROR_NOT_SUPPORTED, "backend %s does not serve %s on sm_%d%d",
                      pa_backend_name(requested), why, plan->caps.compute_capability_major,
                      plan->caps.compute_capability_minor);
    plan->backend = requested;
    plan->ops = ops;
    return PA_SUCCESS;
  }
  char reasons[1024];
  size_t used = 0;
  reasons[0] = '\0';
  for (const pa__backend_ops *const *ops = pa__gpu_backends; *ops; ops++) {
    why[0] = '\0';
    if (!auto_prefers(*ops, p)) continue;
    if ((*ops)->check(p, &plan->caps, why, sizeof why) == PA_SUCCESS) {
      plan->backend = (*ops)->id;
      plan->ops = *ops;
      return PA_SUCCESS;
    }
    if (used < sizeof reasons)
      used += (size_t)snprintf(reasons + used, sizeof reasons - used, "%s%s: %s",
                               used ? "; " : "", pa_backend_name((*ops)->id), why);
  }
  return pa__fail(PA_ERROR_NOT_SUPPORTED,
                  "no backend built into this library serves this request on sm_%d%d (%s)",
                  plan->caps.compute_capability_major, plan->caps.compute_capability_minor,
                  used ? reasons : "no GPU backend is built");
}

static void debug_report(const pa_plan *plan) {
  const char *env = getenv("PA_DEBUG");
  if (!env || strcmp(env, "1") != 0) return;
  const pa__problem *p = &plan->problem;
  fprintf(stderr,
          "[pagedattn] plan: backend=%s device=%d tokens=%lld batch=%d heads=%d/%d head_size=%d/%d "
          "block_size=%d max_query_len=%lld max_kv_len=%lld workspace=%zu (q %zu, backend %zu)\n",
          pa_backend_name(plan->backend), plan->device, (long long)p->token_count, p->batch_size,
          p->num_heads, p->kv_num_heads, p->head_size, p->v_head_size, p->block_size,
          (long long)p->max_query_len, (long long)p->max_kv_len, plan->workspace.total,
          plan->workspace.q_bytes, plan->workspace.backend_bytes);
}

pa_status pa_plan_create(pa_plan **out, const pa_attributes *attrs,
                         const pa_tensor_desc inputs[PA_NUM_INPUTS],
                         const pa_tensor_desc outputs[PA_NUM_OUTPUTS],
                         const pa_plan_options *options) {
  pa__clear_error();
  if (!out) return pa__fail(PA_ERROR_INVALID_ARGUMENT, "plan: must not be NULL");
  *out = NULL;
  if (!attrs) return pa__fail(PA_ERROR_INVALID_ARGUMENT, "attributes: must not be NULL");
  if (attrs->struct_size < ATTRIBUTES_V1_SIZE)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "attributes: struct_size must be at least %zu, got %zu",
                    (size_t)ATTRIBUTES_V1_SIZE, attrs->struct_size);
  if (!inputs) return pa__fail(PA_ERROR_INVALID_ARGUMENT, "inputs: must not be NULL");
  if (!outputs) return pa__fail(PA_ERROR_INVALID_ARGUMENT, "outputs: must not be NULL");
  pa_plan_options opts;
  pa_plan_options_init(&opts);
  if (options) {
    if (options->struct_size < OPTIONS_V1_SIZE)
      return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                      "options: struct_size must be at least %zu, got %zu",
                      (size_t)OPTIONS_V1_SIZE, options->struct_size);
    opts = *options;
  }
  if (opts.device_caps && opts.device_caps->struct_size < CAPS_V1_SIZE)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "device_caps: struct_size must be at least %zu, got %zu",
                    (size_t)CAPS_V1_SIZE, opts.device_caps->struct_size);
  if (opts.device < PA_DEVICE_HOST)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT,
                    "device: expected an ordinal, PA_DEVICE_CURRENT or PA_DEVICE_HOST, got %d",
                    opts.device);
  if (opts.backend < PA_BACKEND_AUTO || opts.backend > PA_BACKEND_LATENT)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT, "backend: unknown value %d", (int)opts.backend);
  uint64_t max_qk_bytes =
      opts.max_output_qk_bytes ? opts.max_output_qk_bytes : PA_DEFAULT_MAX_OUTPUT_QK_BYTES;

  pa_plan *plan = calloc(1, sizeof *plan);
  if (!plan) return pa__fail(PA_ERROR_OUT_OF_MEMORY, "plan: host allocation failed");
  pa_status st = pa__validate(&plan->problem, attrs, inputs, outputs, opts.attention_metadata,
                              max_qk_bytes);
  if (st != PA_SUCCESS) goto fail;

  int setup_device = 0;
  plan->device = opts.device;
  if (opts.device == PA_DEVICE_HOST) {
    /* host plans need no GPU */
  } else if (opts.device_caps) {
    plan->caps = *opts.device_caps;
    plan->described = 1;
  } else {
    st = pa__device_caps_cached(opts.device, &plan->caps);
    if (st != PA_SUCCESS) goto fail;
    if (opts.device == PA_DEVICE_CURRENT && cudaGetDevice(&plan->device) != cudaSuccess) {
      st = pa__fail(PA_ERROR_NO_DEVICE, "device: no current CUDA device");
      goto fail;
    }
    setup_device = 1;
  }

  st = choose_backend(plan, opts.backend);
  if (st != PA_SUCCESS) goto fail;
  size_t backend_bytes = 0;
  if (plan->ops) {
    st = plan->ops->plan(plan, setup_device, &backend_bytes);
    if (st != PA_SUCCESS) goto fail;
  }
  if (plan->backend != PA_BACKEND_REFERENCE) { /* the reference needs no device workspace */
    plan->workspace = pa__workspace_layout_for(&plan->problem, backend_bytes);
    if (plan->workspace.total == SIZE_MAX) {
      st = pa__fail(PA_ERROR_NOT_SUPPORTED,
                    "workspace: backend %s needs the staged query and %zu bytes of scratch, more "
                    "than size_t holds",
                    pa_backend_name(plan->backend), backend_bytes);
      goto fail;
    }
  }
  debug_report(plan);
  *out = plan;
  return PA_SUCCESS;

fail:
  pa_plan_destroy(plan);
  return st;
}

void pa_plan_destroy(pa_plan *plan) {
  if (!plan) return;
  if (plan->ops && plan->ops->destroy) plan->ops->destroy(plan);
  free(plan);
}

size_t pa_plan_workspace_size(const pa_plan *plan) { return plan ? plan->workspace.total : 0; }

pa_backend pa_plan_backend(const pa_plan *plan) { return plan ? plan->backend : PA_BACKEND_AUTO; }
