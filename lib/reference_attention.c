/* Attention of doc/semantics.md from the (already written) cache. Per sequence and KV head, the
 * keys the sequence's tokens can see (mapped blocks within their ranges) are dequantized once into
 * fp32 rows; every query head of the
 * GQA group and every token of the sequence then reads those rows. Dot products, softmax sums and
 * the output accumulate in fp64. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "host_numeric.h"
#include "reference.h"

/* The keys one sequence can see, dequantized for one KV head: only keys of mapped blocks within
 * the union of its tokens' ranges are gathered, so the work follows the visible keys, never the
 * block table's nominal reach (block_table.shape[1] * block_size). Rows are in key order. */
typedef struct key_rows {
  int64_t count;        /* gathered keys */
  const int64_t *key;   /* count key positions, ascending */
  const int64_t *slot;  /* count cache slots */
  float *keys;          /* count * head_size */
  float *values;        /* count rows of value_stride floats; aliases keys in LATENT */
  int64_t value_stride;
} key_rows;

/* Scratch that grows to the largest sequence seen. */
typedef struct scratch {
  int64_t capacity; /* keys */
  int64_t *key, *slot;
  float *keys, *values, *scores;
  uint8_t *admitted;
  double *accumulator; /* v_head_size */
} scratch;

/* Grows every per-key array to `keys` entries; 0 when a size overflows or an allocation fails. */
static int scratch_reserve(scratch *s, int64_t keys, const pa__problem *p) {
  if (keys <= s->capacity) return 1;
  size_t n = (size_t)keys, key_bytes, value_bytes, index_bytes, score_bytes;
  if (!pa__mul3_size(n, (size_t)p->head_size, sizeof(float), &key_bytes) ||
      !pa__mul3_size(n, (size_t)p->v_head_size, sizeof(float), &value_bytes) ||
      !pa__mul_size(n, sizeof(int64_t), &index_bytes) ||
      !pa__mul_size(n, sizeof(float), &score_bytes))
    return 0;
  int64_t *kp = realloc(s->key, index_bytes);
  if (kp) s->key = kp;
  int64_t *sl = realloc(s->slot, index_bytes);
  if (sl) s->slot = sl;
  float *k = realloc(s->keys, key_bytes);
  if (k) s->keys = k;
  float *v = realloc(s->values, value_bytes);
  if (v) s->values = v;
  float *sc = realloc(s->scores, score_bytes);
  if (sc) s->scores = sc;
  uint8_t *a = realloc(s->admitted, n);
  if (a) s->admitted = a;
  if (!kp || !sl || !k || !v || !sc || !a) return 0;
  s->capacity = keys;
  return 1;
}

static void scratch_free(scratch *s) {
  free(s->key);
  free(s->slot);
  free(s->keys);
  free(s->values);
  free(s->scores);
  free(s->admitted);
  free(s->accumulator);
}

/* Dequantizes channels [0, channels) of KV head kv_head of cache row `slot` into dst. */
static void load_cache_row(float *dst, const void *cache, pa_dtype cache_dtype, pa_quant_type quant,
                           const float *scale, const pa__problem *p, int64_t slot, int32_t kv_head,
                           int32_t channels) {
  int64_t base = slot * pa__kv_row_elems(p) + (int64_t)kv_head * p->head_size;
  pa__load_row_as_float(cache_dtype, cache, base, channels, dst);
  if (quant == PA_QUANT_NONE) return;
  for (int32_t c = 0; c < channels; c++)
    dst[c] *= pa__ref_cache_scale(scale, quant, kv_head, p->head_size, c);
}

/* The mapped keys of sequence b in [begin, end) (end <= the table's reach): visits each block of
 * the range once. With key / slot NULL it only counts them. */
static int64_t mapped_keys(const pa__ref_call *call, int32_t b, int64_t begin, int64_t end,
                           int64_t *key, int64_t *slot) {
  const pa__problem *p = call->p;
  const int32_t *table_row = call->io.block_table + (int64_t)b * p->max_blocks_per_seq;
  int64_t count = 0;
  for (int64_t block = begin / p->block_size; block * p->block_size < end; block++) {
    int64_t block_id = table_row[block];
    if (block_id < 0 || block_id >= p->num_blocks) continue;
    int64_t first = block * p->block_size > begin ? block * p->block_size : begin;
    int64_t last = (block + 1) * p->block_size < end ? (block + 1) * p->block_size : end;
    for (int64_t k = first; k < last; k++, count++) {
      if (!key) continue;
      key[count] = k;
      slot[count] = block_id * p->block_size + k % p->block_size;
    }
  }
  return count;
}

static void gather_rows(key_rows *rows, const pa__ref_call *call, int32_t kv_head) {
  const pa__problem *p = call->p;
  const pa__io *io = &call->io;
  for (int64_t i = 0; i < rows->count; i++) {
    load_cache_row(rows->keys + i * p->head_size, io->key_cache, p->k_cache_dtype, p->k_quant,
                   io->k_scale, p, rows->slot[i], kv_head, p->head_size);
    if (p->input_mode != PA__MODE_LATENT)
      load_cache_row(rows->values + i * p->head_size, io->value_cache, p->v_cache_dtype,
                     p->v_quant, io->v_scale, p, rows->slot[i], kv_head, p->head_size);
  }
}

/* The first row whose key is >= key (rows->count when none). */
static int64_t first_row_at(const key_rows *rows, int64_t key) {
  int64_t lo = 0, hi = rows->count;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (rows->key[mid] < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static float softcapped(float s, float softcap) {
  return softcap > 0.0f ? softcap * tanhf(s / softcap) : s;
}

/* Scores, softmax and output of one (token, query head). Writes the output row's head slice and,
 * when requested, output_qk entries of admitted keys (the rest keep their -inf / 0 fill). */
static void attend_one_head(const pa__ref_call *call, const key_rows *rows, scratch *s, int64_t t,
                            int32_t b, int32_t h, int64_t first_row, int64_t end_row) {
  const pa__problem *p = call->p;
  const pa__io *io = &call->io;
  const float *q = call->q + (t * p->num_heads + h) * p->head_size;
  int64_t j = t - io->cu_seqlens[b];
  int has_sink = p->has_head_sink;
  float sink = has_sink ? pa__load_as_float(p->dtype, io->head_sink, h) : 0.0f;
  double max_logit = has_sink ? (double)sink : -INFINITY;
  int64_t admitted_count = 0;

  for (int64_t i = first_row; i < end_row; i++) {
    int64_t k = rows->key[i];
    s->admitted[i] = !p->has_bias || (j < p->bias_q_capacity && k < p->bias_kv_capacity);
    if (!s->admitted[i]) continue;
    const float *key = rows->keys + i * p->head_size;
    /* four fp64 partial sums (head_size is a multiple of 8): exact products, short chains */
    double partial[4] = {0.0, 0.0, 0.0, 0.0};
    for (int32_t c = 0; c < p->head_size; c += 4)
      for (int32_t lane = 0; lane < 4; lane++) partial[lane] += (double)q[c + lane] * key[c + lane];
    double dot = (partial[0] + partial[1]) + (partial[2] + partial[3]);
    float logit = softcapped(p->scale * (float)dot, p->softcap);
    if (p->has_bias) {
      int64_t bias_b = p->bias_batch == 1 ? 0 : b;
      int64_t bias_h = p->bias_heads == 1 ? 0 : h;
      int64_t at = ((bias_b * p->bias_heads + bias_h) * p->bias_q_capacity + j) *
                       p->bias_kv_capacity + k;
      logit += pa__load_as_float(p->dtype, io->attention_bias, at);
    }
    s->scores[i] = logit;
    /* a NaN logit (from a NaN or Inf in q, K or the bias) poisons the row: NaN propagates
     * (doc/semantics.md, non-finite inputs); once max_logit is NaN no comparison replaces it */
    if (logit > max_logit || isnan(logit)) max_logit = logit;
    admitted_count++;
  }
  /* no admitted key, or every admitted logit -inf (every bias -inf, no sink): a zero row */
  if (admitted_count == 0 || max_logit == -INFINITY) return;

  double denominator = has_sink ? exp((double)sink - max_logit) : 0.0;
  for (int64_t i = first_row; i < end_row; i++)
    if (s->admitted[i]) denominator += exp((double)s->scores[i] - max_logit);

  int32_t dv = p->v_head_size;
  memset(s->accumulator, 0, (size_t)dv * sizeof *s->accumulator);
  for (int64_t i = first_row; i < end_row; i++) {
    int64_t k = rows->key[i];
    if (!s->admitted[i]) continue;
    double probability = exp((double)s->scores[i] - max_logit) / denominator;
    const float *value = rows->values + i * rows->value_stride;
    for (int32_t c = 0; c < dv; c++) s->accumulator[c] += probability * value[c];
    if (p->qk_output && k < p->qk_capacity)
      pa__store_from_float(p->qk_dtype, io->output_qk, (h * p->token_count + t) * p->qk_capacity + k,
                           p->qk_output == 1 ? s->scores[i] : (float)probability);
  }
  int64_t out_at = (t * p->num_heads + h) * dv;
  for (int32_t c = 0; c < dv; c++)
    pa__store_from_float(p->dtype, io->output, out_at + c, (float)s->accumulator[c]);
}

/* Zero output rows; output_qk filled with -inf (scores) or 0 (probabilities). The products are
 * the two tensors' own sizes, which fit (V50). */
static void fill_outputs(const pa__ref_call *call) {
  const pa__problem *p = call->p;
  memset(call->io.output, 0,
         (size_t)p->token_count * (size_t)pa__out_row_elems(p) * pa_dtype_size(p->dtype));
  if (!p->qk_output) return;
  float fill = p->qk_output == 1 ? -INFINITY : 0.0f;
  int64_t count = (int64_t)p->num_heads * p->token_count * p->qk_capacity;
  for (int64_t i = 0; i < count; i++) pa__store_from_float(p->qk_dtype, call->io.output_qk, i, fill);
}

/* Whether token t is one of sequence b's (cu ranges may overlap when cu is not monotonic). */
static int owns(const pa__ref_call *call, int64_t t, int32_t b) {
  return call->sequence_of_token[t] == b;
}

static pa_status attend_sequence(const pa__ref_call *call, scratch *s, int32_t b) {
  const pa__problem *p = call->p;
  const int32_t *cu = call->io.cu_seqlens;
  int64_t token_begin = cu[b] > 0 ? cu[b] : 0;
  int64_t token_end = cu[b + 1] < p->token_count ? cu[b + 1] : p->token_count;
  int64_t kv_len = (int64_t)call->io.past_seqlens[b] + ((int64_t)cu[b + 1] - cu[b]);
  int64_t table_reach = (int64_t)p->max_blocks_per_seq * p->block_size;
  int64_t reach = kv_len < table_reach ? kv_len : table_reach; /* keys beyond are unmapped */

  /* the union of the tokens' admitted ranges */
  int64_t lowest_position = INT64_MAX, highest_position = INT64_MIN;
  for (int64_t t = token_begin; t < token_end; t++) {
    if (!owns(call, t, b)) continue;
    int64_t position = call->position_of_token[t];
    if (position < lowest_position) lowest_position = position;
    if (position > highest_position) highest_position = position;
  }
  if (highest_position == INT64_MIN) return PA_SUCCESS; /* no token */
  int64_t begin = 0, end = reach;
  if (p->is_causal) {
    if (highest_position < end) end = highest_position + 1;
    if (p->window > 0 && lowest_position - p->window + 1 > 0) begin = lowest_position - p->window + 1;
  }
  if (end <= begin) return PA_SUCCESS;
  key_rows rows;
  rows.count = mapped_keys(call, b, begin, end, NULL, NULL);
  if (rows.count == 0) return PA_SUCCESS;
  if (!scratch_reserve(s, rows.count, p))
    return pa__fail(PA_ERROR_OUT_OF_MEMORY, "reference: host scratch for %lld keys",
                    (long long)rows.count);
  mapped_keys(call, b, begin, end, s->key, s->slot);
  rows.key = s->key;
  rows.slot = s->slot;
  rows.keys = s->keys;
  rows.values = p->input_mode == PA__MODE_LATENT ? s->keys : s->values;
  rows.value_stride = p->head_size;

  for (int32_t kv_head = 0; kv_head < p->kv_num_heads; kv_head++) {
    gather_rows(&rows, call, kv_head);
    for (int64_t t = token_begin; t < token_end; t++) {
      if (!owns(call, t, b)) continue;
      int64_t position = call->position_of_token[t];
      int64_t first_key = 0, end_key = reach;
      if (p->is_causal) {
        if (position + 1 < end_key) end_key = position + 1;
        if (p->window > 0 && position - p->window + 1 > first_key)
          first_key = position - p->window + 1;
      }
      int64_t first_row = first_row_at(&rows, first_key), end_row = first_row_at(&rows, end_key);
      if (first_row >= end_row) continue;
      for (int32_t g = 0; g < p->group_size; g++)
        attend_one_head(call, &rows, s, t, b, kv_head * p->group_size + g, first_row, end_row);
    }
  }
  return PA_SUCCESS;
}

pa_status pa__ref_attention(const pa__ref_call *call) {
  const pa__problem *p = call->p;
  fill_outputs(call);
  scratch s;
  memset(&s, 0, sizeof s);
  s.accumulator = malloc((size_t)p->v_head_size * sizeof *s.accumulator);
  pa_status st = s.accumulator ? PA_SUCCESS
                               : pa__fail(PA_ERROR_OUT_OF_MEMORY, "reference: host scratch");
  for (int32_t b = 0; b < p->batch_size && st == PA_SUCCESS; b++) st = attend_sequence(call, &s, b);
  scratch_free(&s);
  return st;
}
