// The UNFUSED backend (doc/backends.md): the correctness fallback that serves every request the
// schema allows, and the only home of output_qk. Per step, on the caller's stream:
//   1. gather Q into Q_g[b][kv_head][member * max_q + j][D] (the group's query heads stacked on M),
//   2. gather each sequence's key range (window-clamped) from the pages into dense K_g[b][kv_head]
//      [kv_rows][D] and V_g, dequantized to fp32 (LATENT: V is the leading v_head_size channels of
//      K_g), zeros where a row is unmapped or beyond the sequence, with a per-row "mapped" flag,
//   3. S = Q_g K_g^T, a strided-batched cuBLASLt GEMM over (b, kv_head),
//   4. one masked-softmax pass per row (scale, softcap, bias, masks, sink) writing P over S in
//      place, and output_qk,
//   5. O = P V_g (weighted_values_kernel: its sums must not depend on the bounds, see setup_gemms),
//      then each token's rows scattered to output (rounded to T).
// Precision: Q_g, K_g, V_g, S, P and O are fp32 and both products are true fp32
// (CUBLAS_COMPUTE_32F, not TF32; fmaf), so UNFUSED computes what doc/semantics.md says (dequantized
// values and P in fp32, rounded once to T at the end) up to the order of fp32 sums. Rounding to T
// before a GEMM does not fit the 2e-2 output tolerance: with bf16 over int8 caches (values up to
// ~5), rounding V and P to T cost up to 0.012 * (1 + |out|) on cancelling outputs, and rounding the
// dequantized K to T alone (2^-9 relative per channel: a score error of ~0.0035 rms at D = 80) up
// to 0.019, growing with the scale (simulated: 320k outputs, D = 80, 6..30 keys, the Python suite's
// data). Cost: gathers and scratch twice the size of T ones, and products on fp32 units, not tensor
// cores.
// Every extent comes from static shapes and the clamped bounds (max_query_len, max_kv_len), so the
// launches are the same for every replay.
// Workspace: steps 1-5 run per chunk of sequences (and of query rows) whose sizes are fixed at plan
// time so that the scratch stays within kUnfusedWorkspaceBudget (launch_extents.cuh,
// choose_chunking): the keys of a chunk of sequences are gathered once, then each chunk of their
// query rows runs steps 1 and 3-5; a chunk holds whole score rows over all of its sequences' keys,
// so no sum depends on the chunking. Tokens that no chunk computes (of no sequence, or beyond
// max_query_len in theirs) get zeros once per step (clear_ungathered_kernel).
// This file is the launcher: the backend ops (check / plan / run / destroy). The kernels are in
// unfused_kernel.cuh, the extents and workspace regions in launch_extents.cuh, the cuBLASLt
// descriptors in cublaslt_gemm.cu. Plan time fixes the extents, the regions, the kernel
// instantiations, the grids, the cuBLASLt descriptors and algorithm, and the kernel parameters;
// run fills in the call's pointers and launches.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include <atomic>
#include <new>

#include "../launch_common.cuh"
#include "cublaslt_gemm.cuh"
#include "internal.h"
#include "launch_extents.cuh"
#include "unfused_kernel.cuh"

namespace pa {
namespace detail {
namespace {

constexpr int64_t kMaxGrid = (int64_t)1 << 20;

struct unfused_state;
// The launches of one stage (unfused_stage) for one chunk (a.seq0, a.q0).
typedef void (*unfused_launcher)(const unfused_state &st, const unfused_params &a,
                                 cudaStream_t stream, int stage);
enum unfused_stage {
  kStageClear,     // once per step: outputs of the tokens no chunk computes
  kStageKeys,      // per chunk of sequences: the key (and value) gather
  kStageQueries,   // per chunk of query rows: the query gather (then the scores GEMM)
  kStageAfterGemm  // per chunk of query rows: softmax, O = P V, scatter
};

// The test hook's limits (pa__unfused_set_test_limits): 0 = the default budget, no caps.
std::atomic<uint64_t> test_budget{0};
std::atomic<int64_t> test_max_chunk_seqs{0}, test_max_chunk_q{0};

unfused_limits current_limits() {
  const uint64_t budget = test_budget.load(std::memory_order_relaxed);
  return {budget ? budget : kUnfusedWorkspaceBudget,
          test_max_chunk_seqs.load(std::memory_order_relaxed),
          test_max_chunk_q.load(std::memory_order_relaxed)};
}

struct unfused_state {
  unfused_extents extents;
  unfused_regions regions;
  unfused_params params;  // every field but the pointers
  // grids (blocks), from the extents
  unsigned clear_blocks, query_blocks, key_blocks, softmax_blocks, weighted_blocks;
  unfused_launcher launch;  // the kernels of T and the cache type (launch_kernels<T, C>)
  cublasLtHandle_t handle;
  gemm_plan scores_gemm;  // S^T = K_g x Q_g^T:   m = kv_rows, n = q_rows, k = head_size
};

gemm_shape scores_shape(const pa__problem *p, const unfused_extents &e) {
  return {true, (uint64_t)e.kv_rows, (uint64_t)e.q_rows, (uint64_t)p->head_size,
          p->head_size, e.kv_rows * p->head_size,
          p->head_size, e.q_rows * p->head_size,
          e.kv_rows, e.q_rows * e.kv_rows, (int32_t)e.batches};
}

// Results identical with attention_metadata absent, tight or loose (doc/cuda-graphs.md, "What the
// library guarantees", item 4): the bounds set the scratch extents, and cuBLASLt's heuristic picks
// a different kernel (tiling, split-K) per shape, changing the order of the sums. So
// S = Q_g K_g^T runs one algorithm chosen for the bound-free extents (make_gemm). O = P V_g reduces
// over the keys, whose count kv_rows does follow the bounds, and cuBLAS kernels may place their K
// tiles and K slices relative to that count: it runs weighted_values_kernel instead, which sums
// each sequence's own keys in order. The softmax takes its max and sum over admitted keys only
// (the padding is -inf and skipped), with per-thread columns and a reduction tree that do not
// depend on kv_rows.
pa_status setup_gemms(unfused_state *st, const pa__problem *p) {
  pa_status s = create_gemm_handle(&st->handle);
  if (s != PA_SUCCESS) return s;
  return make_gemm(st->handle, &st->scores_gemm, scores_shape(p, st->extents),
                   scores_shape(p, heuristic_extents_for(p)), "scores GEMM");
}

void destroy_state(unfused_state *st) {
  if (!st) return;
  destroy_gemm(&st->scores_gemm);
  if (st->handle) cublasLtDestroy(st->handle);
  delete st;
}

// The kernels of one stage (unfused_stage) for T and the cache type C.
template <typename T, typename C>
void launch_kernels(const unfused_state &st, const unfused_params &a, cudaStream_t stream,
                    int stage) {
  switch (stage) {
  case kStageClear:
    clear_ungathered_kernel<T><<<st.clear_blocks, kCopyThreads, 0, stream>>>(a);
    break;
  case kStageKeys: gather_keys_kernel<C><<<st.key_blocks, kCopyThreads, 0, stream>>>(a); break;
  case kStageQueries:
    gather_queries_kernel<T><<<st.query_blocks, kCopyThreads, 0, stream>>>(a);
    break;
  default:
    masked_softmax_kernel<T><<<st.softmax_blocks, kRowThreads, 0, stream>>>(a);
    weighted_values_kernel<<<st.weighted_blocks, kWeightedThreads, 0, stream>>>(a);
    scatter_output_kernel<T><<<st.query_blocks, kCopyThreads, 0, stream>>>(a);
    break;
  }
}

template <typename T>
unfused_launcher launcher_for_cache(pa_dtype cache_dtype) {
  switch (cache_dtype) {
  case PA_DTYPE_INT8: return launch_kernels<T, int8_t>;
#if PA_FP8_KV_CACHE
  case PA_DTYPE_FLOAT8_E4M3FN: return launch_kernels<T, fp8_e4m3>;
#endif
  default: return cache_dtype == dtype_of<T>::value ? launch_kernels<T, T> : nullptr;
  }
}

// Every kernel parameter but the pointers, and the grids.
void fill_params(const pa__problem *p, unfused_state *st) {
  const unfused_extents &e = st->extents;
  unfused_params &a = st->params;
  a.batch = p->batch_size;
  a.heads = p->num_heads;
  a.kv_heads = p->kv_num_heads;
  a.group = p->group_size;
  a.head_size = p->head_size;
  a.v_head_size = p->v_head_size;
  a.kv = paged_kv_layout_of(*p);
  a.tokens = p->token_count;
  a.max_q = e.max_q;
  a.kv_rows = e.kv_rows;
  a.chunk_seqs = (int32_t)e.chunk_seqs;
  a.chunk_q = e.chunk_q;
  a.q_rows = e.q_rows;
  a.seq0 = 0;
  a.q0 = 0;
  a.v_row_stride = p->input_mode == PA__MODE_LATENT ? p->head_size : p->v_head_size;
  a.window_clamp = e.window_clamp;
  a.window = p->window;
  a.is_causal = p->is_causal;
  a.scale = p->scale;
  a.softcap = p->softcap;
  a.k_quant = p->k_quant;
  a.v_quant = p->v_quant;
  a.qk_output = p->qk_output;
  a.qk_dtype = p->qk_dtype;
  a.qk_capacity = p->qk_capacity;
  a.bias_batch = p->bias_batch;
  a.bias_heads = p->bias_heads;
  a.bias_q_capacity = p->bias_q_capacity;
  a.bias_kv_capacity = p->bias_kv_capacity;

  // per chunk
  const int64_t key_rows = (int64_t)a.chunk_seqs * a.kv_rows;
  const int64_t query_rows = (int64_t)a.chunk_seqs * a.chunk_q;
  const int64_t score_rows = (int64_t)a.chunk_seqs * a.kv_heads * a.q_rows;
  const int64_t output_tiles = (int64_t)a.chunk_seqs * a.kv_heads *
                               ((a.q_rows + kWeightedTile - 1) / kWeightedTile) *
                               ((a.v_head_size + kWeightedTile - 1) / kWeightedTile);
  st->clear_blocks = (unsigned)min64(a.tokens, kMaxGrid);
  st->query_blocks = (unsigned)min64(query_rows, kMaxGrid);
  st->key_blocks = (unsigned)min64(key_rows, kMaxGrid);
  st->softmax_blocks = (unsigned)min64(score_rows, kMaxGrid);
  st->weighted_blocks = (unsigned)min64(output_tiles, kMaxGrid);
}

// ---- backend ops ---------------------------------------------------------------------------------

// The refusal when not even one sequence with one query row fits the budget.
void describe_refusal(char *why, size_t why_size, uint64_t smallest, uint64_t budget,
                      const unfused_extents &e) {
  snprintf(why, why_size,
           "a step whose smallest chunk (1 sequence, 1 query row, %lld key rows) needs %llu "
           "bytes of workspace, above UNFUSED's budget of %llu bytes (a tighter "
           "attention_metadata max_kv_len shrinks it)",
           (long long)e.kv_rows, (unsigned long long)smallest, (unsigned long long)budget);
}

pa_status unfused_check(const pa__problem *p, const pa_device_caps *, char *why, size_t why_size) {
  const unfused_limits limits = current_limits();
  unfused_extents e;
  uint64_t smallest = 0;
  if (!extents_for(p, limits, &e, &smallest)) {
    describe_refusal(why, why_size, smallest, limits.budget, e);
    return PA_ERROR_NOT_SUPPORTED;
  }
  return PA_SUCCESS;
}

pa_status unfused_plan(pa_plan *plan, int setup_device) {
  const pa__problem *p = &plan->problem;
  unfused_state *st = new (std::nothrow) unfused_state();
  if (!st) return pa__fail(PA_ERROR_OUT_OF_MEMORY, "UNFUSED plan: host allocation failed");
  plan->backend_state = st;
  st->launch = p->dtype == PA_DTYPE_BFLOAT16 ? launcher_for_cache<__nv_bfloat16>(p->k_cache_dtype)
                                             : launcher_for_cache<__half>(p->k_cache_dtype);
  if (!st->launch)
    return pa__fail(PA_ERROR_INTERNAL, "UNFUSED: no kernel for key_cache dtype %d after check",
                    (int)p->k_cache_dtype);
  const unfused_limits limits = current_limits();
  uint64_t bytes = 0;
  if (!extents_for(p, limits, &st->extents, &bytes)) {
    char why[256];
    describe_refusal(why, sizeof why, bytes, limits.budget, st->extents);
    return pa__fail(PA_ERROR_NOT_SUPPORTED, "backend UNFUSED does not serve %s", why);
  }
  fill_params(p, st);
  if (p->token_count == 0) return PA_SUCCESS;  // pa_execute launches nothing: no scratch
  if (!add_unfused_regions(p, st->extents, &plan->workspace, &st->regions, &bytes))
    return pa__fail(PA_ERROR_NOT_SUPPORTED, "UNFUSED: workspace of %llu bytes overflows",
                    (unsigned long long)bytes);
  if (!setup_device) return PA_SUCCESS;
  // Heuristics consult the current device: make it the plan's for the duration.
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(plan->device) != cudaSuccess)
    return pa__fail(PA_ERROR_CUDA, "UNFUSED plan: cannot select device %d", plan->device);
  pa_status s = setup_gemms(st, p);
  cudaSetDevice(previous);
  return s;
}

pa_status unfused_run(const pa_plan *plan, const pa__io *io, pa__stream stream) {
  const pa__problem *p = &plan->problem;
  const unfused_state *st = static_cast<const unfused_state *>(plan->backend_state);
  const pa__workspace_layout *w = &plan->workspace;
  const unfused_regions &r = st->regions;
  void *workspace = io->workspace;

  unfused_params a = st->params;
  a.cu_seqlens = io->cu_seqlens;
  a.past_seqlens = io->past_seqlens;
  a.block_table = io->block_table;
  a.query_positions = io->query_positions;
  a.q_attn = io->q_attn;
  a.q_row_stride = io->q_attn_row_stride;
  a.key_cache = io->key_cache;
  a.value_cache = io->value_cache;
  a.k_scale = io->k_scale;
  a.v_scale = io->v_scale;
  a.attention_bias = io->attention_bias;
  a.head_sink = io->head_sink;
  a.output = io->output;
  a.output_qk = io->output_qk;
  a.q_gathered = static_cast<float *>(pa__workspace_at(w, r.q_gathered, workspace));
  a.k_gathered = static_cast<float *>(pa__workspace_at(w, r.k_gathered, workspace));
  a.v_gathered = p->input_mode == PA__MODE_LATENT
                     ? a.k_gathered
                     : static_cast<float *>(pa__workspace_at(w, r.v_gathered, workspace));
  a.scores = static_cast<float *>(pa__workspace_at(w, r.scores, workspace));
  a.out_gathered = static_cast<float *>(pa__workspace_at(w, r.out_gathered, workspace));
  a.key_mapped = static_cast<uint8_t *>(pa__workspace_at(w, r.key_mapped, workspace));

  void *cublas_workspace = pa__workspace_at(w, r.cublas, workspace);

  // The chunks in order on the one stream, reusing the scratch (launch_extents.cuh: their count
  // and sizes are fixed at plan time).
  const unfused_extents &e = st->extents;
  cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
  st->launch(*st, a, s, kStageClear);
  for (int64_t seq_chunk = 0; seq_chunk < e.seq_chunks; seq_chunk++) {
    a.seq0 = (int32_t)(seq_chunk * e.chunk_seqs);
    a.q0 = 0;
    st->launch(*st, a, s, kStageKeys);
    for (int64_t q_chunk = 0; q_chunk < e.q_chunks; q_chunk++) {
      a.q0 = q_chunk * e.chunk_q;
      st->launch(*st, a, s, kStageQueries);
      const pa_status status = run_gemm(st->handle, st->scores_gemm, a.k_gathered, a.q_gathered,
                                        a.scores, cublas_workspace, s, "scores GEMM");
      if (status != PA_SUCCESS) return status;
      st->launch(*st, a, s, kStageAfterGemm);
    }
  }
  const cudaError_t launch = cudaGetLastError();
  if (launch != cudaSuccess)
    return pa__fail(PA_ERROR_CUDA, "UNFUSED: kernel launch failed: %s", cudaGetErrorString(launch));
  return PA_SUCCESS;
}

void unfused_destroy(pa_plan *plan) {
  destroy_state(static_cast<unfused_state *>(plan->backend_state));
  plan->backend_state = nullptr;
}

}  // namespace
}  // namespace detail
}  // namespace pa

// Test hooks (lib/internal.h).
extern "C" void pa__unfused_set_test_limits(uint64_t budget_bytes, int64_t max_chunk_sequences,
                                            int64_t max_chunk_queries) {
  pa::detail::test_budget.store(budget_bytes, std::memory_order_relaxed);
  pa::detail::test_max_chunk_seqs.store(max_chunk_sequences, std::memory_order_relaxed);
  pa::detail::test_max_chunk_q.store(max_chunk_queries, std::memory_order_relaxed);
}

extern "C" int pa__unfused_chunking(const pa_plan *plan, pa__unfused_chunks *out) {
  if (!plan || plan->backend != PA_BACKEND_UNFUSED || !plan->backend_state) return 0;
  const pa::detail::unfused_extents &e =
      static_cast<const pa::detail::unfused_state *>(plan->backend_state)->extents;
  out->sequences_per_chunk = e.chunk_seqs;
  out->sequence_chunks = e.seq_chunks;
  out->query_rows_per_chunk = e.chunk_q;
  out->query_chunks = e.q_chunks;
  return 1;
}

extern "C" const pa__backend_ops pa__unfused_backend = {
    PA_BACKEND_UNFUSED,
    pa::detail::unfused_check,
    pa::detail::unfused_plan,
    pa::detail::unfused_run,
    pa::detail::unfused_destroy,
};
