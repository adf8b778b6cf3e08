/* The absorbed-MLA invariant's inputs (see mla_case.h). */
#include "mla_case.h"

#include <math.h>
#include <stdlib.h>

#include "host_numeric.h"

const int32_t mla_step_q_lens[2][MLA_B] = {{6, 11}, {1, 1}};

static double lcg_uniform(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static void set_input(pa_case *c, int input, int64_t i, float value) {
  pa__store_from_float(c->inputs_desc[input].dtype, c->inputs[input], i, value);
}

void mla_weights_init(mla_weights *w, uint64_t *s) {
  for (int h = 0; h < MLA_H; h++)
    for (int l = 0; l < MLA_L; l++) {
      for (int n = 0; n < MLA_NOPE; n++) w->uk[h][n][l] = lcg_uniform(s) / sqrt((double)MLA_L);
      for (int v = 0; v < MLA_V; v++) w->uv[h][v][l] = lcg_uniform(s) / sqrt((double)MLA_L);
    }
}

int mla_caches_alloc(mla_caches *c) {
  c->latent_bytes = (size_t)MLA_B * MLA_M * MLA_BS * 48 * 2;
  c->plain_bytes = (size_t)MLA_B * MLA_M * MLA_BS * MLA_H * 32 * 2;
  c->latent = malloc(c->latent_bytes);
  c->plain[0] = malloc(c->plain_bytes);
  c->plain[1] = malloc(c->plain_bytes);
  if (!c->latent || !c->plain[0] || !c->plain[1]) {
    mla_caches_free(c);
    return 0;
  }
  /* never read before written; valid fp16 values anyway */
  for (size_t k = 0; k < c->latent_bytes; k++) c->latent[k] = (uint8_t)(k * 37 % 61);
  for (size_t k = 0; k < c->plain_bytes; k++)
    c->plain[0][k] = c->plain[1][k] = (uint8_t)(k * 37 % 61);
  return 1;
}

void mla_caches_free(mla_caches *c) {
  free(c->latent);
  free(c->plain[0]);
  free(c->plain[1]);
  c->latent = c->plain[0] = c->plain[1] = NULL;
}

void mla_step_configs(pa_case_config *absorbed, pa_case_config *plain, uint64_t seed, int step,
                      const int32_t past[MLA_B], mla_caches *caches) {
  pa_case_config common;
  pa_case_config_init(&common);
  common.seed = seed;
  common.batch_size = MLA_B;
  common.block_size = MLA_BS;
  common.blocks_per_seq = MLA_M;
  common.num_blocks = MLA_B * MLA_M;
  common.attrs.num_heads = MLA_H;
  common.attrs.scale = (float)(1.0 / sqrt((double)(MLA_NOPE + MLA_R)));
  common.attrs.do_rotary = 1;
  common.rotary_dim = MLA_R;
  common.attrs.softcap = 10.0f;
  common.q_lens = mla_step_q_lens[step];
  common.past_lens = past;
  *absorbed = *plain = common;
  absorbed->head_size = 48;
  absorbed->attrs.kv_cache_layout = PA_KV_CACHE_LAYOUT_LATENT;
  absorbed->attrs.kv_num_heads = 1;
  absorbed->attrs.v_head_size = MLA_L;
  absorbed->attrs.rotary_offset = MLA_L;
  absorbed->key_cache = caches->latent;
  plain->head_size = 32;
  plain->attrs.kv_num_heads = MLA_H;
  plain->attrs.rotary_offset = MLA_NOPE;
  plain->key_cache = caches->plain[0];
  plain->value_cache = caches->plain[1];
}

void mla_fill_step(pa_case *absorbed, pa_case *plain, const mla_weights *w, uint64_t *s) {
  for (int64_t t = 0; t < absorbed->token_count; t++) {
    double c[MLA_L], pe[MLA_R];
    for (int l = 0; l < MLA_L; l++) c[l] = pa__round_to(PA_DTYPE_FLOAT16, (float)lcg_uniform(s));
    for (int r = 0; r < MLA_R; r++) pe[r] = pa__round_to(PA_DTYPE_FLOAT16, (float)lcg_uniform(s));
    for (int l = 0; l < MLA_L; l++) set_input(absorbed, PA_IN_KEY, t * 48 + l, (float)c[l]);
    for (int r = 0; r < MLA_R; r++) set_input(absorbed, PA_IN_KEY, t * 48 + MLA_L + r, (float)pe[r]);
    for (int h = 0; h < MLA_H; h++) {
      double q_nope[MLA_NOPE];
      for (int n = 0; n < MLA_NOPE; n++) q_nope[n] = pa__round_to(PA_DTYPE_FLOAT16, (float)lcg_uniform(s));
      for (int r = 0; r < MLA_R; r++) {
        float q_pe = pa__round_to(PA_DTYPE_FLOAT16, (float)lcg_uniform(s));
        set_input(absorbed, PA_IN_QUERY, (t * MLA_H + h) * 48 + MLA_L + r, q_pe);
        set_input(plain, PA_IN_QUERY, (t * MLA_H + h) * 32 + MLA_NOPE + r, q_pe);
        set_input(plain, PA_IN_KEY, (t * MLA_H + h) * 32 + MLA_NOPE + r, (float)pe[r]);
      }
      for (int n = 0; n < MLA_NOPE; n++) {
        double k_nope = 0.0;
        for (int l = 0; l < MLA_L; l++) k_nope += w->uk[h][n][l] * c[l];
        set_input(plain, PA_IN_QUERY, (t * MLA_H + h) * 32 + n, (float)q_nope[n]);
        set_input(plain, PA_IN_KEY, (t * MLA_H + h) * 32 + n, (float)k_nope);
      }
      for (int l = 0; l < MLA_L; l++) {
        double absorbed_q = 0.0;
        for (int n = 0; n < MLA_NOPE; n++) absorbed_q += w->uk[h][n][l] * q_nope[n];
        set_input(absorbed, PA_IN_QUERY, (t * MLA_H + h) * 48 + l, (float)absorbed_q);
      }
      for (int v = 0; v < MLA_V; v++) {
        double value = 0.0;
        for (int l = 0; l < MLA_L; l++) value += w->uv[h][v][l] * c[l];
        set_input(plain, PA_IN_VALUE, (t * MLA_H + h) * 32 + v, (float)value);
      }
    }
  }
}

double mla_projected(const mla_weights *w, const float *out, int64_t t, int h, int v) {
  double projected = 0.0;
  for (int l = 0; l < MLA_L; l++) projected += w->uv[h][v][l] * out[(t * MLA_H + h) * MLA_L + l];
  return projected;
}
