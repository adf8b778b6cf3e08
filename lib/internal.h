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
#include "workspace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cuda/ is compiled with hidden visibility. Its few entry points that the tests call directly are
 * marked visible so that the tests' shared library (test/meson.build) exports them;
 * libpagedattn.so's version script (lib/exports.map) still keeps them local. */
#if defined(__GNUC__)
#define PA_VISIBLE_TO_TESTS __attribute__((visibility("default")))
#else
#define PA_VISIBLE_TO_TESTS
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
  pa__workspace_layout workspace; /* empty for REFERENCE */
  int32_t q_staged_region;      /* the write path's staged Q in workspace, or -1 */
  /* A backend's arrival counters (32-bit words in a workspace region), which the write kernel
   * zeroes in every execute before the backend's kernels use them (DECODE's CTAs counting the
   * splits of a row block, the last one merging them); region -1: none. */
  int32_t arrivals_region;
  uint32_t arrival_count;
  const struct pa__backend_ops *ops; /* NULL for REFERENCE */
  void *backend_state;          /* owned by ops: kernel variant, launch geometry, kernel parameters */
  void *write_state;            /* owned by the write path (pa__write_plan); NULL for host plans */
  void *check_state;            /* owned by the contract checker (pa__check_plan); NULL when off */
};

/* The schema's names of the inputs, by index (messages name tensors by these). */
extern const char *const pa__input_names[PA_NUM_INPUTS];

/* Validates attributes and descriptors (every rule of doc/semantics.md) and fills *p.
 * metadata: the two host bounds or NULL. max_qk_bytes: the output_qk threshold (resolved). */
pa_status pa__validate(pa__problem *p, const pa_attributes *attrs,
                       const pa_tensor_desc inputs[PA_NUM_INPUTS],
                       const pa_tensor_desc outputs[PA_NUM_OUTPUTS], const int32_t *metadata,
                       uint64_t max_qk_bytes);

/* Whether the write path stages Q in the workspace (packed input, rotary or QK-Norm). */
int pa__needs_q_staging(const pa__problem *p);

/* ---- execution (lib/execute.c) --------------------------------------------------------------- */

/* The pointer checks shared by pa_execute and pa_execute_reference (required inputs present,
 * cache outputs aliasing their inputs). */
pa_status pa__check_io(const pa_plan *plan, const void *const inputs[PA_NUM_INPUTS],
                       void *const outputs[PA_NUM_OUTPUTS]);
/* The pointers of one call, with q_attn pointing at the query input (the caller redirects it to the
 * staged workspace copy when the write path stages Q). */
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
  /* Decides everything a run needs, once, into plan->backend_state: the kernel variant, the launch
   * geometry, the kernel parameters less the call's pointers; and appends the backend's scratch
   * regions to plan->workspace (pa__workspace_add, after the write path's), keeping their indices.
   * setup_device != 0: the plan is for a real device, so per-kernel device setup
   * (cudaFuncSetAttribute, cuBLASLt descriptors and heuristics) happens here, never in run. */
  pa_status (*plan)(pa_plan *plan, int setup_device);
  /* Copies the parameters fixed at plan time, fills in the call's pointers (io; its regions through
   * pa__workspace_at(&plan->workspace, index, io->workspace)) and launches the attention, after the
   * write path on the same stream. Returns only what pa_execute documents. */
  pa_status (*run)(const pa_plan *plan, const pa__io *io, pa__stream stream);
  /* Frees plan->backend_state. */
  void (*destroy)(pa_plan *plan);
} pa__backend_ops;

/* The backends built into this library, in AUTO's order of preference; NULL-terminated.
 * Defined in cuda/backends.cu. */
extern const pa__backend_ops *const pa__gpu_backends[];

/* The write path shared by every backend (cuda/write/write.cu): unpack -> QK-Norm -> RoPE ->
 * quantize -> slot writes, and Q into the workspace when pa__needs_q_staging. */
/* Appends the staged-Q region to w when the problem stages Q; returns its index, or -1. */
PA_VISIBLE_TO_TESTS int pa__write_workspace(const pa__problem *p, pa__workspace_layout *w);
/* Fixes the kernel, the launch geometry and the kernel parameters (less the call's pointers) in
 * plan->write_state, for any plan on a device (a REFERENCE one included: the tests run the write
 * path alone on it). NOT_SUPPORTED for a type the kernels are not built for. */
pa_status pa__write_plan(pa_plan *plan);
/* Launches the write path: fills the call's pointers (checked by pa__write_check_alignment) into
 * the parameters fixed at plan time. PA_ERROR_CUDA when the launch fails. */
PA_VISIBLE_TO_TESTS pa_status pa__write_run(const pa_plan *plan, const pa__io *io,
                                         pa__stream stream);
/* MISALIGNED (naming the tensor) for a pointer the write path's and kernels' vector accesses need
 * aligned; pa_execute calls it before it enqueues anything. */
pa_status pa__write_check_alignment(const pa_plan *plan, const pa__io *io);
/* Frees plan->write_state. */
void pa__write_destroy(pa_plan *plan);
/* pa_execute_reference's write path alone (the caches; the output is not written): the oracle of
 * the write-path tests, which the attention would slow down by minutes on their large steps. */
pa_status pa__execute_reference_write(const pa_plan *plan, const void *const inputs[PA_NUM_INPUTS],
                                      void *const outputs[PA_NUM_OUTPUTS]);

/* The device contract checker (cuda/check/check.cu; pa_plan_check_status). */
/* Adds the checker's workspace regions, which must be the plan's first (its status at offset 0,
 * where every checked plan sharing a workspace finds it), and fixes its launch in
 * plan->check_state. Host only: described devices too. */
pa_status pa__check_plan(pa_plan *plan);
/* Launches the checker on the call's device data, before the write path, on the same stream. */
pa_status pa__check_run(const pa_plan *plan, const pa__io *io, pa__stream stream);
/* Reads, reports (message and last error) and clears the status at the start of workspace. */
pa_status pa__check_report(const pa_plan *plan, const void *workspace, pa__stream stream,
                           char *message, size_t size);
/* Frees plan->check_state. */
void pa__check_destroy(pa_plan *plan);

/* ---- UNFUSED's chunking (cuda/unfused/unfused.cu) ---------------------------------------------
 * pa__unfused_set_test_limits is for the tests only (libpagedattn.so exports pa_[a-z]* only); it
 * is not part of the contract. */

/* UNFUSED's chunking limits for the plans created afterwards: a workspace budget in bytes (0 = the
 * built-in kUnfusedWorkspaceBudget, 2 GiB; cuda/unfused/launch_extents.cuh) and caps on the
 * sequences and the query rows per chunk (0 = none). They let small shapes run in the chunks that
 * only large ones need. Plans keep the chunking they were created with; (0, 0, 0) restores the
 * defaults. Set them while no other thread plans. */
PA_VISIBLE_TO_TESTS void pa__unfused_set_test_limits(uint64_t budget_bytes,
                                                     int64_t max_chunk_sequences,
                                                     int64_t max_chunk_queries);

/* The chunking an UNFUSED plan runs with (cuda/unfused/launch_extents.cuh, unfused_extents); also
 * printed by PA_DEBUG=1. */
typedef struct pa__unfused_chunks {
  int64_t sequences_per_chunk, sequence_chunks;
  int64_t query_rows_per_chunk, query_chunks; /* query rows: per (sequence, query head) */
} pa__unfused_chunks;
/* 1 and *out filled for an UNFUSED plan on a device (real or described), else 0. */
PA_VISIBLE_TO_TESTS int pa__unfused_chunking(const pa_plan *plan, pa__unfused_chunks *out);

/* ---- PREFILL's kernel family (cuda/prefill/prefill.cu) -----------------------------------------
 * For the tests and PA_DEBUG, not part of the contract: the family a PREFILL plan runs, fixed at
 * plan time: "wgmma" (the sm_90a kernels) or "mma.sync"; NULL for any other plan. The environment
 * variable PA_PREFILL_KERNEL=mma.sync, read at plan time, keeps every plan on "mma.sync". */
PA_VISIBLE_TO_TESTS const char *pa__prefill_kernel_family(const pa_plan *plan);

/* ---- LATENT's kernel family (cuda/latent/latent.cu) --------------------------------------------
 * The same for LATENT plans: "wgmma" (the sm_90a kernel: compute capability 9.0, fp16 / bf16
 * caches, head_size 576, v_head_size 512) or "mma.sync"; NULL for any other plan.
 * PA_LATENT_KERNEL=mma.sync, read at plan time, keeps every plan on "mma.sync". */
PA_VISIBLE_TO_TESTS const char *pa__latent_kernel_family(const pa_plan *plan);

/* Device queries (lib/device.c); cached per device. */
pa_status pa__device_caps_cached(int32_t device, pa_device_caps *caps);

#ifdef __cplusplus
}
#endif

#endif /* PAGEDATTN_INTERNAL_H */
