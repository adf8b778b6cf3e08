// UNFUSED's kernels (the launcher, unfused.cu, says what each step computes): the gathers of Q and
// of each sequence's keys, the masked softmax, O = P V and the scatter to output. Included by the
// launcher's translation unit only. A kernel header: sees only cuda/common/.
#pragma once

#include <math.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "../common/attention_rules.cuh"
#include "../common/numeric.cuh"
#include "../common/paged_kv.cuh"

namespace pa {
namespace detail {

constexpr int kRowThreads = 256;   // softmax: one block per score row
constexpr int kCopyThreads = 128;  // gathers and scatter: one block per row

__host__ __device__ inline int64_t min64(int64_t x, int64_t y) { return x < y ? x : y; }
__host__ __device__ inline int64_t max64(int64_t x, int64_t y) { return x > y ? x : y; }

// Everything the kernels read: shapes, device inputs, workspace regions, the chunk. Passed by
// value. The launcher fills every field but the pointers and the chunk at plan time, the pointers
// at run time, and the chunk (seq0, q0) before each launch. The workspace holds one chunk: its
// sequences seq0 + s, s < chunk_seqs (those >= batch are empty), and their query rows q0 + i,
// i < chunk_q (rows >= max_q are not computed: their tokens get zeros, clear_ungathered_kernel).
struct unfused_params {
  paged_kv_layout kv;  // the cache geometry (common/paged_kv.cuh)
  int32_t batch, heads, kv_heads, group, head_size, v_head_size;
  int64_t tokens, max_q, kv_rows;
  int32_t chunk_seqs;
  int64_t chunk_q, q_rows;  // q_rows = group * chunk_q: rows per (sequence, KV head) of a chunk
  int32_t seq0;             // the chunk's first sequence
  int64_t q0;               // the chunk's first query row (index among a sequence's new tokens)
  int64_t v_row_stride;  // floats between V_g rows: head_size in LATENT (V lies in K_g)
  int32_t window_clamp, window, is_causal;
  float scale, softcap;
  pa_quant_type k_quant, v_quant;
  int32_t qk_output;
  pa_dtype qk_dtype;
  int64_t qk_capacity;
  int32_t bias_batch, bias_heads;
  int64_t bias_q_capacity, bias_kv_capacity;

  const int32_t *cu_seqlens, *past_seqlens, *block_table, *query_positions;
  const void *q_attn;
  int64_t q_row_stride;
  const void *key_cache, *value_cache;
  const float *k_scale, *v_scale;
  const void *attention_bias, *head_sink;
  void *output, *output_qk;

  float *q_gathered, *k_gathered, *v_gathered;  // v_gathered == k_gathered in LATENT
  float *scores;                                // P is written over each row in place
  float *out_gathered;
  uint8_t *key_mapped;                          // [s][kv_rows]: 1 = a mapped key inside the range
};

// Sequence seq0 + s of the chunk; an empty one beyond the batch (the last chunk's padding).
__device__ sequence_span chunk_sequence(const unfused_params &a, int s) {
  const int64_t b = (int64_t)a.seq0 + s;
  if (b >= a.batch) return sequence_span{0, 0, 0, 0};
  return load_sequence_span(a.cu_seqlens, a.past_seqlens, (int32_t)b);
}

// The token of query row j of a sequence, or -1 when the row is padding (j >= q_len), beyond the
// bound max_q, or outside the token rows.
__device__ int64_t row_token(const unfused_params &a, const sequence_span &span, int64_t j) {
  if (j >= span.q_len || j >= a.max_q) return -1;
  const int64_t t = span.first_token + j;
  return t >= 0 && t < a.tokens ? t : -1;
}

// The keys of a sequence that were gathered: positions [start, start + count). With window_clamp
// (a causal window, positions implied by past_seqlens) the gather starts at the first key the
// sequence's first token admits (attention_rules.cuh: admitted_keys); later tokens admit no key
// before it.
struct gathered_key_rows {
  int64_t start, count;
};

__device__ gathered_key_rows gathered_keys(const unfused_params &a, const sequence_span &span) {
  gathered_key_rows r;
  r.start = a.window_clamp ? admitted_keys(span.past, span.kv_len, a.is_causal, a.window).lo : 0;
  r.count = min64(max64(span.kv_len - r.start, 0), a.kv_rows);
  return r;
}

// Copies (and dequantizes) key position `key` of every KV head into the gathered buffer, or zeros
// when block_id is unmapped (-1).
template <typename C>
__device__ void gather_cache_row(float *dst, int64_t dst_head_stride, const C *cache,
                                 const paged_kv_layout &kv, int32_t block_id, int64_t key,
                                 const float *scale, pa_quant_type quant) {
  const int chunks = kv.head_size / 8;
  for (int i = threadIdx.x; i < kv.kv_num_heads * chunks; i += blockDim.x) {
    const int kv_head = i / chunks, channel = i % chunks * 8;
    float x[8] = {};
    if (block_id >= 0)
      load_dequant8(kv_row(cache, kv, block_id, key, kv_head), channel, scale, quant, kv_head,
                    kv.head_size, x);
    float *out = dst + kv_head * dst_head_stride + channel;
#pragma unroll
    for (int e = 0; e < 8; e++) out[e] = x[e];
  }
}

// One block per (chunk sequence s, gathered row c): key position start + c of sequence seq0 + s.
template <typename C>
__global__ void gather_keys_kernel(unfused_params a) {
  for (int64_t row = blockIdx.x; row < (int64_t)a.chunk_seqs * a.kv_rows; row += gridDim.x) {
    const int s = (int)(row / a.kv_rows);
    const int64_t c = row % a.kv_rows;
    const gathered_key_rows keys = gathered_keys(a, chunk_sequence(a, s));
    const int64_t key = keys.start + c;
    const int64_t b = a.seq0 + s;  // < batch whenever keys.count > 0
    const int32_t block_id =
        c < keys.count ? kv_block_id(a.kv, a.block_table + b * a.kv.max_blocks_per_seq, key) : -1;
    if (threadIdx.x == 0) a.key_mapped[row] = block_id >= 0;
    const int64_t head_stride = a.kv_rows * a.head_size;
    const int64_t first = (int64_t)s * a.kv_heads * head_stride + c * a.head_size;
    gather_cache_row(a.k_gathered + first, head_stride, static_cast<const C *>(a.key_cache), a.kv,
                     block_id, key, a.k_scale, a.k_quant);
    if (a.value_cache)
      gather_cache_row(a.v_gathered + first, head_stride, static_cast<const C *>(a.value_cache),
                       a.kv, block_id, key, a.v_scale, a.v_quant);
  }
}

// Row of Q_g / O_g that holds query head h of query row q0 + i of chunk sequence s.
__device__ int64_t gathered_query_row(const unfused_params &a, int s, int h, int64_t i) {
  return ((int64_t)s * a.kv_heads + h / a.group) * a.q_rows + (int64_t)(h % a.group) * a.chunk_q +
         i;
}

// One block per (chunk sequence s, chunk query row i); rows without a token are not gathered.
template <typename T>
__global__ void gather_queries_kernel(unfused_params a) {
  for (int64_t row = blockIdx.x; row < (int64_t)a.chunk_seqs * a.chunk_q; row += gridDim.x) {
    const int s = (int)(row / a.chunk_q);
    const int64_t i = row % a.chunk_q;
    const int64_t t = row_token(a, chunk_sequence(a, s), a.q0 + i);
    if (t < 0) continue;
    const T *src = static_cast<const T *>(a.q_attn) + t * a.q_row_stride;
    for (int e = threadIdx.x; e < a.heads * a.head_size; e += blockDim.x) {
      const int h = e / a.head_size;
      a.q_gathered[gathered_query_row(a, s, h, i) * a.head_size + e % a.head_size] =
          to_float(src[e]);
    }
  }
}

// The value output_qk holds at positions that are not admitted keys.
__device__ float masked_qk_value(int qk_output) { return qk_output == 1 ? -INFINITY : 0.0f; }

__device__ void store_qk(const unfused_params &a, int64_t index, float x) {
  switch (a.qk_dtype) {
  case PA_DTYPE_FLOAT16: static_cast<__half *>(a.output_qk)[index] = from_float<__half>(x); break;
  case PA_DTYPE_BFLOAT16:
    static_cast<__nv_bfloat16 *>(a.output_qk)[index] = from_float<__nv_bfloat16>(x);
    break;
  default: static_cast<float *>(a.output_qk)[index] = x; break;
  }
}

template <typename Op>
__device__ float block_reduce(float x, Op op, float *shared) {
  for (int offset = 16; offset > 0; offset /= 2) x = op(x, __shfl_xor_sync(0xffffffffu, x, offset));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // shared may still be read by a previous reduction
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  x = shared[0];
  for (int w = 1; w < warps; w++) x = op(x, shared[w]);
  return x;
}

// NaN-propagating (fmaxf drops a NaN): a NaN logit makes the row NaN (doc/semantics.md).
struct max_op {
  __device__ float operator()(float x, float y) const {
    return x != x || y != y ? x + y : fmaxf(x, y);
  }
};
struct sum_op {
  __device__ float operator()(float x, float y) const { return x + y; }
};

// The final logit of key position k for query head h of token j of sequence b, or -inf when the
// key is not admitted: unmapped, outside the token's admitted keys (attention_rules.cuh), or
// outside the bias (doc/semantics.md: scale, softcap, bias, masks).
template <typename T>
__device__ float key_logit(const unfused_params &a, float dot, bool mapped,
                           const key_span &admitted, int b, int h, int64_t j, int64_t k) {
  if (!mapped || k < admitted.lo || k >= admitted.hi) return -INFINITY;
  float s = apply_softcap(a.scale * dot, a.softcap);
  if (a.attention_bias) {
    if (j >= a.bias_q_capacity || k >= a.bias_kv_capacity) return -INFINITY;
    const int64_t bias_b = a.bias_batch == 1 ? 0 : b, bias_h = a.bias_heads == 1 ? 0 : h;
    const int64_t index =
        ((bias_b * a.bias_heads + bias_h) * a.bias_q_capacity + j) * a.bias_kv_capacity + k;
    s += to_float(static_cast<const T *>(a.attention_bias)[index]);
  }
  return s;
}

// One block per row of S (chunk sequence s, KV head, member of the group, query row q0 + i).
// Padding rows get P = 0. Pass 1 turns dot products into logits (masked = -inf), pass 2 sums, pass
// 3 writes P over them; each thread reads and writes only its own elements, so the passes need no
// barrier of their own. A row's columns, their threads and the reduction tree depend on the
// sequence only (columns are keys from its first gathered one), never on the bounds or the chunk.
template <typename T>
__global__ void __launch_bounds__(kRowThreads) masked_softmax_kernel(unfused_params a) {
  __shared__ float reduce_scratch[kRowThreads / 32];
  const int64_t rows_per_sequence = (int64_t)a.kv_heads * a.q_rows;
  for (int64_t row = blockIdx.x; row < (int64_t)a.chunk_seqs * rows_per_sequence;
       row += gridDim.x) {
    const int s = (int)(row / rows_per_sequence);
    const int b = a.seq0 + s;
    const int64_t r = row % rows_per_sequence % a.q_rows;
    const int h = (int)(row % rows_per_sequence / a.q_rows) * a.group + (int)(r / a.chunk_q);
    const int64_t j = a.q0 + r % a.chunk_q;
    float *scores = a.scores + row * a.kv_rows;
    const sequence_span span = chunk_sequence(a, s);
    const int64_t t = row_token(a, span, j);
    if (t < 0) {
      for (int64_t c = threadIdx.x; c < a.kv_rows; c += blockDim.x) scores[c] = 0.0f;
      continue;
    }
    const key_span admitted = admitted_keys(token_position(a.query_positions, span, t),
                                            span.kv_len, a.is_causal, a.window);
    const gathered_key_rows keys = gathered_keys(a, span);
    const int64_t qk_row = ((int64_t)h * a.tokens + t) * a.qk_capacity;

    float row_max = -INFINITY;
    for (int64_t c = threadIdx.x; c < a.kv_rows; c += blockDim.x) {
      const int64_t k = keys.start + c;
      const float x = key_logit<T>(a, scores[c], a.key_mapped[(int64_t)s * a.kv_rows + c] != 0,
                                   admitted, b, h, j, k);
      scores[c] = x;
      row_max = max_op()(row_max, x);
      if (a.qk_output == 1 && k < a.qk_capacity) store_qk(a, qk_row + k, x);
    }
    if (a.qk_output)  // positions outside the gathered range
      for (int64_t k = threadIdx.x; k < a.qk_capacity; k += blockDim.x)
        if (k < keys.start || k >= keys.start + a.kv_rows)
          store_qk(a, qk_row + k, masked_qk_value(a.qk_output));
    row_max = block_reduce(row_max, max_op(), reduce_scratch);
    const bool any_admitted = row_max != -INFINITY;  // NaN: admitted, and the row is NaN
    const float sink = sink_logit<T>(a.head_sink, h);
    const float m = max_op()(row_max, sink);

    float den = 0.0f;
    for (int64_t c = threadIdx.x; c < a.kv_rows; c += blockDim.x)
      if (scores[c] != -INFINITY) den += expf(scores[c] - m);
    den = block_reduce(den, sum_op(), reduce_scratch);
    if (a.head_sink) den += expf(sink - m);

    for (int64_t c = threadIdx.x; c < a.kv_rows; c += blockDim.x) {
      const float x = scores[c];
      const float prob = any_admitted && x != -INFINITY ? expf(x - m) / den : 0.0f;
      scores[c] = prob;
      if (a.qk_output == 2 && keys.start + c < a.qk_capacity)
        store_qk(a, qk_row + keys.start + c, prob);
    }
  }
}

// O = P V_g for one (chunk sequence, KV head) per tile of kWeightedTile rows x kWeightedTile
// channels. Each thread sums its outputs over the sequence's own gathered keys in key order, one
// fmaf per key, so an output depends on the keys' values and P only, never on the bounds (kv_rows,
// q_rows) or the chunk.
constexpr int kWeightedTile = 64;
constexpr int kWeightedKeys = 16;                   // keys staged in shared memory per step
constexpr int kWeightedSide = 16;                   // 16 x 16 threads,
constexpr int kWeightedPerThread = kWeightedTile / kWeightedSide;  // each owning 4 x 4 outputs
constexpr int kWeightedThreads = kWeightedSide * kWeightedSide;

__global__ void __launch_bounds__(kWeightedThreads) weighted_values_kernel(unfused_params a) {
  __shared__ float p_tile[kWeightedKeys][kWeightedTile + 1];  // [key][row], +1 against conflicts
  __shared__ float v_tile[kWeightedKeys][kWeightedTile];      // [key][channel]
  const int64_t row_tiles = (a.q_rows + kWeightedTile - 1) / kWeightedTile;
  const int64_t channel_tiles = (a.v_head_size + kWeightedTile - 1) / kWeightedTile;
  const int64_t tiles = (int64_t)a.chunk_seqs * a.kv_heads * row_tiles * channel_tiles;
  const int tx = threadIdx.x % kWeightedSide, ty = threadIdx.x / kWeightedSide;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t batch = tile / (row_tiles * channel_tiles);  // s * kv_heads + kv_head
    const int64_t within = tile % (row_tiles * channel_tiles);
    const int64_t row0 = within / channel_tiles * kWeightedTile;
    const int64_t channel0 = within % channel_tiles * kWeightedTile;
    const int64_t keys = gathered_keys(a, chunk_sequence(a, (int)(batch / a.kv_heads))).count;
    const float *probs = a.scores + batch * a.q_rows * a.kv_rows;
    const float *values = a.v_gathered + batch * a.kv_rows * a.v_row_stride;
    float acc[kWeightedPerThread][kWeightedPerThread] = {};
    for (int64_t key0 = 0; key0 < keys; key0 += kWeightedKeys) {
      for (int i = threadIdx.x; i < kWeightedTile * kWeightedKeys; i += blockDim.x) {
        const int r = i / kWeightedKeys, k = i % kWeightedKeys;
        const bool inside = row0 + r < a.q_rows && key0 + k < keys;
        p_tile[k][r] = inside ? probs[(row0 + r) * a.kv_rows + key0 + k] : 0.0f;
      }
      for (int i = threadIdx.x; i < kWeightedKeys * kWeightedTile; i += blockDim.x) {
        const int k = i / kWeightedTile, d = i % kWeightedTile;
        const bool inside = channel0 + d < a.v_head_size && key0 + k < keys;
        v_tile[k][d] = inside ? values[(key0 + k) * a.v_row_stride + channel0 + d] : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int k = 0; k < kWeightedKeys; k++)
#pragma unroll
        for (int i = 0; i < kWeightedPerThread; i++)
#pragma unroll
          for (int j = 0; j < kWeightedPerThread; j++)
            acc[i][j] = fmaf(p_tile[k][ty + i * kWeightedSide], v_tile[k][tx + j * kWeightedSide],
                             acc[i][j]);
      __syncthreads();
    }
    for (int i = 0; i < kWeightedPerThread; i++)
      for (int j = 0; j < kWeightedPerThread; j++) {
        const int64_t row = row0 + ty + i * kWeightedSide;
        const int64_t channel = channel0 + tx + j * kWeightedSide;
        if (row < a.q_rows && channel < a.v_head_size)
          a.out_gathered[(batch * a.q_rows + row) * a.v_head_size + channel] = acc[i][j];
      }
  }
}

// One block per (chunk sequence s, chunk query row i): its token's output row from O_g.
template <typename T>
__global__ void scatter_output_kernel(unfused_params a) {
  const int64_t row_elems = (int64_t)a.heads * a.v_head_size;
  for (int64_t row = blockIdx.x; row < (int64_t)a.chunk_seqs * a.chunk_q; row += gridDim.x) {
    const int s = (int)(row / a.chunk_q);
    const int64_t i = row % a.chunk_q;
    const int64_t t = row_token(a, chunk_sequence(a, s), a.q0 + i);
    if (t < 0) continue;
    T *out = static_cast<T *>(a.output) + t * row_elems;
    for (int64_t e = threadIdx.x; e < row_elems; e += blockDim.x) {
      const int h = (int)(e / a.v_head_size);
      out[e] = from_float<T>(
          a.out_gathered[gathered_query_row(a, s, h, i) * a.v_head_size + e % a.v_head_size]);
    }
  }
}

// One block per token, once per step: zeros (and masked output_qk rows) for a token that no
// sequence owns or that lies beyond max_q in its sequence; the chunks' scatters write every other.
template <typename T>
__global__ void clear_ungathered_kernel(unfused_params a) {
  const int64_t row_elems = (int64_t)a.heads * a.v_head_size;
  for (int64_t t = blockIdx.x; t < a.tokens; t += gridDim.x) {
    const int b = token_sequence(a.cu_seqlens, a.batch, t);
    if (b >= 0 && t - a.cu_seqlens[b] < a.max_q) continue;
    T *out = static_cast<T *>(a.output) + t * row_elems;
    for (int64_t e = threadIdx.x; e < row_elems; e += blockDim.x) out[e] = from_float<T>(0.0f);
    if (a.qk_output)
      for (int h = 0; h < a.heads; h++)
        for (int64_t k = threadIdx.x; k < a.qk_capacity; k += blockDim.x)
          store_qk(a, ((int64_t)h * a.tokens + t) * a.qk_capacity + k,
                   masked_qk_value(a.qk_output));
  }
}

}  // namespace detail
}  // namespace pa
