/* The write path of doc/semantics.md, per token: unpack -> QK-Norm -> RoPE -> round to T ->
 * quantize -> slot write. Q goes to the call's scratch, K and V to the caches. */
#include <math.h>

#include "host_numeric.h"
#include "reference.h"

/* x * 1/sqrt(mean(x^2) + eps) * w over one head's channels. The sum of squares is accumulated in
 * fp64 (the page asks for at least fp32): the oracle should be the more exact side. */
static void rms_norm(float *x, int32_t head_size, const void *weight, pa_dtype dtype, float eps) {
  double sum_squares = 0.0;
  for (int32_t c = 0; c < head_size; c++) sum_squares += (double)x[c] * x[c];
  float inv_rms = 1.0f / sqrtf((float)(sum_squares / head_size) + eps);
  for (int32_t c = 0; c < head_size; c++)
    x[c] = x[c] * inv_rms * pa__load_as_float(dtype, weight, c);
}

/* Rotates channels [rotary_offset, rotary_offset + rotary_dim) of one head at `position`; positions
 * outside the cos/sin table pass through. */
static void rotate(float *x, const pa__problem *p, const pa__io *io, int64_t position) {
  if (position < 0 || position >= p->rotary_max_positions) return;
  int32_t half = p->rotary_dim / 2;
  float *base = x + p->rotary_offset;
  for (int32_t i = 0; i < half; i++) {
    float cos_v = pa__load_as_float(p->dtype, io->cos_cache, position * half + i);
    float sin_v = pa__load_as_float(p->dtype, io->sin_cache, position * half + i);
    float *x1 = p->rotary_interleaved ? &base[2 * i] : &base[i];
    float *x2 = p->rotary_interleaved ? &base[2 * i + 1] : &base[i + half];
    float a = *x1, b = *x2;
    *x1 = a * cos_v - b * sin_v;
    *x2 = b * cos_v + a * sin_v;
  }
}

/* Loads `heads` heads of one token from a T row, applies QK-Norm and RoPE when asked, rounds to T. */
static void prepare_heads(float *dst, const void *src, int64_t src_offset, int32_t heads,
                          const pa__problem *p, const pa__io *io, const void *norm_weight,
                          int rotate_heads, int64_t position) {
  int32_t d = p->head_size;
  for (int32_t h = 0; h < heads; h++) {
    float *x = dst + (int64_t)h * d;
    for (int32_t c = 0; c < d; c++)
      x[c] = pa__load_as_float(p->dtype, src, src_offset + (int64_t)h * d + c);
    if (norm_weight) rms_norm(x, d, norm_weight, p->dtype, p->qk_norm_epsilon);
    if (rotate_heads) rotate(x, p, io, position);
    for (int32_t c = 0; c < d; c++) x[c] = pa__round_to(p->dtype, x[c]);
  }
}

/* Writes one token's T-rounded row (kv_num_heads * head_size) to `slot` of a cache. */
static void write_slot(void *cache, pa_dtype cache_dtype, pa_quant_type quant, const float *scale,
                       const pa__problem *p, int64_t slot, const float *row) {
  int64_t row_elems = pa__kv_row_elems(p);
  int quantized = cache_dtype == PA_DTYPE_INT8 || cache_dtype == PA_DTYPE_FLOAT8_E4M3FN;
  for (int32_t h = 0; h < p->kv_num_heads; h++)
    for (int32_t c = 0; c < p->head_size; c++) {
      int64_t channel = (int64_t)h * p->head_size + c;
      int64_t at = slot * row_elems + channel;
      if (quantized) {
        float inv_scale = 1.0f / pa__ref_cache_scale(scale, quant, h, p->head_size, c);
        ((uint8_t *)cache)[at] = pa__quantize(cache_dtype, row[channel], inv_scale);
      } else {
        pa__store_from_float(cache_dtype, cache, at, row[channel]);
      }
    }
}

/* The token's slot, or -1 when nothing is to be written. */
static int64_t slot_of_token(const pa__ref_call *call, int64_t t) {
  const pa__problem *p = call->p;
  int64_t capacity = p->num_blocks * p->block_size;
  int64_t slot;
  if (call->io.slot_mapping) {
    slot = call->io.slot_mapping[t];
  } else {
    int64_t position = call->position_of_token[t];
    if (position < 0 || position / p->block_size >= p->max_blocks_per_seq) return -1;
    int64_t block_id = call->io.block_table[(int64_t)call->sequence_of_token[t] *
                                                p->max_blocks_per_seq + position / p->block_size];
    if (block_id < 0 || block_id >= p->num_blocks) return -1;
    slot = block_id * p->block_size + position % p->block_size;
  }
  return slot >= 0 && slot < capacity ? slot : -1;
}

void pa__ref_write(pa__ref_call *call) {
  const pa__problem *p = call->p;
  const pa__io *io = &call->io;
  int64_t q_row = pa__q_row_elems(p);
  int64_t kv_row = pa__kv_row_elems(p);
  int64_t query_row = pa__query_row_elems(p);
  int packed = p->input_mode == PA__MODE_PACKED;
  int latent = p->input_mode == PA__MODE_LATENT;
  float *k = call->kv_rows;
  float *v = k + kv_row;

  for (int64_t t = 0; t < p->token_count; t++) {
    float *q = call->q + t * q_row;
    if (call->sequence_of_token[t] < 0) continue;
    int64_t position = call->position_of_token[t];
    prepare_heads(q, io->query, t * query_row, p->num_heads, p, io, io->q_norm_weight,
                  p->do_rotary, position);
    const void *k_src = packed ? io->query : io->key;
    int64_t k_offset = packed ? t * query_row + q_row : t * kv_row;
    prepare_heads(k, k_src, k_offset, p->kv_num_heads, p, io, io->k_norm_weight, p->do_rotary,
                  position);
    if (!latent) {
      const void *v_src = packed ? io->query : io->value;
      int64_t v_offset = packed ? t * query_row + q_row + kv_row : t * kv_row;
      prepare_heads(v, v_src, v_offset, p->kv_num_heads, p, io, NULL, 0, position);
    }
    int64_t slot = slot_of_token(call, t);
    if (slot < 0) continue;
    write_slot(io->key_cache, p->k_cache_dtype, p->k_quant, io->k_scale, p, slot, k);
    if (!latent)
      write_slot(io->value_cache, p->v_cache_dtype, p->v_quant, io->v_scale, p, slot, v);
  }
}
