// The UNFUSED backend (contract §5): the correctness fallback that serves every request the schema
// allows, and the only home of output_qk. Per step, on the caller's stream:
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
// launches are replay-invariant; per-step lengths are read on the device.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include <new>

#include "internal.h"
#include "kv_access.cuh"
#include "numeric.cuh"

namespace pa {
namespace detail {
namespace {

// cuBLASLt's workspace inside ours: a fixed budget, so that a plan for described caps and one for the
// device agree on the size.
constexpr size_t kCublasWorkspaceBytes = (size_t)4 << 20;
// Above this the request is not served: no device holds it, and size arithmetic stays far from
// overflow.
constexpr uint64_t kMaxWorkspaceBytes = (uint64_t)1 << 40;
constexpr int kRowThreads = 256;   // softmax: one block per score row
constexpr int kCopyThreads = 128;  // gathers and scatter: one block per row
constexpr int64_t kMaxGrid = (int64_t)1 << 20;

// ---- extents and workspace, from static shapes and bounds only -----------------------------------

struct unfused_extents {
  int64_t max_q;          // query rows per (sequence, query head)
  int64_t q_rows;         // group_size * max_q: rows per (sequence, KV head)
  int64_t kv_rows;        // gathered key rows per sequence, a multiple of 8 (cuBLASLt alignment)
  int32_t window_clamp;   // the gather starts at the window's first key instead of 0
  int64_t batches;        // batch_size * kv_num_heads: the GEMMs' batch count
};

struct unfused_layout {
  size_t q_offset, k_offset, v_offset, scores_offset, out_offset, mapped_offset, cublas_offset;
  size_t total;
};

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
__host__ __device__ inline int64_t min64(int64_t x, int64_t y) { return x < y ? x : y; }
__host__ __device__ inline int64_t max64(int64_t x, int64_t y) { return x > y ? x : y; }

// With a causal window and positions implied by past_seqlens, a sequence's admitted keys all lie in
// [kv_len - q_len - W + 1, kv_len): at most max_q + W - 1 rows. With query_positions the positions
// are device data, so the whole [0, kv_len) is gathered.
static unfused_extents extents_for_bounds(const pa__problem *p, int64_t max_query_len,
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
static unfused_extents extents_for(const pa__problem *p) {
  return extents_for_bounds(p, p->max_query_len, p->max_kv_len);
}

// The extents the scores GEMM's algorithm is chosen for (see setup_gemms): those with
// attention_metadata absent, the same for every bound. Each is capped at kHeuristicRows rows, a
// bound-free size whose best kernel also suits larger ones, so that the heuristic is never asked
// about matrices far beyond any it was tuned for.
constexpr int64_t kHeuristicRows = 32768;
static unfused_extents heuristic_extents_for(const pa__problem *p) {
  const int64_t max_kv = (int64_t)p->max_blocks_per_seq * p->block_size;
  return extents_for_bounds(p, min64(p->token_count, max64(kHeuristicRows / p->group_size, 1)),
                            min64(max_kv, kHeuristicRows));
}

// Appends a region of count * elem_size bytes at the next aligned offset; false on overflow.
static bool add_region(uint64_t *cursor, size_t *offset, uint64_t count, uint64_t elem_size) {
  uint64_t start, bytes;
  if (!pa__add_u64(*cursor, PA_WORKSPACE_ALIGNMENT - 1, &start) ||
      !pa__mul_u64(count, elem_size, &bytes))
    return false;
  start = start / PA_WORKSPACE_ALIGNMENT * PA_WORKSPACE_ALIGNMENT;
  *offset = (size_t)start;
  return pa__add_u64(start, bytes, cursor);
}

// The product of the factors, or false on overflow.
static bool checked_product(uint64_t *out, uint64_t a, uint64_t b, uint64_t c) {
  return pa__mul_u64(a, b, out) && pa__mul_u64(*out, c, out);
}

// The one function that both sizes and carves the backend's scratch. *total_bytes gets the size
// (UINT64_MAX when it overflows 64 bits); the return says whether it is within kMaxWorkspaceBytes.
static bool layout_for(const pa__problem *p, const unfused_extents &e, unfused_layout *w,
                       uint64_t *total_bytes) {
  const uint64_t batches = (uint64_t)e.batches;
  const uint64_t q_rows = (uint64_t)e.q_rows, kv_rows = (uint64_t)e.kv_rows;
  const uint64_t v_head_size = p->input_mode == PA__MODE_LATENT ? 0 : (uint64_t)p->v_head_size;
  uint64_t q_elems, k_elems, v_elems, score_elems, out_elems, cursor = 0;
  bool ok = checked_product(&q_elems, batches, q_rows, (uint64_t)p->head_size) &&
            checked_product(&k_elems, batches, kv_rows, (uint64_t)p->head_size) &&
            checked_product(&v_elems, batches, kv_rows, v_head_size) &&
            checked_product(&score_elems, batches, q_rows, kv_rows) &&
            checked_product(&out_elems, batches, q_rows, (uint64_t)p->v_head_size);
  ok = ok && add_region(&cursor, &w->q_offset, q_elems, sizeof(float));
  ok = ok && add_region(&cursor, &w->k_offset, k_elems, sizeof(float));
  ok = ok && add_region(&cursor, &w->v_offset, v_elems, sizeof(float));  // LATENT: V lies in K_g
  ok = ok && add_region(&cursor, &w->scores_offset, score_elems, sizeof(float));
  ok = ok && add_region(&cursor, &w->out_offset, out_elems, sizeof(float));
  ok = ok && add_region(&cursor, &w->mapped_offset, (uint64_t)p->batch_size * kv_rows, 1);
  ok = ok && add_region(&cursor, &w->cublas_offset, kCublasWorkspaceBytes, 1);
  *total_bytes = ok ? cursor : UINT64_MAX;
  ok = ok && cursor <= kMaxWorkspaceBytes;
  w->total = ok ? (size_t)cursor : 0;
  return ok;
}

// ---- device side ---------------------------------------------------------------------------------

// Everything the kernels read: shapes, device inputs, workspace regions. Passed by value.
struct unfused_args {
  paged_kv_layout kv;  // the cache geometry (kv_access.cuh)
  int32_t batch, heads, kv_heads, group, head_size, v_head_size;
  int64_t tokens, max_q, q_rows, kv_rows;
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
  uint8_t *key_mapped;                          // [b][kv_rows]: 1 = a mapped key inside the range
};

// The keys of sequence b that were gathered: positions [start, start + count).
struct key_range {
  int64_t start, count;
};

__device__ key_range gathered_keys(const unfused_args &a, int b) {
  const int64_t q_len = (int64_t)a.cu_seqlens[b + 1] - a.cu_seqlens[b];
  const int64_t kv_len = (int64_t)a.past_seqlens[b] + q_len;
  key_range r;
  r.start = a.window_clamp ? max64(0, kv_len - q_len - a.window + 1) : 0;
  r.count = min64(max64(kv_len - r.start, 0), a.kv_rows);
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

// One block per (sequence b, gathered row c): key position start + c.
template <typename C>
__global__ void gather_keys_kernel(unfused_args a) {
  for (int64_t row = blockIdx.x; row < (int64_t)a.batch * a.kv_rows; row += gridDim.x) {
    const int b = (int)(row / a.kv_rows);
    const int64_t c = row % a.kv_rows;
    const key_range keys = gathered_keys(a, b);
    const int64_t key = keys.start + c;
    const int32_t block_id =
        c < keys.count
            ? kv_block_id(a.kv, a.block_table + (int64_t)b * a.kv.max_blocks_per_seq, key)
            : -1;
    if (threadIdx.x == 0) a.key_mapped[row] = block_id >= 0;
    const int64_t head_stride = a.kv_rows * a.head_size;
    const int64_t first = (int64_t)b * a.kv_heads * head_stride + c * a.head_size;
    gather_cache_row(a.k_gathered + first, head_stride, static_cast<const C *>(a.key_cache), a.kv,
                     block_id, key, a.k_scale, a.k_quant);
    if (a.value_cache)
      gather_cache_row(a.v_gathered + first, head_stride, static_cast<const C *>(a.value_cache),
                       a.kv, block_id, key, a.v_scale, a.v_quant);
  }
}

// Row of Q_g / O_g that holds query head h of token j of sequence b.
__device__ int64_t gathered_query_row(const unfused_args &a, int b, int h, int64_t j) {
  return ((int64_t)b * a.kv_heads + h / a.group) * a.q_rows + (int64_t)(h % a.group) * a.max_q + j;
}

// One block per token; tokens of no sequence, or beyond max_q in theirs, are not gathered.
template <typename T>
__global__ void gather_queries_kernel(unfused_args a) {
  for (int64_t t = blockIdx.x; t < a.tokens; t += gridDim.x) {
    const int b = token_sequence(a.cu_seqlens, a.batch, t);
    if (b < 0) continue;
    const int64_t j = t - a.cu_seqlens[b];
    if (j >= a.max_q) continue;
    const T *src = static_cast<const T *>(a.q_attn) + t * a.q_row_stride;
    for (int i = threadIdx.x; i < a.heads * a.head_size; i += blockDim.x) {
      const int h = i / a.head_size;
      a.q_gathered[gathered_query_row(a, b, h, j) * a.head_size + i % a.head_size] =
          to_float(src[i]);
    }
  }
}

// The value output_qk holds at positions that are not admitted keys.
__device__ float masked_qk_value(int qk_output) { return qk_output == 1 ? -INFINITY : 0.0f; }

__device__ void store_qk(const unfused_args &a, int64_t index, float x) {
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

struct max_op {
  __device__ float operator()(float x, float y) const { return fmaxf(x, y); }
};
struct sum_op {
  __device__ float operator()(float x, float y) const { return x + y; }
};

// The final logit of key position k for query head h of token j (sequence b, position q_pos), or
// -inf when the key is not admitted (doc/semantics.md: scale, softcap, bias, masks).
template <typename T>
__device__ float key_logit(const unfused_args &a, float dot, bool mapped, int b, int h, int64_t j,
                           int64_t q_pos, int64_t k) {
  if (!mapped) return -INFINITY;
  if (a.is_causal && (k > q_pos || (a.window > 0 && k < q_pos - a.window + 1))) return -INFINITY;
  float s = a.scale * dot;
  if (a.softcap > 0.0f) s = a.softcap * tanhf(s / a.softcap);
  if (a.attention_bias) {
    if (j >= a.bias_q_capacity || k >= a.bias_kv_capacity) return -INFINITY;
    const int64_t bias_b = a.bias_batch == 1 ? 0 : b, bias_h = a.bias_heads == 1 ? 0 : h;
    const int64_t index =
        ((bias_b * a.bias_heads + bias_h) * a.bias_q_capacity + j) * a.bias_kv_capacity + k;
    s += to_float(static_cast<const T *>(a.attention_bias)[index]);
  }
  return s;
}

// One block per row of S (sequence b, KV head, member of the group, query j). Padding rows get P = 0.
// Pass 1 turns dot products into logits (masked = -inf), pass 2 sums, pass 3 writes P over them; each
// thread reads and writes only its own elements, so the passes need no barrier of their own.
template <typename T>
__global__ void __launch_bounds__(kRowThreads) masked_softmax_kernel(unfused_args a) {
  __shared__ float reduce_scratch[kRowThreads / 32];
  const int64_t rows_per_sequence = (int64_t)a.kv_heads * a.q_rows;
  for (int64_t row = blockIdx.x; row < (int64_t)a.batch * rows_per_sequence; row += gridDim.x) {
    const int b = (int)(row / rows_per_sequence);
    const int64_t r = row % rows_per_sequence % a.q_rows;
    const int h = (int)(row % rows_per_sequence / a.q_rows) * a.group + (int)(r / a.max_q);
    const int64_t j = r % a.max_q;
    float *scores = a.scores + row * a.kv_rows;
    const int64_t q_len = (int64_t)a.cu_seqlens[b + 1] - a.cu_seqlens[b];
    const int64_t t = (int64_t)a.cu_seqlens[b] + j;
    if (j >= q_len || t < 0 || t >= a.tokens) {
      for (int64_t c = threadIdx.x; c < a.kv_rows; c += blockDim.x) scores[c] = 0.0f;
      continue;
    }
    const int64_t q_pos = a.query_positions ? a.query_positions[t] : a.past_seqlens[b] + j;
    const key_range keys = gathered_keys(a, b);
    const int64_t qk_row = ((int64_t)h * a.tokens + t) * a.qk_capacity;

    float row_max = -INFINITY;
    for (int64_t c = threadIdx.x; c < a.kv_rows; c += blockDim.x) {
      const int64_t k = keys.start + c;
      const float s = key_logit<T>(a, scores[c], a.key_mapped[(int64_t)b * a.kv_rows + c] != 0, b,
                                   h, j, q_pos, k);
      scores[c] = s;
      row_max = fmaxf(row_max, s);
      if (a.qk_output == 1 && k < a.qk_capacity) store_qk(a, qk_row + k, s);
    }
    if (a.qk_output)  // positions outside the gathered range
      for (int64_t k = threadIdx.x; k < a.qk_capacity; k += blockDim.x)
        if (k < keys.start || k >= keys.start + a.kv_rows)
          store_qk(a, qk_row + k, masked_qk_value(a.qk_output));
    row_max = block_reduce(row_max, max_op(), reduce_scratch);
    const bool any_admitted = row_max > -INFINITY;
    const float sink = a.head_sink ? to_float(static_cast<const T *>(a.head_sink)[h]) : -INFINITY;
    const float m = fmaxf(row_max, sink);

    float den = 0.0f;
    for (int64_t c = threadIdx.x; c < a.kv_rows; c += blockDim.x)
      if (scores[c] > -INFINITY) den += expf(scores[c] - m);
    den = block_reduce(den, sum_op(), reduce_scratch);
    if (a.head_sink) den += expf(sink - m);

    for (int64_t c = threadIdx.x; c < a.kv_rows; c += blockDim.x) {
      const float s = scores[c];
      const float prob = any_admitted && s > -INFINITY ? expf(s - m) / den : 0.0f;
      scores[c] = prob;
      if (a.qk_output == 2 && keys.start + c < a.qk_capacity)
        store_qk(a, qk_row + keys.start + c, prob);
    }
  }
}

// O = P V_g for one (sequence, KV head) per tile of kWeightedTile rows x kWeightedTile channels.
// Each thread sums its outputs over the sequence's own gathered keys in key order, one fmaf per
// key, so an output depends on the keys' values and P only, never on the bounds (kv_rows, q_rows).
constexpr int kWeightedTile = 64;
constexpr int kWeightedKeys = 16;                   // keys staged in shared memory per step
constexpr int kWeightedSide = 16;                   // 16 x 16 threads,
constexpr int kWeightedPerThread = kWeightedTile / kWeightedSide;  // each owning 4 x 4 outputs
constexpr int kWeightedThreads = kWeightedSide * kWeightedSide;

__global__ void __launch_bounds__(kWeightedThreads) weighted_values_kernel(unfused_args a) {
  __shared__ float p_tile[kWeightedKeys][kWeightedTile + 1];  // [key][row], +1 against conflicts
  __shared__ float v_tile[kWeightedKeys][kWeightedTile];      // [key][channel]
  const int64_t row_tiles = (a.q_rows + kWeightedTile - 1) / kWeightedTile;
  const int64_t channel_tiles = (a.v_head_size + kWeightedTile - 1) / kWeightedTile;
  const int64_t tiles = (int64_t)a.batch * a.kv_heads * row_tiles * channel_tiles;
  const int tx = threadIdx.x % kWeightedSide, ty = threadIdx.x / kWeightedSide;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t batch = tile / (row_tiles * channel_tiles);  // b * kv_heads + kv_head
    const int64_t within = tile % (row_tiles * channel_tiles);
    const int64_t row0 = within / channel_tiles * kWeightedTile;
    const int64_t channel0 = within % channel_tiles * kWeightedTile;
    const int64_t keys = gathered_keys(a, (int)(batch / a.kv_heads)).count;
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

// One block per token: its output row from O_g, or zeros (and masked output_qk rows) for a token that
// no sequence owns or that lies beyond max_q in its sequence.
template <typename T>
__global__ void scatter_output_kernel(unfused_args a) {
  const int64_t row_elems = (int64_t)a.heads * a.v_head_size;
  for (int64_t t = blockIdx.x; t < a.tokens; t += gridDim.x) {
    const int b = token_sequence(a.cu_seqlens, a.batch, t);
    const int64_t j = b >= 0 ? t - a.cu_seqlens[b] : 0;
    const bool gathered = b >= 0 && j < a.max_q;
    T *out = static_cast<T *>(a.output) + t * row_elems;
    for (int64_t i = threadIdx.x; i < row_elems; i += blockDim.x) {
      const int h = (int)(i / a.v_head_size);
      out[i] = gathered ? from_float<T>(a.out_gathered[gathered_query_row(a, b, h, j) *
                                                           a.v_head_size + i % a.v_head_size])
                        : from_float<T>(0.0f);
    }
    if (!gathered && a.qk_output)
      for (int h = 0; h < a.heads; h++)
        for (int64_t k = threadIdx.x; k < a.qk_capacity; k += blockDim.x)
          store_qk(a, ((int64_t)h * a.tokens + t) * a.qk_capacity + k,
                   masked_qk_value(a.qk_output));
  }
}

// ---- cuBLASLt ------------------------------------------------------------------------------------

// One strided-batched GEMM D = op(A) B, column-major as cuBLASLt sees it, all in fp32.
struct gemm_plan {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, d;
  cublasLtMatmulAlgo_t algo;
};

struct unfused_state {
  unfused_extents extents;
  unfused_layout layout;
  cublasLtHandle_t handle;
  gemm_plan scores_gemm;  // S^T = K_g x Q_g^T:   m = kv_rows, n = q_rows, k = head_size
};

static pa_status cublas_fail(cublasStatus_t s, const char *what) {
  return pa__fail(PA_ERROR_CUBLAS, "UNFUSED %s: cuBLASLt returned %d", what, (int)s);
}

#define PA_CUBLAS(call, what)                              \
  do {                                                     \
    cublasStatus_t status_ = (call);                       \
    if (status_ != CUBLAS_STATUS_SUCCESS) return cublas_fail(status_, what); \
  } while (0)

static cublasStatus_t make_layout(cublasLtMatrixLayout_t *layout, cudaDataType_t type, uint64_t rows,
                                  uint64_t cols, int64_t ld, int32_t batch, int64_t batch_stride) {
  cublasStatus_t s = cublasLtMatrixLayoutCreate(layout, type, rows, cols, ld);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                         sizeof batch);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                         &batch_stride, sizeof batch_stride);
  return s;
}

struct gemm_shape {
  bool transpose_a;
  uint64_t m, n, k;
  int64_t lda, stride_a, ldb, stride_b, ldd, stride_d;
  int32_t batch;
};

static void destroy_gemm(gemm_plan *g) {
  if (g->desc) cublasLtMatmulDescDestroy(g->desc);
  if (g->a) cublasLtMatrixLayoutDestroy(g->a);
  if (g->b) cublasLtMatrixLayoutDestroy(g->b);
  if (g->d) cublasLtMatrixLayoutDestroy(g->d);
}

// The operand layouts of shape s (g->desc is left alone).
static pa_status make_gemm_layouts(gemm_plan *g, const gemm_shape &s, const char *what) {
  PA_CUBLAS(make_layout(&g->a, CUDA_R_32F, s.transpose_a ? s.k : s.m, s.transpose_a ? s.m : s.k,
                        s.lda, s.batch, s.stride_a),
            what);
  PA_CUBLAS(make_layout(&g->b, CUDA_R_32F, s.k, s.n, s.ldb, s.batch, s.stride_b), what);
  PA_CUBLAS(make_layout(&g->d, CUDA_R_32F, s.m, s.n, s.ldd, s.batch, s.stride_d), what);
  return PA_SUCCESS;
}

// The heuristic's first algorithm for shape s without split-K (found = 0 when there is none).
static cublasStatus_t heuristic_algo(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                     const gemm_plan &layouts, cublasLtMatmulAlgo_t *algo,
                                     int *found) {
  cublasLtMatmulPreference_t preference;
  cublasStatus_t status = cublasLtMatmulPreferenceCreate(&preference);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  const uint64_t workspace = kCublasWorkspaceBytes;
  const uint32_t no_reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
  status = cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace);
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &no_reduction, sizeof no_reduction);
  cublasLtMatmulHeuristicResult_t result;
  *found = 0;
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulAlgoGetHeuristic(handle, desc, layouts.a, layouts.b, layouts.d,
                                            layouts.d, preference, 1, &result, found);
  cublasLtMatmulPreferenceDestroy(preference);
  if (status == CUBLAS_STATUS_SUCCESS && *found > 0) *algo = result.algo;
  return status;
}

// Creates the descriptors for shape `actual` and fixes the algorithm (plan time: contract §3 rule
// 5): the heuristic's choice for `chosen_for`, a shape that does not depend on the
// attention_metadata bounds, with split-K forced to 1 and no reduction scheme, then checked to
// serve `actual`. One kernel without split-K accumulates each output over k in the same order
// whatever m, n and the strides are, so S (k = head_size) is the same for every bound.
static pa_status make_gemm(cublasLtHandle_t handle, gemm_plan *g, const gemm_shape &actual,
                           const gemm_shape &chosen_for, const char *what) {
  PA_CUBLAS(cublasLtMatmulDescCreate(&g->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), what);
  const cublasOperation_t op_a = actual.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  PA_CUBLAS(
      cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a),
      what);
  gemm_plan heuristic_layouts = {};
  pa_status s = make_gemm_layouts(&heuristic_layouts, chosen_for, what);
  int found = 0;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  if (s == PA_SUCCESS)
    status = heuristic_algo(handle, g->desc, heuristic_layouts, &g->algo, &found);
  destroy_gemm(&heuristic_layouts);
  if (s != PA_SUCCESS) return s;
  if (status != CUBLAS_STATUS_SUCCESS) return cublas_fail(status, what);
  if (found < 1)
    return pa__fail(PA_ERROR_NOT_SUPPORTED,
                    "UNFUSED %s: cuBLASLt has no algorithm for m=%llu n=%llu k=%llu batch=%d", what,
                    (unsigned long long)chosen_for.m, (unsigned long long)chosen_for.n,
                    (unsigned long long)chosen_for.k, chosen_for.batch);
  const uint32_t one_split = 1, no_reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
  PA_CUBLAS(cublasLtMatmulAlgoConfigSetAttribute(&g->algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                 &one_split, sizeof one_split),
            what);
  PA_CUBLAS(cublasLtMatmulAlgoConfigSetAttribute(&g->algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                 &no_reduction, sizeof no_reduction),
            what);
  if ((s = make_gemm_layouts(g, actual, what)) != PA_SUCCESS) return s;
  cublasLtMatmulHeuristicResult_t check = {};
  status = cublasLtMatmulAlgoCheck(handle, g->desc, g->a, g->b, g->d, g->d, &g->algo, &check);
  if (status != CUBLAS_STATUS_SUCCESS || check.workspaceSize > kCublasWorkspaceBytes)
    return pa__fail(PA_ERROR_NOT_SUPPORTED,
                    "UNFUSED %s: the algorithm chosen for m=%llu n=%llu (bound-free extents) "
                    "does not serve m=%llu n=%llu k=%llu batch=%d (cuBLASLt check "
                    "returned %d, workspace %llu of %llu bytes)",
                    what, (unsigned long long)chosen_for.m, (unsigned long long)chosen_for.n,
                    (unsigned long long)actual.m, (unsigned long long)actual.n,
                    (unsigned long long)actual.k, actual.batch, (int)status,
                    (unsigned long long)check.workspaceSize,
                    (unsigned long long)kCublasWorkspaceBytes);
  return PA_SUCCESS;
}

static gemm_shape scores_shape(const pa__problem *p, const unfused_extents &e) {
  return {true, (uint64_t)e.kv_rows, (uint64_t)e.q_rows, (uint64_t)p->head_size,
          p->head_size, e.kv_rows * p->head_size,
          p->head_size, e.q_rows * p->head_size,
          e.kv_rows, e.q_rows * e.kv_rows, (int32_t)e.batches};
}

// Contract §3 rule 4 (results identical with attention_metadata absent, tight or loose): the bounds
// set the scratch extents, and cuBLASLt's heuristic picks a different kernel (tiling, split-K) per
// shape, changing the order of the sums. So S = Q_g K_g^T runs one algorithm chosen for the
// bound-free extents (make_gemm). O = P V_g reduces over the keys, whose count kv_rows does follow
// the bounds, and cuBLAS kernels may place their K tiles and K slices relative to that count: it
// runs weighted_values_kernel instead, which sums each sequence's own keys in order. The softmax
// takes its max and sum over admitted keys only (the padding is -inf and skipped), with per-thread
// columns and a reduction tree that do not depend on kv_rows.
static pa_status setup_gemms(unfused_state *st, const pa__problem *p) {
  PA_CUBLAS(cublasLtCreate(&st->handle), "handle");
  return make_gemm(st->handle, &st->scores_gemm, scores_shape(p, st->extents),
                   scores_shape(p, heuristic_extents_for(p)), "scores GEMM");
}

static void destroy_state(unfused_state *st) {
  if (!st) return;
  destroy_gemm(&st->scores_gemm);
  if (st->handle) cublasLtDestroy(st->handle);
  delete st;
}

// ---- backend ops ---------------------------------------------------------------------------------

static pa_status unfused_check(const pa__problem *p, const pa_device_caps *, char *why,
                               size_t why_size) {
  const unfused_extents e = extents_for(p);
  unfused_layout layout;
  uint64_t bytes;
  if (e.batches > INT32_MAX) {
    snprintf(why, why_size, "batch_size * kv_num_heads = %lld (cuBLASLt batch count is int32)",
             (long long)e.batches);
    return PA_ERROR_NOT_SUPPORTED;
  }
  if (!layout_for(p, e, &layout, &bytes)) {
    snprintf(why, why_size,
             "a workspace of %llu bytes, which exceeds 2^40 (tighter attention_metadata "
             "bounds shrink it)",
             (unsigned long long)bytes);
    return PA_ERROR_NOT_SUPPORTED;
  }
  return PA_SUCCESS;
}

static pa_status unfused_plan(pa_plan *plan, int setup_device, size_t *backend_bytes) {
  const pa__problem *p = &plan->problem;
  unfused_state *st = new (std::nothrow) unfused_state();
  if (!st) return pa__fail(PA_ERROR_OUT_OF_MEMORY, "UNFUSED plan: host allocation failed");
  plan->backend_state = st;
  st->extents = extents_for(p);
  uint64_t bytes;
  if (!layout_for(p, st->extents, &st->layout, &bytes))
    return pa__fail(PA_ERROR_NOT_SUPPORTED, "UNFUSED: workspace of %llu bytes exceeds 2^40",
                    (unsigned long long)bytes);
  if (p->token_count == 0) return PA_SUCCESS;  // pa_execute launches nothing: no scratch
  *backend_bytes = st->layout.total;
  if (!setup_device) return PA_SUCCESS;
  // Heuristics consult the current device: make it the plan's for the duration.
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(plan->device) != cudaSuccess)
    return pa__fail(PA_ERROR_CUDA, "UNFUSED plan: cannot select device %d", plan->device);
  pa_status s = setup_gemms(st, p);
  cudaSetDevice(previous);
  return s;
}

template <typename T, typename C>
static void launch_gathers(const unfused_args &a, cudaStream_t stream) {
  const int64_t key_rows = (int64_t)a.batch * a.kv_rows;
  gather_queries_kernel<T><<<(unsigned)min64(a.tokens, kMaxGrid), kCopyThreads, 0, stream>>>(a);
  gather_keys_kernel<C><<<(unsigned)min64(key_rows, kMaxGrid), kCopyThreads, 0, stream>>>(a);
}

template <typename T>
static pa_status launch_gathers_for_cache(const unfused_args &a, pa_dtype cache_dtype,
                                          cudaStream_t stream) {
  switch (cache_dtype) {
  case PA_DTYPE_INT8: launch_gathers<T, int8_t>(a, stream); return PA_SUCCESS;
#if PA_FP8_KV_CACHE
  case PA_DTYPE_FLOAT8_E4M3FN: launch_gathers<T, fp8_e4m3>(a, stream); return PA_SUCCESS;
#endif
  default:
    if (cache_dtype != dtype_of<T>::value) break;
    launch_gathers<T, T>(a, stream);
    return PA_SUCCESS;
  }
  return pa__fail(PA_ERROR_INTERNAL, "UNFUSED: key_cache dtype %d not instantiated",
                  (int)cache_dtype);
}

template <typename T>
static pa_status launch_typed(const unfused_state *st, const unfused_args &a, pa_dtype cache_dtype,
                              char *workspace, cudaStream_t stream) {
  pa_status s = launch_gathers_for_cache<T>(a, cache_dtype, stream);
  if (s != PA_SUCCESS) return s;
  const float one = 1.0f, zero = 0.0f;
  void *cublas_workspace = workspace + st->layout.cublas_offset;
  PA_CUBLAS(cublasLtMatmul(st->handle, st->scores_gemm.desc, &one, a.k_gathered, st->scores_gemm.a,
                           a.q_gathered, st->scores_gemm.b, &zero, a.scores, st->scores_gemm.d,
                           a.scores, st->scores_gemm.d, &st->scores_gemm.algo, cublas_workspace,
                           kCublasWorkspaceBytes, stream),
            "scores GEMM");
  const int64_t score_rows = (int64_t)a.batch * a.kv_heads * a.q_rows;
  masked_softmax_kernel<T><<<(unsigned)min64(score_rows, kMaxGrid), kRowThreads, 0, stream>>>(a);
  const int64_t output_tiles = (int64_t)a.batch * a.kv_heads *
                               ((a.q_rows + kWeightedTile - 1) / kWeightedTile) *
                               ((a.v_head_size + kWeightedTile - 1) / kWeightedTile);
  weighted_values_kernel<<<(unsigned)min64(output_tiles, kMaxGrid), kWeightedThreads, 0, stream>>>(
      a);
  scatter_output_kernel<T><<<(unsigned)min64(a.tokens, kMaxGrid), kCopyThreads, 0, stream>>>(a);
  return PA_SUCCESS;
}

static pa_status unfused_run(const pa_plan *plan, const pa__io *io, pa__stream stream) {
  const pa__problem *p = &plan->problem;
  const unfused_state *st = static_cast<const unfused_state *>(plan->backend_state);
  const unfused_extents &e = st->extents;
  char *workspace = static_cast<char *>(io->backend_workspace);

  unfused_args a = {};
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
  a.q_gathered = reinterpret_cast<float *>(workspace + st->layout.q_offset);
  a.k_gathered = reinterpret_cast<float *>(workspace + st->layout.k_offset);
  a.v_gathered = p->input_mode == PA__MODE_LATENT
                     ? a.k_gathered
                     : reinterpret_cast<float *>(workspace + st->layout.v_offset);
  a.scores = reinterpret_cast<float *>(workspace + st->layout.scores_offset);
  a.out_gathered = reinterpret_cast<float *>(workspace + st->layout.out_offset);
  a.key_mapped = reinterpret_cast<uint8_t *>(workspace + st->layout.mapped_offset);

  cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
  pa_status status = p->dtype == PA_DTYPE_BFLOAT16
                         ? launch_typed<__nv_bfloat16>(st, a, p->k_cache_dtype, workspace, s)
                         : launch_typed<__half>(st, a, p->k_cache_dtype, workspace, s);
  if (status != PA_SUCCESS) return status;
  const cudaError_t launch = cudaGetLastError();
  if (launch != cudaSuccess)
    return pa__fail(PA_ERROR_CUDA, "UNFUSED: kernel launch failed: %s", cudaGetErrorString(launch));
  return PA_SUCCESS;
}

static void unfused_destroy(pa_plan *plan) {
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
