// The attention rules of doc/semantics.md, one device definition each, used by every kernel:
// which sequence and position a token has, which keys it admits (causal / window /
// query_positions / is_causal = 0), the score transform (scale, softcap), the sink term, the
// online-softmax update and the finalization of a row. Scores travel in log2 units (exp2 is one
// instruction): s * log2(e).
#pragma once

#include <math.h>
#include <stdint.h>

#include "chained_launch.cuh"
#include "numeric.cuh"

namespace pa {
namespace detail {

constexpr float kLog2e = 1.4426950408889634f;

// The sequence b of packed token t: cu[b] <= t < cu[b+1] (cu = cumulative_sequence_length), or -1
// when t >= cu[batch_size] (the token belongs to no sequence). Correct for any ragged batch,
// zero-token sequences included; decode steps (one token per sequence) resolve with two loads.
template <bool kBeforeWait = false>
__device__ __forceinline__ int32_t token_sequence(const int32_t *cu, int32_t batch_size,
                                                  int64_t t) {
  const auto cu_at = [&](int32_t b) { return load_step_input<kBeforeWait>(cu + b); };
  int32_t guess = (int32_t)(t < batch_size - 1 ? t : batch_size - 1);
  if (cu_at(guess) <= t && t < cu_at(guess + 1)) return guess;
  int32_t lo = 0, hi = batch_size;  // the last b with cu[b] <= t lies in [lo, hi)
  while (hi - lo > 1) {
    int32_t mid = (lo + hi) / 2;
    if (cu_at(mid) <= t)
      lo = mid;
    else
      hi = mid;
  }
  return (cu_at(lo) <= t && t < cu_at(lo + 1)) ? lo : -1;
}

// What a step says of sequence b: its first packed token, its new tokens, and the keys it has
// once they are written (kv_len = past + q_len).
struct sequence_span {
  int64_t first_token, q_len, past, kv_len;
};
template <bool kBeforeWait = false>
__device__ __forceinline__ sequence_span load_sequence_span(const int32_t *cu_seqlens,
                                                            const int32_t *past_seqlens,
                                                            int32_t b) {
  sequence_span s;
  s.first_token = load_step_input<kBeforeWait>(cu_seqlens + b);
  s.q_len = load_step_input<kBeforeWait>(cu_seqlens + b + 1) - s.first_token;
  s.past = load_step_input<kBeforeWait>(past_seqlens + b);
  s.kv_len = s.past + s.q_len;
  return s;
}

// The position of packed token t, whose sequence's first packed token is first_token:
// query_positions[t] when given, else the sequence's past length (past_of(), called only then, so
// a kernel may pass a length it loaded early) + t's index among the sequence's new tokens.
template <bool kBeforeWait = false, typename PastOf>
__device__ __forceinline__ int64_t token_position(const int32_t *query_positions,
                                                  int64_t first_token, int64_t t, PastOf past_of) {
  return query_positions ? (int64_t)load_step_input<kBeforeWait>(query_positions + t)
                         : (int64_t)past_of() + (t - first_token);
}
// The same for a token of sequence span `s`.
template <bool kBeforeWait = false>
__device__ __forceinline__ int64_t token_position(const int32_t *query_positions,
                                                  const sequence_span &s, int64_t t) {
  return token_position<kBeforeWait>(query_positions, s.first_token, t, [&] { return s.past; });
}

// The keys [lo, hi) a query at position `pos` admits in a sequence of kv_len keys: causal
// (bottom-right) keys [0, pos], with a window W only [pos - W + 1, pos]; is_causal = 0 keys
// [0, kv_len). Empty (lo == hi) when nothing is admitted. Unmapped blocks are masked separately.
struct key_span {
  int64_t lo, hi;
};
__device__ __forceinline__ key_span admitted_keys(int64_t pos, int64_t kv_len, int32_t is_causal,
                                                  int32_t window) {
  key_span r = {0, kv_len};
  if (is_causal) {
    r.hi = min(kv_len, pos + 1);
    r.lo = window > 0 ? max((int64_t)0, pos - window + 1) : 0;
  }
  if (r.hi < r.lo) r.hi = r.lo;
  return r;
}

// Softcap of a scaled score s (natural units): c * tanh(s / c) when softcap c > 0, else s.
__device__ __forceinline__ float apply_softcap(float s, float softcap) {
  return softcap > 0.0f ? softcap * tanhf(s / softcap) : s;
}

// A raw score q·k (the cache's k_scale already folded into qk_scale or Q) in log2 units: scaled,
// then softcapped (apply_softcap) when softcap > 0. Without softcap the two scales fold into one
// multiply.
__device__ __forceinline__ float score_log2(float raw, float qk_scale, float softcap) {
  return softcap > 0.0f ? apply_softcap(raw * qk_scale, softcap) * kLog2e
                        : raw * (qk_scale * kLog2e);
}

// Raw scores of m16 C fragments (score[..][..][i] belongs to the thread's row i / 2: group_id or
// group_id + 8) in log2 units, in place, each scaled by its row's scale and softcapped
// (score_log2). The softcap test is hoisted out of the loops (kSoftcap), so the common case is one
// multiply per score.
template <bool kSoftcap, int A, int B>
__device__ __forceinline__ void transform_score_rows_as(float (&score)[A][B][4],
                                                        const float (&row_scale)[2],
                                                        float softcap) {
#pragma unroll
  for (int a = 0; a < A; a++)
#pragma unroll
    for (int b = 0; b < B; b++)
#pragma unroll
      for (int i = 0; i < 4; i++)
        score[a][b][i] = score_log2(score[a][b][i], row_scale[i / 2], kSoftcap ? softcap : 0.0f);
}
template <int A, int B>
__device__ __forceinline__ void transform_score_rows(float (&score)[A][B][4],
                                                     const float (&row_scale)[2], float softcap) {
  if (softcap > 0.0f)
    transform_score_rows_as<true>(score, row_scale, softcap);
  else
    transform_score_rows_as<false>(score, row_scale, softcap);
}

// The same for raw scores that carry an offset per row (row_offset, raw units) to take off first:
// DECODE's int8 scores, whose codes reach the tensor cores biased (numeric.cuh, kInt8CodeBias).
// Without softcap the offset goes into the multiply (one fused multiply-add per score).
template <int A, int B>
__device__ __forceinline__ void transform_offset_score_rows(float (&score)[A][B][4],
                                                            const float (&row_scale)[2],
                                                            const float (&row_offset)[2],
                                                            float softcap) {
  if (softcap > 0.0f) {
#pragma unroll
    for (int a = 0; a < A; a++)
#pragma unroll
      for (int b = 0; b < B; b++)
#pragma unroll
        for (int i = 0; i < 4; i++)
          score[a][b][i] =
              score_log2(score[a][b][i] - row_offset[i / 2], row_scale[i / 2], softcap);
  } else {
    float factor[2], shift[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
      factor[h] = row_scale[h] * kLog2e;
      shift[h] = -row_offset[h] * factor[h];
    }
#pragma unroll
    for (int a = 0; a < A; a++)
#pragma unroll
      for (int b = 0; b < B; b++)
#pragma unroll
        for (int i = 0; i < 4; i++)
          score[a][b][i] = fmaf(score[a][b][i], factor[i / 2], shift[i / 2]);
  }
}

// The sink logit of a query head (natural units), -inf when head_sink is absent.
template <typename T>
__device__ __forceinline__ float sink_logit(const void *head_sink, int head) {
  if (!head_sink) return -INFINITY;
  return to_float(reinterpret_cast<const T *>(head_sink)[head]);
}
// The same in log2 units.
template <typename T>
__device__ __forceinline__ float sink_log2(const void *head_sink, int head) {
  if (!head_sink) return -INFINITY;
  return sink_logit<T>(head_sink, head) * kLog2e;
}

// The running max a row's probabilities are taken against (its "reference") moves only when new
// scores exceed it by more than this many log2 units, as in FlashAttention-4: a probability is then
// at most 2^8 instead of 1, which changes nothing but its exponent (P and V in T, the sums in fp32;
// the output and the sum share the reference, and finalize_factor and the merges take any), while
// most tiles after a row's first leave the reference alone, so that their rescale of the output
// (a multiply per accumulator) is exactly 1 and skipped (rescale_accumulator_rows).
constexpr float kSoftmaxReferenceSlack = 8.0f;

// One online-softmax step of a row whose reference was row_max: the factor that rescales the
// row's old sum and output, and the base the new scores' exponents subtract (0 while everything
// is -inf, so exp2(-inf - base) = 0, never NaN). With the lazy reference (below), from a reference
// of -inf the factor is 1: the sum and the output hold only zeros (or NaN) then, which 1 leaves as
// 0 did, and a warp whose rows are padding or at their first tile can skip the rescale
// (rescale_accumulator_rows).
struct softmax_step {
  float rescale, base;
};
// The step to a given reference (at least row_max; fmaxf keeps a NaN out): where another
// warpgroup chose the reference of the same rows (online_softmax_step there).
__device__ __forceinline__ softmax_step softmax_step_to_reference(float &row_max,
                                                                  float reference) {
  const float new_max = fmaxf(row_max, reference);
  softmax_step step;
  step.base = new_max == -INFINITY ? 0.0f : new_max;
  // (selecting the exponent, not the result: selecting the result cost the mma.sync LATENT
  // kernel 20 bytes more of spill at 255 registers)
  step.rescale = exp2f((row_max == -INFINITY ? step.base : row_max) - step.base);
  row_max = new_max;
  return step;
}
// The step given the max of the new scores. kLazyReference: the reference moves to it only past
// the slack (from -inf, to any finite max; a NaN max moves nothing, as fmaxf ignored it); every
// thread that holds a row applies it to the same (row_max, new_scores_max), so all agree on the
// reference. Taken where it was measured to pay (twenty-third measurement): PREFILL and the 64-row
// LATENT Hopper kernels, whose tile loops are compute-bound. Otherwise the exact rule (the
// reference is always the running max; a step from -inf rescales by 0): DECODE (flat either way)
// and LATENT's narrow and mma.sync kernels.
template <bool kLazyReference>
__device__ __forceinline__ softmax_step online_softmax_step(float &row_max, float new_scores_max) {
  if constexpr (kLazyReference) {
    return softmax_step_to_reference(
        row_max, new_scores_max > row_max + kSoftmaxReferenceSlack ? new_scores_max : row_max);
  } else {
    const float new_max = fmaxf(row_max, new_scores_max);
    softmax_step step;
    step.base = new_max == -INFINITY ? 0.0f : new_max;
    step.rescale = exp2f(row_max - step.base);
    row_max = new_max;
    return step;
  }
}

// exp2 of a softmax exponent (x <= kSoftmaxReferenceSlack after the reference is subtracted): the
// hardware approximation (MUFU.EX2, about 2 ulp), results below the normal range flushed to zero.
__device__ __forceinline__ float softmax_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// A score's unnormalized probability: the score times score_scale (log2 units, masked scores
// -inf) less the row's base (its reference), through softmax_exp2.
__device__ __forceinline__ float softmax_weight(float score, float score_scale, float base) {
  return softmax_exp2(fmaf(score, score_scale, -base));
}

// Whether a partial state (running max, sum l) saw any admitted key. A NaN sum counts, so a NaN
// score or value reaches the output (doc/semantics.md) instead of being dropped with the empties.
__device__ __forceinline__ bool partial_has_keys(float l) { return l != 0.0f; }

// Weight of a partial state with running max m (log2 units) inside a merge whose max is m_all.
__device__ __forceinline__ float softmax_rescale(float m, float m_all) { return exp2f(m - m_all); }

// The output from the merged state of a row (running max m, sum l, unnormalized channels o; log2
// units), in two parts so that a kernel finalizing many channels of a row divides once per row:
// finalize_factor is the row's keep / denominator, where the sink (log2 units, -inf when absent)
// joins the denominator only; finalize_channel scales one channel by it and by v_scale_c (which
// dequantizes V). A row with no admitted key (l == 0) is zero, sink or not, whatever o holds.
// Every kernel that finalizes a row uses these, so all round identically.
__device__ __forceinline__ float finalize_factor(float m, float l, float sink) {
  if (l == 0.0f) return 0.0f;
  const float m_all = fmaxf(m, sink);
  const float keep = exp2f(m - m_all);
  return keep / (l * keep + exp2f(sink - m_all));
}
__device__ __forceinline__ float finalize_channel(float o, float l, float factor,
                                                  float v_scale_c) {
  return l == 0.0f ? 0.0f : o * factor * v_scale_c;
}
__device__ __forceinline__ float finalize_output(float m, float l, float o, float sink,
                                                 float v_scale_c) {
  return finalize_channel(o, l, finalize_factor(m, l, sink), v_scale_c);
}

}  // namespace detail
}  // namespace pa
