/* pa_plan_create: validate, dispatch (doc/backends.md, "What AUTO picks, and why"), fix every
 * launch and lay out the workspace; PA_DEBUG=1 reports it. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "internal.h"

/* The first release's struct sizes: callers built against it must keep working (fields appended
 * since then take their defaults when struct_size ends before them). */
enum {
  ATTRIBUTES_V1_SIZE = sizeof(pa_attributes),
  OPTIONS_V1_SIZE = offsetof(pa_plan_options, contract_check),
  CAPS_V1_SIZE = sizeof(pa_device_caps),
};

/* Whether the plan runs the device contract checker: the option, or PA_CHECK=1 in the
 * environment (read here, once per plan). */
static int contract_check_wanted(const pa_plan_options *opts) {
  const char *env = getenv("PA_CHECK");
  return opts->contract_check == 1 || (env && strcmp(env, "1") == 0);
}

int pa__needs_q_staging(const pa__problem *p) {
  return p->input_mode == PA__MODE_PACKED || p->do_rotary || p->has_qk_norm;
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

/* AUTO's preference beyond eligibility: DECODE and LATENT serve any ragged batch when forced, but
 * AUTO takes DECODE only for decode-shaped steps and LATENT only for decode-shaped LATENT steps of
 * up to 4 query tokens per sequence (static shape tests; doc/backends.md, "What AUTO picks, and
 * why"). */
static int auto_prefers(const pa__backend_ops *ops, const pa__problem *p) {
  if (ops->id == PA_BACKEND_DECODE) return p->token_count <= p->batch_size;
  if (ops->id == PA_BACKEND_LATENT) return p->token_count <= 4 * (int64_t)p->batch_size;
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
          "block_size=%d max_query_len=%lld max_kv_len=%lld workspace=%zu\n",
          pa_backend_name(plan->backend), plan->device, (long long)p->token_count, p->batch_size,
          p->num_heads, p->kv_num_heads, p->head_size, p->v_head_size, p->block_size,
          (long long)p->max_query_len, (long long)p->max_kv_len, plan->workspace.total);
  if (plan->check_state)
    fprintf(stderr, "[pagedattn]   contract check: on (each execute launches the checker)\n");
  pa__unfused_chunks chunks;
  if (pa__unfused_chunking(plan, &chunks))
    fprintf(stderr,
            "[pagedattn]   UNFUSED chunks: %lld x %lld sequences, %lld x %lld query rows\n",
            (long long)chunks.sequence_chunks, (long long)chunks.sequences_per_chunk,
            (long long)chunks.query_chunks, (long long)chunks.query_rows_per_chunk);
  for (int32_t i = 0; i < plan->workspace.count; i++) {
    const pa__workspace_region *r = &plan->workspace.regions[i];
    fprintf(stderr, "[pagedattn]   workspace [%zu, %zu) %s (%zu-byte aligned)\n", r->offset,
            r->offset + r->bytes, r->name, r->alignment);
  }
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
    memcpy(&opts, options,
           options->struct_size < sizeof opts ? options->struct_size : sizeof opts);
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
  if (opts.contract_check != 0 && opts.contract_check != 1)
    return pa__fail(PA_ERROR_INVALID_ARGUMENT, "contract_check: expected 0 or 1, got %d",
                    opts.contract_check);
  uint64_t max_qk_bytes =
      opts.max_output_qk_bytes ? opts.max_output_qk_bytes : PA_DEFAULT_MAX_OUTPUT_QK_BYTES;

  pa_plan *plan = calloc(1, sizeof *plan);
  if (!plan) return pa__fail(PA_ERROR_OUT_OF_MEMORY, "plan: host allocation failed");
  plan->q_staged_region = -1;
  plan->arrivals_region = -1;
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
  /* Everything a run needs is decided here, once: the write path's and the backend's kernels,
   * launch geometry and parameters, and the workspace layout (the contract checker's regions when
   * it is on, then the staged Q, then the backend's regions; the reference needs no device
   * workspace and has no checker). */
  if (plan->device != PA_DEVICE_HOST) {
    st = pa__write_plan(plan);
    if (st != PA_SUCCESS) goto fail;
  }
  if (plan->ops) {
    if (contract_check_wanted(&opts)) {
      st = pa__check_plan(plan);
      if (st != PA_SUCCESS) goto fail;
    }
    plan->q_staged_region = pa__write_workspace(&plan->problem, &plan->workspace);
    st = plan->ops->plan(plan, setup_device);
    if (st != PA_SUCCESS) goto fail;
    if (plan->workspace.overflowed) {
      st = pa__fail(PA_ERROR_NOT_SUPPORTED, "workspace: its size overflows size_t");
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
  pa__write_destroy(plan);
  pa__check_destroy(plan);
  free(plan);
}

size_t pa_plan_workspace_size(const pa_plan *plan) { return plan ? plan->workspace.total : 0; }

pa_backend pa_plan_backend(const pa_plan *plan) { return plan ? plan->backend : PA_BACKEND_AUTO; }
