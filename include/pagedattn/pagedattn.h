/*
 * libpagedattn: paged attention for LLM serving, with a plain C API.
 *
 * The operator is com.microsoft::PagedAttention (see doc/semantics.md): packed ragged queries,
 * a KV cache split into fixed-size blocks reached through a block table, and the serving
 * features around it (slot_mapping, sinks, QK-Norm, quantized caches, sliding windows,
 * attention_bias, output_qk, absorbed MLA).
 *
 * Life cycle:
 *   pa_plan_create   host only. Validates the request (doc/semantics.md), picks a backend,
 *                    fixes every launch and the workspace layout. Cheap: call it per step.
 *   pa_execute       launches on the caller's stream only; never allocates, synchronizes or reads
 *                    device memory back. Capturable in a CUDA graph.
 *   pa_execute_reference  the same operator on host memory, in plain C (the oracle; a CPU path).
 *
 * Thread safety: every function may be called from any thread. A pa_plan is immutable after
 * creation: one plan may be executed concurrently from several threads on several streams.
 * The last-error message is thread-local.
 */
#ifndef PAGEDATTN_PAGEDATTN_H
#define PAGEDATTN_PAGEDATTN_H

#include <stddef.h>
#include <stdint.h>

#include "version.h"

#ifndef PA_API
#if defined(_WIN32)
#define PA_API
#elif defined(__GNUC__)
#define PA_API __attribute__((visibility("default")))
#else
#define PA_API
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes, grouped by category: 1xxx the request, 2xxx capability, 3xxx the CUDA stack,
 * 4xxx resources, 5xxx a bug in the library. */
typedef enum pa_status {
  PA_SUCCESS = 0,
  PA_ERROR_INVALID_ARGUMENT = 1000,   /* a validation rule: the request is malformed */
  PA_ERROR_WORKSPACE_TOO_SMALL = 1001,
  PA_ERROR_MISALIGNED = 1002,
  PA_ERROR_CONTRACT_VIOLATION = 1003, /* device data broke the contract (pa_plan_check_status) */
  PA_ERROR_NOT_SUPPORTED = 2000,      /* well formed, but no backend on this device/build serves it */
  PA_ERROR_NO_DEVICE = 2001,
  PA_ERROR_CUDA = 3000,
  PA_ERROR_CUBLAS = 3001,
  PA_ERROR_OUT_OF_MEMORY = 4000,
  PA_ERROR_INTERNAL = 5000
} pa_status;

/* Static text naming the status ("PA_ERROR_INVALID_ARGUMENT"); never NULL. Any thread. */
PA_API const char *pa_status_string(pa_status s);

/* Copies the calling thread's detail message of its last failed call into buf (NUL-terminated,
 * truncated to size - 1 characters) and returns the full message length (strlen), so a call with
 * buf == NULL / size == 0 tells how large a buffer is needed. The message is "" after a success
 * has not been preceded by a failure on this thread. */
PA_API size_t pa_last_error_message(char *buf, size_t size);

/* Element types. PA_DTYPE_UNDEFINED in a descriptor means "input absent". */
typedef enum pa_dtype {
  PA_DTYPE_UNDEFINED = 0,
  PA_DTYPE_FLOAT32,
  PA_DTYPE_FLOAT16,
  PA_DTYPE_BFLOAT16,
  PA_DTYPE_INT8,
  PA_DTYPE_FLOAT8_E4M3FN,
  PA_DTYPE_INT32,
  PA_DTYPE_UINT8
} pa_dtype;

/* Size in bytes of one element (0 for PA_DTYPE_UNDEFINED or an unknown value). */
PA_API size_t pa_dtype_size(pa_dtype dtype);

/* A dense, row-major tensor: its type and shape. Strides are implied (contiguous). */
typedef struct pa_tensor_desc {
  pa_dtype dtype;
  int32_t rank;
  int64_t dims[4];
} pa_tensor_desc;

/* Input indices (the schema's order; part of the contract). */
enum {
  PA_IN_QUERY = 0,
  PA_IN_KEY,
  PA_IN_VALUE,
  PA_IN_KEY_CACHE,
  PA_IN_VALUE_CACHE,
  PA_IN_CUMULATIVE_SEQUENCE_LENGTH,
  PA_IN_PAST_SEQLENS,
  PA_IN_BLOCK_TABLE,
  PA_IN_COS_CACHE,
  PA_IN_SIN_CACHE,
  PA_IN_SLOT_MAPPING,
  PA_IN_HEAD_SINK,
  PA_IN_Q_NORM_WEIGHT,
  PA_IN_K_NORM_WEIGHT,
  PA_IN_K_SCALE,
  PA_IN_V_SCALE,
  PA_IN_ATTENTION_METADATA,
  PA_IN_QUERY_POSITIONS,
  PA_IN_ATTENTION_BIAS,
  PA_NUM_INPUTS /* 19 */
};

/* Output indices. */
enum { PA_OUT_OUTPUT = 0, PA_OUT_KEY_CACHE, PA_OUT_VALUE_CACHE, PA_OUT_QK, PA_NUM_OUTPUTS /* 4 */ };

typedef enum pa_quant_type {
  PA_QUANT_NONE = 0,
  PA_QUANT_PER_TENSOR,
  PA_QUANT_PER_CHANNEL
} pa_quant_type;

typedef enum pa_cache_dtype {
  PA_CACHE_DTYPE_DEFAULT = 0, /* "": the cache tensor's own element type */
  PA_CACHE_DTYPE_FLOAT16,
  PA_CACHE_DTYPE_BFLOAT16,
  PA_CACHE_DTYPE_INT8,
  PA_CACHE_DTYPE_FLOAT8E4M3FN,
  PA_CACHE_DTYPE_INT4,       /* reserved: rejected by pa_plan_create */
  PA_CACHE_DTYPE_FLOAT4E2M1  /* reserved: rejected by pa_plan_create */
} pa_cache_dtype;

typedef enum pa_kv_cache_layout {
  PA_KV_CACHE_LAYOUT_SEPARATE = 0,
  PA_KV_CACHE_LAYOUT_LATENT
} pa_kv_cache_layout;

typedef enum pa_backend {
  PA_BACKEND_AUTO = 0,
  PA_BACKEND_REFERENCE,
  PA_BACKEND_DECODE,
  PA_BACKEND_PREFILL,
  PA_BACKEND_UNFUSED,
  PA_BACKEND_LATENT
} pa_backend;

/* "AUTO", "REFERENCE", "DECODE", "PREFILL", "UNFUSED", "LATENT"; "UNKNOWN" otherwise. */
PA_API const char *pa_backend_name(pa_backend b);

/* Every attribute of the operator. Start from pa_attributes_init(). A zero field means the default
 * (scale, qk_norm_epsilon, v_head_size, ...) except where zero is itself a value of the attribute:
 * is_causal = 0 selects full-context attention and local_window_size = 0 is rejected (-1 is off). */
typedef struct pa_attributes {
  size_t struct_size;            /* sizeof(pa_attributes) */
  int32_t num_heads;             /* required, > 0 */
  int32_t kv_num_heads;          /* required, > 0, divides num_heads */
  float scale;                   /* 0 = 1/sqrt(head_size); required when v_head_size != head_size */
  float softcap;                 /* 0 = off; else scores become softcap * tanh(score / softcap) */
  int32_t local_window_size;     /* -1 = off; W >= 1 admits W positions including the current one */
  int32_t do_rotary;             /* 0 or 1 */
  int32_t rotary_interleaved;    /* 0 = half-split (GPT-NeoX), 1 = interleaved pairs (GPT-J) */
  float qk_norm_epsilon;         /* 0 = 1e-6; negative or non-finite is rejected */
  pa_quant_type k_quant_type;
  pa_quant_type v_quant_type;
  pa_cache_dtype k_cache_dtype;
  pa_cache_dtype v_cache_dtype;
  int32_t v_head_size;           /* 0 = head_size; other values only in LATENT */
  int32_t rotary_offset;         /* first channel covered by RoPE; multiple of 8 */
  pa_kv_cache_layout kv_cache_layout;
  int32_t qk_output;             /* 0 none, 1 pre-softmax scores, 2 post-softmax probabilities */
  int32_t is_causal;             /* extension: 1 (default) bottom-right causal, 0 full context */
} pa_attributes;

/* Fills the defaults (local_window_size -1, qk_norm_epsilon 1e-6, is_causal 1, struct_size). */
PA_API void pa_attributes_init(pa_attributes *a);

/* Parse the operator's string attributes. NULL or "" gives the default. Unknown names, the
 * reserved "int4" / "float4e2m1" (for k/v_cache_dtype: parsed, then rejected at plan time) and the
 * unsigned "uint4" / "uint8" (no zero point exists) give PA_ERROR_INVALID_ARGUMENT with a message. */
PA_API pa_status pa_cache_dtype_parse(const char *onnx_name, pa_cache_dtype *out);
PA_API pa_status pa_quant_type_parse(const char *onnx_name, pa_quant_type *out);
PA_API pa_status pa_kv_cache_layout_parse(const char *onnx_name, pa_kv_cache_layout *out);

/* What planning needs to know about a GPU. Filled by pa_device_caps_query, or by the caller to plan
 * for a described device without touching one. */
typedef struct pa_device_caps {
  size_t struct_size;                 /* sizeof(pa_device_caps) */
  int32_t compute_capability_major;   /* 9 for Hopper */
  int32_t compute_capability_minor;
  int32_t multiprocessor_count;
  int64_t max_shared_memory_per_block_optin; /* bytes */
} pa_device_caps;

/* Reads the capabilities of CUDA device `device` (PA_DEVICE_CURRENT for the current one).
 * Cached per device after the first call. PA_ERROR_NO_DEVICE when there is no such device.
 * Not during graph capture on a device never queried before (it may initialize the runtime). */
PA_API pa_status pa_device_caps_query(int32_t device, pa_device_caps *caps);

#define PA_DEVICE_CURRENT (-1)
#define PA_DEVICE_HOST (-2)

typedef struct pa_plan_options {
  size_t struct_size;                  /* sizeof(pa_plan_options) */
  int32_t device;                      /* CUDA ordinal; PA_DEVICE_CURRENT (-1); PA_DEVICE_HOST (-2) */
  pa_backend backend;                  /* PA_BACKEND_AUTO, or force one */
  const int32_t *attention_metadata;   /* input 16's two host values, read once; NULL = absent */
  uint64_t max_output_qk_bytes;        /* 0 = library default (PA_DEFAULT_MAX_OUTPUT_QK_BYTES) */
  const pa_device_caps *device_caps;   /* non-NULL: plan for this described device, touch no GPU */
  int32_t contract_check;              /* 1: check each pa_execute's device data against the
                                        * contract (pa_plan_check_status); 0: only when the
                                        * environment has PA_CHECK=1 */
} pa_plan_options;

#define PA_DEFAULT_MAX_OUTPUT_QK_BYTES ((uint64_t)1 << 30)

/* Defaults: device PA_DEVICE_CURRENT, backend AUTO, no metadata, default threshold, contract check
 * as PA_CHECK says. Note that a zeroed struct means device 0; call this to get "current device". */
PA_API void pa_plan_options_init(pa_plan_options *o);

typedef struct pa_plan pa_plan;

/* The stream type: the same type as cudaStream_t, spelled so that no CUDA header is needed. */
typedef struct CUstream_st *pa_stream;

/*
 * Validates the request and builds a plan. Host only: no device allocation, no synchronization.
 * inputs[i] describes input i (dtype PA_DTYPE_UNDEFINED = absent); outputs likewise.
 * options may be NULL (defaults).
 * Returns PA_SUCCESS and *plan, or:
 *   PA_ERROR_INVALID_ARGUMENT  a validation rule failed (message names the tensor or attribute)
 *   PA_ERROR_NOT_SUPPORTED     no built backend serves this on this device, or the forced one cannot
 *   PA_ERROR_NO_DEVICE         a GPU plan was asked for but there is no such device
 *   PA_ERROR_OUT_OF_MEMORY, PA_ERROR_CUBLAS, PA_ERROR_CUDA
 * Safe during CUDA-graph capture (it touches no stream).
 */
PA_API pa_status pa_plan_create(pa_plan **plan, const pa_attributes *attrs,
                                const pa_tensor_desc inputs[PA_NUM_INPUTS],
                                const pa_tensor_desc outputs[PA_NUM_OUTPUTS],
                                const pa_plan_options *options);

/* Frees a plan; NULL is fine. The plan must not be executing (its launches may be in flight: the
 * plan's host memory is not used by kernels). */
PA_API void pa_plan_destroy(pa_plan *plan);

/* Device workspace bytes pa_execute needs (may be 0). The workspace must be aligned to
 * PA_WORKSPACE_ALIGNMENT bytes. */
PA_API size_t pa_plan_workspace_size(const pa_plan *plan);
#define PA_WORKSPACE_ALIGNMENT 256

/* The backend the plan runs on. */
PA_API pa_backend pa_plan_backend(const pa_plan *plan);

/*
 * Runs the operator on the GPU, on `stream` only. inputs / outputs hold device pointers in the
 * plan's order (absent ones ignored). outputs[PA_OUT_KEY_CACHE] / [PA_OUT_VALUE_CACHE] are NULL or
 * the very pointers of inputs[PA_IN_KEY_CACHE] / [PA_IN_VALUE_CACHE]; the caches are updated in place.
 * Never allocates, synchronizes, or reads device memory on the host: capturable in a CUDA graph.
 * Tensors are read and written with 16-byte vector accesses: query, key, value, the norm weights and
 * 16-bit caches must be 16-byte aligned, 8-bit caches 8-byte aligned (cudaMalloc gives 256), the
 * workspace PA_WORKSPACE_ALIGNMENT-aligned.
 * Every launch is decided by pa_plan_create; this call only fills in pointers and launches.
 * Returns PA_SUCCESS, or INVALID_ARGUMENT (NULL plan or required pointer, cache output not
 * aliasing its input, a host or REFERENCE plan, a plan for described device_caps),
 * WORKSPACE_TOO_SMALL, MISALIGNED (a pointer above), PA_ERROR_CUDA or PA_ERROR_CUBLAS when a
 * launch fails (PA_ERROR_INTERNAL only for a bug in the library). token_count == 0 succeeds and
 * launches nothing.
 */
PA_API pa_status pa_execute(const pa_plan *plan, const void *const inputs[PA_NUM_INPUTS],
                            void *const outputs[PA_NUM_OUTPUTS], void *workspace,
                            size_t workspace_bytes, pa_stream stream);

/*
 * Runs the same operator on host memory, in plain C (fp32/fp64 math). Works for any plan, GPU
 * plans included, on host copies of the buffers. Allocates host scratch memory. Not for use on
 * device pointers.
 */
PA_API pa_status pa_execute_reference(const pa_plan *plan, const void *const inputs[PA_NUM_INPUTS],
                                      void *const outputs[PA_NUM_OUTPUTS]);

/*
 * The device contract checker (opt-in; doc/api.md, "Checking device data"). Device data can break
 * the caller's contract in ways no plan-time rule sees: a block id or slot out of range, a position
 * beyond the cos / sin tables, a length above an attention_metadata bound or a capacity,
 * cumulative lengths that decrease, two tokens writing one slot. The library never reads or writes
 * out of bounds on them, but the results are unspecified. A plan made with
 * pa_plan_options.contract_check = 1, or while the environment has PA_CHECK=1 (read by
 * pa_plan_create), is a checked plan (GPU plans only): each of its pa_execute calls first launches,
 * on the same stream, a checker that scans the call's lengths, block table, slots and positions
 * and records the first violation in the workspace. Its status lives in the workspace's first
 * bytes, in every checked plan, so plans made per step that share a workspace share one status.
 * Without the checker nothing is launched and the workspace is not larger.
 */

/* The checker's status occupies the workspace's first PA_CHECK_STATUS_BYTES bytes. Zero them once
 * when allocating a workspace for checked plans (memory that an earlier workspace used may hold its
 * status); copy them along when moving to a larger workspace. */
#define PA_CHECK_STATUS_BYTES 256

/* 1 when the plan runs the contract checker, else 0 (NULL included). */
PA_API int pa_plan_contract_check(const pa_plan *plan);

/*
 * Reads, reports and clears the checker's status in `workspace` (as passed to pa_execute, for
 * this or another checked plan of the same device): synchronizes `stream`, so call it on the
 * caller's schedule, never during stream capture. Returns PA_SUCCESS (message "") when no
 * pa_execute since the last call found a violation, or PA_ERROR_CONTRACT_VIOLATION with the
 * first violation, naming the tensor, the index and the value, in message (NUL-terminated,
 * truncated to size - 1; NULL / 0 is fine) and in pa_last_error_message. The first violation is
 * the one of the earliest violating call; within a call, the lowest in the order of doc/api.md.
 * INVALID_ARGUMENT: NULL plan or workspace, a plan without the checker, a plan for described
 * device_caps, a capturing stream; PA_ERROR_CUDA when the copy fails.
 */
PA_API pa_status pa_plan_check_status(const pa_plan *plan, const void *workspace,
                                      pa_stream stream, char *message, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* PAGEDATTN_PAGEDATTN_H */
