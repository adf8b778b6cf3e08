/*
 * The GPU test harness: describe a case, and the harness generates seeded random inputs, runs
 * pa_execute on the device and pa_execute_reference on host copies of the very same inputs, and
 * compares the output, the whole key/value caches and output_qk.
 *
 * What a case checks (tolerances: doc/development.md, "Oracles and tolerances"):
 *   output     |gpu - ref| <= tol * (1 + |ref|): fp16 5e-3, bf16 2e-2; 2e-2 with an int8/fp8 cache.
 *              Token rows beyond cu[B] must be zeros.
 *   caches     every slot the case's tokens write (computed by the harness from the inputs,
 *              independently of the library): within 1 ULP of the reference (T caches; or 2e-6
 *              absolute near zero, where RoPE's cancellation magnifies fp32 rounding
 *              differences) or one quantization step (int8: 1; fp8: adjacent codes). Every
 *              other byte of both caches must be identical to its random initial value (the
 *              canaries), on the GPU and in the reference.
 *   output_qk  as the output (float32 output_qk: the T tolerance of the case); -inf must match
 *              exactly.
 * Inputs are never zeros; caches start filled with random valid values (quantized caches: random
 * bytes; fp8 bytes avoid the NaN codes 0x7f / 0xff).
 *
 * On failure the harness prints the case name, the seed and the first mismatches to stderr.
 * Every run function returns one of the GPU_* results below; a test's main returns GPU_SKIP (77)
 * when gpu_available() is 0, which meson reports as skipped.
 *
 * Typical use:
 *
 *   int main(void) {
 *     if (!gpu_available()) return GPU_SKIP;
 *     unsigned seed = gpu_test_seed();
 *     gpu_case c = gpu_case_default("decode_fp16");   // 32/8 heads, d128, block 16, fp16, batch 3
 *     c.batch_size = 257; c.max_q_len = 1; c.max_past_len = 700;
 *     const gpu_axis axes[] = {GPU_AXIS(head_size, 64, 80, 96, 128, 256),
 *                              GPU_AXIS(block_size, 16, 64, 512)};
 *     gpu_matrix_result r = gpu_run_matrix(&c, axes, 2, NULL, PA_BACKEND_DECODE, seed);
 *     return gpu_matrix_exit_code(&r);
 *   }
 *
 * Memory: each case allocates and frees its own device buffers; keep sizes moderate so that the
 * suite runs under `compute-sanitizer --tool memcheck` in minutes.
 */
#ifndef PAGEDATTN_TEST_GPU_HARNESS_H
#define PAGEDATTN_TEST_GPU_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "pagedattn/pagedattn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Results of the run functions. */
enum {
  GPU_PASS = 0,
  GPU_FAIL = 1,
  GPU_UNSUPPORTED = 2, /* pa_plan_create said PA_ERROR_NOT_SUPPORTED (message printed when
                          PA_TEST_VERBOSE=1); not a failure, but counted */
  GPU_SKIP = 77        /* no CUDA device */
};

/* Explicit slot_mapping. */
typedef enum gpu_slots {
  GPU_SLOTS_NONE = 0,     /* absent: slots derived from the block table */
  GPU_SLOTS_DERIVED,      /* present, equal to the derived slots */
  GPU_SLOTS_WITH_INVALID, /* present; about 1 in 5 tokens gets -1, a slot >= num_blocks * block_size
                             (INT32_MAX too) or another negative value (INT32_MIN too): nothing is
                             written there, the canaries stay */
  GPU_SLOTS_INTO_PAST     /* present; each sequence's first new token writes key 0 of the next
                             sequence (when that key is in its past, mapped), which that sequence
                             must read as written (a step writes before it attends); the others
                             derived. Not with shared_prefix_blocks or a ring (two tokens would
                             write one slot) */
} gpu_slots;

/* attention_bias. */
typedef enum gpu_bias {
  GPU_BIAS_NONE = 0,
  GPU_BIAS_FULL,      /* (batch_size, num_heads, Q capacity, KV capacity) */
  GPU_BIAS_BROADCAST, /* (1, 1, Q capacity, KV capacity) */
  GPU_BIAS_PER_HEAD,  /* (1, num_heads, Q capacity, KV capacity) */
  GPU_BIAS_PER_BATCH  /* (batch_size, 1, Q capacity, KV capacity) */
} gpu_bias;

/* attention_metadata (the two host bounds). */
typedef enum gpu_metadata {
  GPU_METADATA_NONE = 0,
  GPU_METADATA_TIGHT, /* exactly max q_len and max kv_len of the batch (over all graph steps) */
  GPU_METADATA_LOOSE, /* larger than needed (clamped by the library) */
  GPU_METADATA_UNDERSIZED /* half the real maxima (at least 1): a contract violation whose result
                             is unspecified, so the run compares nothing; it must only succeed and
                             stay clean (the case is for compute-sanitizer) */
} gpu_metadata;

/*
 * One case. Zero means "default" for every field, so designated initializers or
 * gpu_case_default() + edits both work. Fields that gpu_axis may vary are int-sized (int32_t or an
 * enum).
 */
typedef struct gpu_case {
  const char *name; /* printed on failure; gpu_run_matrix appends the axis values */

  /* attributes */
  int32_t num_heads, kv_num_heads; /* required (> 0); LATENT forces kv_num_heads = 1 */
  int32_t head_size;               /* required, multiple of 8 */
  int32_t v_head_size;             /* LATENT only; 0 = head_size */
  pa_kv_cache_layout layout;       /* SEPARATE (default) or LATENT */
  int32_t packed;                  /* SEPARATE only: Q, K, V packed in the query rows */
  pa_dtype dtype;                  /* T: 0 = PA_DTYPE_FLOAT16; or PA_DTYPE_BFLOAT16 */
  pa_dtype cache_dtype;            /* 0 = T; PA_DTYPE_INT8 or PA_DTYPE_FLOAT8_E4M3FN */
  pa_quant_type k_quant, v_quant;  /* with a quantized cache: NONE means PER_TENSOR (v_quant ignored
                                      in LATENT) */
  float scale;                     /* 0 = 1/sqrt(head_size); LATENT with v_head_size needs it (the
                                      harness then uses 1/sqrt(head_size)) */
  float softcap;                   /* 0 = off */
  int32_t query_exponent;          /* Q drawn from [-2^e, 2^e] instead of [-1, 1], the scale divided
                                      by 2^e (the scores keep their size); not with packed Q/K/V */
  int32_t key_growth;              /* g > 0: each new token's K row times 1 + position / g, so that
                                      a row's maxima rise along its keys (the softmax's reference
                                      moves on later tiles); not with packed Q/K/V */
  int32_t window;                  /* 0 = off (attribute -1), else local_window_size */
  int32_t non_causal;              /* 1: is_causal = 0 */

  /* batch: either explicit per-sequence lengths, or random ragged ones */
  int32_t batch_size;              /* required, >= 1 */
  const int32_t *q_lens;           /* batch_size new-token counts, or NULL = random in
                                      [1, max_q_len] ([0, max_q_len] with zero_q_lens) */
  const int32_t *past_lens;        /* batch_size cached lengths, or NULL = random in
                                      [0, max_past_len] */
  int32_t max_q_len;               /* 0 = 1 */
  int32_t max_past_len;            /* 0 = no past */
  int32_t zero_q_lens;             /* random lengths: about 1 in 4 sequences has no new token */
  int32_t extra_tokens;            /* token rows beyond cu[B] (belong to no sequence) */
  int32_t decreasing_cu;           /* cumulative_sequence_length's entries 1 .. B-1 in reverse
                                      order (batch_size >= 3, non-zero q_lens): a decreasing cu,
                                      each entry still in [0, token_count], a contract violation
                                      whose result is unspecified, so the run compares nothing; it
                                      must only succeed and stay clean (for compute-sanitizer) */

  /* paged cache */
  int32_t block_size;              /* required, power of two >= 16 */
  int32_t blocks_per_seq;          /* block_table.shape[1]; 0 = just enough (+1 spare column) */
  int32_t num_blocks;              /* 0 = every table entry gets its own block, plus 3 spare; never
                                      less than that (blocks are not shared between sequences) */
  int32_t shuffled_blocks;         /* block ids a random permutation instead of 0, 1, 2, ... */
  int32_t unmapped_blocks;         /* about 1 in 8 table entries is -1, a large negative (INT32_MIN
                                      included), >= num_blocks or INT32_MAX */
  int32_t shared_prefix_blocks;    /* the first n table entries of every sequence are sequence 0's
                                      (a common prompt prefix: same physical blocks); past lengths
                                      are raised to at least n * block_size, so the shared part is
                                      in the cache and new tokens go to private blocks */

  /* optional inputs and features */
  int32_t rotary;                  /* do_rotary */
  int32_t rotary_interleaved;
  int32_t rotary_dim;              /* 0 = head_size - rotary_offset */
  int32_t rotary_offset;           /* multiple of 8 */
  int32_t rotary_positions;        /* cos_cache rows; 0 = every position used; smaller to test that
                                      positions beyond the table pass through unrotated */
  int32_t qk_norm;                 /* q_norm_weight and k_norm_weight */
  float qk_norm_epsilon;           /* 0 = the default 1e-6 */
  gpu_slots slots;
  int32_t head_sink;
  int32_t query_positions;         /* present: each sequence's positions [past, past+q_len),
                                      in reverse order */
  gpu_bias bias;
  int32_t qk_output;               /* 0, 1, 2 */
  pa_dtype qk_dtype;               /* 0 = PA_DTYPE_FLOAT32 */
  gpu_metadata metadata;
  int32_t inputs_by_kernel;        /* every input but the caches uploaded to staging buffers and
                                      written by a kernel (input_copy.cu) on the stream right
                                      before pa_execute, captured with it in graph mode: what a
                                      kernel reads before its chained wait was then written by a
                                      kernel two launches back */
  int32_t output_offset_bytes;     /* output 0 starts this many bytes (a multiple of the element
                                      size, at most 16) into its allocation: 2 or 4 for an output
                                      aligned to less than the 16 bytes cudaMalloc gives (doc/api.md
                                      asks only the element's alignment of it); the bytes before it
                                      are poisoned and checked untouched */
} gpu_case;

/* A sane starting point: name, 32/8 heads, d128, fp16, block 16, batch 3, max_q_len 1,
 * max_past_len 40. */
gpu_case gpu_case_default(const char *name);

/* 1 when cudaGetDeviceCount succeeds with at least one device, else 0. */
int gpu_available(void);

/* The nodes a stream capture of one pa_execute records ((size_t)-1 when the capture itself fails);
 * *st gets pa_execute's status. A call refused before any launch records none, which is how the
 * workspace checks are shown to come before every launch. */
size_t gpu_captured_nodes(const pa_plan *plan, const void *const *inputs, void *const *outputs,
                          void *workspace, size_t bytes, pa_stream stream, pa_status *st);

/* The run's seed: PA_TEST_SEED from the environment, else time-based. Printed once to stderr. */
unsigned gpu_test_seed(void);

/* 1 when PA_GPU_TEST_QUICK=1 (tools/gpu-check.sh sets it under compute-sanitizer): tests should
 * then run a reduced matrix. */
int gpu_test_quick(void);

/* Plans c (forcing backend unless PA_BACKEND_AUTO), runs pa_execute once (eager) and the reference,
 * and compares. */
int gpu_case_run(const gpu_case *c, pa_backend backend, unsigned seed);

/*
 * CUDA-graph mode: captures one pa_execute on a stream and replays it for `steps` steps. Before
 * each replay the harness (not the library) updates the device inputs with cudaMemcpyAsync on the
 * same stream: fresh query/key/value rows, past_lens advanced by each sequence's q_len (cu stays:
 * the plan's token_count is fixed), and slot_mapping / query_positions for the new positions. Each
 * replay is compared with the reference of that step, the host caches carried from step to step.
 * Blocks are sized for the last step.
 */
int gpu_case_run_graph(const gpu_case *c, pa_backend backend, unsigned seed, int steps);

/*
 * Ring-buffer sliding window: needs window W > 0. Runs the case twice in lockstep
 * on the same inputs: once with the full cache (every position its own slot), once with each
 * sequence holding only N = ceil((W + max_q_len - 1) / block_size) + 1 physical blocks
 * (ceil(W / block_size) + 1 for decode), recycled through slot_mapping
 * (slot = ring[i % N] * block_size + p % block_size, i = p / block_size) with block_table entries
 * below the live range (and beyond kv_len) -1. The ring cache starts with the full cache's live
 * blocks. Every step compares each run with the reference on its own inputs, then the ring run
 * with the full run: reference outputs bitwise equal, GPU outputs bitwise equal, and each token's
 * written cache row bitwise equal. Forces slots = GPU_SLOTS_DERIVED and unmapped_blocks = 0 (an
 * unwritten or unmapped position would hold different stale data in the two layouts). graph: one
 * capture per run, the block table and slots updated on the device between replays.
 */
int gpu_case_run_ring(const gpu_case *c, pa_backend backend, unsigned seed, int steps, int graph);

/*
 * attention_metadata invariance: runs the case with metadata absent, tight and loose on the same
 * inputs (eager), each compared with the reference, and requires the three GPU outputs, output_qk
 * and written cache rows to be bitwise equal (the bounds only size launches and workspace).
 */
int gpu_case_run_metadata_invariance(const gpu_case *c, pa_backend backend, unsigned seed);

/*
 * Two plans alive at once: creates first's plan, then later's, and only then executes first, then
 * later, each compared with the reference. What a plan sets up on the device for its kernels (a
 * kernel function's shared-memory attribute) must hold for every live plan, not only the last one
 * created.
 */
int gpu_case_run_plans_alive(const gpu_case *first, const gpu_case *later, pa_backend backend,
                             unsigned seed);

/*
 * Threads and streams (doc/api.md: one const plan may be executed concurrently from several
 * threads on several streams): runs the case once serially, then from `threads` host threads at
 * once (at most 16), each on its own stream and its own buffers and workspace (the same inputs),
 * all executing the serial run's plan. Each thread first fails pa_execute with a workspace
 * misaligned by its own offset and, after every thread has failed, checks that
 * pa_last_error_message names its own address; its successful pa_execute must then clear it. Every
 * run is compared with the reference, and its outputs, output_qk and whole caches must equal the
 * serial run's bit for bit.
 */
int gpu_case_run_concurrent(const gpu_case *c, pa_backend backend, unsigned seed, int threads);

/*
 * A fresh thread: runs the case once on this thread, then has a new host thread, whose first CUDA
 * call is its pa_execute (inputs uploaded and the stream made here), execute the same plan on the
 * same inputs; its run is compared with the reference and bitwise with this thread's. The Hopper
 * kernels' tensor maps, encoded per call by a driver function, need a current context there.
 */
int gpu_case_run_fresh_thread(const gpu_case *c, pa_backend backend, unsigned seed);

/*
 * Write-path-only mode (test_write.c): calls pa__write_run directly on a plan forced to the
 * REFERENCE backend, then compares the caches with pa_execute_reference's and the staged Q
 * (pa__needs_q_staging) with the harness's own host computation of the write path's Q (within
 * 1 ULP, or 2e-6 near zero, as the T caches).
 */
int gpu_case_run_write(const gpu_case *c, unsigned seed);

/* ---- matrices ------------------------------------------------------------------------------- */

/* One axis: an int-sized field of gpu_case and the values it takes. */
typedef struct gpu_axis {
  const char *field;
  size_t offset;
  int count;
  int32_t values[16];
} gpu_axis;

#define GPU_AXIS(field_name, ...)                                                             \
  {#field_name, offsetof(gpu_case, field_name),                                               \
   (int)(sizeof((int32_t[]){__VA_ARGS__}) / sizeof(int32_t)), {__VA_ARGS__}}

/* Which run function gpu_run_matrix calls. */
typedef enum gpu_mode {
  GPU_MODE_EAGER = 0,
  GPU_MODE_GRAPH,
  GPU_MODE_WRITE,
  GPU_MODE_RING,       /* gpu_case_run_ring, eager, graph_steps steps */
  GPU_MODE_RING_GRAPH, /* gpu_case_run_ring, graph replay, graph_steps steps */
  GPU_MODE_METADATA    /* gpu_case_run_metadata_invariance */
} gpu_mode;

typedef struct gpu_matrix_result {
  int passed, failed, unsupported, skipped;
} gpu_matrix_result;

/* Optional filter: return 0 to leave out a combination (e.g. LATENT with packed). */
typedef int (*gpu_case_filter)(const gpu_case *c);

/*
 * Runs every combination of the axes' values on top of *base (the Cartesian product, first axis
 * outermost), each with seed + its index, in mode EAGER unless gpu_run_matrix_mode is used. Prints
 * one line per failure and a summary line. With PA_GPU_TEST_SHARD=i/n (0 <= i < n) a process runs
 * only every n-th case, starting at the i-th, counted over all its matrices in order: n processes
 * with the same PA_TEST_SEED together run every case once (tools/gpu-suite-parallel.py).
 */
gpu_matrix_result gpu_run_matrix(const gpu_case *base, const gpu_axis *axes, int num_axes,
                                 gpu_case_filter filter, pa_backend backend, unsigned seed);
gpu_matrix_result gpu_run_matrix_mode(const gpu_case *base, const gpu_axis *axes, int num_axes,
                                      gpu_case_filter filter, pa_backend backend, unsigned seed,
                                      gpu_mode mode, int graph_steps);

/* Accumulates b into a. */
void gpu_matrix_add(gpu_matrix_result *a, gpu_matrix_result b);

/* The exit code for a test's main: 1 if anything failed, 77 if everything was skipped, else 0. */
int gpu_matrix_exit_code(const gpu_matrix_result *r);

/* Folds one run function's result into r. */
void gpu_matrix_count(gpu_matrix_result *r, int result);

#ifdef __cplusplus
}
#endif

#endif /* PAGEDATTN_TEST_GPU_HARNESS_H */
