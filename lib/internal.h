/*
 * Internal interfaces between planning (lib/), the reference executor (lib/reference.c) and the
 * GPU backends (cuda/). Every symbol here is pa__-prefixed: a static library has no hidden
 * visibility, so the prefix is what keeps them out of the caller's namespace.
 */
#ifndef PAGEDATTN_INTERNAL_H
#define PAGEDATTN_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "checked.h"
#include "pagedattn/pagedattn.h"
#include "problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors (lib/status.c) ------------------------------------------------------------------ */

/* Records a printf-style message as the calling thread's last error and returns status. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
pa_status pa__fail(pa_status status, const char *fmt, ...);
/* Clears the thread's last error (called on entry of public functions that can fail). */
void pa__clear_error(void);

/* ---- plans ---------------------------------------------------------------------------------- */

struct pa_plan {
  pa__problem problem;
  int32_t device;               /* PA_DEVICE_HOST or a CUDA ordinal */
  int32_t described;            /* planned for caller-described caps: not executable on a GPU */
  pa_device_caps caps;          /* zeroed for host plans */
  pa_backend backend;
  pa__workspace_layout workspace;
  const struct pa__backend_ops *ops; /* NULL for REFERENCE */
  void *backend_state;          /* owned by ops; launch configuration fixed at plan time */
};

/* The schema's names of the inputs, by index (messages name tensors by these). */
extern const char *const pa__input_names[PA_NUM_INPUTS];

/* Validates attributes and descriptors (every rule of doc/semantics.md) and fills *p.
 * metadata: the two host bounds or NULL. max_qk_bytes: the output_qk threshold (resolved). */
pa_status pa__validate(pa__problem *p, const pa_attributes *attrs,
                       const pa_tensor_desc inputs[PA_NUM_INPUTS],
                       const pa_tensor_desc outputs[PA_NUM_OUTPUTS], const int32_t *metadata,
                       uint64_t max_qk_bytes);

/* Sizes and carves the workspace from the problem and the backend's scratch bytes. */
pa__workspace_layout pa__workspace_layout_for(const pa__problem *p, size_t backend_bytes);
/* Whether the prologue stages Q in the workspace (packed input, rotary or QK-Norm). */
int pa__needs_q_staging(const pa__problem *p);

/* ---- execution (lib/execute.c) --------------------------------------------------------------- */

/* The pointer checks shared by pa_execute and pa_execute_reference (required inputs present,
 * cache outputs aliasing their inputs). */
pa_status pa__check_io(const pa_plan *plan, const void *const inputs[PA_NUM_INPUTS],
                       void *const outputs[PA_NUM_OUTPUTS]);
/* The pointers of one call, with q_attn pointing at the query input (the caller redirects it to the
 * staged workspace copy when the prologue stages Q). */
pa__io pa__io_from(const pa__problem *p, const void *const inputs[PA_NUM_INPUTS],
                   void *const outputs[PA_NUM_OUTPUTS]);

/* ---- GPU backends (cuda/) --------------------------------------------------------------------- */

typedef struct CUstream_st *pa__stream;

typedef struct pa__backend_ops {
  pa_backend id;
  /* PA_SUCCESS when the backend serves the problem on a device with these caps; otherwise writes the
   * unserved feature into why ("attention_bias", "head_size 576") and returns PA_ERROR_NOT_SUPPORTED.
   * Host only, no CUDA calls: also used for described devices. */
  pa_status (*check)(const pa__problem *p, const pa_device_caps *caps, char *why, size_t why_size);
  /* Fixes the launch configuration (plan->backend_state) and returns the scratch bytes it needs in
   * *backend_bytes. setup_device != 0: the plan is for a real device, so per-kernel device setup
   * (cudaFuncSetAttribute, cuBLASLt heuristics) happens here, never in run. */
  pa_status (*plan)(pa_plan *plan, int setup_device, size_t *backend_bytes);
  /* Launches the attention (the prologue has already run on the same stream). */
  pa_status (*run)(const pa_plan *plan, const pa__io *io, pa__stream stream);
  /* Frees plan->backend_state. */
  void (*destroy)(pa_plan *plan);
} pa__backend_ops;

/* The backends built into this library, in AUTO's order of preference; NULL-terminated.
 * Defined in cuda/backends.cu. */
extern const pa__backend_ops *const pa__gpu_backends[];

/* The shared prologue (cuda/prologue.cu): unpack -> QK-Norm -> RoPE -> quantize -> slot writes,
 * and Q into the workspace when pa__needs_q_staging. */
pa_status pa__prologue_run(const pa_plan *plan, const pa__io *io, pa__stream stream);

/* Device queries (lib/device.c); cached per device. */
pa_status pa__device_caps_cached(int32_t device, pa_device_caps *caps);

#ifdef __cplusplus
}
#endif

#endif /* PAGEDATTN_INTERNAL_H */
