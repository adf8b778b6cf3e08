// UNFUSED's extents, chunking and workspace regions, from static shapes and the replay-wide bounds
// only, so the launches are replay-invariant. A launcher header: sees the planning types
// (lib/problem.h, lib/workspace.h); included by unfused.cu only.
#pragma once

#include <stdint.h>

#include "../launch_common.cuh"
#include "checked.h"
#include "cublaslt_gemm.cuh"
#include "unfused_kernel.cuh"
#include "workspace.h"

namespace pa {
namespace detail {

// UNFUSED's workspace budget: all its regions together (gathers, scores, O_g, flags, cuBLASLt's
// 4 MiB, alignment) take at most this many bytes. A step whose worst case (every sequence at the
// bounds) does not fit runs in chunks of sequences, and when one sequence alone does not fit, in
// chunks of its query rows too (choose_chunking). 2 GiB: the whole 256 x 4-token verify step over
// 4k without attention_metadata (which would need 144 GiB at once) runs in 86 chunks of 3
// sequences, and one sequence of 8 KV heads x d128 fits up to ~250k keys of KV capacity.
constexpr uint64_t kUnfusedWorkspaceBudget = (uint64_t)2 << 30;
// Above this no budget is honoured (the test hook included): size arithmetic stays far from
// overflow.
constexpr uint64_t kMaxWorkspaceBytes = (uint64_t)1 << 40;

// What limits the chunks: the budget, and for tests only (pa__unfused_set_test_limits) caps on
// the chunk sizes (0 = none), which make small shapes run in chunks.
struct unfused_limits {
  uint64_t budget;
  int64_t max_chunk_seqs, max_chunk_q;
};

struct unfused_extents {
  int64_t max_q;          // query rows per (sequence, query head) that are computed: the bound
  int64_t kv_rows;        // gathered key rows per sequence, a multiple of 8 (cuBLASLt alignment)
  int32_t window_clamp;   // the gather starts at the window's first key instead of 0
  // A step runs seq_chunks x q_chunks chunks: sequences [s * chunk_seqs, (s + 1) * chunk_seqs)
  // (those beyond batch_size empty) and their query rows [q * chunk_q, (q + 1) * chunk_q).
  int64_t chunk_seqs, seq_chunks;
  int64_t chunk_q, q_chunks;
  int64_t q_rows;         // group_size * chunk_q: rows per (sequence, KV head) of a chunk
  int64_t batches;        // chunk_seqs * kv_num_heads: the GEMMs' batch count
};

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Sets e's chunk sizes (and what follows from them).
inline void set_chunking(const pa__problem *p, unfused_extents *e, int64_t chunk_seqs,
                         int64_t chunk_q) {
  e->chunk_seqs = chunk_seqs;
  e->seq_chunks = ceil_div(p->batch_size, chunk_seqs);
  e->chunk_q = chunk_q;
  e->q_chunks = ceil_div(e->max_q, chunk_q);
  e->q_rows = (int64_t)p->group_size * chunk_q;
  e->batches = chunk_seqs * p->kv_num_heads;
}

// With a causal window and positions implied by past_seqlens, a sequence's admitted keys all lie in
// [kv_len - q_len - W + 1, kv_len): at most max_q + W - 1 rows. With query_positions the positions
// are device data, so the whole [0, kv_len) is gathered. One chunk: the whole batch at once.
inline unfused_extents extents_for_bounds(const pa__problem *p, int64_t max_query_len,
                                          int64_t max_kv_len) {
  unfused_extents e;
  e.max_q = max_query_len > 0 ? max_query_len : 1;
  int64_t keys = max_kv_len > 0 ? max_kv_len : 1;
  e.window_clamp = p->window > 0 && p->is_causal && !p->has_query_positions;
  if (e.window_clamp && e.max_q + p->window - 1 < keys) keys = e.max_q + p->window - 1;
  e.kv_rows = round_up(keys, 8);
  set_chunking(p, &e, p->batch_size, e.max_q);
  return e;
}

// The extents the scores GEMM's algorithm is chosen for (see unfused.cu, setup_gemms): those with
// attention_metadata absent, the same for every bound, unchunked. Each is capped at kHeuristicRows
// rows, a bound-free size whose best kernel also suits larger ones, so that the heuristic is never
// asked about matrices far beyond any it was tuned for; the batch count at INT32_MAX (cuBLASLt's
// type; the chunks' own counts are within it, choose_chunking).
constexpr int64_t kHeuristicRows = 32768;
inline unfused_extents heuristic_extents_for(const pa__problem *p) {
  const int64_t max_kv = (int64_t)p->max_blocks_per_seq * p->block_size;
  unfused_extents e =
      extents_for_bounds(p, min64(p->token_count, max64(kHeuristicRows / p->group_size, 1)),
                         min64(max_kv, kHeuristicRows));
  e.batches = min64(e.batches, INT32_MAX);
  return e;
}

// The product of the factors, or false on overflow.
inline bool checked_product(uint64_t *out, uint64_t a, uint64_t b, uint64_t c) {
  return pa__mul_u64(a, b, out) && pa__mul_u64(*out, c, out);
}

// UNFUSED's regions of the workspace (pa__workspace_add indices).
struct unfused_regions {
  int q_gathered, k_gathered, v_gathered, scores, out_gathered, key_mapped, cublas;
};

// Appends UNFUSED's scratch for one chunk of extents e to w (every chunk reuses it), every region
// PA_WORKSPACE_ALIGNMENT-aligned. *scratch_bytes gets its size, from the first region's start to
// the last one's end (UINT64_MAX when it overflows 64 bits); false on overflow.
inline bool add_unfused_regions(const pa__problem *p, const unfused_extents &e,
                                pa__workspace_layout *w, unfused_regions *r,
                                uint64_t *scratch_bytes) {
  const uint64_t batches = (uint64_t)e.batches;
  const uint64_t q_rows = (uint64_t)e.q_rows, kv_rows = (uint64_t)e.kv_rows;
  const uint64_t v_head_size = p->input_mode == PA__MODE_LATENT ? 0 : (uint64_t)p->v_head_size;
  const size_t align = PA_WORKSPACE_ALIGNMENT;
  uint64_t q_elems, k_elems, v_elems, score_elems, out_elems, flags;
  const uint64_t start = (w->end + align - 1) / align * align;
  bool ok = checked_product(&q_elems, batches, q_rows, (uint64_t)p->head_size) &&
            checked_product(&k_elems, batches, kv_rows, (uint64_t)p->head_size) &&
            checked_product(&v_elems, batches, kv_rows, v_head_size) &&
            checked_product(&score_elems, batches, q_rows, kv_rows) &&
            checked_product(&out_elems, batches, q_rows, (uint64_t)p->v_head_size) &&
            checked_product(&flags, (uint64_t)e.chunk_seqs, kv_rows, 1);
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
  ok = ok && (r->key_mapped = pa__workspace_add(w, "UNFUSED key mapped flags", flags, 1,
                                                align)) >= 0;
  ok = ok && (r->cublas = pa__workspace_add(w, "UNFUSED cuBLASLt workspace",
                                            kCublasWorkspaceBytes, 1, align)) >= 0;
  *scratch_bytes = ok ? w->end - start : UINT64_MAX;
  return ok;
}

// The scratch one chunk of extents e needs (UINT64_MAX on overflow).
inline uint64_t unfused_scratch_bytes(const pa__problem *p, const unfused_extents &e) {
  pa__workspace_layout w = {};
  unfused_regions r;
  uint64_t bytes;
  return add_unfused_regions(p, e, &w, &r, &bytes) ? bytes : UINT64_MAX;
}

// Fixes e's chunking, from static shapes and the bounds only (so every replay runs the same
// launches): the whole batch at once when it fits the budget; else the most sequences per chunk
// that fit, all query rows each; else one sequence per chunk and the most query rows that fit.
// The counts are then evened out (ceil(n / ceil(n / size))), which only shrinks a chunk. Returns
// false when not even one sequence with one query row fits; *smallest_bytes then gets that
// chunk's size. The chunking changes no sum: a chunk holds whole score rows and every key of its
// sequences (see unfused.cu, setup_gemms).
inline bool choose_chunking(const pa__problem *p, unfused_extents *e, const unfused_limits &lim,
                            uint64_t *smallest_bytes) {
  const uint64_t budget = lim.budget < kMaxWorkspaceBytes ? lim.budget : kMaxWorkspaceBytes;
  const int64_t batch = p->batch_size;
  const int64_t seq_cap = lim.max_chunk_seqs > 0 ? min64(batch, lim.max_chunk_seqs) : batch;
  const int64_t q_cap = lim.max_chunk_q > 0 ? min64(e->max_q, lim.max_chunk_q) : e->max_q;
  auto fits = [&](int64_t seqs, int64_t q) {
    unfused_extents t = *e;
    set_chunking(p, &t, seqs, q);
    return t.batches <= INT32_MAX && unfused_scratch_bytes(p, t) <= budget;
  };
  // the largest n in [lo, hi] with ok(n), given ok(lo)
  auto largest = [](int64_t lo, int64_t hi, auto ok) {
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (ok(mid)) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  };
  int64_t seqs = 1, q = 1;
  if (fits(1, q_cap)) {
    seqs = largest(1, seq_cap, [&](int64_t n) { return fits(n, q_cap); });
    q = q_cap;
  } else if (fits(1, 1)) {
    q = largest(1, q_cap, [&](int64_t n) { return fits(1, n); });
  } else {
    set_chunking(p, e, 1, 1);
    *smallest_bytes = unfused_scratch_bytes(p, *e);
    return false;
  }
  set_chunking(p, e, ceil_div(batch, ceil_div(batch, seqs)),
               ceil_div(e->max_q, ceil_div(e->max_q, q)));
  return true;
}

// The extents this plan runs with: the (clamped) attention_metadata bounds, chunked for lim.
inline bool extents_for(const pa__problem *p, const unfused_limits &lim, unfused_extents *e,
                        uint64_t *smallest_bytes) {
  *e = extents_for_bounds(p, p->max_query_len, p->max_kv_len);
  return choose_chunking(p, e, lim, smallest_bytes);
}

}  // namespace detail
}  // namespace pa
