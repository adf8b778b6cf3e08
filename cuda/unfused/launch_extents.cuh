// UNFUSED's extents and workspace regions, from static shapes and the replay-wide bounds only, so
// the launches are replay-invariant. A launcher header: sees the planning types (lib/problem.h,
// lib/workspace.h); included by unfused.cu only.
#pragma once

#include <stdint.h>

#include "../launch_common.cuh"
#include "checked.h"
#include "cublaslt_gemm.cuh"
#include "unfused_kernel.cuh"
#include "workspace.h"

namespace pa {
namespace detail {

// Above this the request is not served: no device holds it, and size arithmetic stays far from
// overflow.
constexpr uint64_t kMaxWorkspaceBytes = (uint64_t)1 << 40;

struct unfused_extents {
  int64_t max_q;          // query rows per (sequence, query head)
  int64_t q_rows;         // group_size * max_q: rows per (sequence, KV head)
  int64_t kv_rows;        // gathered key rows per sequence, a multiple of 8 (cuBLASLt alignment)
  int32_t window_clamp;   // the gather starts at the window's first key instead of 0
  int64_t batches;        // batch_size * kv_num_heads: the GEMMs' batch count
};

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// With a causal window and positions implied by past_seqlens, a sequence's admitted keys all lie in
// [kv_len - q_len - W + 1, kv_len): at most max_q + W - 1 rows. With query_positions the positions
// are device data, so the whole [0, kv_len) is gathered.
inline unfused_extents extents_for_bounds(const pa__problem *p, int64_t max_query_len,
                                          int64_t max_kv_len) {
  unfused_extents e;
  e.max_q = max_query_len > 0 ? max_query_len : 1;
  e.q_rows = (int64_t)p->group_size * e.max_q;
  int64_t keys = max_kv_len > 0 ? max_kv_len : 1;
  e.window_clamp = p->window > 0 && p->is_causal && !p->has_query_positions;
  if (e.window_clamp && e.max_q + p->window - 1 < keys) keys = e.max_q + p->window - 1;
  e.kv_rows = round_up(keys, 8);
  e.batches = (int64_t)p->batch_size * p->kv_num_heads;
  return e;
}

// The extents this plan's scratch is laid out for: the (clamped) attention_metadata bounds.
inline unfused_extents extents_for(const pa__problem *p) {
  return extents_for_bounds(p, p->max_query_len, p->max_kv_len);
}

// The extents the scores GEMM's algorithm is chosen for (see unfused.cu, setup_gemms): those with
// attention_metadata absent, the same for every bound. Each is capped at kHeuristicRows rows, a
// bound-free size whose best kernel also suits larger ones, so that the heuristic is never asked
// about matrices far beyond any it was tuned for.
constexpr int64_t kHeuristicRows = 32768;
inline unfused_extents heuristic_extents_for(const pa__problem *p) {
  const int64_t max_kv = (int64_t)p->max_blocks_per_seq * p->block_size;
  return extents_for_bounds(p, min64(p->token_count, max64(kHeuristicRows / p->group_size, 1)),
                            min64(max_kv, kHeuristicRows));
}

// The product of the factors, or false on overflow.
inline bool checked_product(uint64_t *out, uint64_t a, uint64_t b, uint64_t c) {
  return pa__mul_u64(a, b, out) && pa__mul_u64(*out, c, out);
}

// UNFUSED's regions of the workspace (pa__workspace_add indices).
struct unfused_regions {
  int q_gathered, k_gathered, v_gathered, scores, out_gathered, key_mapped, cublas;
};

// Appends UNFUSED's scratch to w, every region PA_WORKSPACE_ALIGNMENT-aligned. *scratch_bytes gets
// its size, from the first region's start to the last one's end (UINT64_MAX when it overflows 64
// bits); the return says whether it is within kMaxWorkspaceBytes.
inline bool add_unfused_regions(const pa__problem *p, const unfused_extents &e,
                                pa__workspace_layout *w, unfused_regions *r,
                                uint64_t *scratch_bytes) {
  const uint64_t batches = (uint64_t)e.batches;
  const uint64_t q_rows = (uint64_t)e.q_rows, kv_rows = (uint64_t)e.kv_rows;
  const uint64_t v_head_size = p->input_mode == PA__MODE_LATENT ? 0 : (uint64_t)p->v_head_size;
  const size_t align = PA_WORKSPACE_ALIGNMENT;
  uint64_t q_elems, k_elems, v_elems, score_elems, out_elems;
  const uint64_t start = (w->end + align - 1) / align * align;
  bool ok = checked_product(&q_elems, batches, q_rows, (uint64_t)p->head_size) &&
            checked_product(&k_elems, batches, kv_rows, (uint64_t)p->head_size) &&
            checked_product(&v_elems, batches, kv_rows, v_head_size) &&
            checked_product(&score_elems, batches, q_rows, kv_rows) &&
            checked_product(&out_elems, batches, q_rows, (uint64_t)p->v_head_size);
  ok = ok && (r->q_gathered = pa__workspace_add(w, "UNFUSED Q_g (fp32)", q_elems, sizeof(float),
                                                align)) >= 0;
  ok = ok && (r->k_gathered = pa__workspace_add(w, "UNFUSED K_g (fp32)", k_elems, sizeof(float),
                                                align)) >= 0;
  // LATENT: V lies in K_g (an empty region)
  ok = ok && (r->v_gathered = pa__workspace_add(w, "UNFUSED V_g (fp32)", v_elems, sizeof(float),
                                                align)) >= 0;
  ok = ok && (r->scores = pa__workspace_add(w, "UNFUSED scores S, then P (fp32)", score_elems,
                                            sizeof(float), align)) >= 0;
  ok = ok && (r->out_gathered = pa__workspace_add(w, "UNFUSED O_g (fp32)", out_elems,
                                                  sizeof(float), align)) >= 0;
  ok = ok && (r->key_mapped = pa__workspace_add(w, "UNFUSED key mapped flags",
                                                (uint64_t)p->batch_size * kv_rows, 1, align)) >= 0;
  ok = ok && (r->cublas = pa__workspace_add(w, "UNFUSED cuBLASLt workspace",
                                            kCublasWorkspaceBytes, 1, align)) >= 0;
  *scratch_bytes = ok ? w->end - start : UINT64_MAX;
  return ok && *scratch_bytes <= kMaxWorkspaceBytes;
}

}  // namespace detail
}  // namespace pa
