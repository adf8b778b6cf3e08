/*
 * The absorbed-MLA invariant's inputs, shared by the reference suite
 * (test_reference_invariants.c) and the LATENT backend's GPU test (test/gpu/test_latent.c):
 * absorbed MLA == non-absorbed attention with random W_UK / W_UV. Latent width L = 32 (also the
 * absorbed v_head_size), rope width R = 16, per-head nope width 16, per-head v width 32, 2 heads:
 *   non-absorbed: q_h = [q_nope_h; q_pe_h], k_h = [W_UK_h c; k_pe], v_h = W_UV_h c (head_size 32)
 *   absorbed:     q_h = [W_UK_h^T q_nope_h; q_pe_h], latent k = [c; k_pe] (head_size 48, V = c)
 * and W_UV_h applied to the absorbed output must equal the non-absorbed output (within the fp16
 * tolerance: both forms round their own operands to fp16). The tests run a prefill step then a
 * decode step, through the caches, with RoPE on the pe channels of both.
 */
#ifndef PAGEDATTN_TEST_MLA_CASE_H
#define PAGEDATTN_TEST_MLA_CASE_H

#include <stdint.h>

#include "case_builder.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { MLA_H = 2, MLA_L = 32, MLA_R = 16, MLA_NOPE = 16, MLA_V = 32 };
enum { MLA_B = 2, MLA_BS = 16, MLA_M = 2 }; /* sequences, block size, blocks per sequence */
/* The two steps' new tokens per sequence: a prefill step, then a decode step. */
extern const int32_t mla_step_q_lens[2][MLA_B];

typedef struct mla_weights {
  double uk[MLA_H][MLA_NOPE][MLA_L];
  double uv[MLA_H][MLA_V][MLA_L];
} mla_weights;

/* Random W_UK / W_UV from the LCG state *s (1/sqrt(L) keeps the projected rows near unit scale). */
void mla_weights_init(mla_weights *w, uint64_t *s);

/* Host caches of both forms, filled with valid fp16 values (never read before written). */
typedef struct mla_caches {
  uint8_t *latent, *plain[2];
  size_t latent_bytes, plain_bytes;
} mla_caches;
int mla_caches_alloc(mla_caches *c);
void mla_caches_free(mla_caches *c);

/* The configurations of step `step` (past: each sequence's cached length before it) of both forms
 * over the caches, seed `seed`. */
void mla_step_configs(pa_case_config *absorbed, pa_case_config *plain, uint64_t seed, int step,
                      const int32_t past[MLA_B], mla_caches *caches);

/* Writes one step's inputs of both forms from the same random latent rows and queries. */
void mla_fill_step(pa_case *absorbed, pa_case *plain, const mla_weights *w, uint64_t *s);

/* W_UV_h applied to an absorbed output row: channel v of head h of token t, from output `out`
 * (float values of the absorbed output, token-major, MLA_H x MLA_L per token). */
double mla_projected(const mla_weights *w, const float *out, int64_t t, int h, int v);

#ifdef __cplusplus
}
#endif

#endif /* PAGEDATTN_TEST_MLA_CASE_H */
