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
//
// This file is the launcher: the backend ops (check / plan / run / destroy). The kernels are in
// unfused_kernel.cuh, the extents and workspace regions in launch_extents.cuh, the cuBLASLt
// descriptors in cublaslt_gemm.cu. Plan time fixes the extents, the regions, the kernel
// instantiations, the grids, the cuBLASLt descriptors and algorithm, and the kernel parameters;
// run fills in the call's pointers and launches.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

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
typedef void (*unfused_launcher)(const unfused_state &st, const unfused_params &a,
                                 cudaStream_t stream, int stage);

struct unfused_state {
  unfused_extents extents;
  unfused_regions regions;
  unfused_params params;  // every field but the pointers
  // grids (blocks), from the extents
  unsigned query_blocks, key_blocks, softmax_blocks, weighted_blocks, scatter_blocks;
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

// The kernels of one step for T and the cache type C: stage 0 the gathers, stage 1 (after the
// scores GEMM) the softmax, O = P V and the scatter.
template <typename T, typename C>
void launch_kernels(const unfused_state &st, const unfused_params &a, cudaStream_t stream,
                    int stage) {
  if (stage == 0) {
    gather_queries_kernel<T><<<st.query_blocks, kCopyThreads, 0, stream>>>(a);
    gather_keys_kernel<C><<<st.key_blocks, kCopyThreads, 0, stream>>>(a);
    return;
  }
  masked_softmax_kernel<T><<<st.softmax_blocks, kRowThreads, 0, stream>>>(a);
  weighted_values_kernel<<<st.weighted_blocks, kWeightedThreads, 0, stream>>>(a);
  scatter_output_kernel<T><<<st.scatter_blocks, kCopyThreads, 0, stream>>>(a);
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
  a.q_rows = e.q_rows;
  a.kv_rows = e.kv_rows;
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

  const int64_t key_rows = (int64_t)a.batch * a.kv_rows;
  const int64_t score_rows = (int64_t)a.batch * a.kv_heads * a.q_rows;
  const int64_t output_tiles = (int64_t)a.batch * a.kv_heads *
                               ((a.q_rows + kWeightedTile - 1) / kWeightedTile) *
                               ((a.v_head_size + kWeightedTile - 1) / kWeightedTile);
  st->query_blocks = (unsigned)min64(a.tokens, kMaxGrid);
  st->key_blocks = (unsigned)min64(key_rows, kMaxGrid);
  st->softmax_blocks = (unsigned)min64(score_rows, kMaxGrid);
  st->weighted_blocks = (unsigned)min64(output_tiles, kMaxGrid);
  st->scatter_blocks = (unsigned)min64(a.tokens, kMaxGrid);
}

// ---- backend ops ---------------------------------------------------------------------------------

pa_status unfused_check(const pa__problem *p, const pa_device_caps *, char *why, size_t why_size) {
  const unfused_extents e = extents_for(p);
  if (e.batches > INT32_MAX) {
    snprintf(why, why_size, "batch_size * kv_num_heads = %lld (cuBLASLt batch count is int32)",
             (long long)e.batches);
    return PA_ERROR_NOT_SUPPORTED;
  }
  pa__workspace_layout scratch = {};
  unfused_regions regions;
  uint64_t bytes;
  if (!add_unfused_regions(p, e, &scratch, &regions, &bytes)) {
    snprintf(why, why_size,
             "a workspace of %llu bytes, which exceeds 2^40 (tighter attention_metadata "
             "bounds shrink it)",
             (unsigned long long)bytes);
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
  st->extents = extents_for(p);
  fill_params(p, st);
  if (p->token_count == 0) return PA_SUCCESS;  // pa_execute launches nothing: no scratch
  uint64_t bytes;
  if (!add_unfused_regions(p, st->extents, &plan->workspace, &st->regions, &bytes))
    return pa__fail(PA_ERROR_NOT_SUPPORTED, "UNFUSED: workspace of %llu bytes exceeds 2^40",
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

  cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
  st->launch(*st, a, s, 0);
  pa_status status = run_gemm(st->handle, st->scores_gemm, a.k_gathered, a.q_gathered, a.scores,
                              pa__workspace_at(w, r.cublas, workspace), s, "scores GEMM");
  if (status != PA_SUCCESS) return status;
  st->launch(*st, a, s, 1);
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

extern "C" const pa__backend_ops pa__unfused_backend = {
    PA_BACKEND_UNFUSED,
    pa::detail::unfused_check,
    pa::detail::unfused_plan,
    pa::detail::unfused_run,
    pa::detail::unfused_destroy,
};
